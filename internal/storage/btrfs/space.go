package btrfs

// Space that is promised is there. Two layers can fail a write that a volume's
// capacity allows, and each is closed by allocating for real, not by counting:
//
//   - The store image on the data directory's filesystem: it is allocated in full
//     (fallocate, copy-on-write off where the host is btrfs) when it is made, and
//     again at every start, so nothing else on the host can take its blocks. A
//     store larger than that filesystem's free space, less hostReserve kept for
//     the database and logs, is refused; without a size it is sized from it.
//   - Volume images in the store: each is allocated up to its filesystem's size
//     (fallocate; images are NOCOW, so writes land in place), the whole capacity
//     for a volume made thick (the default). An allocation the store cannot make
//     without touching what it keeps is refused (storage.ErrStoreFull) before
//     anything is made.
//
// What the store keeps, and never hands to volumes: room for its own metadata
// (writes into preallocated extents split them; metaKeep), the reserve (the
// headroom a full volume borrows to take a snapshot, and slack), and the
// copy-on-write debt of clones: a clone shares its source's written extents
// (reflinks, so a clone is instant), and overwriting a shared extent takes new
// space; the debt is every shared byte of every image, refreshed with FIEMAP.
//
// Neither layer may be punched: volumes and the store are mounted nodiscard and
// their loop devices refuse discard, or a trim would give back blocks a volume
// was promised.
//
// A full volume: its filesystem is its capacity, so it refuses writes with ENOSPC
// once full, as a volume should; but btrfs then also refuses a snapshot (which
// needs a little metadata). EnsureSnapshot then grows the filesystem by
// headroomBytes, taken from the reserve, and takes it; the watcher gives the
// headroom back once the volume has room again.
//
// Thin provisioning (Options.Thin, --overcommit-ratio above 1): a volume's
// filesystem starts smaller than its capacity and the watcher (Run) grows it as it
// fills, while the store has room. When the store has none, the volume's own
// filesystem refuses writes past its current size with a clean ENOSPC: nothing
// written is ever lost, and no volume turns read-only. Why a volume cannot grow is
// its Note, for the controller to show.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/storage"
)

const (
	// hostReserve is what the store image leaves free on the filesystem it lives
	// on, for the database and logs beside it.
	hostReserve = 256 << 20
	// maxAutoStoreSize bounds a store sized from its filesystem's free space.
	maxAutoStoreSize = 64 << 30
	// minStoreSize is the smallest store Basin makes.
	minStoreSize = 1 << 30
	// storeSizeStep rounds a store sized from free space down.
	storeSizeStep = 256 << 20
	// headroomBytes is what a full volume's filesystem grows by, from the store's
	// reserve, to take a snapshot.
	headroomBytes = 64 << 20
	// nominalXattr holds a volume's capacity on its image: its filesystem may be
	// smaller (thin) or, while it borrows headroom, larger.
	nominalXattr = "user.basin.capacity"
	// sharedXattr marks an image that may share extents with another (a clone or
	// its source): only those are mapped to count the copy-on-write debt.
	sharedXattr = "user.basin.shared"
	// giveBackEvery is how often the watcher tries to shrink a volume's filesystem
	// back from borrowed headroom.
	giveBackEvery = time.Minute
	// debtEvery is how often the watcher maps shared images again.
	debtEvery = 30 * time.Second
)

// spaceState is the store's accounting, kept by the Backend.
type spaceState struct {
	mu     sync.Mutex       // serialises allocations from the store
	shared map[string]int64 // volume key → bytes its image shares with another
	added  map[string]int64 // shared bytes added while refreshDebt maps (nil when it does not)
	// pending is space reserved for an image being made that writes into its
	// holes before they are allocated to it (a clone), by image path.
	pending map[string]int64
	notes   map[string]string
	// giveBack is when each volume last tried to give headroom back.
	giveBack map[string]time.Time
	lastDebt time.Time
	// storeNote is the store report's last note, read every storeNoteEvery.
	storeNote     string
	lastStoreNote time.Time
}

