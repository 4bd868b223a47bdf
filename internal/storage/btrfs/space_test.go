package btrfs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/storage"
)

// smallFS mounts a filesystem of size bytes (ext4 in an image on a loop device,
// like a small disk) on a new directory and returns it.
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	skipUnlessRoot(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "disk")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := createSparse(img, size); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"mkfs.ext4", "-q", "-m", "0", img}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	return mnt
}

// fillRandom fills buf (a multiple of 8 bytes long) from r, eight bytes a
// call: a byte a call cost 20 s of CPU per test filling a 4 GiB store.
func fillRandom(buf []byte, r *rand.Rand) {
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
	}
}

// fillFile writes random data to path in 1 MiB writes until the filesystem
// refuses more or max bytes are written, syncing as it goes, and returns how many
// bytes it was told were written (and synced), their SHA-256 and the error that
// stopped it (nil if max was reached).
func fillFile(path string, max int64, seed uint64) (int64, [32]byte, error) {
	var sum [32]byte
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, sum, err
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(seed, seed))
	buf := make([]byte, 1<<20)
	h := sha256.New()
	var n int64
	for n < max {
		fillRandom(buf, r)
		w, err := f.Write(buf)
		if err == nil && (n+int64(w))%(32<<20) == 0 {
			err = f.Sync()
		}
		if err != nil {
			// What was written since the last sync is not known to be on disk:
			// count only what a final sync confirms.
			if serr := f.Sync(); serr == nil {
				h.Write(buf[:w])
				n += int64(w)
			} else {
				// Truncate to what is known good.
				f.Truncate(n) //nolint:errcheck // best effort; the check reads n bytes
			}
			copy(sum[:], h.Sum(nil))
			return n, sum, err
		}
		h.Write(buf[:w])
		n += int64(w)
	}
	if err := f.Sync(); err != nil {
		copy(sum[:], h.Sum(nil))
		return n, sum, err
	}
	copy(sum[:], h.Sum(nil))
	return n, sum, nil
}

// hashPrefix returns the SHA-256 of path's first n bytes.
func hashPrefix(path string, n int64) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, n); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

func isReadOnly(t *testing.T, path string) bool {
	t.Helper()
	return statfs(t, path).Flags&unix.ST_RDONLY != 0
}

// Volumes the store accepted are really there: every one of them can be filled to
// its capacity, each write it acknowledged is on disk after a restart, and no
// volume (nor the store) fails or turns read-only because another filled up. A
// volume the store cannot hold is refused when it is made, not when it is written.
func TestAcceptedVolumesAreReallyThere(t *testing.T) {
	skipUnlessRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	b := startBackend(t, Options{DataDir: dir, ImageSize: 2 << 30}, dir)
	// Ask for 6 × 512 MiB on a 2 GiB store: some must be refused, at creation.
	var made []string
	var refused error
	for i := range 6 {
		key := fmt.Sprintf("v%d", i)
		if err := b.EnsureVolume(ctx, key, 512<<20, nil); err != nil {
			refused = err
			if _, serr := os.Stat(b.imagePath(key)); serr == nil {
				t.Errorf("refused volume %s left an image: %v", key, err)
			}
			break
		}
		if err := b.SetMode(ctx, key, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := b.Mount(ctx, key); err != nil {
			t.Fatal(err)
		}
		made = append(made, key)
	}
	if refused == nil {
		t.Errorf("6 volumes of 512 MiB accepted on a 2 GiB store")
	} else if !errors.Is(refused, storage.ErrStoreFull) {
		t.Errorf("refusal = %v, want ErrStoreFull", refused)
	}
	type written struct {
		n   int64
		sum [32]byte
	}
	got := map[string]written{}
	for i, key := range made {
		n, sum, err := fillFile(filepath.Join(b.MountPath(key), "fill"), 1<<30, uint64(i+1))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("filling %s stopped with %v after %d MiB, want ENOSPC (its own capacity)", key, err, n>>20)
		}
		// A volume holds nearly its capacity (btrfs metadata takes a little).
		if n < 400<<20 {
			t.Errorf("volume %s of 512 MiB took only %d MiB", key, n>>20)
		}
		got[key] = written{n, sum}
	}
	for _, key := range made {
		if isReadOnly(t, b.MountPath(key)) {
			t.Errorf("volume %s turned read-only", key)
		}
	}
	if isReadOnly(t, b.top) {
		t.Error("the store turned read-only")
	}
	// Restart: what each volume acknowledged reads back from disk.
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range made {
		if err := b.Mount(ctx, key); err != nil {
			t.Fatalf("mount %s after restart: %v", key, err)
		}
		sum, err := hashPrefix(filepath.Join(b.MountPath(key), "fill"), got[key].n)
		if err != nil || sum != got[key].sum {
			t.Errorf("volume %s: the %d MiB it acknowledged do not read back (%v)", key, got[key].n>>20, err)
		}
	}
}

