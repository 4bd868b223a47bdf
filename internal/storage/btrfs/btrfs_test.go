package btrfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/storage"
)

// newBackend starts a real btrfs store on a loop device under a temp dir. These
// tests need root, btrfs-progs and loop devices; they skip with a reason otherwise.
func newBackend(t *testing.T) (*Backend, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("btrfs integration tests need root (loop devices, mount, btrfs quota)")
	}
	if _, err := exec.LookPath("btrfs"); err != nil {
		t.Skip("btrfs-progs not installed (run scripts/setup.sh)")
	}
	dir := t.TempDir()
	b := New(Options{DataDir: dir, ImageSize: 2 << 30})
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		assertNothingLeft(t, dir)
	})
	return b, dir
}

// assertNothingLeft checks that no mount or loop device refers to dir.
func assertNothingLeft(t *testing.T, dir string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), dir) {
		t.Errorf("mounts left under %s", dir)
	}
	// A detach can complete lazily; give the kernel a moment before judging. Never
	// detach anything but this test's own device: other tests run beside this one.
	img := filepath.Join(dir, "store.img")
	var out []byte
	for range 50 {
		if out, _ = exec.Command("losetup", "-j", img, "-O", "NAME", "-n").Output(); len(bytes.TrimSpace(out)) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("loop device left attached: %s", out)
	for _, dev := range strings.Fields(string(out)) {
		exec.Command("losetup", "-d", dev).Run()
	}
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

func mkVolume(t *testing.T, b *Backend, key string, q uint64, limit int64, from *storage.SnapshotRef) {
	t.Helper()
	ctx := context.Background()
	for _, err := range []error{b.CreateQgroup(ctx, q), b.SetLimit(ctx, q, limit), b.CreateVolume(ctx, key, q, from),
		b.SetMode(ctx, key, 0o777), b.Mount(ctx, key)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestQuotaCoversVolumeAndSnapshots(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vq", 1, 64<<20, nil)
	mp := b.MountPath("vq")
	if err := writeRandom(filepath.Join(mp, "a"), 40<<20); err != nil {
		t.Fatalf("write within quota: %v", err)
	}
	keep, _ := os.ReadFile(filepath.Join(mp, "a"))
	if err := writeRandom(filepath.Join(mp, "b"), 40<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write past quota: got %v, want EDQUOT", err)
	}
	os.Remove(filepath.Join(mp, "b"))
	syscall.Sync()
	// A snapshot pins a's 40 MiB: overwriting a needs 40 MiB more, past 64 MiB.
	if err := b.CreateSnapshot(ctx, "vq", "s1", 1); err != nil {
		t.Fatal(err)
	}
	if err := writeRandom(filepath.Join(mp, "a"), 40<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("overwrite with a snapshot holding the old data: got %v, want EDQUOT", err)
	}
	snapCopy, _ := os.ReadFile(filepath.Join(b.snapDir("vq"), "s1", "a"))
	if !bytes.Equal(snapCopy, keep) {
		t.Fatal("snapshot does not hold the data as it was")
	}
	// Raising the limit (by id, even while over it) lets the write through.
	if err := b.SetLimit(ctx, 1, 128<<20); err != nil {
		t.Fatal(err)
	}
	if err := writeRandom(filepath.Join(mp, "a"), 40<<20); err != nil {
		t.Fatalf("write after raising the limit: %v", err)
	}
	st, err := b.Volume(ctx, "vq", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.UsedBytes < 80<<20 || st.UsedBytes > 90<<20 || st.LimitBytes != 128<<20 {
		t.Fatalf("used %d (want ~80 MiB: live + snapshot), limit %d", st.UsedBytes, st.LimitBytes)
	}
}

// A snapshot shares every extent with its source: it costs no data, whatever the
// volume holds (O(1), not a copy), and it is read-only.
func TestSnapshotSharesDataAndIsReadOnly(t *testing.T) {
	b, dir := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vs", 2, 1<<30, nil)
	if err := writeRandom(filepath.Join(b.MountPath("vs"), "big"), 256<<20); err != nil {
		t.Fatal(err)
	}
	before := fsUsed(t, filepath.Join(dir, "store"))
	if err := b.CreateSnapshot(ctx, "vs", "s1", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateSnapshot(ctx, "vs", "s1", 2); err != nil {
		t.Fatalf("second create is not idempotent: %v", err)
	}
	syscall.Sync()
	snap, err := b.Snapshot(ctx, "vs", "s1")
	if err != nil || !snap.Exists {
		t.Fatal(snap, err)
	}
	if snap.ExclusiveBytes > 1<<20 {
		t.Fatalf("snapshot holds %d exclusive bytes of a 256 MiB volume: it copied data", snap.ExclusiveBytes)
	}
	if grown := fsUsed(t, filepath.Join(dir, "store")) - before; grown > 8<<20 {
		t.Fatalf("filesystem grew %d bytes for a snapshot", grown)
	}
	err = os.WriteFile(filepath.Join(b.snapDir("vs"), "s1", "new"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing into a snapshot: got %v, want EROFS", err)
	}
}

func fsUsed(t *testing.T, path string) int64 {
	t.Helper()
	out, err := exec.Command("btrfs", "filesystem", "usage", "-b", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Used:" {
			var n int64
			for _, c := range f[1] {
				n = n*10 + int64(c-'0')
			}
			return n
		}
	}
	t.Fatalf("no Used: line in %s", out)
	return 0
}

func TestCloneIsWritableAndIndependent(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vsrc", 3, 256<<20, nil)
	src := b.MountPath("vsrc")
	os.WriteFile(filepath.Join(src, "f"), []byte("snapshot data"), 0o644)
	syscall.Sync()
	if err := b.CreateSnapshot(ctx, "vsrc", "s1", 3); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "f"), []byte("later data"), 0o644)
	mkVolume(t, b, "vclone", 4, 32<<20, &storage.SnapshotRef{VolumeKey: "vsrc", Snapshot: "s1"})
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
	// The clone has its own quota.
	if err := writeRandom(filepath.Join(cl, "big"), 48<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("clone quota: got %v, want EDQUOT", err)
	}
	inconsistent, _ := os.ReadFile(filepath.Join("/sys/fs/btrfs", b.fsid, "qgroups", "inconsistent"))
	if strings.TrimSpace(string(inconsistent)) == "1" {
		t.Fatal("quota counters left inconsistent after a clone")
	}
}

func TestRevertSwapsInTheSnapshot(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vr", 5, 64<<20, nil)
	mp := b.MountPath("vr")
	os.WriteFile(filepath.Join(mp, "f"), []byte("v1"), 0o644)
	syscall.Sync()
	b.CreateSnapshot(ctx, "vr", "s1", 5)
	os.WriteFile(filepath.Join(mp, "f"), []byte("v2"), 0o644)
	os.WriteFile(filepath.Join(mp, "new"), []byte("x"), 0o644)
	for _, err := range []error{b.Retire(ctx, "vr", "op1"), b.CreateVolume(ctx, "vr", 5, &storage.SnapshotRef{VolumeKey: "vr", Snapshot: "s1"}),
		b.PurgeRetired(ctx, "vr", "op1"), b.Mount(ctx, "vr")} {
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
	st, _ := b.Volume(ctx, "vr", 5, "op1")
	if !st.Exists || !st.Mounted || st.Retired || st.LimitBytes != 64<<20 {
		t.Fatalf("after revert: %+v", st)
	}
	// The quota still applies to the new subvolume (same level-1 group).
	if err := writeRandom(filepath.Join(mp, "big"), 80<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("quota after revert: got %v, want EDQUOT", err)
	}
}

func TestDeleteVolumeLeavesNothing(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vd", 6, 64<<20, nil)
	os.WriteFile(filepath.Join(b.MountPath("vd"), "f"), []byte("x"), 0o644)
	b.CreateSnapshot(ctx, "vd", "s1", 6)
	b.CreateSnapshot(ctx, "vd", "s2", 6)
	if err := b.DeleteVolume(ctx, "vd", 6); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVolume(ctx, "vd", 6); err != nil {
		t.Fatalf("second delete is not idempotent: %v", err)
	}
	inv, err := b.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Volumes) != 0 || len(inv.Snapshots) != 0 || len(inv.Qgroups) != 0 {
		t.Fatalf("left behind: %+v", inv)
	}
	out, _ := exec.Command("btrfs", "subvolume", "list", b.top).Output()
	if len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("subvolumes left: %s", out)
	}
}

// After a crash (no Stop), a new backend adopts the attached loop device and the
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
	a := New(Options{DataDir: dir, ImageSize: 1 << 30})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mkVolume(t, a, "vk", 1, 64<<20, nil)
	os.WriteFile(filepath.Join(a.MountPath("vk"), "f"), []byte("kept"), 0o644)
	// "Crash": a is dropped without Stop.
	b := New(Options{DataDir: dir, ImageSize: 1 << 30})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if b.loop != a.loop {
		t.Fatalf("attached a second loop device %s (had %s)", b.loop, a.loop)
	}
	if err := b.Mount(ctx, "vk"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.MountPath("vk"), "f")); string(got) != "kept" {
		t.Fatalf("data after adoption: %q", got)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, dir)
	// And a fresh start after a clean stop finds the volume again.
	c := New(Options{DataDir: dir, ImageSize: 1 << 30})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Stop(ctx); assertNothingLeft(t, dir) }()
	if err := c.Mount(ctx, "vk"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(c.MountPath("vk"), "f")); string(got) != "kept" {
		t.Fatalf("data after restart: %q", got)
	}
}

// With --store, Basin uses an existing btrfs mount, keeps its tree under basin/, and
// leaves the filesystem itself mounted on Stop.
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
	f.Truncate(1 << 30)
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
	mkVolume(t, b, "vx", 1, 64<<20, nil)
	if _, err := os.Stat(filepath.Join(mnt, "basin", "volumes", "vx")); err != nil {
		t.Fatalf("volume not under basin/: %v", err)
	}
	if err := writeRandom(filepath.Join(b.MountPath("vx"), "big"), 80<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("quota on an existing store: %v", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ := isMountPoint(b.MountPath("vx")); m {
		t.Fatal("volume still mounted after Stop")
	}
	if m, _ := isMountPoint(mnt); !m {
		t.Fatal("Stop unmounted a filesystem Basin did not mount")
	}
}
