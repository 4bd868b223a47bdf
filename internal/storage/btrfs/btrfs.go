// Package btrfs is the embedded storage backend: one btrfs filesystem per node, either
// an existing btrfs path or a sparse image file on a loop device that Basin attaches
// and detaches itself (DESIGN.md §4, DATAPLANE.md §7).
//
// Layout under the base directory:
//
//	volumes/<key>               live subvolume of a volume
//	snapshots/<key>/<snap>      read-only snapshots
//	retired/<key>.<tag>         live subvolume moved aside by an unfinished revert
//
// Each volume is mounted on <data>/mounts/<key> (NFS-Ganesha exports only mount
// points). A volume's capacity is the limit of a level-1 quota group 1/<qgroup> that
// holds the live subvolume and every snapshot, so snapshots count against it, and a
// revert (new subvolume, same group) keeps the limit.
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

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/storage"
)

// Options configures a Backend. The zero value is not usable: DataDir is required.
type Options struct {
	// DataDir holds the image file (if any) and the volume mount points.
	DataDir string
	// Store is an existing btrfs directory to use. Empty: an image file
	// DataDir/store.img of ImageSize bytes on a loop device, mounted on DataDir/store.
	Store string
	// ImageSize is the sparse image's size; default 64 GiB.
	ImageSize int64
	// Runner runs btrfs, mount and losetup; nil = runner.Exec.
	Runner runner.Runner
	// Logger; nil discards.
	Logger *slog.Logger
}

// Backend implements storage.Backend on btrfs.
type Backend struct {
	opts   Options
	run    runner.Runner
	log    *slog.Logger
	base   string // our tree inside the filesystem
	top    string // where the filesystem (or the given store) is mounted
	device string // block device backing the filesystem
	fsid   string // filesystem UUID, for sysfs qgroup counters
	loop   string // loop device we attached ("" if none)
	mounts string // DataDir/mounts

	mu      sync.Mutex
	started bool
}

var _ storage.Backend = (*Backend)(nil)

// New returns a Backend; call Start before use.
func New(opts Options) *Backend {
	if opts.ImageSize == 0 {
		opts.ImageSize = 64 << 30
	}
	r := opts.Runner
	if r == nil {
		r = runner.Exec{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts, run: r, log: log, mounts: filepath.Join(opts.DataDir, "mounts")}
}

func (b *Backend) btrfs(ctx context.Context, args ...string) ([]byte, error) {
	return b.run.Run(ctx, "btrfs", args...)
}

// Start attaches and mounts the store if needed (adopting what a previous run left
// attached or mounted) and enables quotas. It is idempotent.
func (b *Backend) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := os.MkdirAll(b.mounts, 0o755); err != nil {
		return err
	}
	if b.opts.Store != "" {
		b.top = b.opts.Store
		b.base = filepath.Join(b.opts.Store, "basin")
		dev, err := mountSourceOf(b.top)
		if err != nil {
			return fmt.Errorf("store %s: %w", b.top, err)
		}
		b.device = dev
	} else {
		if err := b.attachImage(ctx); err != nil {
			return err
		}
		b.base = b.top
	}
	if _, err := b.btrfs(ctx, "quota", "enable", b.top); err != nil {
		return fmt.Errorf("enable quota: %w", err)
	}
	for _, d := range []string{"volumes", "snapshots", "retired"} {
		if err := os.MkdirAll(filepath.Join(b.base, d), 0o700); err != nil {
			return err
		}
	}
	out, err := b.btrfs(ctx, "filesystem", "show", b.top)
	if err != nil {
		return fmt.Errorf("filesystem show: %w", err)
	}
	if i := strings.Index(string(out), "uuid: "); i >= 0 {
		b.fsid = strings.Fields(string(out)[i+6:])[0]
	}
	if err := b.ensureConsistent(ctx); err != nil {
		return err
	}
	b.started = true
	b.log.Info("btrfs store ready", "base", b.base, "device", b.device, "fsid", b.fsid)
	return nil
}

