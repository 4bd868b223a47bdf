package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// isolationLab is two tenants' volumes on one Basin: vola in project p1 (client X
// read-write with root kept, client R read-only) and volb in project p2 (client Y),
// each with a snapshot exported under .snapshot, plus canaries on the host, in
// vola's own filesystem outside its data, and in volb.
type isolationLab struct {
	s                    *server
	x, r, y, nobody      *clienthost.Host
	epA, epB             netip.Addr
	keyA, keyB           string
	hostDir              string
	topDir, topFile      nfsraw.KernelHandle // vola's filesystem top level (root objectid 5)
	snapA                nfsraw.KernelHandle // a file in vola's snapshot subvolume
	bFile, bDir, bSnap   nfsraw.KernelHandle
	hostFile             nfsraw.KernelHandle
	fsidB, fsidBSnap     []byte
	fsidHost             []byte
	watched              []string
	topLevel, topCanary  string
	mountA, mountB       string
	mountASnap, mntBSnap string
}

func (l *isolationLab) mounts(k string) string { return filepath.Join(l.s.dataDir, "mounts", k) }

func newIsolationLab(t *testing.T) *isolationLab {
	s := newServer(t)
	s.start()
	c := s.client()
	l := &isolationLab{s: s}
	for _, p := range []string{"p1", "p2"} {
		mutate(t, c, "POST", "/v1/projects/"+p+"/locations/us-east4/storagePools?storagePoolId=pool1",
			map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10", "network": "projects/" + p + "/global/networks/default"})
	}
	l.keyA = s.tenantVolume(c, "p1", "vola", rule(s.addrN(201), "READ_WRITE", true, true, "true"), rule(s.addrN(202), "READ_ONLY", true, true, "true"))
	l.keyB = s.tenantVolume(c, "p2", "volb", rule(s.addrN(203), "READ_WRITE", true, true, "true"))
	l.mountA, l.mountB = l.mounts(l.keyA), l.mounts(l.keyB)
	l.x, l.r, l.y, l.nobody = s.host(201), s.host(202), s.host(203), s.host(204) // on the bridge the first volume made
	l.topLevel = filepath.Join(s.dataDir, "fs", l.keyA)
	l.topCanary = filepath.Join(l.topLevel, "toplevel-canary")
	writeFile(t, filepath.Join(l.mountA, "a-data"), "data of a", 0o644)
	writeFile(t, filepath.Join(l.mountA, "ro-data"), "read me", 0o644)
	writeFile(t, l.topCanary, "top level of vola", 0o600)
	writeFile(t, filepath.Join(l.mountB, "canary-b"), "tenant b", 0o600)
	os.Mkdir(filepath.Join(l.mountB, "dir-b"), 0o700)
	mutate(t, c, "POST", "/v1/projects/p1/locations/us-east4/volumes/vola/snapshots?snapshotId=s1", map[string]any{})
	mutate(t, c, "POST", "/v1/projects/p2/locations/us-east4/volumes/volb/snapshots?snapshotId=s1", map[string]any{})
	l.mountASnap, l.mntBSnap = l.mounts(l.keyA+"@s1"), l.mounts(l.keyB+"@s1")

	// The host's files: a directory on the host's own filesystem, outside
	// everything Basin exports.
	l.hostDir = t.TempDir()
	os.MkdirAll(filepath.Join(l.hostDir, "victim-rmdir"), 0o755)
	for _, n := range []string{"canary", "victim-remove", "victim-rename", "target-follow", "chmod-target"} {
		writeFile(t, filepath.Join(l.hostDir, n), "host "+n, 0o600)
	}
	kh := func(p string) nfsraw.KernelHandle {
		k, err := nfsraw.KernelHandleOf(p)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	fsid := func(p string) []byte {
		b, err := nfsraw.StatfsFSID(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	l.topDir, l.topFile = kh(l.topLevel), kh(l.topCanary)
	l.snapA = kh(filepath.Join(l.mountASnap, "a-data"))
	l.bFile, l.bDir, l.bSnap = kh(filepath.Join(l.mountB, "canary-b")), kh(l.mountB), kh(filepath.Join(l.mntBSnap, "canary-b"))
	l.hostFile = kh(filepath.Join(l.hostDir, "canary"))
	l.fsidB, l.fsidBSnap, l.fsidHost = fsid(l.mountB), fsid(l.mntBSnap), fsid(l.hostDir)
	l.epA, l.epB = endpointIn(t, c, "p1", "vola"), endpointIn(t, c, "p2", "volb")
	l.watched = []string{l.hostDir, l.mountB, l.mntBSnap, l.mountASnap, l.mounts(l.keyA + "@.snapshot"), l.mounts(l.keyB + "@.snapshot")}
	return l
}

// tenantVolume makes a 1 GiB NFSv3 and NFSv4 volume, mode 0777, with a
// snapshot directory and export rules rules, in project's pool1, and returns
// its key (the mount that appeared).
func (s *server) tenantVolume(c *client.Client, project, share string, rules ...any) string {
	t := s.t
	t.Helper()
	before := inspect(t, s.dataDir).mounts
	mutate(t, c, "POST", "/v1/projects/"+project+"/locations/us-east4/volumes?volumeId="+share, map[string]any{
		"shareName": share, "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3", "NFSV4"},
		"unixPermissions": "0777", "snapshotDirectory": true, "exportPolicy": map[string]any{"rules": rules}})
	for _, k := range inspect(t, s.dataDir).mounts {
		if !slices.Contains(before, k) {
			return k
		}
	}
	t.Fatalf("no mount appeared for %s", share)
	return ""
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
}

// state describes everything an attack must not change: the watched trees, and the
// top level of vola's filesystem (its names, and the canary there).
func (l *isolationLab) state() string {
	var names []string
	entries, _ := os.ReadDir(l.topLevel)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	canary, _ := os.ReadFile(l.topCanary)
	return nfsraw.Tree(l.watched...) + fmt.Sprintf("top level %v, canary %q\n", names, canary)
}

// mount3 mounts dir of ep over NFSv3 as host h (root).
func mount3(t *testing.T, ctx context.Context, h *clienthost.Host, ep netip.Addr, dir string) *nfs3.Client {
	t.Helper()
	var c *nfs3.Client
	err := h.Within(func() (err error) {
		c, err = nfs3.Mount(ctx, ep.String(), dir, nfs3.Options{Auth: nfs3.Auth{Machine: "attacker"}})
		return err
	})
	if err != nil {
		t.Fatalf("mount %s:%s from %s: %v", ep, dir, h.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dial4 opens an NFSv4.0 connection to ep as host h (root).
func dial4(t *testing.T, ctx context.Context, h *clienthost.Host, ep netip.Addr) *nfsraw.Client {
	t.Helper()
	return dialWith(t, ctx, h, ep, nfsraw.Dial)
}

// dialWith connects to ep's NFSv4 server as host h (root) with dial, and closes
// the client when the test ends.
func dialWith(t *testing.T, ctx context.Context, h *clienthost.Host, ep netip.Addr,
	dial func(context.Context, string, int, nfsraw.Auth) (*nfsraw.Client, error)) *nfsraw.Client {
	t.Helper()
	var c *nfsraw.Client
	err := h.Within(func() (err error) {
		c, err = dial(ctx, ep.String(), 2049, nfsraw.Auth{Machine: "attacker"})
		return err
	})
	if err != nil {
		t.Fatalf("NFSv4 to %s from %s: %v", ep, h.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// handleRefused checks that a forged handle was refused as a bad or stale handle,
// or (for an export the client may not use) as an access or RPC auth error.
func handleRefused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("attack allowed: %s", what)
		return
	}
	if s, ok := nfs3.StatusOf(err); ok && slices.Contains([]nfs3.Status{nfs3.ErrStale, nfs3.ErrBadHandle, nfs3.ErrAcces}, s) {
		return
	}
	if s, ok := nfsraw.StatusOf(err); ok && slices.Contains([]nfsraw.Status{nfsraw.ErrStale, nfsraw.ErrBadHandle, nfsraw.ErrAccess}, s) {
		return
	}
	var re *nfsraw.RPCError
	if errors.As(err, &re) || strings.Contains(err.Error(), "call denied") {
		return // the RPC layer refused: an export the client may not use
	}
	t.Errorf("%s: refused with %v, want STALE, BADHANDLE or ACCES", what, err)
}

func refused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("attack allowed: %s", what)
	}
}

// TestTenantIsolation attacks Basin's NFS data path as a hostile tenant would, with
// raw NFSv3 and NFSv4 clients from client hosts: forged file handles, names that
// try to leave the export, symlinks that try to make the server follow them, a
// read-only client writing, and export listings. Every attack must be refused and
// nothing on the host, in the other tenant's volume, in the snapshots or outside
// the attacker's own data may change.
func TestTenantIsolation(t *testing.T) {
	l := newIsolationLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := l.state()

	a := mount3(t, ctx, l.x, l.epA, "/vola")
	c4 := dial4(t, ctx, l.x, l.epA)
	aData, _, err := a.Lookup(ctx, a.Root, "a-data")
	if err != nil {
		t.Fatal(err)
	}
	h3, err := nfsraw.ParseHandle(aData, true)
	if err != nil {
		t.Fatal(err)
	}
	own, ok := h3.Btrfs()
	if !ok {
		t.Fatalf("handle %x is not a btrfs VFS handle", aData)
	}
	g := &nfsraw.GetFH{}
	if err := c4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "vola"}, &nfsraw.Lookup{Name: "a-data"}, g); err != nil {
		t.Fatal(err)
	}
	h4, err := nfsraw.ParseHandle(g.FH, false)
	if err != nil {
		t.Fatal(err)
	}

	// The same operations with real handles work: the attacks below are refused
	// for what they forge, not for a broken client.
	t.Run("controls", func(t *testing.T) {
		buf := make([]byte, 64)
		if n, _, err := a.Read(ctx, aData, buf, 0); err != nil || string(buf[:n]) != "data of a" {
			t.Fatalf("v3 READ of a-data: %q %v", buf[:n], err)
		}
		if _, err := a.ReadDir(ctx, a.Root); err != nil {
			t.Fatalf("v3 READDIR: %v", err)
		}
		fh, err := a.CreateWith(ctx, a.Root, "control", nfs3.CreateArgs{How: nfs3.Guarded})
		if err != nil {
			t.Fatalf("v3 CREATE: %v", err)
		}
		if _, err := a.Write(ctx, fh, []byte("ok"), 0, nfs3.FileSync); err != nil {
			t.Fatalf("v3 WRITE: %v", err)
		}
		if err := a.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: nfs3.Mode(0o640)}); err != nil {
			t.Fatalf("v3 SETATTR: %v", err)
		}
		rd := &nfsraw.Read{Count: 64}
		if err := c4.Run(ctx, &nfsraw.PutFH{FH: g.FH}, rd); err != nil || string(rd.Data) != "data of a" {
			t.Fatalf("v4 READ: %q %v", rd.Data, err)
		}
		if err := c4.Run(ctx, &nfsraw.PutFH{FH: g.FH}, &nfsraw.Write{Data: []byte("data of a")}); err != nil {
			t.Fatalf("v4 WRITE: %v", err)
		}
	})

	snapID := func(k nfsraw.KernelHandle) uint64 {
		b, ok := (nfsraw.Handle{KernelType: k.Type, Kernel: k.Bytes}).Btrfs()
		if !ok {
			t.Fatalf("not a btrfs handle: %+v", k)
		}
		return b.RootObjectID
	}
	withRoot := func(h nfsraw.Handle, root uint64, objectID uint64) []byte {
		f := h.Clone()
		b := own
		b.RootObjectID, b.ObjectID, b.Generation = root, objectID, 0
		f.SetBtrfs(b)
		return f.Encode()
	}
	rnd := rand.New(rand.NewSource(1))
	forgeries := func(h nfsraw.Handle) []struct {
		name string
		fh   []byte
	} {
		random := h.Clone()
		random.Kernel = make([]byte, len(h.Kernel))
		rnd.Read(random.Kernel)
		garbage := make([]byte, len(h.Encode()))
		rnd.Read(garbage)
		hostFS := h.Clone()
		hostFS.KernelType, hostFS.Kernel, hostFS.FSID = l.hostFile.Type, l.hostFile.Bytes, l.fsidHost
		hostFS.Flags = byte(nfsraw.FSIDTwoUint32) | nfsraw.HandleType8
		return []struct {
			name string
			fh   []byte
		}{
			{"root objectid 5 (vola's top level), generation 0", withRoot(h, nfsraw.BtrfsTopLevelID, 256)},
			{"vola's top-level directory", nfsraw.Forge(h, l.topDir, nil)},
			{"vola's top-level canary", nfsraw.Forge(h, l.topFile, nil)},
			{"vola's snapshot subvolume id", withRoot(h, snapID(l.snapA), own.ObjectID)},
			{"volb's fsid and file", nfsraw.Forge(h, l.bFile, l.fsidB)},
			{"volb's fsid and root directory", nfsraw.Forge(h, l.bDir, l.fsidB)},
			{"volb's snapshot fsid and file", nfsraw.Forge(h, l.bSnap, l.fsidBSnap)},
			{"the host filesystem's fsid and a host file", hostFS.Encode()},
			{"random kernel handle", random.Encode()},
			{"random bytes", garbage},
		}
	}

	t.Run("forged NFSv3 handles", func(t *testing.T) {
		for _, c := range forgeries(h3) {
			_, err := a.ReadDir(ctx, c.fh)
			handleRefused(t, "READDIR "+c.name, err)
			_, _, err = a.Read(ctx, c.fh, make([]byte, 64), 0)
			handleRefused(t, "READ "+c.name, err)
			_, err = a.Write(ctx, c.fh, []byte("PWNED"), 0, nfs3.FileSync)
			handleRefused(t, "WRITE "+c.name, err)
			_, err = a.CreateWith(ctx, c.fh, "forged-create", nfs3.CreateArgs{How: nfs3.Guarded})
			handleRefused(t, "CREATE in "+c.name, err)
			handleRefused(t, "SETATTR "+c.name, a.SetAttr(ctx, c.fh, nfs3.SetAttrs{Mode: nfs3.Mode(0o777)}))
		}
		// A handle claiming volb's export, which X may not use.
		other := h3.Clone()
		other.ExportID = 0
		for id := uint16(1); id < 64 && other.ExportID == 0; id++ {
			if id != h3.ExportID {
				other.ExportID = id
			}
		}
		other.KernelType, other.Kernel, other.FSID = l.bFile.Type, l.bFile.Bytes, l.fsidB
		_, _, err := a.Read(ctx, other.Encode(), make([]byte, 64), 0)
		handleRefused(t, "READ with another export's id, fsid and file", err)
	})

	// volb's kernel handle under vola's fsid is decoded in vola's own filesystem,
	// where the same numbers name vola's objects, if any: whatever it reaches, it
	// is never volb's data.
	t.Run("volb's kernel handle in vola's filesystem", func(t *testing.T) {
		fh3, fh4 := nfsraw.Forge(h3, l.bFile, nil), nfsraw.Forge(h4, l.bFile, nil)
		buf := make([]byte, 64)
		if n, _, err := a.Read(ctx, fh3, buf, 0); err == nil && strings.Contains(string(buf[:n]), "tenant b") {
			t.Errorf("v3 READ of volb's kernel handle under vola's fsid read volb's data")
		}
		rd := &nfsraw.Read{Count: 64}
		if err := c4.Run(ctx, &nfsraw.PutFH{FH: fh4}, rd); err == nil && strings.Contains(string(rd.Data), "tenant b") {
			t.Errorf("v4 READ of volb's kernel handle under vola's fsid read volb's data")
		}
	})

	t.Run("forged NFSv4 handles", func(t *testing.T) {
		for _, c := range forgeries(h4) {
			put := &nfsraw.PutFH{FH: c.fh}
			handleRefused(t, "READDIR "+c.name, c4.Run(ctx, put, &nfsraw.ReadDir{}))
			handleRefused(t, "READ "+c.name, c4.Run(ctx, put, &nfsraw.Read{Count: 64}))
			handleRefused(t, "WRITE "+c.name, c4.Run(ctx, put, &nfsraw.Write{Data: []byte("PWNED")}))
			handleRefused(t, "CREATE in "+c.name, c4.Run(ctx, put, &nfsraw.Create{Name: "forged-dir", Mode: 0o755}))
			m := uint32(0o777)
			handleRefused(t, "SETATTR "+c.name, c4.Run(ctx, put, &nfsraw.SetAttr{Mode: &m}))
		}
	})

	t.Run("NFSv3 names", func(t *testing.T) {
		mine, err := a.Create(ctx, a.Root, "mine", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		// Inside the sandbox vola is mounted on <data>/mounts/<key>; volb beside it.
		prefixes := map[string]string{
			"absolute host path":             l.hostDir + "/",
			"absolute path of volb":          l.mountB + "/",
			"absolute path of volb's snap":   l.mntBSnap + "/",
			"dot-dot to volb":                "../" + l.keyB + "/",
			"dot-dot to volb's snapshot":     "../" + l.keyB + "@s1/",
			"dot-dot to the root":            strings.Repeat("../", 16) + strings.TrimPrefix(l.hostDir, "/") + "/",
			"dot-dot to the sandbox's etc":   strings.Repeat("../", 16) + "etc/",
			"dot-dot to vola's top level":    "../../fs/" + l.keyA + "/",
			"trailing dot-dot":               "a-data/../../" + l.keyB + "/",
			"absolute path of the top level": l.topLevel + "/",
		}
		for kind, p := range prefixes {
			_, _, err := a.Lookup(ctx, a.Root, p+"canary")
			refused(t, "LOOKUP "+kind, err)
			_, _, err = a.Lookup(ctx, a.Root, p+"canary-b")
			refused(t, "LOOKUP canary-b by "+kind, err)
			_, err = a.CreateWith(ctx, a.Root, p+"by-create", nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Mode: nfs3.Mode(0o666)}})
			refused(t, "CREATE "+kind, err)
			_, err = a.CreateWith(ctx, a.Root, p+"canary", nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Size: nfs3.Size(0)}})
			refused(t, "CREATE (truncate) "+kind, err)
			_, err = a.Mkdir(ctx, a.Root, p+"by-mkdir", 0o755)
			refused(t, "MKDIR "+kind, err)
			_, err = a.Symlink(ctx, a.Root, p+"by-symlink", "/etc/passwd")
			refused(t, "SYMLINK "+kind, err)
			_, err = a.Mknod(ctx, a.Root, p+"by-mknod", nfs3.TypeFIFO, 0o644, 0, 0)
			refused(t, "MKNOD "+kind, err)
			refused(t, "REMOVE "+kind, a.Remove(ctx, a.Root, p+"victim-remove"))
			refused(t, "REMOVE canary-b by "+kind, a.Remove(ctx, a.Root, p+"canary-b"))
			refused(t, "RMDIR "+kind, a.Rmdir(ctx, a.Root, p+"victim-rmdir"))
			refused(t, "RMDIR dir-b by "+kind, a.Rmdir(ctx, a.Root, p+"dir-b"))
			refused(t, "RENAME from "+kind, a.Rename(ctx, a.Root, p+"victim-rename", a.Root, "stolen"))
			refused(t, "RENAME canary-b from "+kind, a.Rename(ctx, a.Root, p+"canary-b", a.Root, "stolen-b"))
			refused(t, "RENAME to "+kind, a.Rename(ctx, a.Root, "mine", a.Root, p+"by-rename"))
			refused(t, "LINK to "+kind, a.Link(ctx, mine, a.Root, p+"by-link"))
		}
	})

	t.Run("symlinks the server must not follow", func(t *testing.T) {
		for _, target := range []string{filepath.Join(l.hostDir, "target-follow"), "../" + l.keyB + "/canary-b", filepath.Join(l.mountB, "canary-b")} {
			name := "ln-" + strings.NewReplacer("/", "_", ".", "d").Replace(target)
			if _, err := a.Symlink(ctx, a.Root, name, target); err != nil {
				t.Fatal(err)
			}
			fh, err := a.CreateWith(ctx, a.Root, name, nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Size: nfs3.Size(0), Mode: nfs3.Mode(0o666)}})
			refused(t, "CREATE UNCHECKED over a symlink to "+target, err)
			if err == nil && fh != nil {
				_, err = a.Write(ctx, fh, []byte("PWNED"), 0, nfs3.FileSync)
				refused(t, "WRITE through the symlink's handle to "+target, err)
			}
		}
	})

	t.Run("read-only client", func(t *testing.T) {
		r := mount3(t, ctx, l.r, l.epA, "/vola")
		roData, _, err := r.Lookup(ctx, r.Root, "ro-data")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, _, err := r.Read(ctx, roData, buf, 0); err != nil || string(buf[:n]) != "read me" {
			t.Errorf("read-only client cannot read: %q %v", buf[:n], err)
		}
		_, err = r.Write(ctx, roData, []byte("PWNED"), 0, nfs3.FileSync)
		refused(t, "read-only client WRITE", err)
		refused(t, "read-only client SETATTR", r.SetAttr(ctx, roData, nfs3.SetAttrs{Mode: nfs3.Mode(0o777)}))
		_, err = r.CreateWith(ctx, r.Root, "ro-create", nfs3.CreateArgs{How: nfs3.Guarded})
		refused(t, "read-only client CREATE", err)
		for _, c := range forgeries(h3) {
			_, _, err := r.Read(ctx, c.fh, buf, 0)
			handleRefused(t, "read-only client READ "+c.name, err)
		}
	})

	t.Run(".snapshot", func(t *testing.T) { l.attackSnapshotDirectory(t, ctx, a, c4, h3, h4) })

	t.Run("mounts of another tenant's exports", func(t *testing.T) {
		for _, dir := range []string{"/volb", "/volb/.snapshot/s1", "/volb/.snapshot", "/"} {
			err := l.x.Within(func() error {
				c, err := nfs3.Mount(ctx, l.epB.String(), dir, nfs3.Options{})
				if err == nil {
					c.Close()
				}
				return err
			})
			refused(t, "MNT "+dir+" from vola's client", err)
		}
	})

	t.Run("export listings", func(t *testing.T) {
		for _, c := range []struct {
			who  string
			h    *clienthost.Host
			want []string
		}{
			{"vola's client", l.x, []string{"/vola", "/vola/.snapshot", "/vola/.snapshot/s1"}},
			{"vola's read-only client", l.r, []string{"/vola", "/vola/.snapshot", "/vola/.snapshot/s1"}},
			{"volb's client", l.y, []string{"/volb", "/volb/.snapshot", "/volb/.snapshot/s1"}},
			{"a host no policy names", l.nobody, nil},
		} {
			for _, ep := range []netip.Addr{l.epA, l.epB} {
				var xs []nfs3.Export
				if err := c.h.Within(func() (err error) { xs, err = nfs3.Exports(ctx, ep.String(), nfs3.Options{}); return err }); err != nil {
					t.Fatalf("MOUNT EXPORT from %s: %v", c.who, err)
				}
				var dirs []string
				for _, x := range xs {
					dirs = append(dirs, x.Dir)
				}
				slices.Sort(dirs)
				if !slices.Equal(dirs, c.want) {
					t.Errorf("MOUNT EXPORT at %s for %s lists %v, want %v", ep, c.who, dirs, c.want)
				}
			}
			v4 := dial4(t, ctx, c.h, l.epA)
			ents, err := v4.ReadDirAll(ctx, nil)
			if err != nil {
				t.Fatalf("pseudo-root READDIR as %s: %v", c.who, err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, "/"+e.Name)
			}
			var want []string
			for _, d := range c.want {
				if !strings.Contains(d, ".snapshot") { // reached from the volumes' roots, not listed here
					want = append(want, d)
				}
			}
			if !slices.Equal(names, want) {
				t.Errorf("NFSv4 pseudo-root READDIR for %s lists %v, want %v", c.who, names, want)
			}
		}
	})

	if after := l.state(); after != before {
		t.Errorf("an attack changed what it must not:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if t.Failed() {
		out, _ := exec.Command("tail", "-n", "50", filepath.Join(l.s.dataDir, "sandboxes", "default", "logs", "ganesha.log")).Output()
		t.Logf("ganesha log:\n%s", out)
	}
}

