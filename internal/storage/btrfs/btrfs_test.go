package btrfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/storage"
)

// newBackend starts a real btrfs store on a loop device under a temp dir. These
// tests need root, btrfs-progs and loop devices; they skip with a reason otherwise.
func newBackend(t *testing.T) (*Backend, string) {
	t.Helper()
	skipUnlessRoot(t)
	dir := t.TempDir()
	return startBackend(t, Options{DataDir: dir, ImageSize: 2 << 30}, dir), dir
}

// assertNothingLeft checks that no mount or loop device refers to dir.
func assertNothingLeft(t testing.TB, dir string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), dir) {
		t.Errorf("mounts left under %s", dir)
	}
	// A detach can complete lazily; give the kernel a moment before judging. Never
	// detach anything but this test's own devices: other tests run beside this one.
	var left []string
	for range 50 {
		left = loopsUnder(dir)
		if len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("loop devices left attached: %v", left)
	for _, dev := range left {
		exec.Command("losetup", "-d", dev).Run()
	}
}

// loopsUnder lists loop devices whose backing file lies under dir.
func loopsUnder(dir string) []string {
	out, _ := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output()
	var devs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[1], dir+"/") {
			devs = append(devs, f[0])
		}
	}
	return devs
}

func writeRandom(path string, n int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, rand.Reader, n)
	if err == nil {
		err = f.Sync() // quota errors may only surface when the data is flushed
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	syscall.Sync()
	return err
}

