// Package btrfs is the embedded storage backend: every volume is a btrfs filesystem
// of its own, in a sparse image file on a loop device, and the images live in the
// node store — an existing directory (--store, best on btrfs or XFS so that clones
// are reflinks) or, by default, a btrfs filesystem in DataDir/store.img on a loop
// device that Basin attaches and detaches itself.
//
// One filesystem (superblock) per volume is the tenant-isolation boundary of the
// data path (docs/security.md): a file handle decoded by the kernel cannot name an
// object of another volume, and the volume's capacity is its filesystem's size, so
// clients' df shows it and snapshots count against it.
//
// Layout:
//
//	<store>/basin/images/<key>.img       a volume's filesystem (nodatacow directory)
//	<store>/basin/images/<key>.img.new   a create or clone in progress
//	inside a volume's filesystem, mounted whole and privately on DataDir/fs/<key>:
//	  live                 the volume's data (a subvolume)
//	  snapshots/<snap>     read-only snapshots
//	  retired/revert       live data a revert set aside (only while one runs: one
//	                       operation at a time runs on a volume)
//	DataDir/mounts/<key>         live, nosuid,nodev,noexec: what NFS exports
//	DataDir/mounts/<key>@<snap>  a snapshot, read-only: exported under .snapshot
//	DataDir/mounts/<key>@.snapshot  the snapshot directory (snapdir.go, package localfs), read-only:
//	                             a tmpfs written through DataDir/fs/<key>@.snapshot
//
// Only DataDir/mounts is visible to the data-plane sandboxes.
//
// Observation (observe.go) runs no process: one read of the mount table, then
// stat, statfs, and each snapshot's exclusive bytes from its quota group in sysfs
// (/sys/fs/btrfs/<fsid>/qgroups/0_<subvolid>/exclusive, the subvolume id from
// statx or the INO_LOOKUP ioctl). Start opens (attaches and mounts whole) every
// volume so that observation sees them all. Snapshots are made with the
// SNAP_CREATE_V2 ioctl (ioctl.go); Revert's steps and their recovery are in
// revert.go.
package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/localfs"
)

// Options configures a Backend. The zero value is not usable: DataDir is required.
type Options struct {
	// DataDir holds the image file (if any) and the mount points.
	DataDir string
	// Store is an existing directory to keep volume images in. Empty: a btrfs image
	// file DataDir/store.img of ImageSize bytes on a loop device, mounted on
	// DataDir/store.
	Store string
	// ImageSize is the store image's size; 0 sizes it from the free space of the
	// data directory's filesystem (less hostReserve, at most 64 GiB). A new image
	// larger than that free space is refused. The image is allocated in full
	// (space.go).
	ImageSize int64
	// Thin provisions volumes thin: a volume's filesystem starts smaller than its
	// capacity and grows as it fills, while the store has room (Run). Otherwise
	// (the default) a volume's capacity is allocated when it is made.
	Thin bool
	// ThinInitial is the largest filesystem a thin volume starts with; 0: 1 GiB.
	ThinInitial int64
	// Reserve is store space never given to volumes for good: the headroom a full
	// volume borrows for a snapshot, and slack. 0: 5 % of the store, between
	// 128 MiB and 4 GiB; below 0: none.
	Reserve int64
	// WatchInterval is how often Run looks at the volumes' space; 0: half a second.
	WatchInterval time.Duration
	// Runner runs btrfs, mount, losetup and cp; nil = runner.Exec.
	Runner runner.Runner
	// Logger; nil discards.
	Logger *slog.Logger
}

// Backend implements storage.Backend on btrfs.
type Backend struct {
	opts   Options
	run    runner.Runner
	log    *slog.Logger
	base   string // our tree inside the store
	top    string // where the store filesystem (or the given directory) is
	loop   string // the store's loop device we attached ("" if none)
	mounts string // DataDir/mounts: live and snapshot mount points (shared with sandboxes)
	// fsDir (DataDir/fs) holds each volume's whole filesystem, private to Basin.
	// It is a mount point of its own (a private bind of itself, made by Start and
	// removed by Stop), so tools hide every volume's filesystem in one detach
	// (toolns.go); the daemon does the same for the mounts directory, to share it
	// with sandboxes.
	fsDir string

	mu      sync.Mutex
	started bool
	acct    spaceState // the store's space accounting (space.go)
	// keyMu guards keys: a lock per volume, held by every call that changes a
	// volume's filesystem or image and by the watcher (Run), which skips a
	// volume that is busy.
	keyMu     sync.Mutex
	keys      map[string]*sync.Mutex
	vols      map[string]*volume // opened volumes by key
	failpoint func(op, key, step string) error

	// loops maps image paths to the loop devices backing them: read from sysfs
	// once at Start, then kept by attach and detach, so finding an image's device
	// costs neither a process nor a pass over every loop device (losetup -j
	// queries each: 0.1 s at 1,000 volumes, several times per create).
	loopMu sync.Mutex
	loops  map[string]string

	health healthState // health.go
}

// volume is an opened volume filesystem: attached and mounted whole on fsPath.
type volume struct {
	dev    string // loop device
	uuid   string // filesystem id, names its sysfs directory
	topDev uint64 // st_dev of the mounted top level
}

var _ storage.Backend = (*Backend)(nil)