// A store image larger than the free space of the filesystem it lives on is
// refused at start, saying how much there is and what to do; without a size, the
// store is sized from that free space, and is really allocated.
func TestStoreSizedFromItsFilesystem(t *testing.T) {
	disk := smallFS(t, 2<<30)
	ctx := context.Background()
	b := New(Options{DataDir: filepath.Join(disk, "big"), ImageSize: 64 << 30})
	err := b.Start(ctx)
	if err == nil {
		b.Stop(ctx)
		t.Fatal("a 64 GiB store started on a 2 GiB filesystem")
	}
	for _, want := range []string{"--store-size", "free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %q", err, want)
		}
	}
	if _, serr := os.Stat(filepath.Join(disk, "big", "store.img")); serr == nil {
		t.Error("a refused start left a store image")
	}
	dir := filepath.Join(disk, "auto")
	b = New(Options{DataDir: dir})
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start with the store sized from the filesystem: %v", err)
	}
	defer func() {
		if err := b.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "store.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size > 2<<30 || st.Size < 1<<30 {
		t.Errorf("store sized %d bytes on a 2 GiB filesystem", st.Size)
	}
	if st.Blocks*512 < st.Size {
		t.Errorf("store image of %d bytes has only %d allocated: the host filesystem could take it back", st.Size, st.Blocks*512)
	}
	// The database and logs keep room beside it.
	if free := statfs(t, disk); int64(free.Bavail)*free.Bsize < hostReserve {
		t.Errorf("the store left %d bytes free on its filesystem, want at least %d", int64(free.Bavail)*free.Bsize, int64(hostReserve))
	}
}

// A volume written until it refuses more can still take a snapshot, be grown,
// have a file deleted and take another snapshot.
func TestFullVolumeStillWorks(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "vf", 512<<20, nil)
	mp := b.MountPath("vf")
	if _, _, err := fillFile(filepath.Join(mp, "a"), 256<<20, 1); err != nil {
		t.Fatal(err)
	}
	n, sum, err := fillFile(filepath.Join(mp, "b"), 1<<30, 2)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill: %v", err)
	}
	if err := b.EnsureSnapshot(ctx, "vf", "full"); err != nil {
		t.Fatalf("snapshot of a full volume: %v", err)
	}
	if err := b.Resize(ctx, "vf", 768<<20); err != nil {
		t.Fatalf("grow a full volume: %v", err)
	}
	if err := os.Remove(filepath.Join(mp, "a")); err != nil {
		t.Fatalf("delete a file: %v", err)
	}
	if err := b.EnsureSnapshot(ctx, "vf", "after"); err != nil {
		t.Fatalf("second snapshot: %v", err)
	}
	if err := b.MountSnapshot(ctx, "vf", "full"); err != nil {
		t.Fatal(err)
	}
	if got, err := hashPrefix(filepath.Join(b.SnapshotMountPath("vf", "full"), "b"), n); err != nil || got != sum {
		t.Errorf("the snapshot of the full volume does not hold what was written: %v", err)
	}
	if st, err := b.ObserveVolume(ctx, "vf"); err != nil || st.CapacityBytes != 768<<20 {
		t.Errorf("capacity observed %d (%v), want 768 MiB", st.CapacityBytes, err)
	}
	if w := statfs(t, mp); int64(w.Blocks)*w.Bsize < 768<<20 {
		t.Errorf("df shows %d bytes after growing to 768 MiB", int64(w.Blocks)*w.Bsize)
	}
}