func mkVolume(t testing.TB, b *Backend, key string, size int64, from *storage.SnapshotRef) {
	t.Helper()
	ctx := context.Background()
	for _, err := range []error{b.EnsureVolume(ctx, key, size, from), b.SetMode(ctx, key, 0o777), b.Mount(ctx, key)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func usage(t *testing.T, b *Backend, key string) storage.Usage {
	t.Helper()
	u, err := b.Usage(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func snapshots(t *testing.T, b *Backend, key string) map[string]storage.SnapshotStatus {
	t.Helper()
	m, err := b.ObserveSnapshots(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func statfs(t *testing.T, path string) unix.Statfs_t {
	t.Helper()
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A volume is a filesystem of its own whose size is the capacity: clients' df
// shows it, writes past it fail with ENOSPC, and a snapshot's pinned data counts.
func TestCapacityIsTheFilesystemSize(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vq", 256<<20, nil)
	mp := b.MountPath("vq")
	if s := statfs(t, mp); int64(s.Blocks)*s.Bsize != 256<<20 {
		t.Fatalf("df shows %d bytes, want the capacity %d", int64(s.Blocks)*s.Bsize, 256<<20)
	}
	if err := writeRandom(filepath.Join(mp, "a"), 150<<20); err != nil {
		t.Fatalf("write within capacity: %v", err)
	}
	keep, _ := os.ReadFile(filepath.Join(mp, "a"))
	if err := writeRandom(filepath.Join(mp, "b"), 150<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past capacity: got %v, want ENOSPC", err)
	}
	os.Remove(filepath.Join(mp, "b"))
	syscall.Sync()
	// A snapshot pins a's 150 MiB: overwriting a needs 150 MiB more, past 256 MiB.
	if err := b.EnsureSnapshot(ctx, "vq", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := writeRandom(filepath.Join(mp, "a"), 150<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("overwrite with a snapshot holding the old data: got %v, want ENOSPC", err)
	}
	if err := b.MountSnapshot(ctx, "vq", "s1"); err != nil {
		t.Fatal(err)
	}
	snapCopy, _ := os.ReadFile(filepath.Join(b.SnapshotMountPath("vq", "s1"), "a"))
	if !bytes.Equal(snapCopy, keep) {
		t.Fatal("snapshot does not hold the data as it was")
	}
	// Growing the volume lets the write through, online.
	if err := b.Resize(ctx, "vq", 512<<20); err != nil {
		t.Fatal(err)
	}
	if err := writeRandom(filepath.Join(mp, "a"), 150<<20); err != nil {
		t.Fatalf("write after growing: %v", err)
	}
	st, err := b.ObserveVolume(ctx, "vq")
	if err != nil {
		t.Fatal(err)
	}
	if st.UsedBytes < 300<<20 || st.UsedBytes > 340<<20 || st.CapacityBytes != 512<<20 {
		t.Fatalf("used %d (want ~300 MiB: live + snapshot), capacity %d", st.UsedBytes, st.CapacityBytes)
	}
	if u, err := b.Usage(ctx, "vq"); err != nil || u.UsedBytes != st.UsedBytes || u.SnapshotExclusive["s1"] < 140<<20 {
		t.Fatalf("Usage = %+v, %v; ObserveVolume says %d used", u, err, st.UsedBytes)
	}
}

// Shrinking below what the volume holds is refused and changes nothing; shrinking
// to what fits works.
func TestShrink(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vs", 768<<20, nil)
	mp := b.MountPath("vs")
	if err := writeRandom(filepath.Join(mp, "a"), 400<<20); err != nil {
		t.Fatal(err)
	}
	sum, _ := os.ReadFile(filepath.Join(mp, "a"))
	if err := b.Resize(ctx, "vs", 320<<20); !errors.Is(err, storage.ErrTooSmall) {
		t.Fatalf("shrink below used: got %v, want ErrTooSmall", err)
	}
	if st, _ := b.ObserveVolume(ctx, "vs"); st.CapacityBytes != 768<<20 {
		t.Fatalf("a refused shrink changed the capacity to %d", st.CapacityBytes)
	}
	if err := b.Resize(ctx, "vs", 512<<20); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.ObserveVolume(ctx, "vs"); st.CapacityBytes != 512<<20 {
		t.Fatalf("capacity after shrink = %d", st.CapacityBytes)
	}
	if got, _ := os.ReadFile(filepath.Join(mp, "a")); !bytes.Equal(got, sum) {
		t.Fatal("data changed by a shrink")
	}
}

// A snapshot shares every extent with its source: it costs no data, whatever the
// volume holds (O(1), not a copy), and it is read-only.
func TestSnapshotSharesDataAndIsReadOnly(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vs", 1<<30, nil)
	if err := writeRandom(filepath.Join(b.MountPath("vs"), "big"), 256<<20); err != nil {
		t.Fatal(err)
	}
	before := usage(t, b, "vs").UsedBytes
	if err := b.EnsureSnapshot(ctx, "vs", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureSnapshot(ctx, "vs", "s1"); err != nil {
		t.Fatalf("second create is not idempotent: %v", err)
	}
	syscall.Sync()
	snap := snapshots(t, b, "vs")["s1"]
	if !snap.Exists {
		t.Fatal(snap)
	}
	if snap.ExclusiveBytes > 1<<20 {
		t.Fatalf("snapshot holds %d exclusive bytes of a 256 MiB volume: it copied data", snap.ExclusiveBytes)
	}
	if after := usage(t, b, "vs").UsedBytes; after-before > 8<<20 {
		t.Fatalf("the volume grew %d bytes for a snapshot", after-before)
	}
	if err := b.MountSnapshot(ctx, "vs", "s1"); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(b.SnapshotMountPath("vs", "s1"), "new"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing into a snapshot: got %v, want EROFS", err)
	}
	// Overwriting the live file leaves the old data to the snapshot alone.
	if err := writeRandom(filepath.Join(b.MountPath("vs"), "big"), 256<<20); err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	if snap = snapshots(t, b, "vs")["s1"]; snap.ExclusiveBytes < 200<<20 {
		t.Fatalf("snapshot holds %d exclusive bytes after the live data was overwritten; want ~256 MiB", snap.ExclusiveBytes)
	}
}

// Volumes are separate filesystems: their mount roots differ in device and fsid, a
// clone gets a filesystem id of its own, and mounts carry nosuid,nodev,noexec.
func TestVolumesAreSeparateFilesystems(t *testing.T) {
	b, dir := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "va", 256<<20, nil)
	mkVolume(t, b, "vb", 256<<20, nil)
	b.EnsureSnapshot(ctx, "va", "s1")
	mkVolume(t, b, "vc", 256<<20, &storage.SnapshotRef{VolumeKey: "va", Snapshot: "s1"})
	b.EnsureSnapshot(ctx, "vc", "s1")
	mkVolume(t, b, "vd", 256<<20, &storage.SnapshotRef{VolumeKey: "vc", Snapshot: "s1"}) // a clone of a clone
	if err := b.MountSnapshot(ctx, "va", "s1"); err != nil {
		t.Fatal(err)
	}
	seenDev, seenFsid := map[uint64]string{}, map[[2]int32]string{}
	for _, p := range []string{b.MountPath("va"), b.MountPath("vb"), b.MountPath("vc"), b.MountPath("vd"), b.SnapshotMountPath("va", "s1")} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if o, ok := seenDev[st.Dev]; ok {
			t.Errorf("%s and %s share device %d", p, o, st.Dev)
		}
		seenDev[st.Dev] = p
		fsid := statfs(t, p).Fsid.Val
		if o, ok := seenFsid[fsid]; ok {
			t.Errorf("%s and %s share fsid %v", p, o, fsid)
		}
		seenFsid[fsid] = p
		e, ok, _ := mountinfoLookup(p)
		if !ok || !strings.Contains(e.Options, "nosuid") || !strings.Contains(e.Options, "nodev") || !strings.Contains(e.Options, "noexec") {
			t.Errorf("%s mounted with %q, want nosuid,nodev,noexec", p, e.Options)
		}
	}
	uuids := map[string]bool{}
	for _, k := range []string{"va", "vb", "vc", "vd"} {
		v, err := b.open(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if uuids[v.uuid] {
			t.Errorf("volume %s shares filesystem id %s", k, v.uuid)
		}
		uuids[v.uuid] = true
		// The volume's data is cached once, by its own filesystem: its loop device
		// does direct I/O on the image.
		if dio, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(v.dev), "loop", "dio")); strings.TrimSpace(string(dio)) != "1" {
			t.Errorf("volume %s: loop device %s without direct I/O (dio %q)", k, v.dev, dio)
		}
	}
	// What the sandboxes see (the mounts directory) holds only live data and
	// snapshots, never a volume's whole filesystem.
	entries, _ := os.ReadDir(filepath.Join(dir, "mounts"))
	for _, e := range entries {
		if m, ok, _ := mountinfoLookup(filepath.Join(dir, "mounts", e.Name())); ok && m.Root == "/" {
			t.Errorf("a whole filesystem is mounted in the shared mounts directory: %s", e.Name())
		}
	}
}

func TestCloneIsWritableAndIndependent(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vsrc", 256<<20, nil)
	src := b.MountPath("vsrc")
	os.WriteFile(filepath.Join(src, "f"), []byte("snapshot data"), 0o644)
	if err := b.EnsureSnapshot(ctx, "vsrc", "s1"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "f"), []byte("later data"), 0o644)
	b.EnsureSnapshot(ctx, "vsrc", "s2")
	mkVolume(t, b, "vclone", 512<<20, &storage.SnapshotRef{VolumeKey: "vsrc", Snapshot: "s1"})
	cl := b.MountPath("vclone")
	if got, _ := os.ReadFile(filepath.Join(cl, "f")); string(got) != "snapshot data" {
		t.Fatalf("clone reads %q", got)
	}
	if err := os.WriteFile(filepath.Join(cl, "g"), []byte("clone only"), 0o644); err != nil {
		t.Fatalf("clone is not writable: %v", err)
	}
	if _, err := os.Stat(filepath.Join(src, "g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a write to the clone shows in the source")
	}
	// The clone has its own capacity and none of the source's snapshots.
	st, err := b.ObserveVolume(ctx, "vclone")
	if err != nil || st.CapacityBytes != 512<<20 || !st.Exists || !st.Mounted {
		t.Fatalf("clone status %+v, %v", st, err)
	}
	if inv, _ := b.Inventory(ctx); len(inv.Snapshots["vclone"]) != 0 {
		t.Fatalf("clone kept snapshots %v", inv.Snapshots["vclone"])
	}
	if err := writeRandom(filepath.Join(cl, "big"), 600<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("clone capacity: got %v, want ENOSPC", err)
	}
	v, _ := b.open(ctx, "vclone")
	inconsistent, _ := os.ReadFile(filepath.Join("/sys/fs/btrfs", v.uuid, "qgroups", "inconsistent"))
	if strings.TrimSpace(string(inconsistent)) == "1" {
		t.Fatal("quota counters left inconsistent after a clone")
	}
	// The source is untouched.
	if got, _ := os.ReadFile(filepath.Join(src, "f")); string(got) != "later data" {
		t.Fatalf("source reads %q after the clone", got)
	}
}

func TestRevertSwapsInTheSnapshot(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vr", 256<<20, nil)
	mp := b.MountPath("vr")
	os.WriteFile(filepath.Join(mp, "f"), []byte("v1"), 0o644)
	b.EnsureSnapshot(ctx, "vr", "s1")
	os.WriteFile(filepath.Join(mp, "f"), []byte("v2"), 0o644)
	os.WriteFile(filepath.Join(mp, "new"), []byte("x"), 0o644)
	for _, err := range []error{b.Revert(ctx, "vr", "s1"), b.Mount(ctx, "vr")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(mp, "f")); string(got) != "v1" {
		t.Fatalf("after revert f = %q, want v1", got)
	}
	if _, err := os.Stat(filepath.Join(mp, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a file written after the snapshot survived the revert")
	}
	st, _ := b.ObserveVolume(ctx, "vr")
	if !st.Exists || !st.Mounted || st.CapacityBytes != 256<<20 {
		t.Fatalf("after revert: %+v", st)
	}
	if err := writeRandom(filepath.Join(mp, "big"), 300<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("capacity after revert: got %v, want ENOSPC", err)
	}
}

// A create cut short leaves a ".new" image, possibly attached and mounted; the
// next attempt starts over and succeeds, and the inventory names it meanwhile so
// orphan collection can remove it.
func TestInterruptedCreateStartsOver(t *testing.T) {
	b, dir := newBackend(t)
	ctx := context.Background()
	tmp := b.newImage("vi")
	if err := createSparse(tmp, 256<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.btrfs", "-q", tmp).CombinedOutput(); err != nil {
		t.Fatal(err, string(out))
	}
	if _, err := b.mountWhole(ctx, tmp, b.fsPath("vi")); err != nil {
		t.Fatal(err)
	}
	inv, _ := b.Inventory(ctx)
	if !slices.Contains(inv.Volumes, "vi") {
		t.Fatalf("inventory %v does not name the unfinished volume", inv.Volumes)
	}
	mkVolume(t, b, "vi", 256<<20, nil)
	if st, _ := b.ObserveVolume(ctx, "vi"); !st.Exists || !st.Mounted {
		t.Fatalf("status after the retried create: %+v", st)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the unfinished image is still there")
	}
	if out, _ := exec.Command("losetup", "-j", tmp).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("the unfinished image is still attached: %s", out)
	}
	_ = dir
}

func TestDeleteVolumeLeavesNothing(t *testing.T) {
	b, dir := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vd", 256<<20, nil)
	os.WriteFile(filepath.Join(b.MountPath("vd"), "f"), []byte("x"), 0o644)
	b.EnsureSnapshot(ctx, "vd", "s1")
	b.EnsureSnapshot(ctx, "vd", "s2")
	if err := b.MountSnapshot(ctx, "vd", "s1"); err != nil {
		t.Fatal(err)
	}
	img := b.imagePath("vd")
	if err := b.DeleteVolume(ctx, "vd"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVolume(ctx, "vd"); err != nil {
		t.Fatalf("second delete is not idempotent: %v", err)
	}
	inv, err := b.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Volumes) != 0 || len(inv.Snapshots) != 0 {
		t.Fatalf("left behind: %+v", inv)
	}
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("image left behind")
	}
	if out, _ := exec.Command("losetup", "-j", img).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("loop device left attached: %s", out)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), filepath.Join(dir, "mounts", "vd")) {
		t.Fatal("mounts left behind")
	}
}

// After a crash (no Stop), a new backend adopts the attached loop devices and the
// mounts, and its Stop leaves nothing behind.
func TestAdoptAfterCrash(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("btrfs"); err != nil {
		t.Skip("btrfs-progs not installed")
	}
	dir := t.TempDir()
	ctx := context.Background()
	a := New(Options{DataDir: dir, ImageSize: 2 << 30})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mkVolume(t, a, "vk", 256<<20, nil)
	os.WriteFile(filepath.Join(a.MountPath("vk"), "f"), []byte("kept"), 0o644)
	aDev, _ := a.loopOf(ctx, a.imagePath("vk"))
	// "Crash": a is dropped without Stop.
	b := New(Options{DataDir: dir, ImageSize: 2 << 30})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if b.loop != a.loop {
		t.Fatalf("attached a second store loop device %s (had %s)", b.loop, a.loop)
	}
	if err := b.Mount(ctx, "vk"); err != nil {
		t.Fatal(err)
	}
	if bDev, _ := b.loopOf(ctx, b.imagePath("vk")); bDev != aDev {
		t.Fatalf("volume reattached on %s (was %s)", bDev, aDev)
	}
	if got, _ := os.ReadFile(filepath.Join(b.MountPath("vk"), "f")); string(got) != "kept" {
		t.Fatalf("data after adoption: %q", got)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, dir)
	// And a fresh start after a clean stop finds the volume again.
	c := New(Options{DataDir: dir, ImageSize: 2 << 30})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Stop(ctx); assertNothingLeft(t, dir) }()
	if st, _ := c.ObserveVolume(ctx, "vk"); !st.Exists || st.Mounted {
		t.Fatalf("after a clean restart: %+v (want existing, not yet mounted)", st)
	}
	if err := c.Mount(ctx, "vk"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(c.MountPath("vk"), "f")); string(got) != "kept" {
		t.Fatalf("data after restart: %q", got)
	}
}

// After a crash, a start that adopts every volume's mount reads the mount table
// once (for the store), not once per volume: at 1,000 volumes the reads made
// such a start take 12.5 s where 500 took 3.1 s. Then mounting and observing
// each adopted volume reads it no more.
func TestCrashStartReadsNoMountTablePerVolume(t *testing.T) {
	skipUnlessRoot(t)
	dir := t.TempDir()
	ctx := context.Background()
	opts := Options{DataDir: dir, ImageSize: 2 << 30}
	a := New(opts)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{"c1", "c2", "c3", "c4"}
	for _, k := range keys {
		mkVolume(t, a, k, 256<<20, nil)
	}
	// "Crash": a is dropped without Stop; its mounts and loop devices stay.
	b := New(opts)
	before := mountinfo.Reads()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(ctx); err != nil {
			t.Error(err)
		}
		assertNothingLeft(t, dir)
	})
	if n := mountinfo.Reads() - before; n > 1 {
		t.Fatalf("a start adopting %d volumes read the mount table %d times, want at most 1", len(keys), n)
	}
	before = mountinfo.Reads()
	for _, k := range keys {
		if err := b.Mount(ctx, k); err != nil {
			t.Fatal(err)
		}
		st, err := b.ObserveVolume(ctx, k)
		if err != nil || !st.Exists || !st.Mounted {
			t.Fatalf("%s after adoption: %+v, %v", k, st, err)
		}
	}
	if n := mountinfo.Reads() - before; n != 0 {
		t.Fatalf("mounting and observing the adopted volumes read the mount table %d times", n)
	}
	for _, k := range keys {
		if da, _ := a.loopOf(ctx, a.imagePath(k)); da == "" || da != b.vols[k].dev {
			t.Fatalf("%s: adopted on %q, was on %q", k, b.vols[k].dev, da)
		}
	}
}