// New returns a Backend; call Start before use.
func New(opts Options) *Backend {
	if opts.ThinInitial <= 0 {
		opts.ThinInitial = defaultThinInitial
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = 500 * time.Millisecond
	}
	r := opts.Runner
	if r == nil {
		r = runner.Exec{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Absolute, as the mount table names mount points.
	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		dataDir = opts.DataDir
	}
	return &Backend{opts: opts, run: r, log: log, mounts: filepath.Join(dataDir, "mounts"),
		fsDir: filepath.Join(dataDir, "fs"), vols: map[string]*volume{}, keys: map[string]*sync.Mutex{},
		acct: spaceState{shared: map[string]int64{}, pending: map[string]int64{}, notes: map[string]string{}, giveBack: map[string]time.Time{}}}
}

func (b *Backend) btrfs(ctx context.Context, args ...string) ([]byte, error) {
	return b.run.Run(ctx, "btrfs", args...)
}

// runTool runs a program that reads the whole mount table (mkfs.btrfs,
// btrfstune) where the volumes' mounts are hidden (toolns.go).
func (b *Backend) runTool(ctx context.Context, name string, args ...string) error {
	return runHidden(ctx, []string{b.mounts, b.fsDir}, func() error {
		_, err := b.run.Run(ctx, name, args...)
		return err
	})
}

// bindFS makes fsDir a mount point of its own, unless it is one already (left by
// a killed run). Private: the volumes' whole filesystems show nowhere else.
func (b *Backend) bindFS(ctx context.Context) error {
	ok, err := mountinfo.IsMountPoint(b.fsDir)
	if err != nil || ok {
		return err
	}
	if _, err := b.run.Run(ctx, "mount", "--bind", "--make-private", b.fsDir, b.fsDir); err != nil {
		return fmt.Errorf("bind %s: %w", b.fsDir, err)
	}
	return nil
}

// Start attaches and mounts the store if needed (adopting what a previous run left
// attached or mounted) and opens every volume, so that observation, which runs no
// process, sees them all. It is idempotent.
func (b *Backend) Start(ctx context.Context) error {
	if err := b.start(ctx); err != nil {
		return err
	}
	keys, err := b.imageKeys()
	if err != nil {
		return err
	}
	b.refreshDebt()
	// Every image is allocated up to its filesystem's size (images made by an
	// earlier Basin were sparse): what a volume holds is then its own.
	for _, key := range keys {
		img := b.imagePath(key)
		size, allocated, err := fileSize(img)
		if err != nil || allocated >= size {
			continue
		}
		if err := allocateFile(img, size); err != nil {
			b.setNote(key, "this volume's storage is not fully allocated: the node's store is short of space")
			b.log.Error("volume image not fully allocated: the store is short of space, and a write may fail", "volume", key, "err", err)
		}
	}
	// Opened side by side: each open waits mostly on the kernel (attach, mount),
	// and a restart serves nothing until every volume is open.
	var wg sync.WaitGroup
	sem := make(chan struct{}, startParallelism)
	for _, key := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := b.open(ctx, key); err != nil {
				// The volume is reported with an unknown capacity; a mutating
				// call opens it again (or says why it cannot).
				b.log.Warn("cannot open volume", "volume", key, "err", err)
			}
		}()
	}
	wg.Wait()
	return nil
}

// startParallelism is how many volumes Start opens at once.
const startParallelism = 8

func (b *Backend) start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	loops, err := scanLoops() // what a previous run may have left attached
	if err != nil {
		return err
	}
	b.loopMu.Lock()
	b.loops = loops
	b.loopMu.Unlock()
	for _, d := range []string{b.mounts, b.fsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if b.opts.Store != "" {
		b.top = b.opts.Store
		b.base = filepath.Join(b.opts.Store, "basin")
		if fi, err := os.Stat(b.top); err != nil || !fi.IsDir() {
			return fmt.Errorf("store %s is not a directory", b.top)
		}
	} else {
		if err := b.attachStore(ctx); err != nil {
			return err
		}
		b.base = b.top
	}
	if err := refuseOldLayout(b.base); err != nil {
		return err
	}
	if err := os.MkdirAll(b.imagesDir(), 0o700); err != nil {
		return err
	}
	// Images are filesystems with checksums of their own; the store need not copy
	// on write or checksum them again (reflinks still work). Not every store
	// filesystem has the flag: best effort.
	b.run.Run(ctx, "chattr", "+C", b.imagesDir()) //nolint:errcheck // optional
	if err := b.bindFS(ctx); err != nil {
		return err
	}
	b.started = true
	b.log.Info("volume store ready", "images", b.imagesDir())
	return nil
}

// refuseOldLayout stops a start on a store made before volumes had filesystems of
// their own (subvolumes of one shared filesystem): re-creating those volumes empty
// would hide their data. It says how to move on instead.
func refuseOldLayout(base string) error {
	entries, err := os.ReadDir(filepath.Join(base, "volumes"))
	if err != nil || len(entries) == 0 {
		return nil
	}
	return fmt.Errorf("store %s holds %d volume(s) in the shared-filesystem layout of Basin before tenant isolation "+
		"(%s/volumes/<key>); this Basin keeps each volume in a filesystem of its own and will not start on it: "+
		"copy the data out (each subvolume is mountable with subvol=volumes/<key>) and start on an empty store",
		base, len(entries), base)
}

