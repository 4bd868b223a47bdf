package btrfs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/storage"
)

func TestParseErrorStats(t *testing.T) {
	got, err := parseErrorStats("write_errs 2\nread_errs 0\nflush_errs 1\ncorruption_errs 0\ngeneration_errs 0\n")
	if err != nil || got["write_errs"] != 2 || got["flush_errs"] != 1 || sum(got) != 3 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"write_errs", "write_errs x", "write_errs -1", "a b c"} {
		if _, err := parseErrorStats(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// writeStats writes a device's error counters where sysfs would have them.
func writeStats(t *testing.T, root, fsid, dev, stats string) {
	t.Helper()
	dir := filepath.Join(root, fsid, "devinfo", dev)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "error_stats"), []byte(stats), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Error counters are kept on disk by btrfs: a filesystem is faulted only when
// they grow past what they were when first seen, over all its devices, and
// healthy again once they are reset (or the baseline is taken anew, as after a
// restart).
func TestErrorCountersAgainstBaseline(t *testing.T) {
	root := t.TempDir()
	hs := &healthState{sysfs: root}
	paths := []string{t.TempDir()} // a read-write filesystem to statfs
	const fsid = "0f0e0d0c-aaaa-bbbb-cccc-000000000001"
	clean := "write_errs 0\nread_errs 0\nflush_errs 0\ncorruption_errs 0\ngeneration_errs 0\n"
	writeStats(t, root, fsid, "1", "write_errs 4\nread_errs 0\nflush_errs 0\ncorruption_errs 1\ngeneration_errs 0\n")
	writeStats(t, root, fsid, "2", clean)
	if f := hs.check(fsid, paths); !f.OK() {
		t.Fatalf("errors from before Basin saw the filesystem count: %+v", f)
	}
	writeStats(t, root, fsid, "2", "write_errs 0\nread_errs 2\nflush_errs 0\ncorruption_errs 0\ngeneration_errs 0\n")
	f := hs.check(fsid, paths)
	if f.Reason != storage.FaultIOErrors || !strings.Contains(f.Detail, "2 I/O errors") || !strings.Contains(f.Detail, "read_errs 2") {
		t.Fatalf("new errors: %+v", f)
	}
	if f := hs.check(fsid, paths); f.Reason != storage.FaultIOErrors {
		t.Fatalf("errors that stay are forgotten: %+v", f)
	}
	writeStats(t, root, fsid, "1", clean) // `btrfs device stats -z`
	writeStats(t, root, fsid, "2", clean)
	if f := hs.check(fsid, paths); !f.OK() {
		t.Fatalf("after a reset: %+v", f)
	}
	if f := hs.check("no-such-fsid", paths); !f.OK() {
		t.Fatalf("a filesystem without counters: %+v", f)
	}
}

// tmpfsDir mounts a tmpfs of size bytes on a new directory, unmounted when the
// test ends (after the cleanups registered later, such as a backend's Stop).
func tmpfsDir(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmount tmpfs: %v: %s", err, out)
		}
	})
	return dir
}

// startBackend starts a backend on opts, stopped (and checked to leave nothing
// behind under dirs) when the test ends.
func startBackend(t *testing.T, opts Options, dirs ...string) *Backend {
	t.Helper()
	b := New(opts)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		for _, d := range dirs {
			assertNothingLeftBelow(t, d)
		}
	})
	return b
}

