package btrfs

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/mountinfo"
)

// runHidden runs f on an OS thread of its own whose mount namespace is a private
// copy of the host's with everything at and below each of hide detached, so a
// process f starts (the fork happens on the calling thread) sees a mount table
// that does not grow with the number of volumes. The namespace lives as long as
// f and what it started: nothing of the host stays pinned by it, and the thread
// goes back to the process's namespace afterwards.
//
// mkfs.btrfs needs it: to check that its target is not in use it reads the whole
// mount table and resolves every loop device in it, which made it four times
// slower at 1,000 volumes than at 10 (42 ms against 10 ms, docs/benchmarks.md).
// Its target, a new image file in the store, is there as in the host.
//
// A directory of hide that is a mount point goes in one detach; one that is not
// costs a detach per mount below it. Where the namespace cannot be made (no
// privilege), f runs here, in the host's.
func runHidden(ctx context.Context, hide []string, f func() error) error {
	errc := make(chan error, 1)
	go hiddenThread(hide, f, errc)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hiddenThread runs f on a locked OS thread, never the process's main thread
// (what /proc/self shows, to Basin and to every tool, is the main thread's
// namespace), in a mount namespace of its own, then puts the thread back into
// the process's namespace and current directory and returns it to the pool.
//
// The thread must not die: a child started with Pdeathsig (a sandbox's holder,
// its daemons) is killed when the thread that forked it exits, and any thread
// may have forked one. Only if it cannot go back does it stay locked and end
// with the goroutine (logged by the caller through the error).
func hiddenThread(hide []string, f func() error, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// While this goroutine holds the main thread, the next one cannot have it.
		started := make(chan struct{})
		go func() {
			close(started)
			hiddenThread(hide, f, errc)
		}()
		<-started
		runtime.UnlockOSThread()
		return
	}
	home, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		errc <- f()
		return
	}
	defer unix.Close(home)
	cwd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		errc <- f()
		return
	}
	defer unix.Close(cwd)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		runtime.UnlockOSThread() // unchanged: the thread may go back to the pool
		errc <- f()
		return
	}
	hidden := hideMounts(hide) == nil
	var ferr error
	if hidden {
		ferr = f()
	}
	// Back home: the process's namespace (setns also moves the thread's root and
	// directory to that namespace's root), then the directory it had.
	if err := unix.Setns(home, unix.CLONE_NEWNS); err != nil {
		errc <- errors.Join(ferr, fmt.Errorf("tool thread left in its namespace: %w", err))
		return // stays locked: the thread ends with this goroutine
	}
	if err := unix.Fchdir(cwd); err != nil {
		errc <- errors.Join(ferr, fmt.Errorf("tool thread's directory: %w", err))
		return
	}
	runtime.UnlockOSThread()
	if !hidden {
		ferr = f() // half hidden is no place to run it: here, in the host's
	}
	errc <- ferr
}

func hideMounts(hide []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	for _, dir := range hide {
		top, err := mountinfo.IsMountPoint(dir)
		if err != nil {
			return err
		}
		if top {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				return err
			}
			continue
		}
		es, err := mountinfo.Under(dir) // this thread's table, deepest first
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := unix.Unmount(e.MountPoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
	}
	return nil
}