func (b *Backend) attachStore(ctx context.Context) error {
	img := filepath.Join(b.opts.DataDir, "store.img")
	b.top = filepath.Join(b.opts.DataDir, "store")
	if err := os.MkdirAll(b.top, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		size, err := b.storeImageSize(b.opts.DataDir)
		if err != nil {
			return err
		}
		tmp := img + ".new"
		os.Remove(tmp)
		if err := createImage(tmp, size); err != nil {
			return fmt.Errorf("create store image of %s: %w", gibs(size), err)
		}
		// Mixed block groups: the store's metadata (extents of the images,
		// split as volumes write into them) takes what it needs of the free
		// space, never stranded by data chunks that fallocate took.
		if _, err := b.run.Run(ctx, "mkfs.btrfs", "-q", "--mixed", tmp); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("mkfs: %w", err)
		}
		if err := os.Rename(tmp, img); err != nil {
			return err
		}
		b.log.Info("store image made", "size", size, "path", img)
	} else if err == nil {
		// Allocated in full at every start: an image an earlier Basin left
		// sparse, or whose blocks a trim gave back, gets them now or the start
		// says why.
		if size, allocated, err := fileSize(img); err == nil && allocated < size {
			if err := allocateFile(img, size); err != nil {
				free, _, _ := hostFree(b.opts.DataDir)
				if !b.opts.Thin {
					return fmt.Errorf("the store image %s (%s) is not fully allocated and its filesystem has only %s free: "+
						"a volume's write could fail when that filesystem fills; free space on it, or accept the risk with --overcommit-ratio above 1 (thin provisioning)",
						img, gibs(size), gibs(free))
				}
				b.log.Error("store image not fully allocated (thin provisioning): writes may fail when its filesystem fills", "image", img, "free", free, "err", err)
			}
		}
	}
	loop, err := b.attach(ctx, img, false)
	if err != nil {
		return fmt.Errorf("attach store image: %w", err)
	}
	b.loop = loop
	e, mounted, err := mountinfo.Lookup(b.top)
	if err != nil {
		return err
	}
	if mounted && e.Source != loop {
		return fmt.Errorf("store %s is mounted from %s, not from its image's %s", b.top, e.Source, loop)
	}
	if !mounted {
		if _, err := b.run.Run(ctx, "mount", "-t", "btrfs", "-o", "noatime,nosuid,nodev,noexec,nodiscard", loop, b.top); err != nil {
			return fmt.Errorf("mount store: %w", err)
		}
	}
	// Shared, so a mount namespace copied from the host's later (ip netns exec, a
	// service's private /tmp, a test's DC) follows the store's unmount at Stop:
	// on a host whose root is private its copy would otherwise keep the store,
	// and so its loop device, alive for as long as that namespace lives.
	if _, err := b.run.Run(ctx, "mount", "--make-shared", b.top); err != nil {
		return fmt.Errorf("share the store's mount: %w", err)
	}
	return nil
}

func createSparse(path string, size int64) error {
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// attach returns the loop device backing file img, attaching one if there is none
// (a previous, killed run may have left it attached). With directIO the loop device
// reads and writes the image with O_DIRECT, so a volume's data is cached once (by
// its own filesystem), not a second time by the store's: that doubles buffered
// sequential writes (docs/benchmarks.md). A store filesystem that cannot do direct
// I/O gets a buffered loop device instead.
func (b *Backend) attach(ctx context.Context, img string, directIO bool) (string, error) {
	if dev, err := b.loopOf(ctx, img); err != nil || dev != "" {
		return dev, err
	}
	var dev string
	var err error
	if directIO {
		dev, err = attachLoop(img, true)
		if err != nil {
			b.log.Warn("no direct I/O for a volume image; attaching it buffered", "image", img, "err", err)
		}
	}
	if !directIO || err != nil {
		if dev, lerr := b.loopOf(ctx, img); lerr == nil && dev != "" {
			return dev, nil // attached after all, without direct I/O
		}
		dev, err = attachLoop(img, false)
	}
	if err != nil {
		return "", err
	}
	noDiscard(dev)
	b.setLoop(img, dev)
	return dev, nil
}

// scanLoops reads which file backs each loop device, from sysfs.
func scanLoops() (map[string]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	loops := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		if back := strings.TrimSpace(string(data)); back != "" {
			loops[back] = dev
		}
	}
	return loops, nil
}

// loopBacks reports whether loop device dev is backed by img now.
func loopBacks(dev, img string) bool {
	data, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	return err == nil && strings.TrimSpace(string(data)) == img
}

// loopOf returns the loop device backing img ("" if none): from the table, checked
// against the device's own sysfs entry (one small read).
func (b *Backend) loopOf(_ context.Context, img string) (string, error) {
	b.loopMu.Lock()
	defer b.loopMu.Unlock()
	if b.loops == nil {
		loops, err := scanLoops()
		if err != nil {
			return "", fmt.Errorf("find loop device of %s: %w", img, err)
		}
		b.loops = loops
	}
	dev := b.loops[img]
	if dev != "" && !loopBacks(dev, img) {
		delete(b.loops, img) // detached behind our back
		dev = ""
	}
	return dev, nil
}

func (b *Backend) setLoop(img, dev string) {
	b.loopMu.Lock()
	defer b.loopMu.Unlock()
	if b.loops == nil {
		b.loops = map[string]string{}
	}
	if dev == "" {
		delete(b.loops, img)
	} else {
		b.loops[img] = dev
	}
}

// detached reports a losetup -d that found the device already free (ENXIO): an
// autoclear loop lets go of its file when the last reference to its filesystem
// goes, which may be a mount namespace (a Samba instance's holder) that ended
// just before. Nothing is left to detach.
func detached(err error) bool { return runner.StderrContains(err, "No such device or address") }