// assertNothingLeftBelow is assertNothingLeft for a directory that is a mount
// of the test's own (a tmpfs): nothing mounted below it, no loop device on a
// file in it.
func assertNothingLeftBelow(t *testing.T, dir string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for line := range strings.Lines(string(mi)) {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("mount left: %s", strings.TrimSpace(line))
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(loopsUnder(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, dev := range loopsUnder(dir) {
		t.Errorf("loop device left attached: %s", dev)
		exec.Command("losetup", "-d", dev).Run()
	}
}

func health(t *testing.T, b *Backend) storage.Health {
	t.Helper()
	h, err := b.ObserveHealth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// waitHealth polls ObserveHealth until ok says it shows what the test waits for.
func waitHealth(t *testing.T, b *Backend, what string, ok func(storage.Health) bool) storage.Health {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		h := health(t, b)
		if ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not observed in 60 s: %+v", what, h)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func remount(t *testing.T, opts, path string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+opts, path).CombinedOutput(); err != nil {
		t.Fatalf("remount %s %s: %v: %s", opts, path, err, out)
	}
}

// A volume's filesystem remounted read-only (the whole filesystem, or its live
// mount alone) is observed read-only until it is remounted read-write; the
// other volume and the store stay healthy.
func TestHealthReadOnlyRemount(t *testing.T) {
	b, _ := newBackend(t)
	mkVolume(t, b, "va", 256<<20, nil)
	mkVolume(t, b, "vb", 256<<20, nil)
	if h := health(t, b); !h.Store.OK() || len(h.Volumes) != 2 || !h.Volumes["va"].OK() || !h.Volumes["vb"].OK() {
		t.Fatalf("healthy: %+v", h)
	}
	remount(t, "ro", b.fsPath("va"))
	h := health(t, b)
	if h.Volumes["va"].Reason != storage.FaultReadOnly || !h.Volumes["vb"].OK() || !h.Store.OK() {
		t.Fatalf("va remounted read-only: %+v", h)
	}
	remount(t, "rw", b.fsPath("va"))
	if h := health(t, b); !h.Volumes["va"].OK() {
		t.Fatalf("va remounted read-write: %+v", h)
	}
	remount(t, "ro,bind", b.MountPath("vb"))
	if h := health(t, b); h.Volumes["vb"].Reason != storage.FaultReadOnly || !h.Volumes["va"].OK() {
		t.Fatalf("vb's live mount read-only: %+v", h)
	}
	remount(t, "rw,bind", b.MountPath("vb"))
	if h := health(t, b); !h.Volumes["vb"].OK() {
		t.Fatalf("vb's live mount read-write: %+v", h)
	}
}

// fill writes n bytes of random data into a new file of dir and flushes it,
// ignoring the errors a failing disk gives (the point is to fail it).
func fill(dir string, n int64) {
	writeRandom(filepath.Join(dir, "fill"), n) //nolint:errcheck // it fails by design
	if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
}

// copySparse replaces file with a copy that leaves out every block reading as
// zeroes (cp --sparse=always, as a careless backup or restore would): blocks
// never written are given back to the filesystem, though Basin allocated them.
// That is the one way left for a volume's writes to fail underneath it.
func copySparse(t *testing.T, file string) {
	t.Helper()
	for _, argv := range [][]string{{"cp", "--sparse=always", "--preserve=all", file, file + ".copy"}, {"mv", file + ".copy", file}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
}

// fillUp takes every free byte of the filesystem holding dir.
func fillUp(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail)*st.Bsize); err != nil {
		t.Fatal(err)
	}
}

// A real write error: a volume's image lies in a store directory on a small
// tmpfs; the image loses the blocks it was allocated (digHoles) and the tmpfs
// fills up; the loop device's writes fail and btrfs turns the volume's
// filesystem read-only. It is observed so, the store itself (a tmpfs, not
// read-only) is not, the other volume's data still reads, and a restart with
// room again opens the volume healthy.
func TestHealthWriteErrorForcesReadOnly(t *testing.T) {
	skipUnlessRoot(t)
	store := tmpfsDir(t, "1g")
	opts := Options{DataDir: t.TempDir(), Store: store}
	b := startBackend(t, opts, opts.DataDir, store)
	mkVolume(t, b, "va", 512<<20, nil)
	mkVolume(t, b, "vb", 256<<20, nil)
	keep := bytes.Repeat([]byte("kept "), 1000)
	if err := os.WriteFile(filepath.Join(b.MountPath("vb"), "keep"), keep, 0o644); err != nil {
		t.Fatal(err)
	}
	fill(b.MountPath("vb"), 0)
	// va's image copied sparse while Basin is stopped, and the store's
	// filesystem full: Start cannot allocate it again.
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	copySparse(t, b.imagePath("va"))
	fillUp(t, store)
	b = startBackend(t, opts, opts.DataDir, store)
	for _, key := range []string{"va", "vb"} {
		if err := b.Mount(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	fill(b.MountPath("va"), 200<<20)
	h := waitHealth(t, b, "va read-only after its writes failed", func(h storage.Health) bool {
		return h.Volumes["va"].Reason == storage.FaultReadOnly
	})
	if !h.Store.OK() {
		t.Fatalf("the store (a tmpfs that is full, not read-only) is reported %+v", h.Store)
	}
	if got, err := os.ReadFile(filepath.Join(b.MountPath("vb"), "keep")); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("vb reads %d bytes, %v", len(got), err)
	}
	all, err := b.ObserveVolumes(context.Background())
	if err != nil || !all["va"].Exists || !all["vb"].Exists {
		t.Fatalf("ObserveVolumes %+v, %v", all, err)
	}

	// Room again, and a restart: healthy.
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	os.Remove(filepath.Join(store, "filler"))
	b2 := startBackend(t, opts, opts.DataDir, store)
	if h := health(t, b2); !h.Volumes["va"].OK() || !h.Volumes["vb"].OK() {
		t.Fatalf("after the restart: %+v", h)
	}
	if err := os.WriteFile(filepath.Join(b2.fsPath("va"), "live", "again"), []byte("x"), 0o644); err != nil {
		t.Fatalf("va is not writable after the restart: %v", err)
	}
}

// The default store (an image in the data directory) on a small filesystem: the
// store image loses the blocks it was allocated (digHoles) and the filesystem
// fills; the store's btrfs turns read-only, which is observed; the volumes are
// never reported fewer than they are (a short list made every volume seem
// gone), and Stop detaches every loop device though the store cannot be read.
func TestHealthStoreFillsUp(t *testing.T) {
	skipUnlessRoot(t)
	data := tmpfsDir(t, "2560m")
	// Thin: Basin then starts on a store image it cannot allocate in full.
	opts := Options{DataDir: data, ImageSize: 2 << 30, Thin: true}
	b := startBackend(t, opts, data)
	mkVolume(t, b, "va", 1<<30, nil)
	mkVolume(t, b, "vb", 256<<20, nil)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	copySparse(t, filepath.Join(data, "store.img"))
	fillUp(t, data)
	b = startBackend(t, opts, data)
	for _, key := range []string{"va", "vb"} {
		if err := b.Mount(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	fill(b.MountPath("va"), 256<<20)
	fill(b.top, 0)
	waitHealth(t, b, "the store read-only after its writes failed", func(h storage.Health) bool {
		return h.Store.Reason == storage.FaultReadOnly
	})
	all, err := b.ObserveVolumes(context.Background())
	if err == nil && len(all) != 2 {
		t.Fatalf("ObserveVolumes reports %d of 2 volumes, and no error", len(all))
	}
	t.Logf("ObserveVolumes: %d volumes, %v", len(all), err)
}