// StoreReport is the store's space as the backend accounts it.
type StoreReport struct {
	// SizeBytes is the store filesystem's size.
	SizeBytes int64
	// UsableBytes is what pools may commit at an overcommit ratio of 1: the size
	// less the store's own overhead, what it keeps for its metadata and the
	// reserve.
	UsableBytes int64
	// FreeBytes is the store filesystem's free space.
	FreeBytes int64
	// AllocatableBytes is what volumes may still be given (free space less
	// what the store keeps).
	AllocatableBytes int64
	// ReserveBytes is the reserve; MetadataBytes what is kept for the store's own
	// metadata; SharedBytes the clones' copy-on-write debt.
	ReserveBytes, MetadataBytes, SharedBytes int64
	// PromisedBytes is Σ capacity of the volumes; ProvisionedBytes Σ the size of
	// their filesystems (less than PromisedBytes only with thin provisioning).
	PromisedBytes, ProvisionedBytes int64
	// ShortBytes is what thin volumes were promised beyond what the store can
	// still give them (0 when every promise can be kept).
	ShortBytes int64
	// Thin reports thin provisioning.
	Thin bool
	// Note says, in plain words, what is wrong with the store's space ("" if
	// nothing).
	Note string
}

// hostFree returns the free space of the filesystem holding path (as an
// unprivileged process sees it: reserved blocks are not the database's).
func hostFree(path string) (free, size int64, err error) {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return 0, 0, err
	}
	return int64(s.Bavail) * s.Bsize, int64(s.Blocks) * s.Bsize, nil
}

// gibs formats bytes for a message.
func gibs(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", b>>30)
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
}

// storeImageSize decides the size of a new store image in dir, from
// Options.ImageSize and the free space of dir's filesystem.
func (b *Backend) storeImageSize(dir string) (int64, error) {
	free, _, err := hostFree(dir)
	if err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	room := free - hostReserve
	if want := b.opts.ImageSize; want > 0 {
		if want > room {
			return 0, fmt.Errorf("--store-size %s does not fit on the filesystem of %s: it has %s free, and %s stays free for the database and logs; "+
				"pass --store-size %s or less, or put --data-dir (or --store) on a larger filesystem",
				gibs(want), dir, gibs(free), gibs(hostReserve), gibs(max(room, 0)/storeSizeStep*storeSizeStep))
		}
		return want, nil
	}
	size := min(room, maxAutoStoreSize) / storeSizeStep * storeSizeStep
	if size < minStoreSize {
		return 0, fmt.Errorf("the filesystem of %s has %s free: too little for a store of at least %s beside %s for the database and logs; "+
			"free space, or put --data-dir (or --store) on a larger filesystem", dir, gibs(free), gibs(minStoreSize), gibs(hostReserve))
	}
	return size, nil
}

// allocateFile makes sure path's first size bytes are allocated on its
// filesystem (extending it to size if shorter). ENOSPC is storage.ErrStoreFull.
func allocateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return fmt.Errorf("allocate %s for %s: %w", gibs(size), path, storage.ErrStoreFull)
		}
		return fmt.Errorf("allocate %s for %s: %w", gibs(size), path, err)
	}
	return nil
}

// createImage creates path (which must not exist) as a NOCOW file of size bytes,
// allocated in full.
func createImage(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	setNoCOW(f) // before any data: btrfs takes the flag only on an empty file
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return fmt.Errorf("allocate %s: %w", gibs(size), storage.ErrStoreFull)
		}
		return fmt.Errorf("allocate %s: %w", gibs(size), err)
	}
	return nil
}

// fsNoCOW is FS_NOCOW_FL.
const fsNoCOW = 0x00800000

// setNoCOW turns copy-on-write off for an empty file on btrfs (elsewhere it is a
// no-op): writes then land in the blocks allocated for them.
func setNoCOW(f *os.File) {
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return
	}
	v := int(flags | fsNoCOW)
	unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, v) //nolint:errcheck // not every filesystem has the flag
}

// noDiscard makes a loop device refuse discard requests, so that a filesystem on
// it (or fstrim) never punches holes in its image.
func noDiscard(dev string) {
	p := filepath.Join("/sys/block", filepath.Base(dev), "queue", "discard_max_bytes")
	os.WriteFile(p, []byte("0"), 0) //nolint:errcheck // a device without discard has nothing to turn off
}