// detach detaches the loop device backing img.
func (b *Backend) detach(ctx context.Context, img string) error {
	dev, err := b.loopOf(ctx, img)
	if err != nil || dev == "" {
		return err
	}
	if _, err := b.run.Run(ctx, "losetup", "-d", dev); err != nil && !detached(err) {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	b.setLoop(img, "")
	b.waitLoopFree(ctx, dev)
	return nil
}

// loopFreeTimeout bounds waitLoopFree.
const loopFreeTimeout = 3 * time.Second

// waitLoopFree waits a moment for loop device dev to let go of its file.
// `losetup -d` of a device something still holds open only marks it to clear on
// the last close: a mount namespace being torn down (a Samba instance's) lets go
// a moment later, and one that copied the store while its mount was private
// keeps it until that namespace ends. The latter is reported, not fatal: the
// device clears by itself then.
func (b *Backend) waitLoopFree(ctx context.Context, dev string) {
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	deadline := time.Now().Add(loopFreeTimeout)
	for {
		if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.log.Warn("loop device still attached after its detach: another mount namespace holds its filesystem; it clears when that namespace ends",
				"device", dev, "waited", loopFreeTimeout)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Release lets go of the store and its volumes without unmounting anything:
// Basin stops with its data plane serving (the volumes stay mounted and
// exported), and the next Start adopts the store, the loop devices and the
// mounts as it does after a crash.
func (b *Backend) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vols = map[string]*volume{}
	b.started = false
}

// Teardown is Stop without a Start: it unmounts and detaches what an earlier
// Basin left mounted and attached (volumes, snapshots, the volumes' whole
// filesystems, the store and their loop devices), attaching and mounting
// nothing first. The data stays; a later Start serves it again.
func (b *Backend) Teardown(ctx context.Context) error {
	b.mu.Lock()
	if b.opts.Store != "" {
		b.top = b.opts.Store
		b.base = filepath.Join(b.opts.Store, "basin")
	} else {
		b.top = filepath.Join(b.opts.DataDir, "store")
		b.base = b.top
		loops, err := scanLoops()
		if err != nil {
			b.mu.Unlock()
			return err
		}
		b.loop = loops[filepath.Join(b.opts.DataDir, "store.img")]
		if b.loop == "" {
			// An image deleted while attached ("… (deleted)" in sysfs): its
			// loop device is the one the store is mounted from.
			if e, mounted, err := mountinfo.Lookup(b.top); err == nil && mounted && strings.HasPrefix(e.Source, "/dev/loop") {
				b.loop = e.Source
			}
		}
	}
	b.started = true
	b.mu.Unlock()
	return b.Stop(ctx)
}

// Stop unmounts every volume and snapshot and, for an image store, the store
// itself, and detaches the loop devices. It leaves nothing mounted or attached
// that Start or the volumes made.
func (b *Backend) Stop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		return nil
	}
	var errs []error
	var mu sync.Mutex
	// Side by side, like Start: a volume's unmount waits mostly on the kernel.
	each := func(items []string, fn func(string) error) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, startParallelism)
		for _, it := range items {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := fn(it); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	for _, dir := range []string{b.mounts, b.fsDir} {
		entries, err := mountinfo.Under(dir)
		if err != nil {
			errs = append(errs, err)
		}
		var points []string
		for _, e := range entries {
			if e.MountPoint != dir {
				points = append(points, e.MountPoint)
			}
		}
		each(points, func(p string) error {
			if _, err := b.run.Run(ctx, "umount", p); err != nil {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
			return nil
		})
	}
	if err := b.unmountPath(ctx, b.fsDir); err != nil {
		errs = append(errs, err)
	}
	each(b.attachedImages(), func(img string) error { return b.detach(ctx, img) })
	b.vols = map[string]*volume{}
	if b.loop != "" {
		// A volume's loop device lets go of its image (a file in the store) once
		// the last reference to it is dropped, which the kernel may finish just
		// after its detach returned: the store can be busy for a moment.
		var err error
		for range 40 {
			if err = b.unmountPath(ctx, b.top); err == nil || !runner.StderrContains(err, "busy") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, err)
		} else if _, err := b.run.Run(ctx, "losetup", "-d", b.loop); err != nil && !detached(err) {
			errs = append(errs, fmt.Errorf("detach %s: %w", b.loop, err))
		} else {
			b.waitLoopFree(ctx, b.loop)
		}
	}
	b.started = false
	return errors.Join(errs...)
}

func (b *Backend) imagesDir() string           { return filepath.Join(b.base, "images") }
func (b *Backend) imagePath(key string) string { return filepath.Join(b.imagesDir(), key+".img") }
func (b *Backend) newImage(key string) string  { return b.imagePath(key) + ".new" }
func (b *Backend) fsPath(key string) string    { return filepath.Join(b.fsDir, key) }
func (b *Backend) livePath(key string) string  { return filepath.Join(b.fsPath(key), "live") }
func (b *Backend) snapPath(key, snap string) string {
	return filepath.Join(b.fsPath(key), "snapshots", snap)
}

// asidePath is where Revert sets the live data aside: one name per volume, since
// one operation at a time runs on a volume.
func (b *Backend) asidePath(key string) string {
	return filepath.Join(b.fsPath(key), "retired", "revert")
}

// MountPath implements storage.Backend.
func (b *Backend) MountPath(key string) string { return filepath.Join(b.mounts, key) }

// SnapshotMountPath implements storage.Backend: beside the volumes' mount points, so
// sandboxes see it appear.
func (b *Backend) SnapshotMountPath(key, snap string) string {
	return filepath.Join(b.mounts, key+"@"+snap)
}

// open attaches a volume's image and mounts its whole filesystem on fsPath, or
// returns nil if the volume has no (finished) image.
func (b *Backend) open(ctx context.Context, key string) (*volume, error) {
	b.mu.Lock()
	v := b.vols[key]
	b.mu.Unlock()
	// An opened volume is still mounted as it was if its mount point still shows
	// that filesystem's device: a stat, not a parse of the mount table, since
	// every observation of a volume and of each of its snapshots comes here.
	if v != nil && v.topDev != 0 && statDev(b.fsPath(key)) == v.topDev {
		return v, nil
	}
	img := b.imagePath(key)
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	v, err := b.mountWhole(ctx, img, b.fsPath(key))
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", key, err)
	}
	b.mu.Lock()
	b.vols[key] = v
	b.mu.Unlock()
	return v, nil
}

