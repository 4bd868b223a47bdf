package btrfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/storagetest"
)

// The conformance suite the fake runs too, on real btrfs.
func TestConformance(t *testing.T) {
	skipUnlessRoot(t)
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		b, _ := newBackend(t)
		return aside{b}
	})
}

// aside adds to the backend what the suite asks of it to check that a revert
// leaves nothing set aside.
type aside struct{ *Backend }

func (a aside) SetAside(key string) bool {
	entries, err := os.ReadDir(filepath.Join(a.fsPath(key), "retired"))
	return err != nil || len(entries) > 0
}

func skipUnlessRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("btrfs integration tests need root (loop devices, mount, btrfs quota)")
	}
	for _, tool := range []string{"btrfs", "mkfs.btrfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (run scripts/setup.sh)", tool)
		}
	}
}

// countingRunner counts the processes a backend runs.
type countingRunner struct {
	mu    sync.Mutex
	calls []string
}

func (c *countingRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprint(name, args))
	c.mu.Unlock()
	return runner.Exec{}.Run(ctx, name, args...)
}

func (c *countingRunner) reset() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

// Observing and reading the usage of 10 volumes with snapshots runs no process:
// a reconcile pass costs no fork per volume. After a restart, Start opens the
// volumes so observation sees them in full, again without a process.
func TestObservationRunsNoProcess(t *testing.T) {
	skipUnlessRoot(t)
	dir := t.TempDir()
	ctx := context.Background()
	cr := &countingRunner{}
	b := New(Options{DataDir: dir, ImageSize: 8 << 30, Runner: cr})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			b.Stop(ctx)
		}
		assertNothingLeft(t, dir)
	})
	var keys []string
	for i := range 10 {
		k := fmt.Sprintf("v%d", i)
		keys = append(keys, k)
		mkVolume(t, b, k, 256<<20, nil)
		os.WriteFile(filepath.Join(b.MountPath(k), "f"), []byte(k), 0o644)
		for _, s := range []string{"s1", "s2", "s3"} {
			if err := b.EnsureSnapshot(ctx, k, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.MountSnapshot(ctx, k, "s1"); err != nil {
			t.Fatal(err)
		}
	}
	observe := func() {
		t.Helper()
		cr.reset()
		all, err := b.ObserveVolumes(ctx)
		if err != nil || len(all) != 10 {
			t.Fatalf("ObserveVolumes: %d volumes, %v", len(all), err)
		}
		for _, k := range keys {
			st, err := b.ObserveVolume(ctx, k)
			if err != nil || !st.Exists || st.CapacityBytes != 256<<20 || st != all[k] {
				t.Fatalf("ObserveVolume %s: %+v, %v (ObserveVolumes: %+v)", k, st, err, all[k])
			}
			snaps, err := b.ObserveSnapshots(ctx, k)
			if err != nil || len(snaps) != 3 || !snaps["s1"].Mounted || snaps["s2"].Mounted {
				t.Fatalf("ObserveSnapshots %s: %+v, %v", k, snaps, err)
			}
			u, err := b.Usage(ctx, k)
			if err != nil || u.UsedBytes <= 0 || len(u.SnapshotExclusive) != 3 {
				t.Fatalf("Usage %s: %+v, %v", k, u, err)
			}
			if used, err := b.VolumeUsedBytes(ctx, k); err != nil || used != u.UsedBytes {
				t.Fatalf("VolumeUsedBytes %s = %d, %v; Usage says %d", k, used, err, u.UsedBytes)
			}
		}
		if calls := cr.reset(); len(calls) != 0 {
			t.Fatalf("observation ran %d processes: %v", len(calls), calls)
		}
	}
	observe()
	// A restart: a new backend adopts what is attached and mounted.
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b = New(Options{DataDir: dir, ImageSize: 8 << 30, Runner: cr})
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := b.Mount(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := b.MountSnapshot(ctx, k, "s1"); err != nil {
			t.Fatal(err)
		}
	}
	observe()
	stopped = true
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// Revert stopped at each step, by hand, as a crash would leave it: the next Revert
// finishes it, and a Mount instead puts the data back. (The suite does the same
// through the failpoint; this checks the on-disk states themselves.)
func TestRevertCrashStatesOnDisk(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		partial func(t *testing.T, key string) // the steps done before the "crash"
		mount   string                         // what Mount (instead of a resumed revert) shows
	}{
		{"unmounted", func(t *testing.T, key string) { run(t, "umount", b.MountPath(key)) }, "new"},
		{"set-aside", func(t *testing.T, key string) {
			run(t, "umount", b.MountPath(key))
			if err := os.Rename(b.livePath(key), b.asidePath(key)); err != nil {
				t.Fatal(err)
			}
		}, "new"},
		{"copied", func(t *testing.T, key string) {
			run(t, "umount", b.MountPath(key))
			if err := os.Rename(b.livePath(key), b.asidePath(key)); err != nil {
				t.Fatal(err)
			}
			run(t, "btrfs", "subvolume", "snapshot", b.snapPath(key, "s1"), b.livePath(key))
		}, "old"},
		{"older-basin-tag", func(t *testing.T, key string) {
			run(t, "umount", b.MountPath(key))
			if err := os.Rename(b.livePath(key), filepath.Join(b.fsPath(key), "retired", "op-1234")); err != nil {
				t.Fatal(err)
			}
		}, "new"},
	} {
		for _, then := range []string{"Revert", "Mount"} {
			t.Run(tc.name+"/"+then, func(t *testing.T) {
				key := "r" + fmt.Sprint(time.Now().UnixNano()%1e9)
				mkVolume(t, b, key, 256<<20, nil)
				os.WriteFile(filepath.Join(b.MountPath(key), "f"), []byte("old"), 0o644)
				if err := b.EnsureSnapshot(ctx, key, "s1"); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(b.MountPath(key), "f"), []byte("new"), 0o644)
				tc.partial(t, key)
				want := tc.mount
				if then == "Revert" {
					if err := b.Revert(ctx, key, "s1"); err != nil {
						t.Fatal(err)
					}
					want = "old"
				}
				if err := b.Mount(ctx, key); err != nil {
					t.Fatal(err)
				}
				if got, _ := os.ReadFile(filepath.Join(b.MountPath(key), "f")); string(got) != want {
					t.Fatalf("f = %q, want %q", got, want)
				}
				if then == "Revert" {
					if entries, _ := os.ReadDir(filepath.Join(b.fsPath(key), "retired")); len(entries) != 0 {
						t.Fatalf("left aside: %v", entries)
					}
				}
				if err := b.DeleteVolume(ctx, key); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v %s", argv, err, out)
	}
}

// EnsureSnapshot does not slow down with the number of snapshots a volume holds:
// the 255th is within 2x of the first. Each round times the first snapshot of a
// fresh volume and, right after, the next of a volume holding 254 or more, so the
// machine's noise falls on both alike; medians are compared.
//
// Basin's part (a stat and one ioctl) is what this asserts, so it runs with the
// volumes' quota groups disabled: with them, the kernel walks the back references
// of every tree block the snapshot's root shares (btrfs_copy_root ->
// btrfs_find_all_roots), which grows with the snapshots sharing them — measured
// ~3x at the 255th. Those numbers are logged, not asserted.
func TestSnapshotCreateIsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 254 snapshots")
	}
	b, _ := newBackend(t)
	for _, quota := range []bool{false, true} {
		first, last := snapshotTimes(t, b, quota, 9)
		t.Logf("EnsureSnapshot with quota groups %v: 1st %v, 255th %v (medians of %d)", quota, first, last, 9)
		if !quota && last > 2*first {
			t.Errorf("the 255th snapshot took %v, the 1st %v: EnsureSnapshot grows with the number of snapshots", last, first)
		}
	}
}

// snapshotTimes returns the median time of a volume's first snapshot and of its
// 255th (and on), over rounds.
func snapshotTimes(t testing.TB, b *Backend, quota bool, rounds int) (first, last time.Duration) {
	ctx := context.Background()
	tag := "q"
	if !quota {
		tag = "n"
	}
	many := "many" + tag
	mkSnapVolume(t, b, many, quota)
	for i := range 254 {
		// A little change between snapshots, as a live volume has.
		os.WriteFile(filepath.Join(b.MountPath(many), "f"), []byte(fmt.Sprint(i)), 0o644)
		if err := b.EnsureSnapshot(ctx, many, fmt.Sprintf("s%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var d1, d255 []time.Duration
	for i := range rounds {
		few := fmt.Sprintf("few%s%d", tag, i)
		mkSnapVolume(t, b, few, quota)
		d1 = append(d1, timeSnapshot(t, b, few, "s000"))
		d255 = append(d255, timeSnapshot(t, b, many, fmt.Sprintf("t%03d", i)))
		if err := b.DeleteVolume(ctx, few); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteVolume(ctx, many); err != nil {
		t.Fatal(err)
	}
	return median(d1), median(d255)
}

// mkSnapVolume makes a volume holding 16 MiB, with or without quota groups.
func mkSnapVolume(t testing.TB, b *Backend, key string, quota bool) {
	mkVolume(t, b, key, 256<<20, nil)
	if err := writeRandom(filepath.Join(b.MountPath(key), "data"), 16<<20); err != nil {
		t.Fatal(err)
	}
	if !quota {
		if _, err := b.btrfs(context.Background(), "quota", "disable", b.fsPath(key)); err != nil {
			t.Fatal(err)
		}
	}
}

// timeSnapshot times one EnsureSnapshot, after a small write.
func timeSnapshot(t testing.TB, b *Backend, key, snap string) time.Duration {
	os.WriteFile(filepath.Join(b.MountPath(key), "f"), []byte(snap), 0o644)
	start := time.Now()
	if err := b.EnsureSnapshot(context.Background(), key, snap); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkEnsureSnapshot reports the median time of a volume's 1st and 255th
// snapshot, with and without quota groups (run with -benchtime=1x: each
// iteration makes its own volumes).
func BenchmarkEnsureSnapshot(bm *testing.B) {
	skipUnlessRoot(bm)
	dir := bm.TempDir()
	b := New(Options{DataDir: dir, ImageSize: 4 << 30})
	if err := b.Start(context.Background()); err != nil {
		bm.Fatal(err)
	}
	defer func() { b.Stop(context.Background()); assertNothingLeft(bm, dir) }()
	for _, quota := range []bool{true, false} {
		bm.Run(fmt.Sprintf("quota=%v", quota), func(bm *testing.B) {
			for range bm.N {
				first, last := snapshotTimes(bm, b, quota, 9)
				bm.ReportMetric(float64(first.Microseconds()), "µs-1st")
				bm.ReportMetric(float64(last.Microseconds()), "µs-255th")
			}
		})
	}
}