func (b *Backend) attachImage(ctx context.Context) error {
	img := filepath.Join(b.opts.DataDir, "store.img")
	b.top = filepath.Join(b.opts.DataDir, "store")
	if err := os.MkdirAll(b.top, 0o700); err != nil {
		return err
	}
	fresh := false
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("create image: %w", err)
		}
		err = f.Truncate(b.opts.ImageSize)
		f.Close()
		if err != nil {
			return fmt.Errorf("size image: %w", err)
		}
		fresh = true
	}
	// Adopt a loop device a previous (killed) run left attached to the image.
	out, err := b.run.Run(ctx, "losetup", "-j", img, "-O", "NAME", "-n")
	if err != nil {
		return fmt.Errorf("find loop device: %w", err)
	}
	loop := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if loop == "" {
		if fresh {
			if _, err := b.run.Run(ctx, "mkfs.btrfs", "-q", img); err != nil {
				return fmt.Errorf("mkfs: %w", err)
			}
		}
		out, err := b.run.Run(ctx, "losetup", "--find", "--show", img)
		if err != nil {
			return fmt.Errorf("attach image: %w", err)
		}
		loop = strings.TrimSpace(string(out))
	}
	b.loop, b.device = loop, loop
	mounted, err := isMountPoint(b.top)
	if err != nil {
		return err
	}
	if !mounted {
		if _, err := b.run.Run(ctx, "mount", "-o", "noatime", loop, b.top); err != nil {
			return fmt.Errorf("mount store: %w", err)
		}
	}
	return nil
}

// Stop unmounts every volume and, for an image store, the store itself, then detaches
// the loop device. It leaves nothing mounted or attached that Start made.
func (b *Backend) Stop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		return nil
	}
	var errs []error
	entries, _ := os.ReadDir(b.mounts)
	for _, e := range entries {
		if err := b.unmountPath(ctx, filepath.Join(b.mounts, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if b.loop != "" {
		if err := b.unmountPath(ctx, b.top); err != nil {
			errs = append(errs, err)
		} else if _, err := b.run.Run(ctx, "losetup", "-d", b.loop); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", b.loop, err))
		}
	}
	b.started = false
	return errors.Join(errs...)
}

func (b *Backend) livePath(key string) string  { return filepath.Join(b.base, "volumes", key) }
func (b *Backend) snapDir(key string) string   { return filepath.Join(b.base, "snapshots", key) }
func (b *Backend) mountPath(key string) string { return filepath.Join(b.mounts, key) }
func (b *Backend) retiredPath(key, tag string) string {
	return filepath.Join(b.base, "retired", key+"."+tag)
}
func qg(q uint64) string { return "1/" + strconv.FormatUint(q, 10) }

// MountPath returns where a volume is mounted.
func (b *Backend) MountPath(key string) string { return b.mountPath(key) }

// Volume implements storage.Backend.
func (b *Backend) Volume(ctx context.Context, key string, qgroup uint64, retireTag string) (storage.VolumeStatus, error) {
	var st storage.VolumeStatus
	if fi, err := os.Stat(b.livePath(key)); err == nil {
		st.Exists = true
		st.Mode = fi.Mode().Perm()
	}
	if retireTag != "" {
		if _, err := os.Stat(b.retiredPath(key, retireTag)); err == nil {
			st.Retired = true
		}
	}
	m, err := isMountPoint(b.mountPath(key))
	if err != nil {
		return st, err
	}
	st.Mounted = m
	q, err := b.qgroupInfo(ctx, "1_"+strconv.FormatUint(qgroup, 10))
	if err != nil {
		return st, err
	}
	st.QgroupExists, st.LimitBytes, st.UsedBytes = q.exists, q.limit, q.referenced
	return st, nil
}

type qinfo struct {
	exists                bool
	referenced, exclusive int64
	limit                 int64
}

// qgroupInfo reads a qgroup's counters from sysfs (name like "1_7" or "0_258").
func (b *Backend) qgroupInfo(ctx context.Context, name string) (qinfo, error) {
	dir := filepath.Join("/sys/fs/btrfs", b.fsid, "qgroups", name)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return b.qgroupInfoCmd(ctx, strings.Replace(name, "_", "/", 1))
		}
		return qinfo{}, err
	}
	read := func(f string) int64 {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return n
	}
	return qinfo{exists: true, referenced: read("referenced"), exclusive: read("exclusive"), limit: read("max_referenced")}, nil
}

// qgroupInfoCmd is the fallback for kernels without qgroup sysfs: parse
// `btrfs qgroup show`. A missing group is not an error.
func (b *Backend) qgroupInfoCmd(ctx context.Context, id string) (qinfo, error) {
	out, err := b.btrfs(ctx, "qgroup", "show", "--raw", "-re", b.top)
	if err != nil {
		return qinfo{}, fmt.Errorf("qgroup show: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == id {
			ref, _ := strconv.ParseInt(f[1], 10, 64)
			excl, _ := strconv.ParseInt(f[2], 10, 64)
			lim, _ := strconv.ParseInt(f[3], 10, 64) // "none" parses as 0
			return qinfo{exists: true, referenced: ref, exclusive: excl, limit: lim}, nil
		}
	}
	return qinfo{}, nil
}

