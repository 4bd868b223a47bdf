// Package localfs holds what every storage backend does with a node's own mount
// table: bind mounts made whole before they are attached, unmounts of stacked
// mounts, and a volume's snapshot directory (NFS clients' .snapshot,
// docs/architecture.md): a small tmpfs holding one empty directory named after
// each mounted snapshot, written at one path no sandbox sees and shown
// read-only, nosuid, nodev and noexec at another, where Ganesha exports it.
// Backends decide which snapshots are mounted; SnapDir keeps the directory's
// entries in step and its mounts whole.
package localfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/runner"
)

// options bound the tmpfs: it only ever holds empty directories.
const options = "size=1m,nr_inodes=65536,mode=0755"

// SnapDir is one volume's snapshot directory: RW is where Basin writes it, RO
// where it is shown.
type SnapDir struct{ RW, RO string }

// Mount mounts the directory (keeping one an earlier run left mounted), makes its
// entries exactly the names in mounted, and shows it read-only on RO. unmount
// unmounts whatever else is on RO.
func (d SnapDir) Mount(mounted []string, unmount func(path string) error) error {
	for _, p := range []string{d.RW, d.RO} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	on, err := mountinfo.IsMountPoint(d.RW)
	if err != nil {
		return err
	}
	if !on {
		if err := unix.Mount("tmpfs", d.RW, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, options); err != nil {
			return fmt.Errorf("mount the snapshot directory %s: %w", d.RW, err)
		}
	}
	if err := d.sync(mounted); err != nil {
		return err
	}
	if same, err := SameMount(d.RO, d.RW); err != nil || same {
		return err
	}
	if err := unmount(d.RO); err != nil {
		return err
	}
	return BindReadOnly(d.RW, d.RO)
}

// sync makes the entries exactly the names in mounted.
func (d SnapDir) sync(mounted []string) error {
	want := map[string]bool{}
	for _, n := range mounted {
		want[n] = true
	}
	have, err := os.ReadDir(d.RW)
	if err != nil {
		return err
	}
	for _, e := range have {
		if !want[e.Name()] {
			if err := os.Remove(filepath.Join(d.RW, e.Name())); err != nil {
				return err
			}
		}
		delete(want, e.Name())
	}
	for name := range want {
		if err := mkdirEntry(d.RW, name); err != nil {
			return err
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

// List adds (listed) or removes snap's entry if the directory is mounted.
func (d SnapDir) List(snap string, listed bool) error {
	on, err := mountinfo.IsMountPoint(d.RW)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !on {
		return nil
	}
	if listed {
		return mkdirEntry(d.RW, snap)
	}
	if err := os.Remove(filepath.Join(d.RW, snap)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// UnmountSnapshot takes snap out of the directory first (so that it never
// lists a snapshot on its way out), then unmounts the snapshot's mount point mp
// and removes it.
func (d SnapDir) UnmountSnapshot(ctx context.Context, run runner.Runner, snap, mp string) error {
	if err := d.List(snap, false); err != nil {
		return err
	}
	if err := Unmount(ctx, run, mp); err != nil {
		return err
	}
	if err := os.Remove(mp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Unmount unmounts both paths with unmount and removes them.
func (d SnapDir) Unmount(unmount func(path string) error) error {
	for _, p := range []string{d.RO, d.RW} {
		if err := unmount(p); err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// SameMount reports whether mount point dst shows the filesystem mounted on src.
func SameMount(dst, src string) (bool, error) {
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

// BindReadOnly mounts src on dst read-only, nosuid, nodev and noexec.
func BindReadOnly(src, dst string) error {
	return Bind(src, dst, unix.MOUNT_ATTR_RDONLY)
}

// Bind mounts src on dst nosuid, nodev and noexec, with attrs besides
// (unix.MOUNT_ATTR_*). The mount is made whole before it is attached
// (open_tree, mount_setattr, move_mount): a bind followed by a remount would
// reach the sandboxes' copies of dst without the attributes, since a remount
// does not propagate.
func Bind(src, dst string, attrs uint64) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: attrs | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// Unmount unmounts whatever is mounted on mp, stacked mounts one by one (at most
// eight); a missing mp is unmounted already.
func Unmount(ctx context.Context, run runner.Runner, mp string) error {
	for range 8 {
		m, err := mountinfo.IsMountPoint(mp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !m {
			return err
		}
		if _, err := run.Run(ctx, "umount", mp); err != nil {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", mp)
}
