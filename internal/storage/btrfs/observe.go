package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/storage"
)

// Observation runs no process. A pass over every volume (ObserveVolumes) reads
// the mount table once; observing one volume (ObserveVolume, ObserveSnapshots,
// Usage) reads none: it stats the volume's own mount points, so its cost does
// not grow with the number of volumes. Only volumes Start or a mutating call
// opened are seen in full; one whose filesystem is not mounted (something outside
// Basin unmounted it) is reported existing and unmounted with an unknown capacity
// (-1), so the controller's Mount or Resize opens it again.

// mounts says what is mounted where, for observation.
type mounts interface {
	// top returns the device whose filesystem is mounted whole (its top level) on
	// volume key's fsPath.
	top(key string) (source string, ok bool)
	// shows reports whether mount point mp shows subvolume sub of key's
	// filesystem, opened as v.
	shows(v *volume, key, mp, sub string) bool
}

// mountTable is the mount table, by mount point, of what lies under DataDir.
type mountTable map[string]mountinfo.Entry

func (b *Backend) readMounts() (mountTable, error) {
	es, err := mountinfo.Under(filepath.Dir(b.mounts))
	if err != nil {
		return nil, err
	}
	mt := mountTable{}
	for _, e := range es { // latest first: the one on top wins
		if _, ok := mt[e.MountPoint]; !ok {
			mt[e.MountPoint] = e
		}
	}
	return mt, nil
}

type tableMounts struct {
	b  *Backend
	mt mountTable
}

func (t tableMounts) top(key string) (string, bool) {
	e, ok := t.mt[t.b.fsPath(key)]
	return e.Source, ok && e.Root == "/" && e.FSType == "btrfs"
}

func (t tableMounts) shows(v *volume, key, mp, sub string) bool {
	e, ok := t.mt[mp]
	return ok && e.Source == v.dev && e.Root == "/"+sub
}

// statMounts answers for one volume from its own mount points.
type statMounts struct{ b *Backend }

func (s statMounts) top(key string) (string, bool) {
	s.b.mu.Lock()
	v := s.b.vols[key]
	s.b.mu.Unlock()
	if v != nil && v.topDev != 0 && statDev(s.b.fsPath(key)) == v.topDev {
		return v.dev, true
	}
	// Not opened by this run (or no longer as it was): ask the mount point.
	source, top, _, err := topMount(s.b.fsPath(key))
	return source, err == nil && top
}

func (s statMounts) shows(v *volume, key, mp, sub string) bool {
	ok, err := showsSubvolume(mp, filepath.Join(s.b.fsPath(key), sub))
	return err == nil && ok
}

// view returns the opened volume key if its whole filesystem is mounted on fsPath,
// adopting one mounted earlier (by a previous run) without running anything; nil
// if it is not.
func (b *Backend) view(key string, m mounts) *volume {
	source, ok := m.top(key)
	if !ok {
		return nil
	}
	b.mu.Lock()
	v := b.vols[key]
	b.mu.Unlock()
	if v != nil && v.dev == source {
		return v
	}
	uuid, err := fsidOf(b.fsPath(key))
	if err != nil {
		return nil
	}
	v = &volume{dev: source, uuid: uuid, topDev: statDev(b.fsPath(key))}
	b.mu.Lock()
	b.vols[key] = v
	b.mu.Unlock()
	return v
}