// CreateQgroup implements storage.Backend.
func (b *Backend) CreateQgroup(ctx context.Context, qgroup uint64) error {
	if _, err := b.btrfs(ctx, "qgroup", "create", qg(qgroup), b.top); err != nil && !runner.StderrContains(err, "File exists") {
		return fmt.Errorf("create qgroup %s: %w", qg(qgroup), err)
	}
	return nil
}

// CreateVolume implements storage.Backend.
func (b *Backend) CreateVolume(ctx context.Context, key string, qgroup uint64, from *storage.SnapshotRef) error {
	live := b.livePath(key)
	if _, err := os.Stat(live); err == nil {
		return nil
	}
	var err error
	if from != nil {
		src := filepath.Join(b.snapDir(from.VolumeKey), from.Snapshot)
		_, err = b.btrfs(ctx, "subvolume", "snapshot", "-i", qg(qgroup), src, live)
	} else {
		_, err = b.btrfs(ctx, "subvolume", "create", "-i", qg(qgroup), live)
	}
	if err != nil {
		return fmt.Errorf("create subvolume %s: %w", key, err)
	}
	if from != nil {
		// A writable snapshot whose source lies in another quota group (a clone) or
		// is a read-only snapshot (a revert) leaves the counters inconsistent.
		return b.ensureConsistent(ctx)
	}
	return nil
}

// ensureConsistent rescans quota groups if the kernel flags their counters as
// inconsistent, and waits for the rescan, so usage and limits are exact again.
func (b *Backend) ensureConsistent(ctx context.Context) error {
	data, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", b.fsid, "qgroups", "inconsistent"))
	if err != nil || strings.TrimSpace(string(data)) != "1" {
		return nil // consistent, or no sysfs to tell: nothing to do
	}
	if _, err := b.btrfs(ctx, "quota", "rescan", "-w", b.top); err != nil {
		if !runner.StderrContains(err, "in progress") {
			return fmt.Errorf("quota rescan: %w", err)
		}
		if _, err := b.btrfs(ctx, "quota", "rescan", "-W", b.top); err != nil {
			return fmt.Errorf("wait for quota rescan: %w", err)
		}
	}
	return nil
}

// SetLimit implements storage.Backend. It addresses the group by id against the
// filesystem root, which works even when the group is over its limit.
func (b *Backend) SetLimit(ctx context.Context, qgroup uint64, bytes int64) error {
	lim := "none"
	if bytes > 0 {
		lim = strconv.FormatInt(bytes, 10)
	}
	if _, err := b.btrfs(ctx, "qgroup", "limit", lim, qg(qgroup), b.top); err != nil {
		return fmt.Errorf("limit %s: %w", qg(qgroup), err)
	}
	return nil
}

// SetMode implements storage.Backend.
func (b *Backend) SetMode(ctx context.Context, key string, mode fs.FileMode) error {
	if err := os.Chmod(b.livePath(key), mode); err != nil {
		return fmt.Errorf("chmod %s: %w", key, err)
	}
	return nil
}