// topMount tells a btrfs's top level mounted on a path, with its device, from
// a subvolume or a directory of it bind-mounted there, and from no mount.
func TestTopMount(t *testing.T) {
	b, _ := newBackend(t)
	mkVolume(t, b, "tm", 256<<20, nil)
	if unsafe.Sizeof(btrfsDevInfoArgs{}) != 4096 {
		t.Fatalf("btrfsDevInfoArgs is %d bytes, want 4096", unsafe.Sizeof(btrfsDevInfoArgs{}))
	}
	fs := b.fsPath("tm")
	src, top, mounted, err := topMount(fs)
	e, _, _ := mountinfo.Lookup(fs)
	if err != nil || !top || !mounted || src != e.Source || src != b.vols["tm"].dev {
		t.Fatalf("topMount(%s) = %q %v %v %v; the table says %q, the volume is on %q", fs, src, top, mounted, err, e.Source, b.vols["tm"].dev)
	}
	// The volume's data subvolume, mounted where clients see it: not the top.
	if src, top, mounted, err := topMount(b.MountPath("tm")); err != nil || top || !mounted {
		t.Fatalf("topMount of the volume's mount = %q %v %v %v, want mounted, not the top level", src, top, mounted, err)
	}
	// A directory of the top level, bind-mounted: not the top either.
	sub, bind := filepath.Join(fs, "d"), filepath.Join(t.TempDir(), "bind")
	for _, d := range []string{sub, bind} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(sub, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(bind, 0)
	if _, top, mounted, err := topMount(bind); err != nil || top || !mounted {
		t.Fatalf("topMount of a bind-mounted directory = %v %v %v", top, mounted, err)
	}
	if _, top, mounted, err := topMount(sub); err != nil || top || mounted {
		t.Fatalf("topMount of a plain directory = %v %v %v", top, mounted, err)
	}
}

// With --store, Basin keeps volume images in an existing directory, under basin/,
// and leaves the store's own filesystem mounted on Stop.
func TestExistingStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("btrfs"); err != nil {
		t.Skip("btrfs-progs not installed")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "own.img"), filepath.Join(dir, "own")
	os.Mkdir(mnt, 0o755)
	f, _ := os.Create(img)
	f.Truncate(2 << 30)
	f.Close()
	for _, argv := range [][]string{{"mkfs.btrfs", "-q", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	ctx := context.Background()
	b := New(Options{DataDir: filepath.Join(dir, "data"), Store: mnt})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mkVolume(t, b, "vx", 256<<20, nil)
	if _, err := os.Stat(filepath.Join(mnt, "basin", "images", "vx.img")); err != nil {
		t.Fatalf("volume image not under basin/images: %v", err)
	}
	if err := writeRandom(filepath.Join(b.MountPath("vx"), "big"), 300<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("capacity on an existing store: %v", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := mountinfo.IsMountPoint(b.MountPath("vx")); m {
		t.Fatal("volume still mounted after Stop")
	}
	if m, _ := mountinfo.IsMountPoint(mnt); !m {
		t.Fatal("Stop unmounted a filesystem Basin did not mount")
	}
	if out, _ := exec.Command("losetup", "-j", filepath.Join(mnt, "basin", "images", "vx.img")).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("volume loop device left attached: %s", out)
	}
}

// A store in the layout of Basin before per-volume filesystems is refused, not
// silently re-populated with empty volumes.
func TestOldLayoutRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	os.MkdirAll(filepath.Join(store, "basin", "volumes", "v1234"), 0o700)
	b := New(Options{DataDir: filepath.Join(dir, "data"), Store: store})
	err := b.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "shared-filesystem layout") {
		t.Fatalf("start on an old-layout store: %v", err)
	}
}

func mountinfoLookup(p string) (mountinfo.Entry, bool, error) { return mountinfo.Lookup(p) }

// Work on one volume reads no mount table: its cost must not grow with the number
// of volumes (each adds mounts; at 1,000 volumes one read of the table took ~15 ms).
// Only a pass over every volume (ObserveVolumes) reads it, once.
func TestOneVolumeReadsNoMountTable(t *testing.T) {
	skipUnlessRoot(t)
	// As the daemon does, the mounts directory is a mount point before Start
	// (dataplane.ShareMounts): mkfs hides it in one detach, reading no table.
	dir := t.TempDir()
	mounts := filepath.Join(dir, "mounts")
	if err := os.Mkdir(mounts, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(mounts, mounts, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := New(Options{DataDir: dir, ImageSize: 2 << 30})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := unix.Unmount(mounts, 0); err != nil {
			t.Error(err)
		}
		assertNothingLeft(t, dir)
	})
	mkVolume(t, b, "v1", 256<<20, nil)
	if err := b.EnsureSnapshot(ctx, "v1", "s1"); err != nil {
		t.Fatal(err)
	}
	before := mountinfo.Reads()
	steps := []struct {
		name string
		f    func() error
	}{
		{"create", func() error { return b.EnsureVolume(ctx, "v2", 256<<20, nil) }},
		{"set mode", func() error { return b.SetMode(ctx, "v2", 0o777) }},
		{"mount", func() error { return b.Mount(ctx, "v2") }},
		{"mount again", func() error { return b.Mount(ctx, "v1") }},
		{"mount snapshot", func() error { return b.MountSnapshot(ctx, "v1", "s1") }},
		{"mount snapshot again", func() error { return b.MountSnapshot(ctx, "v1", "s1") }},
		{"observe", func() error {
			st, err := b.ObserveVolume(ctx, "v1")
			if err == nil && (!st.Exists || !st.Mounted) {
				err = fmt.Errorf("observed %+v", st)
			}
			return err
		}},
		{"observe snapshots", func() error {
			m, err := b.ObserveSnapshots(ctx, "v1")
			if err == nil && !m["s1"].Mounted {
				err = fmt.Errorf("observed %+v", m)
			}
			return err
		}},
		{"usage", func() error { _, err := b.Usage(ctx, "v1"); return err }},
		{"unmount snapshot", func() error { return b.UnmountSnapshot(ctx, "v1", "s1") }},
		{"unmount", func() error { return b.Unmount(ctx, "v2") }},
		{"delete", func() error { return b.DeleteVolume(ctx, "v2") }},
	}
	for _, s := range steps {
		if err := s.f(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if n := mountinfo.Reads() - before; n != 0 {
			t.Fatalf("%s read the mount table %d times", s.name, n)
		}
	}
	if _, err := b.ObserveVolumes(ctx); err != nil {
		t.Fatal(err)
	}
	if n := mountinfo.Reads() - before; n != 1 {
		t.Fatalf("a pass over every volume read the mount table %d times, want 1", n)
	}
}

// mkfs.btrfs runs where the volumes' mounts are not, so that its pass over the
// mount table does not grow with the number of volumes; the host keeps them all,
// and nothing stays behind in the host's table.
func TestToolsDoNotSeeVolumeMounts(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "v1", 256<<20, nil)
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var inTools []byte
	err = runHidden(ctx, []string{b.mounts, b.fsDir}, func() (err error) {
		inTools, err = exec.Command("cat", "/proc/self/mountinfo").Output()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range []string{b.MountPath("v1"), b.fsPath("v1")} {
		if !strings.Contains(string(host), " "+mp+" ") {
			t.Fatalf("%s is not mounted in the host", mp)
		}
		if strings.Contains(string(inTools), " "+mp+" ") {
			t.Errorf("%s is mounted where mkfs runs", mp)
		}
	}
	if !strings.Contains(string(inTools), " / / ") {
		t.Errorf("the tool namespace has no root:\n%s", inTools)
	}
	after, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(host) {
		t.Errorf("the host's mount table changed:\nbefore:\n%s\nafter:\n%s", host, after)
	}
	// The thread survives, back in the process's namespace and directory: had it
	// died, every child it ever forked with Pdeathsig (a sandbox's holder and
	// daemons) would have been killed with it.
	var tid int
	if err := runHidden(ctx, []string{b.mounts, b.fsDir}, func() error { tid = unix.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for _, link := range []string{"ns/mnt", "cwd", "root"} {
		got, err := os.Readlink(filepath.Join(task, link))
		if err != nil {
			t.Fatalf("the tool thread %d is gone: %v", tid, err)
		}
		if want, _ := os.Readlink(filepath.Join("/proc/self", link)); got != want {
			t.Errorf("the tool thread's %s is %s, the process's %s", link, got, want)
		}
	}
	// A second volume's mkfs still finds its image there.
	mkVolume(t, b, "v2", 256<<20, nil)
}