// TestSandboxHoldsNothingOfTheHost looks at the running Ganesha from outside: its
// root holds only what the sandbox gives it (no host /home, /root, /var/lib…), it
// keeps only its few capabilities, and the sandbox answers on no UDP port.
func TestSandboxHoldsNothingOfTheHost(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "vol1")
	pids := s.ganeshaPIDs()
	if len(pids) != 1 {
		t.Fatalf("ganesha pids %v", pids)
	}
	root := fmt.Sprintf("/proc/%d/root", pids[0])
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	first := strings.Split(strings.Trim(s.dataDir, "/"), "/")[0] // the data dir's top directory, e.g. tmp
	allowed := []string{"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "tmp", "usr", "var", first}
	for _, n := range names {
		if !slices.Contains(allowed, n) {
			t.Errorf("Ganesha's root holds %q (all: %v)", n, names)
		}
	}
	for _, p := range []string{"etc/shadow", "root", "home", "var/lib/dpkg", "etc/ssh"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("Ganesha's root has the host's /%s", p)
		}
	}
	// The data directory shows only the sandbox's state and the volumes' mount
	// points: not the database, the keys or the store.
	inside := filepath.Join(root, s.dataDir)
	entries, _ = os.ReadDir(inside)
	names = names[:0]
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"mounts", "sandboxes"}) {
		t.Errorf("Ganesha sees %v in the data directory; want only mounts and sandboxes", names)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "CapBnd:") || strings.HasPrefix(line, "CapEff:") {
			var mask uint64
			fmt.Sscanf(strings.TrimSpace(strings.SplitN(line, ":", 2)[1]), "%x", &mask)
			const sysAdmin, sysPtrace, netAdmin, sysModule = 21, 19, 12, 16
			for _, capNo := range []uint{sysAdmin, sysPtrace, netAdmin, sysModule} {
				if mask&(1<<capNo) != 0 {
					t.Errorf("Ganesha holds capability %d (%s)", capNo, line)
				}
			}
		}
	}
	out, err := exec.Command("ip", "netns", "exec", "basin-"+s.bridge, "ss", "-Hlnu").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("the sandbox listens on UDP:\n%s", out)
	}
	s.stop(syscall.SIGTERM)
}