// Mount implements storage.Backend: the live subvolume, by its current id, on its own
// mount point.
func (b *Backend) Mount(ctx context.Context, key string) error {
	mp := b.mountPath(key)
	if m, err := isMountPoint(mp); err != nil || m {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	out, err := b.btrfs(ctx, "inspect-internal", "rootid", b.livePath(key))
	if err != nil {
		return fmt.Errorf("subvolume id of %s: %w", key, err)
	}
	id := strings.TrimSpace(string(out))
	if _, err := b.run.Run(ctx, "mount", "-t", "btrfs", "-o", "noatime,subvolid="+id, b.device, mp); err != nil {
		return fmt.Errorf("mount %s: %w", key, err)
	}
	return nil
}

// Unmount implements storage.Backend.
func (b *Backend) Unmount(ctx context.Context, key string) error {
	return b.unmountPath(ctx, b.mountPath(key))
}

func (b *Backend) unmountPath(ctx context.Context, mp string) error {
	for range 8 { // stacked mounts from repeated adoption are unwound one by one
		m, err := isMountPoint(mp)
		if err != nil || !m {
			return err
		}
		if _, err := b.run.Run(ctx, "umount", mp); err != nil {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", mp)
}

// DeleteVolume implements storage.Backend.
func (b *Backend) DeleteVolume(ctx context.Context, key string, qgroup uint64) error {
	if err := b.Unmount(ctx, key); err != nil {
		return err
	}
	if err := os.Remove(b.mountPath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if snapMounts, _ := filepath.Glob(filepath.Join(b.mounts, key+"@*")); len(snapMounts) > 0 {
		for _, mp := range snapMounts {
			if err := b.unmountPath(ctx, mp); err != nil {
				return err
			}
			os.Remove(mp)
		}
	}
	var paths []string
	if entries, err := os.ReadDir(b.snapDir(key)); err == nil {
		for _, e := range entries {
			paths = append(paths, filepath.Join(b.snapDir(key), e.Name()))
		}
	}
	if entries, err := os.ReadDir(filepath.Join(b.base, "retired")); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), key+".") {
				paths = append(paths, filepath.Join(b.base, "retired", e.Name()))
			}
		}
	}
	if _, err := os.Stat(b.livePath(key)); err == nil {
		paths = append(paths, b.livePath(key))
	}
	if err := b.deleteSubvolumes(ctx, paths); err != nil {
		return err
	}
	if err := os.Remove(b.snapDir(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if qgroup == 0 { // unknown (orphan collection): leave groups to their own pass
		return nil
	}
	return b.DestroyQgroup(ctx, qgroup)
}

// deleteSubvolumes deletes subvolumes and waits until the cleaner has dropped them,
// so their quota groups are released.
func (b *Backend) deleteSubvolumes(ctx context.Context, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	var ids []string
	for _, p := range paths {
		out, err := b.btrfs(ctx, "inspect-internal", "rootid", p)
		if err != nil {
			return fmt.Errorf("subvolume id of %s: %w", p, err)
		}
		ids = append(ids, strings.TrimSpace(string(out)))
	}
	args := append([]string{"subvolume", "delete", "--commit-after"}, paths...)
	if _, err := b.btrfs(ctx, args...); err != nil {
		return fmt.Errorf("delete subvolumes: %w", err)
	}
	if _, err := b.btrfs(ctx, append([]string{"subvolume", "sync", b.top}, ids...)...); err != nil {
		return fmt.Errorf("wait for subvolume cleanup: %w", err)
	}
	return nil
}

// DestroyQgroup implements storage.Backend.
func (b *Backend) DestroyQgroup(ctx context.Context, qgroup uint64) error {
	if _, err := b.btrfs(ctx, "qgroup", "destroy", qg(qgroup), b.top); err != nil && !runner.StderrContains(err, "No such file") {
		// A group whose level-0 members are still being cleaned is busy; clear them.
		if runner.StderrContains(err, "busy") {
			b.btrfs(ctx, "qgroup", "clear-stale", b.top) //nolint:errcheck // best effort; the retry below reports
			if _, err2 := b.btrfs(ctx, "qgroup", "destroy", qg(qgroup), b.top); err2 == nil || runner.StderrContains(err2, "No such file") {
				return nil
			}
		}
		return fmt.Errorf("destroy qgroup %s: %w", qg(qgroup), err)
	}
	return nil
}

// SnapshotMountPath implements storage.Backend: beside the volumes' mount points, so
// sandboxes see it appear.
func (b *Backend) SnapshotMountPath(key, snap string) string {
	return filepath.Join(b.mounts, key+"@"+snap)
}

// SnapshotMounted implements storage.Backend.
func (b *Backend) SnapshotMounted(key, snap string) (bool, error) {
	return isMountPoint(b.SnapshotMountPath(key, snap))
}

// MountSnapshot implements storage.Backend.
func (b *Backend) MountSnapshot(ctx context.Context, key, snap string) error {
	mp := b.SnapshotMountPath(key, snap)
	if m, err := isMountPoint(mp); err != nil || m {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return err
	}
	out, err := b.btrfs(ctx, "inspect-internal", "rootid", filepath.Join(b.snapDir(key), snap))
	if err != nil {
		return fmt.Errorf("subvolume id of %s@%s: %w", key, snap, err)
	}
	id := strings.TrimSpace(string(out))
	if _, err := b.run.Run(ctx, "mount", "-t", "btrfs", "-o", "ro,noatime,subvolid="+id, b.device, mp); err != nil {
		return fmt.Errorf("mount %s@%s: %w", key, snap, err)
	}
	return nil
}

// UnmountSnapshot implements storage.Backend.
func (b *Backend) UnmountSnapshot(ctx context.Context, key, snap string) error {
	mp := b.SnapshotMountPath(key, snap)
	if err := b.unmountPath(ctx, mp); err != nil {
		return err
	}
	if err := os.Remove(mp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Snapshot implements storage.Backend.
func (b *Backend) Snapshot(ctx context.Context, key, snap string) (storage.SnapshotStatus, error) {
	p := filepath.Join(b.snapDir(key), snap)
	if _, err := os.Stat(p); err != nil {
		return storage.SnapshotStatus{}, nil
	}
	var err error
	st := storage.SnapshotStatus{Exists: true}
	if st.Mounted, err = isMountPoint(b.SnapshotMountPath(key, snap)); err != nil {
		return st, err
	}
	out, err := b.btrfs(ctx, "inspect-internal", "rootid", p)
	if err != nil {
		return st, fmt.Errorf("subvolume id of %s: %w", p, err)
	}
	q, err := b.qgroupInfo(ctx, "0_"+strings.TrimSpace(string(out)))
	if err != nil {
		return st, err
	}
	st.ExclusiveBytes = q.exclusive
	return st, nil
}

// CreateSnapshot implements storage.Backend: a read-only snapshot in the volume's
// quota group, O(1) whatever the volume holds.
func (b *Backend) CreateSnapshot(ctx context.Context, key, snap string, qgroup uint64) error {
	dir := b.snapDir(key)
	p := filepath.Join(dir, snap)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if _, err := b.btrfs(ctx, "subvolume", "snapshot", "-r", "-i", qg(qgroup), b.livePath(key), p); err != nil {
		return fmt.Errorf("snapshot %s@%s: %w", key, snap, err)
	}
	return nil
}

// DeleteSnapshot implements storage.Backend.
func (b *Backend) DeleteSnapshot(ctx context.Context, key, snap string) error {
	if err := b.UnmountSnapshot(ctx, key, snap); err != nil {
		return err
	}
	p := filepath.Join(b.snapDir(key), snap)
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	return b.deleteSubvolumes(ctx, []string{p})
}

// Retire implements storage.Backend: an atomic rename of the live subvolume.
func (b *Backend) Retire(ctx context.Context, key, tag string) error {
	if _, err := os.Stat(b.livePath(key)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := b.Unmount(ctx, key); err != nil {
		return err
	}
	if err := os.Rename(b.livePath(key), b.retiredPath(key, tag)); err != nil {
		return fmt.Errorf("retire %s: %w", key, err)
	}
	return nil
}

// PurgeRetired implements storage.Backend.
func (b *Backend) PurgeRetired(ctx context.Context, key, tag string) error {
	p := b.retiredPath(key, tag)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return b.deleteSubvolumes(ctx, []string{p})
}

// Inventory implements storage.Backend.
func (b *Backend) Inventory(ctx context.Context) (storage.Inventory, error) {
	inv := storage.Inventory{Snapshots: map[string][]string{}}
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			inv.Volumes = append(inv.Volumes, k)
		}
	}
	for _, d := range []string{filepath.Join(b.base, "volumes"), b.mounts} {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return inv, err
		}
		for _, e := range entries {
			k, _, _ := strings.Cut(e.Name(), "@") // snapshot mounts are key@snap
			add(k)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(b.base, "retired")); err == nil {
		for _, e := range entries {
			k, _, _ := strings.Cut(e.Name(), ".")
			add(k)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(b.base, "snapshots")); err == nil {
		for _, e := range entries {
			snaps, _ := os.ReadDir(filepath.Join(b.base, "snapshots", e.Name()))
			for _, s := range snaps {
				inv.Snapshots[e.Name()] = append(inv.Snapshots[e.Name()], s.Name())
			}
			add(e.Name())
		}
	}
	out, err := b.btrfs(ctx, "qgroup", "show", "--raw", b.top)
	if err != nil {
		return inv, fmt.Errorf("qgroup show: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "1/") {
			if n, err := strconv.ParseUint(f[0][2:], 10, 64); err == nil {
				inv.Qgroups = append(inv.Qgroups, n)
			}
		}
	}
	return inv, nil
}

func isMountPoint(path string) (bool, error) { return mountinfo.IsMountPoint(path) }

func mountSourceOf(path string) (string, error) { return mountinfo.Source(path) }