// mountWhole attaches img and mounts its filesystem's top level on dir.
func (b *Backend) mountWhole(ctx context.Context, img, dir string) (*volume, error) {
	dev, err := b.attach(ctx, img, true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// What is mounted there, if anything, costs a few system calls, not a read of
	// the mount table: after a crash every volume's mount is found this way, and a
	// stale mount of an earlier device may be there.
	source, top, mounted, err := topMount(dir)
	if err != nil {
		return nil, err
	}
	if mounted && (!top || source != dev) {
		if err := b.unmountPath(ctx, dir); err != nil {
			return nil, err
		}
		mounted = false
	}
	if !mounted {
		if err := mountBtrfs(dev, dir, "noatime,nosuid,nodev,noexec,nodiscard,subvolid=5"); err != nil {
			return nil, fmt.Errorf("mount %s: %w", img, err)
		}
	}
	uuid, err := fsidOf(dir)
	if err != nil {
		return nil, err
	}
	return &volume{dev: dev, uuid: uuid, topDev: statDev(dir)}, nil
}

// space reads the size and usage of a volume's filesystem.
func (b *Backend) space(key string) (size, used int64, err error) {
	var s unix.Statfs_t
	if err := unix.Statfs(b.fsPath(key), &s); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", key, err)
	}
	return int64(s.Blocks) * s.Bsize, int64(s.Blocks-s.Bfree) * s.Bsize, nil
}

// EnsureVolume implements storage.Backend. The filesystem is made in a ".new" image
// that takes its final name only when complete, so a crash at any point leaves
// either nothing or a whole volume. A volume that exists is left as it is, except
// that live data a cut-short revert set aside is put back.
func (b *Backend) EnsureVolume(ctx context.Context, key string, size int64, from *storage.SnapshotRef) error {
	defer b.lockKey(key)()
	if _, err := os.Stat(b.imagePath(key)); err == nil {
		if _, err := b.open(ctx, key); err != nil {
			return err
		}
		return b.recoverLive(key)
	}
	tmp := b.newImage(key)
	if err := b.discard(ctx, key, tmp); err != nil {
		return err
	}
	var err error
	if from == nil {
		err = b.makeEmpty(ctx, key, tmp, size)
	} else {
		err = b.makeClone(ctx, key, tmp, size, *from)
	}
	if err == nil {
		err = setNominal(tmp, size)
	}
	if err != nil {
		b.acct.mu.Lock()
		delete(b.acct.shared, key)
		b.acct.mu.Unlock()
		return errors.Join(err, b.discard(ctx, key, tmp))
	}
	if err := os.Rename(tmp, b.imagePath(key)); err != nil {
		return err
	}
	// Its loop device stays attached under the new name (the kernel follows the
	// rename); so does the table.
	b.loopMu.Lock()
	if dev := b.loops[tmp]; dev != "" {
		delete(b.loops, tmp)
		b.loops[b.imagePath(key)] = dev
	}
	b.loopMu.Unlock()
	return syncDir(b.imagesDir())
}

