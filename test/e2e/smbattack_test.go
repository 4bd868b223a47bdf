package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	smb2 "github.com/cloudsoda/go-smb2"
	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/addc"
)

// TestSMBTenantIsolation is the tenant-isolation attack suite's SMB part. Two
// projects on one network, each with its own Active Directory policy (one DC, two
// machine accounts), so one sandbox runs two Samba instances side by side:
//
//	p1: data (NFSv3 + SMB, the attacker's own), secret1 (SMB)
//	p2: data (SMB; the same share name as p1's), secret2 (SMB)
//
// A domain user who may use every share of both projects still reaches, through
// an endpoint, only the shares of that endpoint's project; share names of any
// shape never open another share; and paths — `..` in names, or symlinks the
// tenant plants over NFS — never leave the share.
func TestSMBTenantIsolation(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	alice := l.user("alice")

	// p2's own policy and SMB pool, on the same network as p1's.
	p2 := "/v1/projects/p2/locations/us-east4"
	mutate(t, l.c, "POST", p2+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": l.realm, "dns": l.dc.Addr,
		"netBiosPrefix": "TENB", "organizationalUnit": l.dc.OU, "username": l.dc.Delegated.Name, "password": l.dc.Delegated.Password})
	mutate(t, l.c, "POST", p2+"/storagePools?storagePoolId=smb", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 1024,
		"network": "projects/p2/global/networks/default", "activeDirectory": strings.TrimPrefix(p2, "/v1/") + "/activeDirectories/ad1"})

	// mounted creates a volume and returns its mount point on the host (which is
	// also where the sandbox, and every Samba instance in it, sees it).
	mounted := func(project, id string, body map[string]any) string {
		t.Helper()
		before := inspect(t, l.s.dataDir).mounts
		body["shareName"], body["storagePool"], body["capacityGib"] = id, "smb", 100
		mutate(t, l.c, "POST", "/v1/projects/"+project+"/locations/us-east4/volumes?volumeId="+id, body)
		for _, k := range inspect(t, l.s.dataDir).mounts {
			if !slices.Contains(before, k) {
				return filepath.Join(l.s.dataDir, "mounts", k)
			}
		}
		t.Fatalf("no mount appeared for %s/%s", project, id)
		return ""
	}
	smbOnly := func() map[string]any { return map[string]any{"protocols": []string{"SMB"}} }
	data1Dir := mounted("p1", "data", map[string]any{"protocols": []string{"NFSV3", "SMB"}, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{rule(l.s.addrN(150), "READ_WRITE", true, false, "true")}}})
	secret1Dir := mounted("p1", "secret1", smbOnly())
	data2Dir := mounted("p2", "data", smbOnly())
	mounted("p2", "secret2", smbOnly())
	data1, secret1 := l.share("data"), l.share("secret1")
	data2, secret2 := l.shareIn("p2", "tenb", "data"), l.shareIn("p2", "tenb", "secret2")
	if data1.Machine == data2.Machine || data1.Endpoint == data2.Endpoint {
		t.Fatalf("p1 and p2 share a server: %+v %+v", data1, data2)
	}

	// Each share holds a file of its own, written by alice through its endpoint:
	// she may use all four, so every refusal below is the boundary's, not the ACL's.
	contents := map[string]string{}
	for _, sh := range []smbShare{data1, secret1, data2, secret2} {
		c := sh.Machine + " " + sh.Share
		contents[c] = sh.UNC
		fs := l.mount(ctx, sh, alice, sh.Share)
		if err := fs.WriteFile("hello.txt", []byte(c), 0o644); err != nil {
			t.Fatalf("write %s as alice: %v", sh.UNC, err)
		}
	}
	// leaked fails the test if b is any share's file but data1's own.
	leaked := func(what string, b []byte) {
		t.Helper()
		if _, ok := contents[string(b)]; ok && string(b) != data1.Machine+" data" {
			t.Errorf("%s: read %q, another share's file", what, b)
		}
	}

	t.Run("controls", func(t *testing.T) {
		for _, sh := range []smbShare{data1, secret1, data2, secret2} {
			if b, err := l.mount(ctx, sh, alice, sh.Share).ReadFile("hello.txt"); err != nil || string(b) != sh.Machine+" "+sh.Share {
				t.Errorf("%s: hello.txt = %q (%v)", sh.UNC, b, err)
			}
		}
	})

	t.Run("another project's shares through this endpoint", func(t *testing.T) {
		for _, c := range []struct {
			via   smbShare // the endpoint connected to
			other smbShare // a share of the other project
		}{{data2, secret1}, {data1, secret2}} {
			// By its name over NTLM (go-smb2 and smbclient), and over Kerberos with
			// a ticket for the other project's server.
			if err := l.tryMount(ctx, c.via, alice, c.other.Share); err == nil {
				t.Errorf("%s opened through %s's endpoint %s", c.other.UNC, c.via.Machine, c.via.Endpoint)
			}
			other := c.other
			other.Endpoint = c.via.Endpoint
			if o, err := l.smbclient(ctx, other, alice, "-m", "SMB3", "-c", "get hello.txt /dev/stdout"); err == nil || !strings.Contains(o, "BAD_NETWORK_NAME") {
				t.Errorf("smbclient %s via %s: %v, want NT_STATUS_BAD_NETWORK_NAME\n%s", other.Share, c.via.Endpoint, err, o)
			}
			if o, err := l.smbclientKrb5(ctx, other, alice, "-m", "SMB3", "-c", "get hello.txt /dev/stdout"); err == nil {
				t.Errorf("smbclient kerberos as %s to %s's endpoint %s: read %q", other.Server, c.via.Machine, c.via.Endpoint, o)
			}
			// Listing the endpoint's shares names only its own project's.
			o, err := l.h.Run(ctx, "smbclient", "-L", "//"+c.via.Endpoint.String(), "-m", "SMB3", "-U", l.dc.Domain+`\`+alice.Name+"%"+alice.Password)
			if err != nil {
				t.Fatalf("smbclient -L %s: %v\n%s", c.via.Endpoint, err, o)
			}
			if !strings.Contains(o, c.via.Share) || strings.Contains(o, c.other.Share) {
				t.Errorf("smbclient -L %s (%s) lists:\n%s\nwant %s and not %s", c.via.Endpoint, c.via.Machine, o, c.via.Share, c.other.Share)
			}
		}
		// The same share name in both projects: each endpoint serves its own.
		for _, sh := range []smbShare{data1, data2} {
			b, err := l.mount(ctx, sh, alice, "DATA").ReadFile("hello.txt")
			if want := sh.Machine + " data"; err != nil || string(b) != want {
				t.Errorf("DATA via %s: %q (%v), want %q", sh.Endpoint, b, err, want)
			}
		}
	})

	t.Run("hostile share names", func(t *testing.T) {
		// Sent as is by go-smb2 (it refuses only '/' and '\\' in a share name).
		names := []string{"..", ".", "...", "secret1 ", "secret1.", "secret1:$DATA", "secret1::$INDEX_ALLOCATION", "SECRET1",
			"SECRET2", "secret2 ", "secret2\x00", "secret2\x00x", "secret2%", "%S", "%P", "C$", "ADMIN$", "global", "homes",
			"printers", "print$", "secret1*", "secret?", strings.Repeat("a", 300), strings.Repeat(".", 80)}
		for _, via := range []smbShare{data1, data2} {
			for _, n := range names {
				fs, err := l.tryMountFS(ctx, via, alice, n)
				if err != nil {
					continue
				}
				// Samba may resolve a name to a share of the endpoint's own
				// server ("SECRET1" → secret1 on p1's); never to another's.
				if b, err := fs.ReadFile("hello.txt"); err == nil && !strings.HasPrefix(string(b), via.Machine+" ") {
					t.Errorf("share %q via %s (%s): read %q", n, via.Endpoint, via.Machine, b)
				}
			}
		}
		// smbclient takes a service path with separators; what follows the share
		// name is a directory within it.
		for _, svc := range []string{"data/../secret2", `data\..\secret2`, "../secret2", "data/../../secret2"} {
			o, err := l.h.Run(ctx, "smbclient", "//"+data1.Endpoint.String()+"/"+svc, "-m", "SMB3",
				"-U", l.dc.Domain+`\`+alice.Name+"%"+alice.Password, "-c", "get hello.txt /dev/stdout")
			if err == nil && strings.Contains(o, data2.Machine) {
				t.Errorf("smbclient //%s/%s: %s", data1.Endpoint, svc, o)
			}
		}
	})

	t.Run("path traversal in names", func(t *testing.T) {
		fs := l.mount(ctx, data1, alice, data1.Share)
		paths := []string{`..\secret1\hello.txt`, `..\..\..\..\etc\passwd`, `sub\..\..\secret1\hello.txt`, `.\..\hello.txt`,
			`..\` + filepath.Base(data2Dir) + `\hello.txt`, `...\hello.txt`, `hello.txt\..\..\secret1\hello.txt`,
			strings.Repeat(`..\`, 64) + `etc\passwd`}
		if err := fs.Mkdir("sub", 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			if b, err := fs.ReadFile(p); err == nil {
				leaked("read "+p, b)
				if strings.Contains(string(b), "root:") {
					t.Errorf("read %s: the host's passwd", p)
				}
			}
			if err := fs.WriteFile(p, []byte("PWNED"), 0o644); err == nil {
				t.Errorf("write %s succeeded", p)
			}
			if _, err := fs.ReadDir(strings.TrimSuffix(p, `\hello.txt`)); err == nil && strings.HasPrefix(p, "..") {
				t.Errorf("listing %s succeeded", p)
			}
		}
		for _, d := range []string{"..", `..\..`, `sub\..\..`} {
			if es, err := fs.ReadDir(d); err == nil {
				t.Errorf("listing %s: %d entries", d, len(es))
			}
		}
		// smbclient (its own path handling) on the same names.
		for _, p := range paths[:3] {
			o, err := l.smbclient(ctx, data1, alice, "-m", "SMB3", "-c", "get "+p+" /dev/stdout")
			if err == nil {
				for c := range contents {
					if c != data1.Machine+" data" && strings.Contains(o, c) {
						t.Errorf("smbclient get %s: %s", p, o)
					}
				}
			}
		}
		for _, d := range []string{secret1Dir, data2Dir} {
			if b, _ := os.ReadFile(filepath.Join(d, "hello.txt")); strings.Contains(string(b), "PWNED") {
				t.Errorf("%s/hello.txt was overwritten", d)
			}
		}
	})

	t.Run("symlinks planted over NFS", func(t *testing.T) {
		host := filepath.Join(t.TempDir(), "canary")
		writeFile(t, host, "host canary", 0o644)
		nfs := mount3(t, ctx, l.h, data1.Endpoint, "/data")
		links := map[string]string{
			"host":       host,
			"passwd":     "/etc/passwd",
			"up":         strings.Repeat("../", 16) + "etc/passwd",
			"secret1":    filepath.Join(secret1Dir, "hello.txt"),
			"secret1rel": "../" + filepath.Base(secret1Dir) + "/hello.txt",
			"p2":         filepath.Join(data2Dir, "hello.txt"),
			"p2rel":      "../" + filepath.Base(data2Dir) + "/hello.txt",
			"p2dir":      data2Dir,
			"root":       "/",
			"inside":     "hello.txt",
		}
		for name, target := range links {
			if _, err := nfs.Symlink(ctx, nfs.Root, name, target); err != nil {
				t.Fatalf("NFS SYMLINK %s -> %s: %v", name, target, err)
			}
		}
		fs := l.mount(ctx, data1, alice, data1.Share)
		if b, err := fs.ReadFile("inside"); err != nil || string(b) != data1.Machine+" data" {
			t.Fatalf("a symlink inside the share: %q (%v), want its target's content", b, err)
		}
		for name := range links {
			if name == "inside" {
				continue
			}
			if b, err := fs.ReadFile(name); err == nil {
				t.Errorf("symlink %s -> %s read %q", name, links[name], b)
			}
			if err := fs.WriteFile(name, []byte("PWNED"), 0o644); err == nil {
				t.Errorf("symlink %s -> %s written", name, links[name])
			}
		}
		for _, d := range []string{"p2dir", "root", `p2dir\..`, `p2dir\..\..`} {
			es, err := fs.ReadDir(d)
			if err != nil {
				continue
			}
			// smbd resolves `p2dir\..` by name, to the share's own root (where it
			// hides the links that point outside): that is all it may list.
			for _, e := range es {
				if !slices.Contains([]string{"hello.txt", "inside", "sub"}, e.Name()) || !strings.HasPrefix(d, `p2dir\..`) {
					t.Errorf("listing %s: %s", d, e.Name())
				}
			}
		}
		for _, p := range []string{host, filepath.Join(secret1Dir, "hello.txt"), filepath.Join(data2Dir, "hello.txt")} {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "PWNED") {
				t.Errorf("%s was overwritten", p)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(data1Dir, "inside")); string(b) != data1.Machine+" data" {
			t.Errorf("data's own file through the link: %q", b)
		}
	})

	t.Run("special files planted over NFS", func(t *testing.T) {
		// A FIFO and a socket made over NFS, and a character device (made on
		// the volume's mount point: Basin's NFS refuses to make devices) that
		// would be /dev/zero. smbd opens a FIFO non-blocking and reads with
		// pread, which a FIFO refuses; the volume is mounted nodev. Whatever
		// the tenant does with them over SMB, every call answers, and the same
		// connection and another client's go on being served.
		nfs := mount3(t, ctx, l.h, data1.Endpoint, "/data")
		for name, typ := range map[string]nfs3.FileType{"fifo": nfs3.TypeFIFO, "sock": nfs3.TypeSock} {
			if _, err := nfs.Mknod(ctx, nfs.Root, name, typ, 0o666, 0, 0); err != nil {
				t.Fatalf("NFS MKNOD %s: %v", name, err)
			}
		}
		if err := unix.Mknod(filepath.Join(data1Dir, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
			t.Fatal(err)
		}
		attacker := l.mount(ctx, data1, alice, data1.Share)
		other := l.mount(ctx, data1, alice, data1.Share) // another connection: another smbd process
		served := func(what string, fs *smb2.Share) {
			t.Helper()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			t0 := time.Now()
			if b, err := fs.WithContext(cctx).ReadFile("hello.txt"); err != nil || string(b) != data1.Machine+" data" {
				t.Fatalf("%s: hello.txt = %q (%v) after %v", what, b, err, time.Since(t0))
			}
		}
		// Each call must answer: 10 s is far more than any takes; a call that
		// blocked a thread of smbd's would never answer.
		try := func(what string, call func(fs *smb2.Share) error) {
			t.Helper()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			t0 := time.Now()
			err := call(attacker.WithContext(cctx))
			if cctx.Err() != nil {
				t.Fatalf("%s: no answer in %v (%v)", what, time.Since(t0), err)
			}
			t.Logf("%s: %v in %v", what, err, time.Since(t0).Round(time.Millisecond))
		}
		for _, name := range []string{"fifo", "sock", "zero"} {
			for _, flag := range []int{os.O_RDONLY, os.O_WRONLY, os.O_RDWR} {
				try(fmt.Sprintf("open %s (%#x), read, write", name, flag), func(fs *smb2.Share) error {
					f, err := fs.OpenFile(name, flag, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					buf := make([]byte, 4096)
					_, rerr := f.Read(buf)
					_, werr := f.Write([]byte("x"))
					return errors.Join(rerr, werr)
				})
			}
		}
		// The FIFO with a writer and a reader, both open: a blocking read would
		// wait for data that never comes.
		try("fifo held open for writing, then read", func(fs *smb2.Share) error {
			w, err := fs.OpenFile("fifo", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer w.Close()
			r, err := fs.OpenFile("fifo", os.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = r.Read(make([]byte, 10))
			return err
		})
		served("the attacker's own connection", attacker)
		served("another connection", other)
		o, err := l.smbclient(ctx, data1, alice, "-m", "SMB3", "-t", "10", "-c", "get fifo /dev/null; get zero /dev/null; get sock /dev/null; get hello.txt /dev/stdout")
		if !strings.Contains(o, data1.Machine+" data") {
			t.Errorf("smbclient after the special files: %v\n%s", err, o)
		}
	})
}

// mount opens share on sh's endpoint as u (NTLM), failing the test if it cannot.
// The session ends with the test.
func (l *smbLab) mount(ctx context.Context, sh smbShare, u addc.User, share string) *smb2.Share {
	l.t.Helper()
	fs, err := l.tryMountFS(ctx, sh, u, share)
	if err != nil {
		l.t.Fatalf("mount %s on %s as %s: %v", share, sh.Endpoint, u.Name, err)
	}
	return fs
}

func (l *smbLab) tryMount(ctx context.Context, sh smbShare, u addc.User, share string) error {
	_, err := l.tryMountFS(ctx, sh, u, share)
	return err
}

// tryMountFS opens share (any string, sent as is) on sh's endpoint as u.
func (l *smbLab) tryMountFS(ctx context.Context, sh smbShare, u addc.User, share string) (*smb2.Share, error) {
	sess, err := l.dialNTLM(ctx, sh, u)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	fs, err := sess.Mount(`\\` + sh.Endpoint.String() + `\` + share)
	if err != nil {
		sess.Logoff()
		return nil, err
	}
	l.t.Cleanup(func() { fs.Umount(); sess.Logoff() })
	return fs, nil
}