// nominal returns the capacity recorded on a volume's image, or ok false.
func nominal(img string) (int64, bool) {
	buf := make([]byte, 32)
	n, err := unix.Getxattr(img, nominalXattr, buf)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(string(buf[:n]), 10, 64)
	return v, err == nil && v > 0
}

func setNominal(img string, size int64) error {
	if err := unix.Setxattr(img, nominalXattr, []byte(strconv.FormatInt(size, 10)), 0); err != nil {
		return fmt.Errorf("record the capacity of %s: %w", filepath.Base(img), err)
	}
	return nil
}

// fileSize returns a file's size and allocated bytes.
func fileSize(path string) (size, allocated int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Size, st.Blocks * 512, nil
}

// thinSlack is the free space the watcher keeps in a thin volume's filesystem of
// capacity nominal, now size bytes, on a store of usable bytes, volumes starting
// at initial bytes: an eighth of the capacity, at least 256 MiB, at most 8 GiB
// or a 32nd of the store (so that one volume's slack never takes a small
// store), and never more than half of the larger of initial and size (16 MiB
// at least). Half of initial: a slack larger than a new volume's free space grew
// every new volume at once, empty, to twice the slack (a 128 MiB start became
// 513 MiB), which made --thin-initial moot. Half of size, once the volume has
// grown past its start: held to half the start for good, a 32 MiB start kept
// 16 MiB of slack and grew 32 MiB a pass, slower than a client writes. With
// both, a grow to used + 2 × slack adds at most the larger of the start and the
// size now (past btrfs's 256 MiB floor, which a first grow goes to anyway).
func thinSlack(nominal, usable, initial, size int64) int64 {
	half := max(initial/2, size/2, 16<<20)
	s := min(max(nominal/8, 256<<20), max(256<<20, min(8<<30, usable/32)))
	return min(s, half)
}

// defaultThinInitial is the largest filesystem a thin volume starts with: a
// volume up to that size is provisioned whole.
const defaultThinInitial = 1 << 30

// initialFS is the size of a new volume's filesystem: the capacity or, with thin
// provisioning, at most Options.ThinInitial.
func (b *Backend) initialFS(nominal int64) int64 {
	if !b.opts.Thin {
		return nominal
	}
	return min(nominal, b.opts.ThinInitial)
}

// allocatable is what the store can still give volumes for good. The caller
// holds acct.mu.
func (b *Backend) allocatable() int64 {
	total, free, err := b.storeSize()
	if err != nil {
		return 0
	}
	return max(free-b.keep(total, false, ""), 0)
}

// metaKeep is what the store keeps for its own metadata: 2 % of it and 64 MiB
// (twice that on a store whose metadata chunks are apart from data, DUP).
func (b *Backend) metaKeep(size int64) int64 {
	k := size/50 + 64<<20
	if b.loop != "" && !b.storeMixed() {
		k *= 2
	}
	return k
}

// reserve is the store's reserve for a store of size bytes.
func (b *Backend) reserve(size int64) int64 {
	switch r := b.opts.Reserve; {
	case r < 0:
		return 0
	case r > 0:
		return r
	}
	return min(max(size/20, 128<<20), 4<<30)
}

// storeMixed reports whether the image store has mixed block groups.
func (b *Backend) storeMixed() bool {
	uuid, err := fsidOf(b.top)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join("/sys/fs/btrfs", uuid, "allocation", "mixed"))
	if err == nil {
		return true
	}
	// Older kernels: no data directory beside a mixed one.
	_, err = os.Stat(filepath.Join("/sys/fs/btrfs", uuid, "allocation", "data"))
	return err != nil
}