// discard removes an unfinished image and anything it has mounted or attached.
func (b *Backend) discard(ctx context.Context, key, tmp string) error {
	if err := b.unmountAll(ctx, key); err != nil {
		return err
	}
	if err := b.detach(ctx, tmp); err != nil {
		return err
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syncFS(b.imagesDir()); err != nil {
		b.log.Warn("store not committed after discarding an image: its space returns at the next commit", "volume", key, "err", err)
	}
	return nil
}

func (b *Backend) makeEmpty(ctx context.Context, key, tmp string, size int64) error {
	if err := b.newImageFile(tmp, b.initialFS(size)); err != nil {
		return err
	}
	// Mixed block groups: data and metadata share chunks, so a volume that was once
	// full can still take a snapshot (with separate chunks, data takes every chunk
	// and a snapshot then fails with ENOSPC until a balance), and ~99 % of a 1 GiB
	// volume holds data. Measured no slower than separate chunks (docs/benchmarks.md).
	if err := b.runTool(ctx, "mkfs.btrfs", "-q", "--mixed", tmp); err != nil {
		return fmt.Errorf("mkfs %s: %w", key, err)
	}
	v, err := b.mountWhole(ctx, tmp, b.fsPath(key))
	if err != nil {
		return err
	}
	top := b.fsPath(key)
	if _, err := b.btrfs(ctx, "subvolume", "create", filepath.Join(top, "live")); err != nil {
		return fmt.Errorf("create live data of %s: %w", key, err)
	}
	for _, d := range []string{"snapshots", "retired"} {
		if err := os.Mkdir(filepath.Join(top, d), 0o700); err != nil {
			return err
		}
	}
	// Quota groups count what each snapshot holds alone (its usedBytes).
	if _, err := b.btrfs(ctx, "quota", "enable", top); err != nil {
		return fmt.Errorf("enable quota on %s: %w", key, err)
	}
	b.mu.Lock()
	b.vols[key] = v
	b.mu.Unlock()
	return nil
}

// makeClone makes the new volume from a reflink copy of the source volume's image:
// its filesystem gets a new identity, and of everything the copy holds only the
// chosen snapshot remains, as the live data.
func (b *Backend) makeClone(ctx context.Context, key, tmp string, size int64, from storage.SnapshotRef) error {
	src, err := b.open(ctx, from.VolumeKey)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("source volume %s does not exist", from.VolumeKey)
	}
	if _, err := os.Stat(b.snapPath(from.VolumeKey, from.Snapshot)); err != nil {
		return fmt.Errorf("source snapshot %s@%s does not exist", from.VolumeKey, from.Snapshot)
	}
	// The snapshot is committed; syncing puts it in the image, whose copy is then a
	// consistent (crash-consistent) image of the source filesystem.
	if _, err := b.btrfs(ctx, "filesystem", "sync", b.fsPath(from.VolumeKey)); err != nil {
		return err
	}
	// The copy's filesystem ends at its capacity (thin: at least what the source's
	// holds): reserved now, since the copy writes into its holes (removing the
	// source's other subvolumes, relocating to shrink) before they are allocated
	// to it at the end; what it shares with the source is reserved twice over
	// (the copy's rewrite and the source's).
	srcImg := b.imagePath(from.VolumeKey)
	srcSize, _, err := fileSize(srcImg)
	if err != nil {
		return err
	}
	srcWritten, err := writtenBytes(srcImg)
	if err != nil {
		return fmt.Errorf("map %s: %w", from.VolumeKey, err)
	}
	fsSize := size
	if b.opts.Thin {
		fsSize = min(size, max(srcSize, b.initialFS(size)))
	}
	b.acct.mu.Lock()
	if err = b.room(tmp, fsSize+2*srcWritten, false); err == nil {
		b.acct.pending[tmp] = fsSize
	}
	b.acct.mu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		b.acct.mu.Lock()
		delete(b.acct.pending, tmp)
		b.acct.mu.Unlock()
	}()
	// The copy shares the source image's written extents (instant on a store
	// that can reflink); both images then owe the store what rewriting them
	// would take.
	b.acct.mu.Lock()
	shared, err := cloneWritten(srcImg, tmp)
	if err == nil && shared > 0 {
		b.markShared(srcImg, shared)
		b.markShared(tmp, shared)
	}
	b.acct.mu.Unlock()
	if err != nil {
		return fmt.Errorf("copy %s: %w", from.VolumeKey, err)
	}
	// A filesystem id is how the kernel and NFS tell filesystems apart: never two alike.
	if err := b.runTool(ctx, "btrfstune", "-m", tmp); err != nil {
		return fmt.Errorf("new filesystem id for %s: %w", key, err)
	}
	v, err := b.mountWhole(ctx, tmp, b.fsPath(key))
	if err != nil {
		return err
	}
	top := b.fsPath(key)
	var drop []string
	for _, d := range []string{"retired", "snapshots"} {
		entries, _ := os.ReadDir(filepath.Join(top, d))
		for _, e := range entries {
			if d == "snapshots" && e.Name() == from.Snapshot {
				continue
			}
			drop = append(drop, filepath.Join(top, d, e.Name()))
		}
	}
	drop = append(drop, filepath.Join(top, "live"))
	if err := b.deleteSubvolumes(ctx, drop); err != nil {
		return err
	}
	if _, err := b.btrfs(ctx, "subvolume", "snapshot", filepath.Join(top, "snapshots", from.Snapshot), filepath.Join(top, "live")); err != nil {
		return fmt.Errorf("clone live data of %s: %w", key, err)
	}
	if err := b.deleteSubvolumes(ctx, []string{filepath.Join(top, "snapshots", from.Snapshot)}); err != nil {
		return err
	}
	b.mu.Lock()
	b.vols[key] = v
	b.mu.Unlock()
	if err := b.resizeFS(ctx, key, tmp, v, fsSize, false); err != nil {
		return err
	}
	// Every block of the copy now its own.
	b.acct.mu.Lock()
	err = b.grant(tmp, fsSize, false)
	b.acct.mu.Unlock()
	if err != nil {
		return err
	}
	return b.ensureConsistent(ctx, key)
}

// ensureConsistent rescans a volume's quota groups if the kernel flags their
// counters as inconsistent (after a clone or a revert), so snapshot usage is exact.
func (b *Backend) ensureConsistent(ctx context.Context, key string) error {
	b.mu.Lock()
	v := b.vols[key]
	b.mu.Unlock()
	if v == nil {
		return nil
	}
	data, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", v.uuid, "qgroups", "inconsistent"))
	if err != nil || strings.TrimSpace(string(data)) != "1" {
		return nil
	}
	if _, err := b.btrfs(ctx, "quota", "rescan", "-w", b.fsPath(key)); err != nil {
		if !runner.StderrContains(err, "in progress") {
			return fmt.Errorf("quota rescan: %w", err)
		}
		if _, err := b.btrfs(ctx, "quota", "rescan", "-W", b.fsPath(key)); err != nil {
			return fmt.Errorf("wait for quota rescan: %w", err)
		}
	}
	return nil
}

// Resize implements storage.Backend: the volume's capacity becomes size, its
// filesystem too (thin: its filesystem shrinks if larger, and grows as it fills).
// The capacity is recorded last, so a resize cut short runs again.
func (b *Backend) Resize(ctx context.Context, key string, size int64) error {
	defer b.lockKey(key)()
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	fsSize := size
	if b.opts.Thin {
		cur, _, err := b.space(key)
		if err != nil {
			return err
		}
		fsSize = min(size, max(cur, b.initialFS(size)))
	}
	if err := b.resizeFS(ctx, key, b.imagePath(key), v, fsSize, false); err != nil {
		return err
	}
	return setNominal(b.imagePath(key), size)
}

// minSize is the smallest size the kernel resizes a btrfs filesystem to, in
// either direction.
const minSize = 256 << 20

