package ganeshatest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

// snapLab is two volumes laid out as Basin lays them out, each a btrfs of its
// own with its live data and a read-only snapshot s1 mounted apart, and a
// snapshot directory: a read-only tmpfs holding one empty directory per
// snapshot. Volume a is served to ipA (read-write) and ipR (read-only), volume
// b to ipB; volume c has no snapshot directory.
type snapLab struct {
	a, b, c string // live mounts
	srv     *Server
}

// Snapshot directory exports: P/.snapshot, P/.snapshot/<name> (patch 0006).
func newSnapLab(t *testing.T) *snapLab {
	Need(t)
	root := Scratch(t, "snaplab")
	l := &snapLab{}
	volume := func(name string, snaps bool) string {
		img := NewBtrfs(t, filepath.Join(root, name+".img"), 300<<20)
		top := filepath.Join(root, "top-"+name)
		img.Mount(top, "")
		Run(t, "btrfs", "-q", "subvolume", "create", filepath.Join(top, "live"))
		write(t, filepath.Join(top, "live", "f"), "before in "+name, 0o644)
		live := filepath.Join(root, "mounts", name)
		if snaps {
			os.MkdirAll(filepath.Join(top, "snapshots"), 0o700)
			Run(t, "btrfs", "-q", "subvolume", "snapshot", "-r", filepath.Join(top, "live"), filepath.Join(top, "snapshots", "s1"))
			write(t, filepath.Join(top, "live", "f"), "after in "+name, 0o644)
		}
		Unmount(top)
		img.Mount(live, "subvol=live")
		if snaps {
			img.Mount(filepath.Join(root, "mounts", name+"@s1"), "subvol=snapshots/s1,ro")
			// The snapshot directory: a tmpfs Basin writes through a mount of
			// its own, seen read-only where it is exported.
			rw := filepath.Join(root, "fs", name+"@.snapshot")
			os.MkdirAll(rw, 0o755)
			Run(t, "mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=1024,mode=0555", "tmpfs", rw)
			t.Cleanup(func() { Unmount(rw) })
			os.Mkdir(filepath.Join(rw, "s1"), 0o555)
			ro := filepath.Join(root, "mounts", name+"@.snapshot")
			os.MkdirAll(ro, 0o755)
			Run(t, "mount", "--bind", "-o", "ro", rw, ro)
			t.Cleanup(func() { Unmount(ro) })
		}
		img.Settle()
		return live
	}
	l.a, l.b, l.c = volume("a", true), volume("b", true), volume("c", false)
	mounts := filepath.Join(root, "mounts")
	noCache := "Attr_Expiration_Time = 0;"
	ro := func(ips ...string) []Client {
		var cs []Client
		for _, ip := range ips {
			cs = append(cs, Client{IP: ip, Access: "RO", Squash: "no_root_squash"})
		}
		return cs
	}
	l.srv = Start(t, *ganeshaBin, []Export{
		{ID: 1, Path: l.a, Pseudo: "/vola", Clients: []Client{{IP: ipA, Access: "RW", Squash: "no_root_squash"}, {IP: ipR, Access: "RO"}}},
		{ID: 2, Path: filepath.Join(mounts, "a@.snapshot"), Pseudo: "/vola/.snapshot", Clients: ro(ipA, ipR), Extra: noCache},
		{ID: 3, Path: filepath.Join(mounts, "a@s1"), Pseudo: "/vola/.snapshot/s1", Clients: ro(ipA, ipR)},
		{ID: 4, Path: l.b, Pseudo: "/volb", Clients: []Client{{IP: ipB, Access: "RW", Squash: "no_root_squash"}}},
		{ID: 5, Path: filepath.Join(mounts, "b@.snapshot"), Pseudo: "/volb/.snapshot", Clients: ro(ipB), Extra: noCache},
		{ID: 6, Path: filepath.Join(mounts, "b@s1"), Pseudo: "/volb/.snapshot/s1", Clients: ro(ipB)},
		{ID: 7, Path: l.c, Pseudo: "/volc", Clients: []Client{{IP: ipA, Access: "RW", Squash: "no_root_squash"}}},
	})
	return l
}

