package btrfs

import (
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The two btrfs ioctls Basin calls itself rather than through btrfs-progs: both
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
