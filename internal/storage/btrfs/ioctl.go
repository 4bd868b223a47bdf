package btrfs

import (
	"bytes"
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
)

// The btrfs ioctls Basin calls itself rather than through btrfs-progs: both
// sit on hot paths (observation, scheduled snapshots) where a fork per call adds
// up.

// btrfsInoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type btrfsInoLookupArgs struct {
	TreeID   uint64
	ObjectID uint64
	Name     [4080]byte
}

// btrfsIocInoLookup is BTRFS_IOC_INO_LOOKUP: _IOWR(0x94, 18, 4096 bytes).
const btrfsIocInoLookup = 0xd0009412

func inoLookupTreeID(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	args := btrfsInoLookupArgs{ObjectID: 256} // BTRFS_FIRST_FREE_OBJECTID: a subvolume's root
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocInoLookup, uintptr(unsafe.Pointer(&args))); e != 0 {
		return 0, e
	}
	return args.TreeID, nil
}

// btrfsVolArgsV2 is struct btrfs_ioctl_vol_args_v2.
type btrfsVolArgsV2 struct {
	FD      int64
	TransID uint64
	Flags   uint64
	Unused  [4]uint64 // size and qgroup_inherit: none
	Name    [4040]byte
}

const (
	// btrfsIocSnapCreateV2 is BTRFS_IOC_SNAP_CREATE_V2: _IOW(0x94, 23, 4096 bytes).
	btrfsIocSnapCreateV2 = 0x50009417
	btrfsSubvolRdonly    = 1 << 1
)

// snapshotReadOnly makes dst a read-only snapshot of subvolume src, as `btrfs
// subvolume snapshot -r src dst` does.
func snapshotReadOnly(src, dst string) error {
	name := filepath.Base(dst)
	var args btrfsVolArgsV2
	if len(name) >= len(args.Name) {
		return fmt.Errorf("snapshot name %q too long", name)
	}
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(filepath.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	args.FD = int64(sfd)
	args.Flags = btrfsSubvolRdonly
	copy(args.Name[:], name)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(dfd), btrfsIocSnapCreateV2, uintptr(unsafe.Pointer(&args))); e != 0 {
		return fmt.Errorf("snapshot %s as %s: %w", src, dst, e)
	}
	return nil
}

// btrfsFsInfoArgs is struct btrfs_ioctl_fs_info_args (1 KiB); only the fields
// before fsid matter here.
type btrfsFsInfoArgs struct {
	MaxID      uint64
	NumDevices uint64
	FSID       [16]byte
	Rest       [1024 - 32]byte
}

// btrfsIocFsInfo is BTRFS_IOC_FS_INFO: _IOR(0x94, 31, 1024 bytes).
const btrfsIocFsInfo = 0x8400941f

// fsidOf returns the id of the btrfs mounted on path, as its sysfs directory
// (/sys/fs/btrfs/<fsid>) is named: one ioctl, not a search of every filesystem's
// directory.
func fsidOf(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var args btrfsFsInfoArgs
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocFsInfo, uintptr(unsafe.Pointer(&args))); e != 0 {
		return "", fmt.Errorf("fs info of %s: %w", path, e)
	}
	u := args.FSID
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// btrfsDevInfoArgs is struct btrfs_ioctl_dev_info_args (4 KiB).
type btrfsDevInfoArgs struct {
	DevID      uint64
	UUID       [16]byte // zero: look the device up by DevID alone
	BytesUsed  uint64
	TotalBytes uint64
	Unused     [379]uint64 // fsid (Linux 6.3 on) and padding
	Path       [1024]byte
}

// btrfsIocDevInfo is BTRFS_IOC_DEV_INFO: _IOWR(0x94, 30, 4096 bytes).
const btrfsIocDevInfo = 0xd000941e

// btrfsTopLevel is the id of a btrfs's top-level subvolume, and 256 the inode
// of every subvolume's root directory.
const (
	btrfsTopLevel = 5
	btrfsRootIno  = 256
)

// topMount reports whether a btrfs's top level (subvolume 5, its root
// directory) is what path shows, and if so the path of its one device, as the
// mount table would give it. mounted says whether anything is mounted on path
// at all. It costs a few system calls whatever the size of the mount table:
// after a crash every volume's mount is checked this way, and a read of the
// table per volume made that start quadratic in the number of volumes.
func topMount(path string) (source string, top, mounted bool, err error) {
	mounted, err = mountinfo.IsMountPoint(path)
	if err != nil || !mounted {
		return "", false, mounted, err
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(path, &sf); err != nil {
		return "", false, true, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", false, true, err
	}
	if sf.Type != unix.BTRFS_SUPER_MAGIC || st.Ino != btrfsRootIno {
		return "", false, true, nil
	}
	if id, err := subvolID(path); err != nil || id != btrfsTopLevel {
		return "", false, true, err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, true, err
	}
	defer unix.Close(fd)
	var fi btrfsFsInfoArgs
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocFsInfo, uintptr(unsafe.Pointer(&fi))); e != 0 {
		return "", false, true, fmt.Errorf("fs info of %s: %w", path, e)
	}
	if fi.NumDevices != 1 {
		return "", false, true, nil // not a volume's: those have one device
	}
	for id := uint64(1); id <= fi.MaxID; id++ {
		args := btrfsDevInfoArgs{DevID: id}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), btrfsIocDevInfo, uintptr(unsafe.Pointer(&args)))
		if e == unix.ENODEV {
			continue // a device id no longer in use (replaced)
		}
		if e != 0 {
			return "", false, true, fmt.Errorf("device info of %s: %w", path, e)
		}
		n := bytes.IndexByte(args.Path[:], 0)
		if n < 0 {
			n = len(args.Path)
		}
		return string(args.Path[:n]), true, true, nil
	}
	return "", false, true, fmt.Errorf("device info of %s: no device among ids 1..%d", path, fi.MaxID)
}