// attackSnapshotDirectory attacks .snapshot as client X of vola: names that try
// to leave it, handles forged from its own to reach volb's snapshot directory or
// to reach the directory's filesystem through the volume's export, writes; and
// checks that each tenant's .snapshot lists its own snapshots only.
func (l *isolationLab) attackSnapshotDirectory(t *testing.T, ctx context.Context, a *nfs3.Client, c4 *nfsraw.Client, h3, h4 nfsraw.Handle) {
	dirA, _, err := a.Lookup(ctx, a.Root, ".snapshot")
	if err != nil {
		t.Fatalf("LOOKUP .snapshot in vola: %v", err)
	}
	ents, err := a.ReadDirPlus(ctx, dirA)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{".", "..", "s1"}) {
		t.Errorf("vola's .snapshot lists %v", names)
	}
	if got, err := readPath(ctx, a, ".snapshot/s1/a-data"); err != nil || got != "data of a" {
		t.Errorf("vola's .snapshot/s1/a-data: %q %v", got, err)
	}
	// volb's client sees volb's snapshots under volb's .snapshot, and not vola's.
	b := mount3(t, ctx, l.y, l.epB, "/volb")
	dirB, _, err := b.Lookup(ctx, b.Root, ".snapshot")
	if err != nil {
		t.Fatalf("LOOKUP .snapshot in volb: %v", err)
	}
	if got, err := readPath(ctx, b, ".snapshot/s1/canary-b"); err != nil || got != "tenant b" {
		t.Errorf("volb's .snapshot/s1/canary-b: %q %v", got, err)
	}
	_, err = b.ReadDir(ctx, dirA)
	handleRefused(t, "volb's client READDIR of vola's .snapshot handle", err)

	// Names: nothing but the snapshots' names leads anywhere, and "." and ".."
	// stay in .snapshot.
	for _, dots := range []string{".", ".."} {
		if fh, _, err := a.Lookup(ctx, dirA, dots); err != nil || !bytes.Equal(fh, dirA) {
			t.Errorf("LOOKUP %q in .snapshot left it: %x %v", dots, fh, err)
		}
	}
	for _, name := range []string{"volb", "vola", ".snapshot", "../volb", "/volb", "s1/../../volb", "../../" + l.keyB, l.keyB + "@s1", l.keyB, "S1"} {
		_, _, err := a.Lookup(ctx, dirA, name)
		refused(t, "NFSv3 LOOKUP "+name+" in .snapshot", err)
		err = c4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "vola"}, &nfsraw.Lookup{Name: ".snapshot"}, &nfsraw.Lookup{Name: name})
		refused(t, "NFSv4 LOOKUP "+name+" in .snapshot", err)
	}
	// Writes, as root with root kept.
	_, err = a.Create(ctx, dirA, "planted", 0o644)
	refused(t, "CREATE in .snapshot", err)
	_, err = a.Mkdir(ctx, dirA, "planted", 0o755)
	refused(t, "MKDIR in .snapshot", err)
	_, err = a.Symlink(ctx, dirA, "planted", "/etc/passwd")
	refused(t, "SYMLINK in .snapshot", err)
	refused(t, "RMDIR .snapshot/s1", a.Rmdir(ctx, dirA, "s1"))
	refused(t, "RENAME .snapshot/s1", a.Rename(ctx, dirA, "s1", a.Root, "stolen"))
	s1, _, _ := a.Lookup(ctx, dirA, "s1")
	aData, _, _ := a.Lookup(ctx, s1, "a-data")
	_, err = a.Write(ctx, aData, []byte("PWNED"), 0, nfs3.FileSync)
	refused(t, "WRITE .snapshot/s1/a-data", err)

	// Forged handles: vola's .snapshot handle naming volb's snapshot directory or
	// its entry; vola's volume handle naming its own snapshot directory's
	// filesystem; volb's snapshot directory's export ID.
	hDir, err := nfsraw.ParseHandle(dirA, true)
	if err != nil {
		t.Fatal(err)
	}
	hDirB, _ := nfsraw.ParseHandle(dirB, true)
	kh := func(p string) nfsraw.KernelHandle {
		k, err := nfsraw.KernelHandleOf(p)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	snapDirA, snapDirB := l.mounts(l.keyA+"@.snapshot"), l.mounts(l.keyB+"@.snapshot")
	fsidDirA, _ := nfsraw.StatfsFSID(snapDirA)
	fsidDirB, _ := nfsraw.StatfsFSID(snapDirB)
	otherExport := hDirB.Clone()
	for _, c := range []struct {
		name string
		fh   []byte
	}{
		{"vola's .snapshot handle with volb's .snapshot fsid and root", nfsraw.Forge(hDir, kh(snapDirB), fsidDirB)},
		{"vola's .snapshot handle with volb's .snapshot fsid and entry", nfsraw.Forge(hDir, kh(filepath.Join(snapDirB, "s1")), fsidDirB)},
		{"vola's volume handle with its .snapshot's fsid and root", nfsraw.Forge(h3, kh(snapDirA), fsidDirA)},
		{"vola's .snapshot handle with vola's live filesystem's root", nfsraw.Forge(hDir, kh(l.mountA), h3.FSID)},
		{"volb's .snapshot handle (its export id)", otherExport.Encode()},
	} {
		_, err := a.ReadDir(ctx, c.fh)
		handleRefused(t, "READDIR "+c.name, err)
		_, _, err = a.Lookup(ctx, c.fh, "s1")
		handleRefused(t, "LOOKUP s1 in "+c.name, err)
		// (A read-only export refuses a CREATE before it looks at the handle.)
		_, err = a.Create(ctx, c.fh, "forged", 0o644)
		refused(t, "CREATE in "+c.name, err)
	}
	g := &nfsraw.GetFH{}
	if err := c4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "vola"}, &nfsraw.Lookup{Name: ".snapshot"}, g); err != nil {
		t.Fatalf("NFSv4 LOOKUP .snapshot: %v", err)
	}
	hDir4, _ := nfsraw.ParseHandle(g.FH, false)
	for _, c := range []struct {
		name string
		fh   []byte
	}{
		{"vola's .snapshot handle with volb's .snapshot fsid and root", nfsraw.Forge(hDir4, kh(snapDirB), fsidDirB)},
		{"vola's volume handle with its .snapshot's fsid and root", nfsraw.Forge(h4, kh(snapDirA), fsidDirA)},
	} {
		handleRefused(t, "NFSv4 READDIR "+c.name, c4.Run(ctx, &nfsraw.PutFH{FH: c.fh}, &nfsraw.ReadDir{}))
		handleRefused(t, "NFSv4 LOOKUP s1 in "+c.name, c4.Run(ctx, &nfsraw.PutFH{FH: c.fh}, &nfsraw.Lookup{Name: "s1"}))
	}
	// The read-only client reads .snapshot too, and cannot write there.
	r := mount3(t, ctx, l.r, l.epA, "/vola")
	if got, err := readPath(ctx, r, ".snapshot/s1/ro-data"); err != nil || got != "read me" {
		t.Errorf("the read-only client's .snapshot/s1/ro-data: %q %v", got, err)
	}
	rDir, _, _ := r.Lookup(ctx, r.Root, ".snapshot")
	_, err = r.Create(ctx, rDir, "planted", 0o644)
	refused(t, "read-only client CREATE in .snapshot", err)
}
