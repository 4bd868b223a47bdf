package btrfs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Loop devices and mounts by system call: losetup and mount(8) are processes
// (~3 and ~5 ms each), and mount(8) reads the whole mount table before it
// mounts. Start opens every volume, a restart re-mounts every volume's live
// data: at 1,000 volumes those processes were most of a restart.

// attachLoop attaches img to a free loop device (LOOP_CTL_GET_FREE, then
// LOOP_CONFIGURE; a device another process took meanwhile is skipped) and
// returns its path. With directIO the device reads and writes img with O_DIRECT.
func attachLoop(img string, directIO bool) (string, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: "/dev/loop-control", Err: err}
	}
	defer unix.Close(ctl)
	file, err := unix.Open(img, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: img, Err: err}
	}
	defer unix.Close(file)
	for range 16 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", &os.PathError{Op: "open", Path: dev, Err: err}
		}
		cfg := unix.LoopConfig{Fd: uint32(file)}
		if directIO {
			cfg.Info.Flags = unix.LO_FLAGS_DIRECT_IO
		}
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
		err = unix.IoctlLoopConfigure(fd, &cfg)
		unix.Close(fd)
		if errors.Is(err, unix.EBUSY) {
			continue // another process took it first
		}
		if err != nil {
			return "", fmt.Errorf("attach %s to %s: %w", img, dev, err)
		}
		return dev, nil
	}
	return "", fmt.Errorf("attach %s: every free loop device was taken before it could be configured", img)
}

// mountBtrfs mounts dev's btrfs on dir with options as mount(8) -o takes them:
// the flags ro, noatime, nosuid, nodev and noexec, and btrfs's own (subvol=,
// subvolid=) passed through.
func mountBtrfs(dev, dir, options string) error {
	var flags uintptr
	var data []string
	for _, o := range strings.Split(options, ",") {
		switch o {
		case "":
		case "ro":
			flags |= unix.MS_RDONLY
		case "noatime":
			flags |= unix.MS_NOATIME
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		default:
			data = append(data, o)
		}
	}
	if err := unix.Mount(dev, dir, "btrfs", flags, strings.Join(data, ",")); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %w", dev, dir, options, err)
	}
	return nil
}