// With thin provisioning, volumes may be promised more than the store holds:
// their filesystems grow as they fill while the store has room, and when it has
// none a volume's own filesystem refuses more with ENOSPC. Nothing acknowledged
// is lost, no filesystem turns read-only, and the store and the volume say why.
func TestThinVolumesRefuseCleanlyWhenTheStoreIsFull(t *testing.T) {
	skipUnlessRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	b := startBackend(t, Options{DataDir: dir, ImageSize: 4 << 30, Thin: true, WatchInterval: 50 * time.Millisecond}, dir)
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { b.Run(runCtx); close(ran) }()
	defer func() { stopRun(); <-ran }()
	keys := []string{"t0", "t1", "t2"}
	for _, key := range keys {
		mkVolume(t, b, key, 3<<30, nil) // 9 GiB promised on a 4 GiB store
		st, err := b.ObserveVolume(ctx, key)
		if err != nil || st.CapacityBytes != 3<<30 {
			t.Fatalf("capacity of thin %s observed %d (%v), want 3 GiB", key, st.CapacityBytes, err)
		}
		if fs := statfs(t, b.MountPath(key)); int64(fs.Blocks)*fs.Bsize >= 3<<30 {
			t.Fatalf("thin volume %s starts with its whole capacity", key)
		}
	}
	n0, sum0, err := fillFile(filepath.Join(b.MountPath("t0"), "fill"), 3<<30, 1)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling t0: %v after %d MiB, want ENOSPC", err, n0>>20)
	}
	if n0 < 1200<<20 {
		t.Errorf("t0 took %d MiB: its filesystem did not grow past its first 1 GiB", n0>>20)
	}
	n1, sum1, err := fillFile(filepath.Join(b.MountPath("t1"), "fill"), 3<<30, 2)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling t1: %v after %d MiB, want ENOSPC", err, n1>>20)
	}
	for _, key := range keys {
		if isReadOnly(t, b.MountPath(key)) {
			t.Errorf("volume %s turned read-only", key)
		}
	}
	if isReadOnly(t, b.top) {
		t.Error("the store turned read-only")
	}
	r, err := b.StoreReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.ShortBytes <= 0 || !strings.Contains(r.Note, "thin provisioning") {
		t.Errorf("store report %+v: no shortfall said", r)
	}
	waitFor(t, func() bool { return b.Note("t1") != "" }, "t1's note that it cannot grow")
	if note := b.Note("t1"); !strings.Contains(note, "refused") {
		t.Errorf("t1's note %q does not say writes are refused", note)
	}
	stopRun()
	<-ran
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for key, w := range map[string]struct {
		n   int64
		sum [32]byte
	}{"t0": {n0, sum0}, "t1": {n1, sum1}} {
		if err := b.Mount(ctx, key); err != nil {
			t.Fatal(err)
		}
		if sum, err := hashPrefix(filepath.Join(b.MountPath(key), "fill"), w.n); err != nil || sum != w.sum {
			t.Errorf("volume %s: the %d MiB it acknowledged do not read back (%v)", key, w.n>>20, err)
		}
	}
}