// imageKeys lists the keys of the volumes whose image is whole, from the images
// directory. A directory that cannot be read is an error, never a short list:
// filepath.Glob drops I/O errors, and an empty answer from a store whose
// filesystem failed once made every volume seem gone.
func (b *Backend) imageKeys() ([]string, error) {
	entries, err := os.ReadDir(b.imagesDir())
	if err != nil {
		return nil, fmt.Errorf("list volume images: %w", err)
	}
	var keys []string
	for _, e := range entries {
		if key, ok := strings.CutSuffix(e.Name(), ".img"); ok {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// attachedImages lists the images in the store that have a loop device, from the
// table of loop devices (sysfs), not from the images directory: Stop detaches
// them even when the store's filesystem can no longer be read.
func (b *Backend) attachedImages() []string {
	if loops, err := scanLoops(); err == nil {
		b.loopMu.Lock()
		b.loops = loops
		b.loopMu.Unlock()
	}
	b.loopMu.Lock()
	defer b.loopMu.Unlock()
	var imgs []string
	for img := range b.loops {
		if filepath.Dir(img) == b.imagesDir() {
			imgs = append(imgs, img)
		}
	}
	return imgs
}

// ObserveVolumes implements storage.Backend.
func (b *Backend) ObserveVolumes(ctx context.Context) (map[string]storage.VolumeStatus, error) {
	mt, err := b.readMounts()
	if err != nil {
		return nil, err
	}
	keys, err := b.imageKeys()
	if err != nil {
		return nil, err
	}
	out := make(map[string]storage.VolumeStatus, len(keys))
	for _, key := range keys {
		st, err := b.status(key, tableMounts{b, mt})
		if err != nil {
			return nil, err
		}
		if st.Exists {
			out[key] = st
		}
	}
	return out, nil
}

// ObserveVolume implements storage.Backend.
func (b *Backend) ObserveVolume(ctx context.Context, key string) (storage.VolumeStatus, error) {
	return b.status(key, statMounts{b})
}

func (b *Backend) status(key string, m mounts) (storage.VolumeStatus, error) {
	var st storage.VolumeStatus
	img, err := os.Stat(b.imagePath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	} else if err != nil {
		return st, err
	}
	v := b.view(key, m)
	if v == nil {
		// A whole image had live data when it took its name; if a revert set it
		// aside since, Mount puts it back.
		return storage.VolumeStatus{Exists: true, CapacityBytes: -1}, nil
	}
	fi, err := os.Stat(b.livePath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil // no live data: a revert cut short after setting it aside
	} else if err != nil {
		return st, err // not knowing is not knowing it is gone
	}
	st.Exists = true
	st.Mode = fi.Mode().Perm()
	st.Mounted = m.shows(v, key, b.MountPath(key), "live")
	size, used, err := b.space(key)
	if err != nil {
		return st, err
	}
	st.UsedBytes = used
	// The filesystem and its image must agree; if they don't (a resize was cut
	// short) the size is reported unknown, so a resize runs again. The capacity
	// is the one recorded on the image: the filesystem may be smaller (thin) or
	// larger (headroom borrowed for a snapshot); images an earlier Basin made
	// have none, and their filesystem is their capacity.
	st.CapacityBytes = -1
	if img.Size() == size {
		st.CapacityBytes = size
		if n, ok := nominal(b.imagePath(key)); ok {
			st.CapacityBytes = n
		}
	}
	st.SpaceNote = b.note(key)
	return st, nil
}

// ObserveSnapshots implements storage.Backend.
func (b *Backend) ObserveSnapshots(ctx context.Context, key string) (map[string]storage.SnapshotStatus, error) {
	m := statMounts{b}
	v, err := b.viewExisting(key, m)
	if err != nil || v == nil {
		return map[string]storage.SnapshotStatus{}, err
	}
	names, err := b.snapshotNames(key)
	if err != nil {
		return nil, err
	}
	out := make(map[string]storage.SnapshotStatus, len(names))
	for _, n := range names {
		x, err := b.exclusive(v, key, n)
		if err != nil {
			return nil, err
		}
		out[n] = storage.SnapshotStatus{Exists: true, ExclusiveBytes: x,
			Mounted: m.shows(v, key, b.SnapshotMountPath(key, n), "snapshots/"+n)}
	}
	return out, nil
}

// Usage implements storage.Backend.
func (b *Backend) Usage(ctx context.Context, key string) (storage.Usage, error) {
	v, err := b.viewExisting(key, statMounts{b})
	if err != nil {
		return storage.Usage{}, err
	}
	if v == nil {
		return storage.Usage{}, fmt.Errorf("volume %s has no filesystem", key)
	}
	_, used, err := b.space(key)
	if err != nil {
		return storage.Usage{}, err
	}
	names, err := b.snapshotNames(key)
	if err != nil {
		return storage.Usage{}, err
	}
	u := storage.Usage{UsedBytes: used, SnapshotExclusive: make(map[string]int64, len(names))}
	for _, n := range names {
		if u.SnapshotExclusive[n], err = b.exclusive(v, key, n); err != nil {
			return storage.Usage{}, err
		}
	}
	return u, nil
}

// viewExisting is view for a volume that must be open if it exists: nil, nil if
// it has no image.
func (b *Backend) viewExisting(key string, m mounts) (*volume, error) {
	if _, err := os.Stat(b.imagePath(key)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	v := b.view(key, m)
	if v == nil {
		return nil, fmt.Errorf("volume %s is not open (its filesystem is not mounted on %s)", key, b.fsPath(key))
	}
	return v, nil
}

func (b *Backend) snapshotNames(key string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(b.fsPath(key), "snapshots"))
	if err != nil {
		return nil, fmt.Errorf("snapshots of %s: %w", key, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// exclusive reads what snapshot snap alone holds from its quota group's counter in
// sysfs.
func (b *Backend) exclusive(v *volume, key, snap string) (int64, error) {
	id, err := subvolID(b.snapPath(key, snap))
	if err != nil {
		return 0, fmt.Errorf("subvolume id of %s@%s: %w", key, snap, err)
	}
	p := filepath.Join("/sys/fs/btrfs", v.uuid, "qgroups", "0_"+strconv.FormatUint(id, 10), "exclusive")
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("usage of snapshot %s@%s: %w", key, snap, err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

// subvolID returns the id of the subvolume whose root is path: statx's
// STATX_SUBVOL (Linux 6.10), else the INO_LOOKUP ioctl `btrfs inspect-internal
// rootid` uses.
func subvolID(path string) (uint64, error) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_SUBVOL, &sx); err != nil {
		return 0, err
	}
	if sx.Mask&unix.STATX_SUBVOL != 0 {
		return sx.Subvol, nil
	}
	return inoLookupTreeID(path)
}

// VolumeUsedBytes reads a volume's usage (data and snapshots) now, with one statfs:
// what api.Capacity asks of the backend, inside a store transaction. It is not part
// of storage.Backend (Usage is).
func (b *Backend) VolumeUsedBytes(ctx context.Context, key string) (int64, error) {
	v, err := b.viewExisting(key, statMounts{b})
	if err != nil {
		return 0, err
	}
	if v == nil {
		return 0, fmt.Errorf("volume %s has no filesystem", key)
	}
	_, used, err := b.space(key)
	return used, err
}
