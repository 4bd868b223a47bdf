package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
)

// The snapshot directory (NFS clients' .snapshot, docs/architecture.md): a tmpfs
// per volume holding one empty directory named after each mounted snapshot. Basin
// writes it through DataDir/fs/<key>@.snapshot, which no sandbox sees; it is
// mounted read-only, nosuid, nodev and noexec on DataDir/mounts/<key>@.snapshot,
// where Ganesha exports it.

const snapDirSuffix = "@.snapshot"

// snapDirOptions bound the tmpfs: it only ever holds empty directories.
const snapDirOptions = "size=1m,nr_inodes=65536,mode=0755"

// SnapshotDirPath implements storage.Backend.
func (b *Backend) SnapshotDirPath(key string) string {
	return filepath.Join(b.mounts, key+snapDirSuffix)
}

// snapDirRW is where Basin writes the snapshot directory.
func (b *Backend) snapDirRW(key string) string { return filepath.Join(b.fsDir, key+snapDirSuffix) }

// MountSnapshotDir implements storage.Backend. A directory left mounted by an
// earlier run is kept and its entries brought up to date.
func (b *Backend) MountSnapshotDir(ctx context.Context, key string) error {
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	rw, ro := b.snapDirRW(key), b.SnapshotDirPath(key)
	for _, d := range []string{rw, ro} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	mounted, err := mountinfo.IsMountPoint(rw)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount("tmpfs", rw, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, snapDirOptions); err != nil {
			return fmt.Errorf("mount the snapshot directory of %s: %w", key, err)
		}
	}
	if err := b.syncSnapDir(key); err != nil {
		return err
	}
	if same, err := sameMount(ro, rw); err != nil || same {
		return err
	}
	if err := b.unmountPath(ctx, ro); err != nil {
		return err
	}
	return bindReadOnly(rw, ro)
}

// syncSnapDir makes the snapshot directory's entries the volume's mounted
// snapshots.
func (b *Backend) syncSnapDir(key string) error {
	rw := b.snapDirRW(key)
	want := map[string]bool{}
	snaps, err := os.ReadDir(filepath.Join(b.fsPath(key), "snapshots"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, s := range snaps {
		shows, err := showsSubvolume(b.SnapshotMountPath(key, s.Name()), b.snapPath(key, s.Name()))
		if err != nil {
			return err
		}
		want[s.Name()] = shows
	}
	have, err := os.ReadDir(rw)
	if err != nil {
		return err
	}
	for _, e := range have {
		if !want[e.Name()] {
			if err := os.Remove(filepath.Join(rw, e.Name())); err != nil {
				return err
			}
		}
		delete(want, e.Name())
	}
	for name, mounted := range want {
		if mounted {
			if err := mkdirEntry(rw, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func mkdirEntry(dir, name string) error {
	if err := os.Mkdir(filepath.Join(dir, name), 0o555); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// listInSnapDir adds (or removes) snap's entry if the volume's snapshot
// directory is mounted.
func (b *Backend) listInSnapDir(key, snap string, listed bool) error {
	rw := b.snapDirRW(key)
	mounted, err := mountinfo.IsMountPoint(rw)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !mounted {
		return nil
	}
	if listed {
		return mkdirEntry(rw, snap)
	}
	if err := os.Remove(filepath.Join(rw, snap)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// UnmountSnapshotDir implements storage.Backend.
func (b *Backend) UnmountSnapshotDir(ctx context.Context, key string) error {
	for _, d := range []string{b.SnapshotDirPath(key), b.snapDirRW(key)} {
		if err := b.unmountPath(ctx, d); err != nil {
			return err
		}
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// sameMount reports whether mount point dst shows the filesystem mounted on src.
func sameMount(dst, src string) (bool, error) {
	mounted, err := mountinfo.IsMountPoint(dst)
	if err != nil || !mounted {
		return false, err
	}
	var a, b unix.Stat_t
	if err := unix.Stat(dst, &a); err != nil {
		return false, err
	}
	if err := unix.Stat(src, &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev, nil
}

// bindReadOnly mounts src on dst read-only, nosuid, nodev and noexec. The mount
// is made whole before it is attached (open_tree, mount_setattr, move_mount):
// a bind followed by a read-only remount would reach the sandboxes' copies of
// dst read-write, since a remount does not propagate.
func bindReadOnly(src, dst string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}