// storeOverhead is what the image store's own filesystem takes off its size
// before any data: its system chunks and, unless mixed, its metadata chunks.
func (b *Backend) storeOverhead() int64 {
	uuid, err := fsidOf(b.top)
	if err != nil {
		return 0
	}
	read := func(kind string) int64 {
		data, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", uuid, "allocation", kind, "disk_total"))
		if err != nil {
			return 0
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return v
	}
	o := read("system")
	if !b.storeMixed() {
		o += read("metadata")
	}
	return o
}

// keep is what the store must keep free, beside allocations: its metadata, the
// clones' debt, what images being made reserved (but for, except, the one asking)
// and, unless borrowing from it, the reserve.
func (b *Backend) keep(size int64, borrow bool, except string) int64 {
	k := b.metaKeep(size) + b.sharedDebt()
	for img, n := range b.acct.pending {
		if img != except {
			k += n
		}
	}
	if !borrow {
		k += b.reserve(size)
	}
	return k
}

func (b *Backend) sharedDebt() int64 {
	var d int64
	for _, n := range b.acct.shared {
		d += n
	}
	return d
}

// storeSize returns the store filesystem's size and free space.
func (b *Backend) storeSize() (size, free int64, err error) {
	var s unix.Statfs_t
	if err := unix.Statfs(b.imagesDir(), &s); err != nil {
		return 0, 0, fmt.Errorf("statfs store: %w", err)
	}
	return int64(s.Blocks) * s.Bsize, int64(s.Bavail) * s.Bsize, nil
}

// room refuses to give need more bytes when the store would keep less than it
// must (borrow: the reserve may be used). The caller holds acct.mu.
func (b *Backend) room(img string, need int64, borrow bool) error {
	total, free, err := b.storeSize()
	if err != nil {
		return err
	}
	if k := b.keep(total, borrow, img); free-need < k {
		return fmt.Errorf("%s for %s: the store has %s free and keeps %s: %w",
			gibs(need), filepath.Base(img), gibs(free), gibs(k), storage.ErrStoreFull)
	}
	return nil
}

// grant allocates img up to size bytes from the store, unless that would leave
// the store less than it keeps. The caller holds acct.mu.
func (b *Backend) grant(img string, size int64, borrow bool) error {
	cur, allocated, err := fileSize(img)
	if err != nil {
		return err
	}
	need := size - allocated
	if cur >= size && need <= 0 {
		return nil
	}
	if err := b.room(img, need, borrow); err != nil {
		return err
	}
	if err := allocateFile(img, size); err != nil {
		if cur < size {
			os.Truncate(img, cur) //nolint:errcheck // the allocation failed; leave the size as it was
		}
		return err
	}
	return nil
}

// newImageFile creates img with size bytes granted from the store.
func (b *Backend) newImageFile(img string, size int64) error {
	b.acct.mu.Lock()
	defer b.acct.mu.Unlock()
	if err := b.room(img, size, false); err != nil {
		return err
	}
	return createImage(img, size)
}

// StoreSpace implements storage.Backend: what pools may commit at a ratio of 1
// (the store less its own overhead, what it keeps for its metadata and its
// reserve; a directory store counts its whole filesystem, which it should not
// share), and what volumes may still be given. A statfs and a few sysfs reads.
func (b *Backend) StoreSpace(ctx context.Context) (size, free int64, err error) {
	total, _, err := b.storeSize()
	if err != nil {
		return 0, 0, err
	}
	b.acct.mu.Lock()
	defer b.acct.mu.Unlock()
	return b.usable(total), b.allocatable(), nil
}

// usable is what pools may commit at a ratio of 1 on a store of total bytes.
func (b *Backend) usable(total int64) int64 {
	u := total - b.metaKeep(total) - b.reserve(total)
	if b.loop != "" {
		u -= b.storeOverhead()
	}
	return max(u, 0)
}

// Allocation implements intent.Allocator: what a new volume of capacity bytes
// takes from the store when it is made.
func (b *Backend) Allocation(capacity int64) int64 { return b.initialFS(capacity) }

// StoreReport reports the store's space, and what volumes were promised and
// given: a statfs of the store and of every image.
func (b *Backend) StoreReport(ctx context.Context) (StoreReport, error) {
	total, free, err := b.storeSize()
	if err != nil {
		return StoreReport{}, err
	}
	imgs, _ := filepath.Glob(filepath.Join(b.imagesDir(), "*.img"))
	b.acct.mu.Lock()
	r := StoreReport{SizeBytes: total, FreeBytes: free, Thin: b.opts.Thin, UsableBytes: b.usable(total),
		ReserveBytes: b.reserve(total), MetadataBytes: b.metaKeep(total), SharedBytes: b.sharedDebt(), AllocatableBytes: b.allocatable()}
	b.acct.mu.Unlock()
	var wanted int64
	for _, img := range imgs {
		size, _, err := fileSize(img)
		if err != nil {
			continue
		}
		n, ok := nominal(img)
		if !ok {
			n = size
		}
		r.PromisedBytes += n
		r.ProvisionedBytes += min(size, n)
		wanted += max(n-size, 0)
	}
	r.ShortBytes = max(wanted-r.AllocatableBytes, 0)
	switch {
	case r.ShortBytes > 0:
		r.Note = fmt.Sprintf("thin provisioning: volumes were promised %s more than the store can still give them (%s free for volumes)",
			gibs(r.ShortBytes), gibs(r.AllocatableBytes))
	case b.opts.Thin && wanted > 0 && r.AllocatableBytes < r.UsableBytes/10:
		r.Note = fmt.Sprintf("thin provisioning: the store has %s left for volumes to grow into", gibs(r.AllocatableBytes))
	}
	return r, nil
}

// fiemap.

// fsIocFiemap is FS_IOC_FIEMAP: _IOWR('f', 11, struct fiemap).
const fsIocFiemap = 0xc020660b

const (
	fiemapFlagSync     = 0x1
	fiemapExtentLast   = 0x1
	fiemapExtentUnwrit = 0x800
	fiemapExtentShared = 0x2000
	fiemapBatch        = 256
)

type fiemapExtent struct {
	Logical, Physical, Length uint64
	reserved64                [2]uint64
	Flags                     uint32
	reserved                  [3]uint32
}

type fiemapHeader struct {
	Start, Length                             uint64
	Flags, MappedExtents, ExtentCount, unused uint32
}

type fiemapBuf struct {
	fiemapHeader
	Extents [fiemapBatch]fiemapExtent
}

// extents calls fn for each extent of the file open as fd, in order.
func extents(fd int, fn func(e fiemapExtent)) error {
	var buf fiemapBuf
	var start uint64
	for {
		buf.fiemapHeader = fiemapHeader{Start: start, Length: ^uint64(0) - start, Flags: fiemapFlagSync, ExtentCount: fiemapBatch}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(&buf))); e != 0 {
			return e
		}
		n := int(buf.MappedExtents)
		if n == 0 {
			return nil
		}
		for _, e := range buf.Extents[:n] {
			fn(e)
		}
		last := buf.Extents[n-1]
		if last.Flags&fiemapExtentLast != 0 {
			return nil
		}
		start = last.Logical + last.Length
	}
}