// resizeFS brings a volume's filesystem and image to size: to grow, the image
// (allocated from the store, which may refuse: storage.ErrStoreFull; borrow: from
// its reserve too) then the filesystem; to shrink, the filesystem then the image.
func (b *Backend) resizeFS(ctx context.Context, key, img string, v *volume, size int64, borrow bool) error {
	cur, _, err := b.space(key)
	if err != nil {
		return err
	}
	if size < cur && size < minSize {
		return fmt.Errorf("shrink %s to %d bytes: btrfs cannot shrink below %d: %w", key, size, int64(minSize), storage.ErrTooSmall)
	}
	if size > cur && size < minSize {
		// Nor grow to less (the kernel refuses a new size under 256 MiB with
		// EINVAL): a thin volume that starts smaller grows to minSize first.
		size = minSize
	}
	if size < cur {
		if _, err := b.btrfs(ctx, "filesystem", "resize", strconv.FormatInt(size, 10), b.fsPath(key)); err != nil {
			if runner.StderrContains(err, "No space left") {
				return fmt.Errorf("shrink %s to %d bytes: %w", key, size, storage.ErrTooSmall)
			}
			return fmt.Errorf("shrink %s: %w", key, err)
		}
		if err := os.Truncate(img, size); err != nil {
			return err
		}
	} else {
		b.acct.mu.Lock()
		err := b.grant(img, size, borrow)
		b.acct.mu.Unlock()
		if err != nil {
			return fmt.Errorf("grow %s: %w", key, err)
		}
		if fi, err := os.Stat(img); err == nil && fi.Size() > size {
			// A grow cut short after its image grew further.
			if err := os.Truncate(img, size); err != nil {
				return err
			}
		}
	}
	if _, err := b.run.Run(ctx, "losetup", "-c", v.dev); err != nil {
		return fmt.Errorf("resize %s: %w", v.dev, err)
	}
	if size > cur {
		if _, err := b.btrfs(ctx, "filesystem", "resize", "max", b.fsPath(key)); err != nil {
			return fmt.Errorf("grow %s: %w", key, err)
		}
	}
	return nil
}

// lockKey locks volume key against the watcher and returns the unlock.
func (b *Backend) lockKey(key string) func() {
	m := b.keyLock(key)
	m.Lock()
	return m.Unlock
}

func (b *Backend) keyLock(key string) *sync.Mutex {
	b.keyMu.Lock()
	defer b.keyMu.Unlock()
	m := b.keys[key]
	if m == nil {
		m = &sync.Mutex{}
		b.keys[key] = m
	}
	return m
}

// SetMode implements storage.Backend.
func (b *Backend) SetMode(ctx context.Context, key string, mode fs.FileMode) error {
	if _, err := b.open(ctx, key); err != nil {
		return err
	}
	if err := os.Chmod(b.livePath(key), mode); err != nil {
		return fmt.Errorf("chmod %s: %w", key, err)
	}
	return nil
}

// Mount implements storage.Backend: the live subvolume of the volume's own
// filesystem on its mount point, verified. Live data a cut-short revert set aside
// (and had not replaced yet) is put back first.
func (b *Backend) Mount(ctx context.Context, key string) error {
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	if err := b.recoverLive(key); err != nil {
		return err
	}
	return b.mountSubvol(ctx, key, v, b.MountPath(key), "live", "noatime,nosuid,nodev,noexec")
}

