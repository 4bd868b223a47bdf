package ganeshatest

import (
	"bytes"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

var ganeshaBin = flag.String("ganesha.bin", envOr("NFSATK_GANESHA", PatchedBin()),
	"ganesha.nfsd to attack; with "+DebianBin+" the attacks are only reported, not failed")

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func TestMain(m *testing.M) { Main(m) }

// Client hosts on the namespace's loopback network.
const (
	ipA = "127.0.0.2" // RW (no_root_squash) on /a and /v2, RO on /v2snap
	ipR = "127.0.0.3" // RO on /a
	ipB = "127.0.0.4" // the other tenant: RW on /b and /v3
)

// lab is the test bed: (a) one btrfs with subvolumes va and vb mounted on
// mnt/a and mnt/b; (b) two btrfs filesystems each with a live subvolume
// mounted with subvol=live on mnt/v2 and mnt/v3, and a read-only snapshot of
// v2's mounted read-only on mnt/v2snap. Canaries on the host (host/) and in the
// other tenant's volumes must never change.
type lab struct {
	root, host         string
	a, b, v2, v3, snap string
	// Kernel handles (type, bytes) taken on the host.
	topDir, topFile, bFile, bDir, liveFile, snapFile, v3File kfh
	fsidB, fsidV3                                            []byte
	srv                                                      *Server
}

type kfh = nfsraw.KernelHandle

func kernelHandle(t *testing.T, path string) kfh {
	t.Helper()
	k, err := nfsraw.KernelHandleOf(path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func statfsFSID(t *testing.T, path string) []byte {
	t.Helper()
	b, err := nfsraw.StatfsFSID(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
}

func newLab(t *testing.T) *lab {
	Need(t)
	l := &lab{root: Scratch(t, "lab")}
	l.host = filepath.Join(l.root, "host")
	os.MkdirAll(filepath.Join(l.host, "victim-rmdir"), 0o755)
	for _, n := range []string{"canary", "victim-remove", "victim-rename", "target-follow", "chmod-target"} {
		write(t, filepath.Join(l.host, n), "host "+n, 0o600)
	}
	mnt := func(n string) string { return filepath.Join(l.root, "mnt", n) }
	l.a, l.b, l.v2, l.v3, l.snap = mnt("a"), mnt("b"), mnt("v2"), mnt("v3"), mnt("v2snap")

	// (a) one filesystem, two subvolumes, two exports.
	fs1 := NewBtrfs(t, filepath.Join(l.root, "fs1.img"), 300<<20)
	top := filepath.Join(l.root, "top1")
	fs1.Mount(top, "")
	Run(t, "btrfs", "-q", "subvolume", "create", filepath.Join(top, "va"))
	Run(t, "btrfs", "-q", "subvolume", "create", filepath.Join(top, "vb"))
	write(t, filepath.Join(top, "toplevel-canary"), "top level", 0o600)
	write(t, filepath.Join(top, "va", "a-data"), "data of a", 0o644)
	write(t, filepath.Join(top, "vb", "canary-b"), "tenant b", 0o600)
	l.topDir, l.topFile = kernelHandle(t, top), kernelHandle(t, filepath.Join(top, "toplevel-canary"))
	Unmount(top) // as in Basin, the top level is not mounted
	fs1.Mount(l.a, "subvol=va")
	fs1.Mount(l.b, "subvol=vb")
	fs1.Settle()
	l.bFile, l.bDir = kernelHandle(t, filepath.Join(l.b, "canary-b")), kernelHandle(t, l.b)
	l.fsidB = statfsFSID(t, l.b)

	// (b) two filesystems with live and a read-only snapshot.
	for i, dst := range []string{l.v2, l.v3} {
		fs := NewBtrfs(t, filepath.Join(l.root, fmt.Sprintf("fs%d.img", i+2)), 300<<20)
		top := filepath.Join(l.root, fmt.Sprintf("top%d", i+2))
		fs.Mount(top, "")
		Run(t, "btrfs", "-q", "subvolume", "create", filepath.Join(top, "live"))
		write(t, filepath.Join(top, "live", "data"), fmt.Sprintf("live data %d", i+2), 0o644)
		if i == 0 {
			Run(t, "btrfs", "-q", "subvolume", "snapshot", "-r", filepath.Join(top, "live"), filepath.Join(top, "snap1"))
		}
		Unmount(top)
		fs.Mount(dst, "subvol=live")
		if i == 0 {
			fs.Mount(l.snap, "subvol=snap1,ro")
		}
		fs.Settle()
	}
	l.liveFile, l.snapFile = kernelHandle(t, filepath.Join(l.v2, "data")), kernelHandle(t, filepath.Join(l.snap, "data"))
	l.v3File, l.fsidV3 = kernelHandle(t, filepath.Join(l.v3, "data")), statfsFSID(t, l.v3)

	rwA := Client{IP: ipA, Access: "RW", Squash: "no_root_squash"}
	rwB := Client{IP: ipB, Access: "RW", Squash: "no_root_squash"}
	l.srv = Start(t, *ganeshaBin, []Export{
		{ID: 1, Path: l.a, Pseudo: "/a", Clients: []Client{rwA, {IP: ipR, Access: "RO"}}},
		{ID: 2, Path: l.b, Pseudo: "/b", Clients: []Client{rwB}},
		{ID: 3, Path: l.v2, Pseudo: "/v2", Clients: []Client{rwA}},
		{ID: 4, Path: l.v3, Pseudo: "/v3", Clients: []Client{rwB}},
		{ID: 5, Path: l.snap, Pseudo: "/v2snap", Clients: []Client{{IP: ipA, Access: "RO", Squash: "no_root_squash"}}},
	})
	return l
}

func tree(t *testing.T, dirs ...string) string { return nfsraw.Tree(dirs...) }

// verdicts records each attack's outcome; against the patched server an
// allowed attack fails the test, against Debian's it is only reported.
type verdicts struct {
	t      *testing.T
	strict bool
	rows   []string
}

func newVerdicts(t *testing.T) *verdicts {
	v := &verdicts{t: t, strict: *ganeshaBin != DebianBin}
	t.Cleanup(func() {
		t.Logf("ganesha %s: %d attacks\n%s", *ganeshaBin, len(v.rows), strings.Join(v.rows, "\n"))
	})
	return v
}

func (v *verdicts) refused(name string, err error) {
	v.t.Helper()
	if err == nil {
		v.rows = append(v.rows, fmt.Sprintf("ALLOWED  %s", name))
		if v.strict {
			v.t.Errorf("attack allowed: %s", name)
		}
		return
	}
	v.rows = append(v.rows, fmt.Sprintf("refused  %s: %v", name, err))
}

func (v *verdicts) unchanged(name, before, after string) {
	v.t.Helper()
	if before != after {
		v.rows = append(v.rows, fmt.Sprintf("CHANGED  %s", name))
		if v.strict {
			v.t.Errorf("%s: disk changed:\nbefore:\n%s\nafter:\n%s", name, before, after)
		}
		return
	}
	v.rows = append(v.rows, fmt.Sprintf("intact   %s", name))
}

func (l *lab) nfs3(t *testing.T, ctx context.Context, ip, dir string) *nfs3.Client {
	t.Helper()
	return mount3(t, ctx, l.srv, ip, dir)
}

// mount3 mounts dir of srv over NFSv3 as client ip.
func mount3(t *testing.T, ctx context.Context, srv *Server, ip, dir string) *nfs3.Client {
	t.Helper()
	c, err := nfs3.Mount(ctx, srv.Host, dir, nfs3.Options{NFSPort: srv.NFSPort, MountPort: srv.MountPort, LocalIP: ip,
		Auth: nfs3.Auth{Machine: "attacker"}})
	if err != nil {
		t.Fatalf("mount %s as %s: %v\n%s", dir, ip, err, srv.Log())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (l *lab) nfs4(t *testing.T, ctx context.Context, ip string) *nfsraw.Client {
	t.Helper()
	c, err := nfsraw.Dial(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: ip, Machine: "attacker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func forge(h nfsraw.Handle, k kfh, fsid []byte) []byte { return nfsraw.Forge(h, k, fsid) }

type fsidGuess struct {
	name string
	typ  int
	b    []byte
}

// hostFSIDs returns the fsids Ganesha may give the filesystem holding dir:
// statfs f_fsid (two u32) and, when blkid knows the device, its UUID.
func hostFSIDs(t *testing.T, dir string) []fsidGuess {
	out := []fsidGuess{{"statfs f_fsid", nfsraw.FSIDTwoUint32, statfsFSID(t, dir)}}
	src, err := exec.Command("findmnt", "-no", "SOURCE", "--target", dir).Output()
	if err != nil {
		return out
	}
	u, err := exec.Command("blkid", "-s", "UUID", "-o", "value", strings.TrimSpace(string(src))).Output()
	if err != nil {
		return out
	}
	hexs := strings.ReplaceAll(strings.TrimSpace(string(u)), "-", "")
	if b, err := hex.DecodeString(hexs); err == nil && len(b) == 16 {
		out = append(out, fsidGuess{"blkid UUID", nfsraw.FSIDTwoUint64, b})
	}
	return out
}

func TestAttacks(t *testing.T) {
	l := newLab(t)
	ctx := Context(t, 5*time.Minute)
	v := newVerdicts(t)
	watched := []string{l.host, l.b, l.v3, l.snap}
	before := tree(t, watched...)

	a := l.nfs3(t, ctx, ipA, "/a")
	aData, _, err := a.Lookup(ctx, a.Root, "a-data")
	if err != nil {
		t.Fatal(err)
	}
	h3, err := nfsraw.ParseHandle(aData, true)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := h3.Btrfs(); ok {
		t.Logf("v3 handle of /a/a-data: %x (export %d, flags %#x, fsid %x, type %#x, objectid %d, root %d, gen %d)",
			aData, h3.ExportID, h3.Flags, h3.FSID, h3.KernelType, b.ObjectID, b.RootObjectID, b.Generation)
	} else {
		t.Fatalf("handle %x is not a btrfs VFS handle", aData)
	}

	t.Run("forged v3 handles", func(t *testing.T) {
		rnd := rand.New(rand.NewSource(1))
		random := h3.Clone()
		random.Kernel = make([]byte, len(h3.Kernel))
		rnd.Read(random.Kernel)
		garbage := make([]byte, 36)
		rnd.Read(garbage)
		dummy := h3.Clone()
		dummy.Flags = dummy.Flags&0x1F | nfsraw.HandleDummy
		dummy.FSID = l.fsidB
		cases := []struct {
			name string
			fh   []byte
		}{
			{"top level (root objectid 5) dir", forge(h3, l.topDir, nil)},
			{"top level (root objectid 5) file", forge(h3, l.topFile, nil)},
			{"sibling subvolume vb file", forge(h3, l.bFile, nil)},
			{"sibling subvolume vb dir", forge(h3, l.bDir, nil)},
			{"other export's fsid (vb) + its file", forge(h3, l.bFile, l.fsidB)},
			{"other volume's fsid (v3) + its file", forge(h3, l.v3File, l.fsidV3)},
			{"dummy handle with vb's fsid", dummy.Encode()},
			{"random kernel handle", random.Encode()},
			{"random bytes", garbage},
		}
		for _, c := range cases {
			_, err := a.ReadDir(ctx, c.fh)
			v.refused("v3 READDIR "+c.name, err)
			_, _, err = a.Read(ctx, c.fh, make([]byte, 64), 0)
			v.refused("v3 READ "+c.name, err)
			_, err = a.Write(ctx, c.fh, []byte("PWNED"), 0, nfs3.FileSync)
			v.refused("v3 WRITE "+c.name, err)
			_, err = a.CreateWith(ctx, c.fh, "forged-create", nfs3.CreateArgs{How: nfs3.Guarded})
			v.refused("v3 CREATE in "+c.name, err)
			err = a.SetAttr(ctx, c.fh, nfs3.SetAttrs{Mode: nfs3.Mode(0o777)})
			v.refused("v3 SETATTR "+c.name, err)
		}
	})

	c4 := l.nfs4(t, ctx, ipA)
	t.Run("forged v4 handles", func(t *testing.T) {
		g := &nfsraw.GetFH{}
		if err := c4.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "a"}, &nfsraw.Lookup{Name: "a-data"}, g); err != nil {
			t.Fatal(err)
		}
		h4, err := nfsraw.ParseHandle(g.FH, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("v4 handle of /a/a-data: %x", g.FH)
		cases := []struct {
			name string
			fh   []byte
		}{
			{"top level (root objectid 5) dir", forge(h4, l.topDir, nil)},
			{"top level (root objectid 5) file", forge(h4, l.topFile, nil)},
			{"sibling subvolume vb file", forge(h4, l.bFile, nil)},
			{"sibling subvolume vb dir", forge(h4, l.bDir, nil)},
			{"other export's fsid (vb) + its file", forge(h4, l.bFile, l.fsidB)},
			{"other volume's fsid (v3) + its file", forge(h4, l.v3File, l.fsidV3)},
		}
		for _, c := range cases {
			put := &nfsraw.PutFH{FH: c.fh}
			v.refused("v4 READDIR "+c.name, c4.Run(ctx, put, &nfsraw.ReadDir{}))
			v.refused("v4 READ "+c.name, c4.Run(ctx, put, &nfsraw.Read{Count: 64}))
			v.refused("v4 WRITE "+c.name, c4.Run(ctx, put, &nfsraw.Write{Data: []byte("PWNED")}))
			v.refused("v4 CREATE dir in "+c.name, c4.Run(ctx, put, &nfsraw.Create{Name: "forged-dir", Mode: 0o755}))
			m := uint32(0o777)
			v.refused("v4 SETATTR "+c.name, c4.Run(ctx, put, &nfsraw.SetAttr{Mode: &m}))
		}
	})

	t.Run("host root filesystem handles", func(t *testing.T) {
		// The host's canary lives on the filesystem the lab is in (here
		// "/"); Ganesha names it by statfs f_fsid or by its blkid UUID.
		canary := kernelHandle(t, filepath.Join(l.host, "canary"))
		for _, f := range hostFSIDs(t, l.host) {
			fh := h3.Clone()
			fh.Flags = byte(f.typ) | nfsraw.HandleType8
			fh.FSID = f.b
			fh.KernelType, fh.Kernel = canary.Type, canary.Bytes
			_, _, err := a.Read(ctx, fh.Encode(), make([]byte, 64), 0)
			v.refused(fmt.Sprintf("v3 READ of a host file with the host filesystem's fsid (%s)", f.name), err)
			_, err = a.Write(ctx, fh.Encode(), []byte("PWNED"), 0, nfs3.FileSync)
			v.refused(fmt.Sprintf("v3 WRITE of a host file with the host filesystem's fsid (%s)", f.name), err)
		}
	})

	t.Run("snapshot export handles", func(t *testing.T) {
		s := l.nfs3(t, ctx, ipA, "/v2snap")
		fh, _, err := s.Lookup(ctx, s.Root, "data")
		if err != nil {
			t.Fatal(err)
		}
		hs, _ := nfsraw.ParseHandle(fh, true)
		_, _, err = s.Read(ctx, forge(hs, l.liveFile, nil), make([]byte, 64), 0)
		v.refused("v3 READ of the live subvolume through the snapshot export", err)
		w := l.nfs3(t, ctx, ipA, "/v2")
		fh, _, err = w.Lookup(ctx, w.Root, "data")
		if err != nil {
			t.Fatal(err)
		}
		hw, _ := nfsraw.ParseHandle(fh, true)
		_, _, err = w.Read(ctx, forge(hw, l.snapFile, nil), make([]byte, 64), 0)
		v.refused("v3 READ of the snapshot through the live export", err)
		_, _, err = w.Read(ctx, forge(hw, l.v3File, l.fsidV3), make([]byte, 64), 0)
		v.refused("v3 READ of another volume (its fsid) through the live export", err)
	})

	t.Run("v3 names", func(t *testing.T) {
		mine, err := a.Create(ctx, a.Root, "mine", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{
			"absolute": l.host + "/",
			"dotdot":   "../../host/",
			"sibling":  "../b/",
		}
		for kind, p := range names {
			_, _, err := a.Lookup(ctx, a.Root, p+"canary")
			v.refused("LOOKUP "+kind+" "+p+"canary", err)
			_, err = a.CreateWith(ctx, a.Root, p+"by-create", nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Mode: nfs3.Mode(0o666)}})
			v.refused("CREATE "+kind, err)
			_, err = a.CreateWith(ctx, a.Root, p+"canary", nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Size: nfs3.Size(0)}})
			v.refused("CREATE (truncate) "+kind+" canary", err)
			_, err = a.Mkdir(ctx, a.Root, p+"by-mkdir", 0o755)
			v.refused("MKDIR "+kind, err)
			_, err = a.Symlink(ctx, a.Root, p+"by-symlink", "/etc/passwd")
			v.refused("SYMLINK "+kind, err)
			_, err = a.Mknod(ctx, a.Root, p+"by-mknod", nfs3.TypeFIFO, 0o644, 0, 0)
			v.refused("MKNOD "+kind, err)
			v.refused("REMOVE "+kind, a.Remove(ctx, a.Root, p+"victim-remove"))
			v.refused("RMDIR "+kind, a.Rmdir(ctx, a.Root, p+"victim-rmdir"))
			v.refused("RENAME from "+kind, a.Rename(ctx, a.Root, p+"victim-rename", a.Root, "stolen"))
			v.refused("RENAME to "+kind, a.Rename(ctx, a.Root, "mine", a.Root, p+"by-rename"))
			v.refused("LINK to "+kind, a.Link(ctx, mine, a.Root, p+"by-link"))
		}
		for _, n := range []string{".", "..", ""} {
			_, err := a.CreateWith(ctx, a.Root, n, nfs3.CreateArgs{How: nfs3.Unchecked})
			v.refused(fmt.Sprintf("CREATE %q", n), err)
			_, err = a.Mkdir(ctx, a.Root, n, 0o755)
			v.refused(fmt.Sprintf("MKDIR %q", n), err)
			_, err = a.Symlink(ctx, a.Root, n, "x")
			v.refused(fmt.Sprintf("SYMLINK %q", n), err)
			_, err = a.Mknod(ctx, a.Root, n, nfs3.TypeFIFO, 0o644, 0, 0)
			v.refused(fmt.Sprintf("MKNOD %q", n), err)
			v.refused(fmt.Sprintf("REMOVE %q", n), a.Remove(ctx, a.Root, n))
			v.refused(fmt.Sprintf("RMDIR %q", n), a.Rmdir(ctx, a.Root, n))
			v.refused(fmt.Sprintf("RENAME from %q", n), a.Rename(ctx, a.Root, n, a.Root, "x"))
			v.refused(fmt.Sprintf("RENAME to %q", n), a.Rename(ctx, a.Root, "mine", a.Root, n))
			v.refused(fmt.Sprintf("LINK to %q", n), a.Link(ctx, mine, a.Root, n))
		}
		_, _, err = a.Lookup(ctx, a.Root, "")
		v.refused(`LOOKUP ""`, err)
	})

	t.Run("symlink following", func(t *testing.T) {
		for _, target := range []string{filepath.Join(l.host, "target-follow"), "../b/canary-b", "../../host/target-follow"} {
			name := "ln-" + strings.NewReplacer("/", "_", ".", "d").Replace(target)
			if _, err := a.Symlink(ctx, a.Root, name, target); err != nil {
				t.Fatal(err)
			}
			fh, err := a.CreateWith(ctx, a.Root, name, nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Size: nfs3.Size(0), Mode: nfs3.Mode(0o666)}})
			v.refused("v3 CREATE UNCHECKED over a symlink to "+target, err)
			if err == nil && fh != nil {
				_, err = a.Write(ctx, fh, []byte("PWNED"), 0, nfs3.FileSync)
				v.refused("v3 WRITE through the symlink's handle to "+target, err)
			}
		}
		// A socket is addressed by directory and name: swap its name for a
		// symlink and chmod the socket.
		for i, proto := range []string{"v3", "v4"} {
			sk := fmt.Sprintf("sock%d", i)
			fh, err := a.Mknod(ctx, a.Root, sk, nfs3.TypeSock, 0o600, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Link(ctx, fh, a.Root, sk+"-keep"); err != nil {
				t.Fatal(err)
			}
			if err := a.Remove(ctx, a.Root, sk); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Symlink(ctx, a.Root, sk, filepath.Join(l.host, "chmod-target")); err != nil {
				t.Fatal(err)
			}
			if proto == "v3" {
				v.refused("v3 SETATTR mode on a socket whose name became a symlink to a host file",
					a.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: nfs3.Mode(0o666)}))
			} else {
				// The same object by its v4 handle (the v3 one unpadded).
				h, err := nfsraw.ParseHandle(fh, true)
				if err != nil {
					t.Fatal(err)
				}
				h.V3, h.Pad = false, nil
				m := uint32(0o666)
				v.refused("v4 SETATTR mode on a socket whose name became a symlink to a host file",
					c4.Run(ctx, &nfsraw.PutFH{FH: h.Encode()}, &nfsraw.SetAttr{Mode: &m}))
			}
		}
	})

	t.Run("read-only client", func(t *testing.T) {
		r := l.nfs3(t, ctx, ipR, "/a")
		buf := make([]byte, 64)
		if n, _, err := r.Read(ctx, aData, buf, 0); err != nil || string(buf[:n]) != "data of a" {
			t.Errorf("RO read: %q %v", buf[:n], err)
		}
		_, err := r.Write(ctx, aData, []byte("PWNED"), 0, nfs3.FileSync)
		v.refused("RO client WRITE", err)
		v.refused("RO client SETATTR", r.SetAttr(ctx, aData, nfs3.SetAttrs{Mode: nfs3.Mode(0o777)}))
		_, err = r.CreateWith(ctx, r.Root, "ro-create", nfs3.CreateArgs{How: nfs3.Guarded})
		v.refused("RO client CREATE", err)
		other := h3.Clone()
		other.ExportID = 2
		other.KernelType, other.Kernel, other.FSID = l.bFile.Type, l.bFile.Bytes, l.fsidB
		_, _, err = r.Read(ctx, other.Encode(), buf, 0)
		v.refused("RO client READ with a handle of export 2 (not allowed there)", err)
		_, _, err = r.Read(ctx, forge(h3, l.bFile, nil), buf, 0)
		v.refused("RO client READ of sibling subvolume through export 1", err)
	})

	after := tree(t, watched...)
	v.unchanged("host canaries, tenant b's volumes, the snapshot", before, after)
	if t.Failed() || os.Getenv("NFSATK_LOG") != "" {
		t.Logf("ganesha log:\n%s", l.srv.Log())
	}
}

func TestLegitOperations(t *testing.T) {
	l := newLab(t)
	ctx := Context(t, 2*time.Minute)
	a := l.nfs3(t, ctx, ipA, "/a")
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, l.srv.Log())
		}
	}
	fh, err := a.CreateWith(ctx, a.Root, "legit", nfs3.CreateArgs{How: nfs3.Guarded, Attrs: nfs3.SetAttrs{Mode: nfs3.Mode(0o644)}})
	must("create", err)
	_, err = a.Write(ctx, fh, []byte("hello"), 0, nfs3.FileSync)
	must("write", err)
	buf := make([]byte, 16)
	n, _, err := a.Read(ctx, fh, buf, 0)
	must("read", err)
	if string(buf[:n]) != "hello" {
		t.Fatalf("read %q", buf[:n])
	}
	_, err = a.CreateWith(ctx, a.Root, "legit", nfs3.CreateArgs{How: nfs3.Guarded})
	if s, _ := nfs3.StatusOf(err); s != nfs3.ErrExist {
		t.Errorf("guarded create of an existing file: %v", err)
	}
	must("unchecked create of an existing file", func() error {
		_, err := a.CreateWith(ctx, a.Root, "legit", nfs3.CreateArgs{How: nfs3.Unchecked})
		return err
	}())
	must("exclusive create", func() error {
		_, err := a.CreateWith(ctx, a.Root, "excl", nfs3.CreateArgs{How: nfs3.Exclusive, Verf: [8]byte{1, 2, 3}})
		return err
	}())
	must("setattr", a.SetAttr(ctx, fh, nfs3.SetAttrs{Mode: nfs3.Mode(0o600), Size: nfs3.Size(4)}))
	at, err := a.GetAttr(ctx, fh)
	must("getattr", err)
	if at.Mode&0o777 != 0o600 || at.Size != 4 {
		t.Errorf("attrs after setattr: %+v", at)
	}
	must("rename", a.Rename(ctx, a.Root, "legit", a.Root, "legit2"))
	must("link", a.Link(ctx, fh, a.Root, "legit3"))
	_, err = a.Symlink(ctx, a.Root, "legit-ln", "legit2")
	must("symlink", err)
	d, err := a.Mkdir(ctx, a.Root, "dir", 0o755)
	must("mkdir", err)
	_, err = a.Mknod(ctx, d, "fifo", nfs3.TypeFIFO, 0o644, 0, 0)
	must("mknod", err)
	must("remove", a.Remove(ctx, d, "fifo"))
	ents, err := a.ReadDirPlus(ctx, a.Root)
	must("readdirplus", err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	for _, want := range []string{".", "..", "a-data", "legit2", "legit3", "legit-ln", "dir", "excl"} {
		if !slices.Contains(names, want) {
			t.Errorf("readdirplus lacks %q: %v", want, names)
		}
	}
	plain, err := a.ReadDir(ctx, a.Root)
	must("readdir", err)
	if len(plain) != len(ents) {
		t.Errorf("readdir %d entries, readdirplus %d", len(plain), len(ents))
	}
	root, err := a.GetAttr(ctx, a.Root)
	must("getattr root", err)
	for _, dots := range []string{"..", "."} {
		_, up, err := a.LookupAttr(ctx, a.Root, dots)
		must("lookup "+dots, err)
		if up.FileID != root.FileID {
			t.Errorf("LOOKUP %q at the export root left it: fileid %d, root %d", dots, up.FileID, root.FileID)
		}
	}
	_, sub, err := a.LookupAttr(ctx, d, "..")
	must("lookup .. in a subdirectory", err)
	if sub.FileID != root.FileID {
		t.Errorf("LOOKUP .. of /dir: fileid %d, want the root's %d", sub.FileID, root.FileID)
	}
	must("rmdir", a.Rmdir(ctx, a.Root, "dir"))
	if c, err := os.ReadFile(filepath.Join(l.a, "legit3")); err != nil || string(c) != "hell" {
		t.Errorf("on disk: %q %v", c, err)
	}

	// NFSv4 with the anonymous stateid.
	c4 := l.nfs4(t, ctx, ipA)
	fa, err := c4.LookupPath(ctx, "a")
	must("v4 lookup /a", err)
	must("v4 create dir", c4.Run(ctx, &nfsraw.PutFH{FH: fa}, &nfsraw.Create{Name: "v4dir", Mode: 0o755}))
	must("v4 create symlink", c4.Run(ctx, &nfsraw.PutFH{FH: fa}, &nfsraw.Create{Name: "v4ln", Target: "legit2"}))
	f4, err := c4.LookupPath(ctx, "a", "legit2")
	must("v4 lookup file", err)
	must("v4 write", c4.Run(ctx, &nfsraw.PutFH{FH: f4}, &nfsraw.Write{Data: []byte("HELLO")}))
	rd := &nfsraw.Read{Count: 16}
	must("v4 read", c4.Run(ctx, &nfsraw.PutFH{FH: f4}, rd))
	if string(rd.Data) != "HELLO" {
		t.Errorf("v4 read %q", rd.Data)
	}
	m := uint32(0o640)
	ga := &nfsraw.GetAttr{}
	must("v4 setattr", c4.Run(ctx, &nfsraw.PutFH{FH: f4}, &nfsraw.SetAttr{Mode: &m}, ga))
	if ga.Attr.Mode != 0o640 || ga.Attr.Type != 1 || ga.Attr.Size != 5 {
		t.Errorf("v4 attrs %+v", ga.Attr)
	}
	must("v4 remove", c4.Run(ctx, &nfsraw.PutFH{FH: fa}, &nfsraw.Remove{Name: "v4dir"}))
	g := &nfsraw.GetFH{}
	must("v4 lookupp", c4.Run(ctx, &nfsraw.PutFH{FH: fa}, &nfsraw.LookupP{}, g))
	if bytes.Equal(g.FH, fa) {
		t.Error("v4 LOOKUPP of /a stayed at /a")
	}
	err = c4.Run(ctx, &nfsraw.PutFH{FH: fa}, &nfsraw.Lookup{Name: ".."})
	if s, _ := nfsraw.StatusOf(err); s != nfsraw.ErrBadName {
		t.Errorf("v4 LOOKUP .. : %v, want NFS4ERR_BADNAME", err)
	}
}