// sharedBytes returns how many bytes of path's extents are shared with another
// file.
func sharedBytes(path string) (int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var n int64
	err = extents(fd, func(e fiemapExtent) {
		if e.Flags&fiemapExtentShared != 0 {
			n += int64(e.Length)
		}
	})
	return n, err
}

// writtenBytes returns how many bytes of path's extents hold data written to
// them (not only allocated): what a clone of it would share.
func writtenBytes(path string) (int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var n int64
	err = extents(fd, func(e fiemapExtent) {
		if e.Flags&fiemapExtentUnwrit == 0 {
			n += int64(e.Length)
		}
	})
	return n, err
}

// cloneWritten makes dst (which must not exist) a copy of src of the same size
// that shares src's written extents (reflinks) and leaves the rest a hole, for
// grant to allocate: sharing src's preallocated, never-written extents would
// count them as debt for nothing. A filesystem that cannot share extents gets a
// copy of the written data. It returns the bytes shared.
func cloneWritten(src, dst string) (int64, error) {
	sf, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer sf.Close()
	fi, err := sf.Stat()
	if err != nil {
		return 0, err
	}
	df, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return 0, err
	}
	defer df.Close()
	setNoCOW(df)
	if err := df.Truncate(fi.Size()); err != nil {
		return 0, err
	}
	var ranges [][2]int64
	if err := extents(int(sf.Fd()), func(e fiemapExtent) {
		if e.Flags&fiemapExtentUnwrit != 0 {
			return // allocated, never written: reads as zeroes
		}
		off, n := int64(e.Logical), int64(e.Length)
		if off+n > fi.Size() {
			n = fi.Size() - off
		}
		if n <= 0 {
			return
		}
		// Adjacent ranges in one call.
		if l := len(ranges); l > 0 && ranges[l-1][0]+ranges[l-1][1] == off {
			ranges[l-1][1] += n
			return
		}
		ranges = append(ranges, [2]int64{off, n})
	}); err != nil {
		return 0, fmt.Errorf("map %s: %w", filepath.Base(src), err)
	}
	var shared int64
	reflink := true
	for _, r := range ranges {
		if reflink {
			err := unix.IoctlFileCloneRange(int(df.Fd()), &unix.FileCloneRange{Src_fd: int64(sf.Fd()),
				Src_offset: uint64(r[0]), Src_length: uint64(r[1]), Dest_offset: uint64(r[0])})
			if err == nil {
				shared += r[1]
				continue
			}
			if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EINVAL) {
				return 0, fmt.Errorf("reflink %s: %w", filepath.Base(src), err)
			}
			reflink = false
		}
		if err := copyRange(df, sf, r[0], r[1]); err != nil {
			return 0, fmt.Errorf("copy %s: %w", filepath.Base(src), err)
		}
	}
	return shared, df.Sync()
}

