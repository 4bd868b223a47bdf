package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// cbreak makes the terminal f deliver each key as it is pressed, without
// echoing it (Ctrl-C still interrupts), and returns how to restore it. ok is
// false if f is not a terminal.
func cbreak(f *os.File) (restore func(), ok bool) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, false
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return nil, false
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, true
}
