package ganeshatest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/cephfs"
	"github.com/basin-nas/basin/test/ceph"
	"github.com/basin-nas/basin/test/nfsraw"
)

// forgeCeph is FSAL_CEPH handle h naming another inode and snapid.
func forgeCeph(t *testing.T, h []byte, ino, snap uint64) []byte {
	t.Helper()
	f, err := nfsraw.ForgeCeph(h, ino, snap)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Two tenants' CephFS volumes served by FSAL_CEPH, each export with its own
// path-restricted cephx user of a namespace-isolated subvolume (as Basin's
// CephFS backend makes them). Tenant A forges handles naming tenant B's
// inodes, with the live snapid and with snapids 2, 1000 and 2^64-16 (for
// which the MDS checks no path: Debian's Ganesha answered GETATTR of any
// inode and READ of another subvolume's file). Every operation that takes a
// handle is refused, over NFSv3 and NFSv4; nothing of B's is read or changed.
func TestCephForgedHandles(t *testing.T) {
	Need(t)
	if err := ceph.Check(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("ceph-fuse"); err != nil {
		t.Skip("ceph-fuse not installed (scripts/setup.sh --test)")
	}
	bin := *ganeshaBin
	fsal := filepath.Join(filepath.Dir(filepath.Dir(bin)), "lib", "ganesha", "libfsalceph.so")
	if bin == DebianBin {
		fsal = "/usr/lib/x86_64-linux-gnu/ganesha/libfsalceph.so"
	}
	if _, err := os.Stat(fsal); err != nil {
		t.Skipf("%s has no FSAL_CEPH (%s)", bin, fsal)
	}
	// The server first: it gives this mount namespace a /run of its own, where
	// the cluster's namespace is then made.
	srv := NewServer(t, bin)
	Run(t, "ip", "link", "add", "bcg0", "type", "bridge")
	Run(t, "ip", "addr", "add", "10.99.82.1/24", "dev", "bcg0")
	Run(t, "ip", "link", "set", "bcg0", "up")
	cl := ceph.StartT(t, ceph.Options{Name: "cgt", Dir: Scratch(t, "ceph"), Bridge: "bcg0", Addr: "10.99.82.2/24"})
	ctx := Context(t, 3*time.Minute)

	be := cephfs.New(cephfs.Options{Conf: cl.Conf, ID: "admin", Keyring: cl.AdminKeyring, DataDir: Scratch(t, "cephfs")})
	if err := be.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	att := map[string]storage.Attachment{}
	for _, k := range []string{"va", "vb"} {
		if err := be.EnsureVolume(ctx, k, 64<<20, nil); err != nil {
			t.Fatal(err)
		}
		if err := be.SetMode(ctx, k, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := be.Mount(ctx, k); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.DeleteVolume(context.Background(), k) })
		a, err := be.Attachment(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		att[k] = a
	}
	write(t, filepath.Join(be.MountPath("va"), "own"), "A-OWN-DATA\n", 0o644)
	write(t, filepath.Join(be.MountPath("vb"), "secret"), "B-SECRET-DATA\n", 0o600)
	os.Mkdir(filepath.Join(be.MountPath("vb"), "dir"), 0o755)
	bFiles := tree(t, be.MountPath("vb"))

	export := func(id int, k, ip string) Export {
		a := att[k]
		return Export{ID: id, Path: a.Path, Pseudo: "/" + k, Clients: []Client{{IP: ip, Access: "RW", Squash: "no_root_squash"}},
			Extra: "Attr_Expiration_Time = 0;",
			FSAL:  fmt.Sprintf("FSAL { Name = CEPH; User_Id = %q; Secret_Access_Key = %q; Filesystem = %q; }", a.UserID, a.Secret, a.FS)}
	}
	conf := Config(srv.Dir, srv.NFSPort, srv.MountPort, []Export{export(101, "va", ipA), export(102, "vb", ipB)}) +
		fmt.Sprintf("CEPH { Ceph_Conf = %q; }\n", cl.Conf)
	if err := os.WriteFile(srv.ConfPath(), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Launch(t)

	// B's inode numbers, from B's own handles (ceph-fuse shows its mount's
	// root as inode 1, whatever it is in CephFS).
	b := mount3(t, ctx, srv, ipB, "/vb")
	bSecret, _, err := b.Lookup(ctx, b.Root, "secret")
	if err != nil {
		t.Fatalf("B's file: %v\n%s", err, srv.Log())
	}
	bDir, _, err := b.Lookup(ctx, b.Root, "dir")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]uint64{"B's file": nfsraw.CephIno(bSecret), "B's root": nfsraw.CephIno(b.Root), "B's dir": nfsraw.CephIno(bDir), "/": 1}
	t.Logf("B's inodes: %v", targets)

	a := mount3(t, ctx, srv, ipA, "/va")
	// The control: A reads its own file through its export.
	own, _, err := a.Lookup(ctx, a.Root, "own")
	if err != nil {
		t.Fatalf("A's own file: %v\n%s", err, srv.Log())
	}
	buf := make([]byte, 64)
	if n, _, err := a.Read(ctx, own, buf, 0); err != nil || string(buf[:n]) != "A-OWN-DATA\n" {
		t.Fatalf("A reads its own file: %q, %v", buf[:n], err)
	}
	v4 := nfs4Client(t, ctx, srv, ipA)
	// NFSv4's handle of the same root (no XDR padding in it, unlike v3's).
	root4 := &nfsraw.GetFH{}
	if err := v4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "va"}, root4); err != nil {
		t.Fatalf("v4 root of /va: %v", err)
	}
	if err := v4.Run(ctx, &nfsraw.PutFH{FH: forgeCeph(t, root4.FH, nfsraw.CephIno(a.Root), nfsraw.CephNoSnap)}, &nfsraw.GetAttr{}); err != nil {
		t.Fatalf("v4 GETATTR of A's root through a handle made the same way: %v", err)
	}

	v := newVerdicts(t)
	for name, ino := range targets {
		for _, snap := range []uint64{nfsraw.CephNoSnap, 2, 1000, 1<<64 - 16} {
			fh, fh4 := forgeCeph(t, a.Root, ino, snap), forgeCeph(t, root4.FH, ino, snap)
			what := fmt.Sprintf("%s, snapid %#x", name, snap)
			_, err := a.GetAttr(ctx, fh)
			v.refused("v3 GETATTR "+what, err)
			n, _, err := a.Read(ctx, fh, buf, 0)
			if err == nil && n > 0 && v.strict {
				t.Errorf("v3 READ %s read %q", what, buf[:n])
			}
			v.refused("v3 READ "+what, err)
			_, err = a.ReadDirPlus(ctx, fh)
			v.refused("v3 READDIRPLUS "+what, err)
			_, _, err = a.Lookup(ctx, fh, "secret")
			v.refused("v3 LOOKUP "+what, err)
			_, err = a.Write(ctx, fh, []byte("OVERWRITTEN"), 0, nfs3.FileSync)
			v.refused("v3 WRITE "+what, err)
			mode := uint32(0o777)
			v.refused("v3 SETATTR "+what, a.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: &mode}))
			v.refused("v4 GETATTR "+what, v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, &nfsraw.GetAttr{}))
			rd := &nfsraw.Read{Count: 64}
			err = v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, rd)
			if err == nil && len(rd.Data) > 0 && v.strict {
				t.Errorf("v4 READ %s read %q", what, rd.Data)
			}
			v.refused("v4 READ "+what, err)
			v.refused("v4 LOOKUP "+what, v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, &nfsraw.Lookup{Name: "secret"}))
			v.refused("v4 WRITE "+what, v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, &nfsraw.Write{Data: []byte("OVERWRITTEN")}))
		}
	}
	v.unchanged("B's volume", bFiles, tree(t, be.MountPath("vb")))
}

func nfs4Client(t *testing.T, ctx context.Context, srv *Server, ip string) *nfsraw.Client {
	t.Helper()
	c, err := nfsraw.Dial(ctx, srv.Host, srv.NFSPort, nfsraw.Auth{LocalIP: ip, Machine: "attacker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