// mountSubvol mounts subvolume sub of key's filesystem (opened as v) on mp,
// replacing whatever else is mounted there, and checks the result.
func (b *Backend) mountSubvol(ctx context.Context, key string, v *volume, mp, sub, opts string) error {
	inner := filepath.Join(b.fsPath(key), sub)
	if shows, err := showsSubvolume(mp, inner); err != nil || shows {
		return err
	}
	if err := b.unmountPath(ctx, mp); err != nil {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	if err := mountBtrfs(v.dev, mp, opts+",subvol="+sub); err != nil {
		return err
	}
	shows, err := showsSubvolume(mp, inner)
	if err != nil {
		return err
	}
	if !shows {
		return fmt.Errorf("mount %s: it does not show subvolume %s of %s", mp, sub, v.dev)
	}
	return nil
}

// showsSubvolume reports whether mount point mp shows the subvolume found at inner
// (a path through the volume's whole-filesystem mount), without reading the mount
// table: btrfs gives each subvolume of a mounted filesystem its own device number,
// the same through every mount of it, and its root is inode 256. A directory that
// is not a mount point, or shows anything else, has another device or inode.
func showsSubvolume(mp, inner string) (bool, error) {
	mounted, err := mountinfo.IsMountPoint(mp)
	if err != nil || !mounted {
		return false, err
	}
	var at, want unix.Stat_t
	if err := unix.Stat(mp, &at); err != nil {
		return false, err
	}
	if err := unix.Stat(inner, &want); err != nil {
		return false, nil
	}
	return at.Dev == want.Dev && at.Ino == subvolRootIno && want.Ino == subvolRootIno, nil
}

// subvolRootIno is the inode number of every btrfs subvolume's root directory
// (BTRFS_FIRST_FREE_OBJECTID).
const subvolRootIno = 256

// Unmount implements storage.Backend.
func (b *Backend) Unmount(ctx context.Context, key string) error {
	return b.unmountPath(ctx, b.MountPath(key))
}

func (b *Backend) unmountPath(ctx context.Context, mp string) error {
	return localfs.Unmount(ctx, b.run, mp)
}

// unmountAll unmounts a volume's snapshots and snapshot directory, live data and
// whole filesystem.
func (b *Backend) unmountAll(ctx context.Context, key string) error {
	snapMounts, _ := filepath.Glob(filepath.Join(b.mounts, key+"@*"))
	for _, mp := range append(snapMounts, b.snapDir(key).RW, b.MountPath(key), b.fsPath(key)) {
		if err := b.unmountPath(ctx, mp); err != nil {
			return err
		}
	}
	b.mu.Lock()
	delete(b.vols, key)
	b.mu.Unlock()
	return nil
}

// DeleteVolume implements storage.Backend.
func (b *Backend) DeleteVolume(ctx context.Context, key string) error {
	defer b.lockKey(key)()
	if err := b.unmountAll(ctx, key); err != nil {
		return err
	}
	for _, img := range []string{b.imagePath(key), b.newImage(key)} {
		if err := b.detach(ctx, img); err != nil {
			return err
		}
		if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	// The images are gone: a failed commit (syncfs reports any file's
	// writeback error) only delays their space, and must not leave the rest.
	if err := syncFS(b.imagesDir()); err != nil {
		b.log.Warn("store not committed after a delete: its space returns at the next commit", "volume", key, "err", err)
	}
	snapMounts, _ := filepath.Glob(filepath.Join(b.mounts, key+"@*"))
	for _, d := range append(snapMounts, b.snapDir(key).RW, b.MountPath(key), b.fsPath(key)) {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	b.acct.mu.Lock()
	delete(b.acct.shared, key) // what it shared is its partners' alone now: mapped again
	delete(b.acct.notes, key)
	delete(b.acct.giveBack, key)
	b.acct.mu.Unlock()
	return nil
}

// deleteSubvolumes deletes subvolumes (absent ones are fine) and waits until the
// cleaner has dropped them, so their space and quota groups are released.
func (b *Backend) deleteSubvolumes(ctx context.Context, paths []string) error {
	var present []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			present = append(present, p)
		}
	}
	if len(present) == 0 {
		return nil
	}
	args := append([]string{"subvolume", "delete", "--commit-after"}, present...)
	if _, err := b.btrfs(ctx, args...); err != nil {
		return fmt.Errorf("delete subvolumes: %w", err)
	}
	return nil
}

// MountSnapshot implements storage.Backend.
func (b *Backend) MountSnapshot(ctx context.Context, key, snap string) error {
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	if _, err := os.Stat(b.snapPath(key, snap)); err != nil {
		return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
	}
	if err := b.mountSubvol(ctx, key, v, b.SnapshotMountPath(key, snap), "snapshots/"+snap, "ro,noatime,nosuid,nodev,noexec"); err != nil {
		return err
	}
	return b.listInSnapDir(key, snap, true)
}

// UnmountSnapshot implements storage.Backend: out of the snapshot directory
// first, so that it never lists a snapshot on its way out.
func (b *Backend) UnmountSnapshot(ctx context.Context, key, snap string) error {
	return b.snapDir(key).UnmountSnapshot(ctx, b.run, snap, b.SnapshotMountPath(key, snap))
}

// EnsureSnapshot implements storage.Backend: a read-only snapshot inside the
// volume's filesystem, O(1) whatever the volume holds and however many snapshots
// it has (nothing here lists or counts them).
func (b *Backend) EnsureSnapshot(ctx context.Context, key, snap string) error {
	defer b.lockKey(key)()
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	p := b.snapPath(key, snap)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	err = snapshotReadOnly(b.livePath(key), p)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		// A full volume: borrow headroom from the store's reserve for the
		// snapshot's metadata (the watcher gives it back).
		if herr := b.borrowHeadroom(ctx, key, v); herr != nil {
			b.log.Warn("no headroom for a full volume's snapshot", "volume", key, "err", herr)
		} else {
			err = snapshotReadOnly(b.livePath(key), p)
		}
	}
	if err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			err = fmt.Errorf("%w (%v)", storage.ErrNoSpace, err)
		}
		return fmt.Errorf("snapshot %s@%s: %w", key, snap, err)
	}
	return nil
}

// DeleteSnapshot implements storage.Backend.
func (b *Backend) DeleteSnapshot(ctx context.Context, key, snap string) error {
	if err := b.UnmountSnapshot(ctx, key, snap); err != nil {
		return err
	}
	v, err := b.open(ctx, key)
	if err != nil || v == nil {
		return err
	}
	return b.deleteSubvolumes(ctx, []string{b.snapPath(key, snap)})
}

// Inventory implements storage.Backend.
func (b *Backend) Inventory(ctx context.Context) (storage.Inventory, error) {
	inv := storage.Inventory{Snapshots: map[string][]string{}, Complete: map[string]bool{}}
	seen := map[string]bool{}
	add := func(k string) {
		if k != "" && !seen[k] {
			seen[k] = true
			inv.Volumes = append(inv.Volumes, k)
		}
	}
	entries, err := os.ReadDir(b.imagesDir())
	if err != nil {
		return inv, err
	}
	for _, e := range entries {
		add(strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".new"), ".img"))
		if key, ok := strings.CutSuffix(e.Name(), ".img"); ok {
			inv.Complete[key] = true
		}
	}
	for _, d := range []string{b.mounts, b.fsDir} {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return inv, err
		}
		for _, e := range entries {
			k, _, _ := strings.Cut(e.Name(), "@") // snapshot mounts are key@snap
			add(k)
		}
	}
	for _, k := range inv.Volumes {
		if _, err := os.Stat(b.imagePath(k)); err != nil {
			continue
		}
		if v, err := b.open(ctx, k); err != nil || v == nil {
			continue
		}
		snaps, _ := os.ReadDir(filepath.Join(b.fsPath(k), "snapshots"))
		for _, s := range snaps {
			inv.Snapshots[k] = append(inv.Snapshots[k], s.Name())
		}
	}
	return inv, nil
}

// statDev returns path's st_dev, or 0 if it cannot be read.
func statDev(path string) uint64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Dev
}

// syncFS commits the filesystem holding path (syncfs). The store's btrfs gives
// a removed image's extents back only when the transaction removing it
// commits, up to its commit interval later; until then statfs counts them as
// used and the store refuses what they would make room for.
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Capabilities implements storage.Backend: quota groups count every byte at
// once; snapshots, clones and reverts are O(1).
func (b *Backend) Capabilities() storage.Capabilities {
	return storage.Capabilities{ExactUsage: true}
}