func names3(ents []nfs3.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

// TestSnapshotDirectory: patch 0006 against a bare Ganesha. Over NFSv3 and
// NFSv4.1, LOOKUP of .snapshot at a volume's root crosses into its snapshot
// directory, which lists the snapshots; a snapshot's files read as they were
// and refuse writes; a volume without one has no .snapshot; a client sees only
// the snapshots of the volumes its policy names.
func TestSnapshotDirectory(t *testing.T) {
	l := newSnapLab(t)
	ctx := Context(t, 2*time.Minute)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"\n%s", append(args, l.srv.Log())...)
	}

	t.Run("NFSv3", func(t *testing.T) {
		a := mount3(t, ctx, l.srv, ipA, "/vola")
		dir, da, err := a.LookupAttr(ctx, a.Root, ".snapshot")
		if err != nil || da.Type != nfs3.TypeDir {
			t.Fatalf("LOOKUP .snapshot: %+v %v\n%s", da, err, l.srv.Log())
		}
		h, _ := nfsraw.ParseHandle(dir, true)
		if h.ExportID != 2 {
			fail("LOOKUP .snapshot gave a handle of export %d, want the snapshot directory's (2)", h.ExportID)
		}
		for _, plus := range []bool{false, true} {
			list := a.ReadDir
			if plus {
				list = a.ReadDirPlus
			}
			ents, err := list(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := names3(ents); !slices.Equal(got, []string{".", "..", "s1"}) {
				fail("READDIR(plus %v) .snapshot = %v", plus, got)
			}
			for _, e := range ents {
				if e.Name == "s1" && (e.FH != nil || e.Attr != nil) {
					fail("READDIRPLUS gave s1 a handle or attributes (those of the directory beneath the snapshot)")
				}
			}
		}
		s1, sa, err := a.LookupAttr(ctx, dir, "s1")
		if err != nil || sa.Type != nfs3.TypeDir {
			t.Fatalf("LOOKUP s1: %v", err)
		}
		if h, _ := nfsraw.ParseHandle(s1, true); h.ExportID != 3 {
			fail("LOOKUP s1 gave a handle of export %d, want the snapshot's (3)", h.ExportID)
		}
		f, _, err := a.Lookup(ctx, s1, "f")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, _, err := a.Read(ctx, f, buf, 0); err != nil || string(buf[:n]) != "before in a" {
			fail("READ .snapshot/s1/f: %q %v", buf[:n], err)
		}
		if _, err := a.Write(ctx, f, []byte("x"), 0, nfs3.FileSync); !isStatus3(err, nfs3.ErrROFS) {
			fail("WRITE into a snapshot: %v, want NFS3ERR_ROFS", err)
		}
		for _, d := range [][]byte{s1, dir} {
			if _, err := a.Create(ctx, d, "new", 0o644); !isStatus3(err, nfs3.ErrROFS) {
				fail("CREATE in the snapshot directory or a snapshot: %v, want NFS3ERR_ROFS", err)
			}
		}
		if err := a.Rmdir(ctx, dir, "s1"); err == nil {
			fail("RMDIR .snapshot/s1 allowed")
		}
		if _, _, err := a.Lookup(ctx, dir, "s2"); !isStatus3(err, nfs3.ErrNoEnt) {
			fail("LOOKUP of a snapshot that does not exist: %v, want NFS3ERR_NOENT", err)
		}
		// The live volume is untouched, and "." and ".." stay where they are.
		live, _, _ := a.Lookup(ctx, a.Root, "f")
		if n, _, err := a.Read(ctx, live, buf, 0); err != nil || string(buf[:n]) != "after in a" {
			fail("live f: %q %v", buf[:n], err)
		}
		for _, dots := range []string{".", ".."} {
			if up, _, err := a.LookupAttr(ctx, dir, dots); err != nil || !bytes.Equal(up, dir) {
				fail("LOOKUP %q in .snapshot: %v", dots, err)
			}
		}
		// A volume with no snapshot directory has no .snapshot.
		c := mount3(t, ctx, l.srv, ipA, "/volc")
		if _, _, err := c.Lookup(ctx, c.Root, ".snapshot"); !isStatus3(err, nfs3.ErrNoEnt) {
			fail("LOOKUP .snapshot in a volume without one: %v, want NFS3ERR_NOENT", err)
		}
		// The read-only client reads snapshots too; the other tenant sees only its own.
		r := mount3(t, ctx, l.srv, ipR, "/vola")
		rdir, _, err := r.Lookup(ctx, r.Root, ".snapshot")
		if err != nil {
			t.Fatal(err)
		}
		rs1, _, err := r.Lookup(ctx, rdir, "s1")
		if err != nil {
			t.Fatal(err)
		}
		rf, _, _ := r.Lookup(ctx, rs1, "f")
		if n, _, err := r.Read(ctx, rf, buf, 0); err != nil || string(buf[:n]) != "before in a" {
			fail("read-only client: %q %v", buf[:n], err)
		}
		b := mount3(t, ctx, l.srv, ipB, "/volb")
		bdir, _, err := b.Lookup(ctx, b.Root, ".snapshot")
		if err != nil {
			t.Fatal(err)
		}
		bs1, _, _ := b.Lookup(ctx, bdir, "s1")
		bf, _, _ := b.Lookup(ctx, bs1, "f")
		if n, _, err := b.Read(ctx, bf, buf, 0); err != nil || string(buf[:n]) != "before in b" {
			fail("volb's snapshot: %q %v", buf[:n], err)
		}
		// ipB's handle of vola's snapshot directory: the RPC layer refuses it.
		if _, err := b.ReadDir(ctx, dir); err == nil {
			fail("volb's client listed vola's snapshot directory through vola's handle")
		}
	})

	t.Run("NFSv4.1", func(t *testing.T) {
		c, err := nfsraw.Dial41(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: ipA})
		if err != nil {
			t.Fatalf("NFSv4.1 session: %v\n%s", err, l.srv.Log())
		}
		defer c.Close()
		dir, err := c.LookupPath(ctx, "vola", ".snapshot")
		if err != nil {
			t.Fatalf("LOOKUP /vola/.snapshot: %v\n%s", err, l.srv.Log())
		}
		ents, err := c.ReadDirAll(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name)
		}
		if !slices.Equal(names, []string{"s1"}) {
			fail("READDIR .snapshot = %v, want [s1]", names)
		}
		live := &nfsraw.GetAttr{}
		c.Run(ctx, &nfsraw.PutRootFH{}, &nfsraw.Lookup{Name: "vola"}, live)
		if e := ents[0].Attr; e.FSIDMajor == live.Attr.FSIDMajor && e.FSIDMinor == live.Attr.FSIDMinor {
			fail("READDIR shows s1 on the live volume's filesystem: %+v", e)
		}
		f, err := c.LookupPath(ctx, "vola", ".snapshot", "s1", "f")
		if err != nil {
			t.Fatal(err)
		}
		rd := &nfsraw.Read{Count: 64}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: f}, rd); err != nil || string(rd.Data) != "before in a" {
			fail("READ .snapshot/s1/f: %q %v", rd.Data, err)
		}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: f}, &nfsraw.Write{Data: []byte("x")}); !isStatus4(err, nfsraw.ErrROFS) {
			fail("WRITE into a snapshot: %v, want NFS4ERR_ROFS", err)
		}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: dir}, &nfsraw.Create{Name: "d", Mode: 0o755}); !isStatus4(err, nfsraw.ErrROFS) {
			fail("CREATE in .snapshot: %v, want NFS4ERR_ROFS", err)
		}
		if _, err := c.LookupPath(ctx, "volc", ".snapshot"); !isStatus4(err, nfsraw.ErrNoEnt) {
			fail("LOOKUP .snapshot in a volume without one: %v", err)
		}
		if _, err := c.LookupPath(ctx, "vola", ".snapshot", "nosuch"); !isStatus4(err, nfsraw.ErrNoEnt) {
			fail("LOOKUP of a snapshot that does not exist: %v", err)
		}
		root, err := c.ReadDirAll(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var top []string
		for _, e := range root {
			top = append(top, e.Name)
		}
		slices.Sort(top)
		if !slices.Equal(top, []string{"vola", "volc"}) {
			fail("pseudo-root READDIR = %v", top)
		}
		// The other tenant's client does not see vola at all, nor its snapshots.
		b, err := nfsraw.Dial41(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: ipB})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if _, err := b.LookupPath(ctx, "vola", ".snapshot"); err == nil {
			fail("volb's client reached vola's .snapshot")
		}
		if err := b.Run(ctx, &nfsraw.PutFH{FH: dir}, &nfsraw.ReadDir{}); err == nil {
			fail("volb's client listed vola's .snapshot through its handle")
		}
	})
}

func isStatus3(err error, want nfs3.Status) bool {
	s, ok := nfs3.StatusOf(err)
	return ok && s == want
}

func isStatus4(err error, want nfsraw.Status) bool {
	s, ok := nfsraw.StatusOf(err)
	return ok && s == want
}