func TestExportLists(t *testing.T) {
	l := newLab(t)
	ctx := Context(t, time.Minute)
	for _, c := range []struct {
		ip   string
		want []string
	}{
		{ipA, []string{"/a", "/v2", "/v2snap"}},
		{ipR, []string{"/a"}},
		{ipB, []string{"/b", "/v3"}},
		{"127.0.0.9", nil},
	} {
		xs, err := nfs3.Exports(ctx, l.srv.Host, nfs3.Options{NFSPort: l.srv.NFSPort, MountPort: l.srv.MountPort, LocalIP: c.ip})
		if err != nil {
			t.Fatal(err)
		}
		var dirs []string
		for _, x := range xs {
			dirs = append(dirs, x.Dir)
		}
		slices.Sort(dirs)
		t.Logf("MOUNT EXPORT as %s: %+v", c.ip, xs)
		if !slices.Equal(dirs, c.want) {
			t.Errorf("MOUNT EXPORT as %s: %v, want %v", c.ip, dirs, c.want)
		}
		v4 := l.nfs4(t, ctx, c.ip)
		ents, err := v4.ReadDirAll(ctx, nil)
		if err != nil {
			t.Fatalf("pseudo-root READDIR as %s: %v", c.ip, err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, "/"+e.Name)
		}
		slices.Sort(names)
		t.Logf("NFSv4 pseudo-root READDIR as %s: %v", c.ip, names)
		if !slices.Equal(names, c.want) {
			t.Errorf("pseudo-root READDIR as %s: %v, want %v", c.ip, names, c.want)
		}
	}
}