func copyRange(dst, src *os.File, off, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		m := min(int64(len(buf)), n)
		if _, err := src.ReadAt(buf[:m], off); err != nil {
			return err
		}
		if _, err := dst.WriteAt(buf[:m], off); err != nil {
			return err
		}
		off += m
		n -= m
	}
	return nil
}

// imageKey is the volume key of an image path (key.img or key.img.new).
func imageKey(img string) string {
	return strings.TrimSuffix(strings.TrimSuffix(filepath.Base(img), ".new"), ".img")
}

// markShared records that img may share extents, with n bytes shared now. The
// caller holds space.mu.
func (b *Backend) markShared(img string, n int64) {
	unix.Setxattr(img, sharedXattr, []byte("1"), 0) //nolint:errcheck // the in-memory debt holds until the next start
	b.acct.shared[imageKey(img)] += n
	if b.acct.added != nil {
		b.acct.added[imageKey(img)] += n // a refresh is mapping: keep it on top
	}
}

// refreshDebt maps every image marked shared and records what it shares now;
// an image that shares nothing any more is unmarked. Mapping runs outside
// acct.mu (the API reads the store's space inside its transactions); what a clone
// adds meanwhile is kept on top of what was mapped.
func (b *Backend) refreshDebt() {
	b.acct.mu.Lock()
	b.acct.added = map[string]int64{}
	old := b.acct.shared
	b.acct.mu.Unlock()
	imgs, _ := filepath.Glob(filepath.Join(b.imagesDir(), "*.img*"))
	debt := map[string]int64{}
	for _, img := range imgs {
		if _, err := unix.Getxattr(img, sharedXattr, make([]byte, 8)); err != nil {
			continue
		}
		key := imageKey(img)
		n, err := sharedBytes(img)
		if err != nil {
			// Keep what was counted (the debt only shrinks on its own), or
			// the whole image.
			if n = old[key]; n == 0 {
				_, n, _ = fileSize(img)
			}
		}
		if n == 0 {
			unix.Removexattr(img, sharedXattr) //nolint:errcheck // mapped again next time
			continue
		}
		debt[key] += n
	}
	b.acct.mu.Lock()
	defer b.acct.mu.Unlock()
	for k, n := range b.acct.added {
		debt[k] += n
	}
	b.acct.added = nil
	b.acct.shared = debt
	b.acct.lastDebt = time.Now()
}

// Note returns why a volume's filesystem is not what it was promised ("" if it
// is).
func (b *Backend) note(key string) string {
	b.acct.mu.Lock()
	defer b.acct.mu.Unlock()
	return b.acct.notes[key]
}

func (b *Backend) setNote(key, note string) {
	b.acct.mu.Lock()
	defer b.acct.mu.Unlock()
	if note == "" {
		delete(b.acct.notes, key)
	} else {
		b.acct.notes[key] = note
	}
}