// A clone shares its source's data: what rewriting the shared extents would take
// is kept free in the store, so neither the clone nor its source can be starved.
func TestCloneDebtIsKept(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "src", 512<<20, nil)
	if err := writeRandom(filepath.Join(b.MountPath("src"), "a"), 200<<20); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureSnapshot(ctx, "src", "s"); err != nil {
		t.Fatal(err)
	}
	_, before, err := b.StoreSpace(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mkVolume(t, b, "cl", 512<<20, &storage.SnapshotRef{VolumeKey: "src", Snapshot: "s"})
	_, after, err := b.StoreSpace(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The clone's blocks that are not shared are allocated to it, and the
	// store keeps twice what is shared (the clone's rewrite and the source's):
	// 512 MiB and the 200 MiB shared, at least.
	if taken := before - after; taken < 512<<20+200<<20 {
		t.Errorf("a clone sharing 200 MiB took %d MiB of what the store can give, want at least 712", taken>>20)
	}
	b.refreshDebt()
	if d := b.sharedDebt(); d < 2*200<<20 {
		t.Errorf("debt mapped %d MiB, want at least 400", d>>20)
	}
	// Rewriting the clone's data whole pays the debt down.
	if err := writeRandom(filepath.Join(b.MountPath("cl"), "a"), 200<<20); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVolume(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	b.refreshDebt()
	if d := b.sharedDebt(); d != 0 {
		t.Errorf("debt %d bytes after the source is gone", d)
	}
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for range 200 {
		if ok() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A clone smaller than its source fits a store that could not hold the source's
// size twice: only what the clone ends with is taken (and what it shares).
func TestCloneSmallerThanItsSource(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	mkVolume(t, b, "big", 1<<30, nil) // of a 2 GiB store
	if err := writeRandom(filepath.Join(b.MountPath("big"), "a"), 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureSnapshot(ctx, "big", "s"); err != nil {
		t.Fatal(err)
	}
	mkVolume(t, b, "small", 256<<20, &storage.SnapshotRef{VolumeKey: "big", Snapshot: "s"})
	if st, err := b.ObserveVolume(ctx, "small"); err != nil || st.CapacityBytes != 256<<20 {
		t.Fatalf("clone's capacity %d (%v), want 256 MiB", st.CapacityBytes, err)
	}
	if size, allocated, err := fileSize(b.imagePath("small")); err != nil || size != 256<<20 || allocated < size {
		t.Errorf("clone's image %d bytes, %d allocated (%v): want 256 MiB, all allocated", size, allocated, err)
	}
	b.acct.mu.Lock()
	pending := len(b.acct.pending)
	b.acct.mu.Unlock()
	if pending != 0 {
		t.Errorf("%d reservations left after the clone", pending)
	}
}

// A deleted volume's space is free the moment the delete returns: btrfs gives
// a removed file's extents back only when its transaction commits (up to 30 s
// later), and a pool or volume made right after a delete, as a script does,
// was refused for want of the room just freed.
func TestDeletedVolumeSpaceIsFreeAtOnce(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	_, free, err := b.StoreSpace(ctx)
	if err != nil {
		t.Fatal(err)
	}
	size := (free - 64<<20) &^ (64<<20 - 1)
	for i := range 2 {
		mkVolume(t, b, "vd", size, nil)
		if err := b.DeleteVolume(ctx, "vd"); err != nil {
			t.Fatal(err)
		}
		if _, after, err := b.StoreSpace(ctx); err != nil || after < size {
			t.Fatalf("round %d: %s free right after deleting a volume of %s (%v), %s before", i, gibs(after), gibs(size), err, gibs(free))
		}
	}
}

// A new thin volume's filesystem has more free space than the slack the
// watcher keeps, so it is not grown before anything is written to it; once it
// has grown, its slack grows with it, and a grow (to used + 2 × slack) adds
// at most the larger of its start and its size.
func TestThinSlackFitsANewVolume(t *testing.T) {
	for _, c := range []struct{ nominal, usable, initial, size, want int64 }{
		{20 << 30, 100 << 30, 1 << 30, 1 << 30, 512 << 20},  // an eighth of 20 GiB, held to half the start
		{1 << 40, 1 << 40, 1 << 30, 1 << 30, 512 << 20},     // idem for 1 TiB
		{2 << 30, 100 << 30, 1 << 30, 1 << 30, 256 << 20},   // the 256 MiB floor
		{20 << 30, 4 << 30, 128 << 20, 128 << 20, 64 << 20}, // a 128 MiB start on a 4 GiB store
		{20 << 30, 4 << 30, 64 << 20, 64 << 20, 32 << 20},   // a 64 MiB start
		{20 << 30, 4 << 30, 32 << 20, 32 << 20, 16 << 20},   // the smallest start
		{20 << 30, 1 << 30, 8 << 30, 8 << 30, 256 << 20},    // a small store: a 32nd of it, at least 256 MiB
		{200 << 30, 1 << 40, 64 << 30, 64 << 30, 8 << 30},   // the 8 GiB cap
		// Grown past its start: half the size now, no longer half the start.
		{20 << 30, 4 << 30, 32 << 20, 256 << 20, 128 << 20}, // a 32 MiB start grown to btrfs's 256 MiB floor
		{20 << 30, 4 << 30, 32 << 20, 512 << 20, 256 << 20}, // and on: an eighth of the capacity, 256 MiB at least
		{20 << 30, 100 << 30, 1 << 30, 4 << 30, 2 << 30},    // a 1 GiB start grown to 4 GiB: half of it
		{200 << 30, 1 << 40, 1 << 30, 64 << 30, 8 << 30},    // the 8 GiB cap still holds
	} {
		got := thinSlack(c.nominal, c.usable, c.initial, c.size)
		if got != c.want {
			t.Errorf("thinSlack(%s, %s, %s, %s) = %s, want %s", gibs(c.nominal), gibs(c.usable), gibs(c.initial), gibs(c.size), gibs(got), gibs(c.want))
		}
		if c.size == c.initial && got > c.initial/2 {
			t.Errorf("slack %s exceeds half of a new volume's %s", gibs(got), gibs(c.initial))
		}
		// The watcher grows a volume short of slack to used + 2 × slack, used < size.
		if grow := c.size + 2*got; grow > c.size+max(c.size, c.initial, 32<<20) {
			t.Errorf("a full volume of %s would grow to %s, more than its size or start more", gibs(c.size), gibs(grow))
		}
	}
}

// Thin starts below 256 MiB, the smallest size the kernel grows btrfs to: many
// idle volumes cost their start each, none is grown while it is empty, and one
// that is written grows (to 256 MiB first) and takes more than it started with.
func TestSmallThinStarts(t *testing.T) {
	skipUnlessRoot(t)
	for _, start := range []int64{32 << 20, 64 << 20} {
		t.Run(fmt.Sprintf("%dMiB", start>>20), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			b := startBackend(t, Options{DataDir: dir, ImageSize: 1 << 30, Thin: true, ThinInitial: start, WatchInterval: 50 * time.Millisecond}, dir)
			runCtx, stopRun := context.WithCancel(ctx)
			ran := make(chan struct{})
			go func() { b.Run(runCtx); close(ran) }()
			defer func() { stopRun(); <-ran }()
			keys := make([]string, 8)
			for i := range keys {
				keys[i] = fmt.Sprintf("s%02d", i)
				mkVolume(t, b, keys[i], 1<<30, nil) // 8 GiB promised on a 1 GiB store
			}
			size := func(key string) int64 {
				n, _, err := b.space(key)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			time.Sleep(20 * 50 * time.Millisecond) // twenty watcher passes
			for _, key := range keys {
				if got := size(key); got > start {
					t.Errorf("empty thin volume %s has a %d MiB filesystem, want %d MiB at most", key, got>>20, start>>20)
				}
			}
			first := start * 5 / 8 // past the slack (half the start): the watcher grows it
			if n, _, err := fillFile(filepath.Join(b.MountPath("s00"), "f"), first, 3); err != nil {
				t.Fatalf("writing %d MiB into a new volume: %v after %d MiB", first>>20, err, n>>20)
			}
			waitFor(t, func() bool { return size("s00") >= minSize }, "s00 to grow to 256 MiB once written")
			if n, _, err := fillFile(filepath.Join(b.MountPath("s00"), "g"), start, 4); err != nil {
				t.Fatalf("writing %d MiB more into the grown volume: %v after %d MiB", start>>20, err, n>>20)
			}
			for _, key := range keys[1:] {
				if got := size(key); got > start {
					t.Errorf("empty thin volume %s grew to %d MiB beside a written one", key, got>>20)
				}
			}
		})
	}
}
