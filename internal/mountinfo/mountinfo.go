// Package mountinfo answers questions about the mount table of the calling process
// (/proc/thread-self/mountinfo: the calling thread's namespace). It imports nothing of Basin's; drivers use it.
package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Entry is one line of mountinfo.
type Entry struct {
	MountPoint string
	Root       string // the path, inside its filesystem, of what is mounted (a btrfs subvolume: "/live")
	FSType     string
	Source     string // e.g. /dev/loop3
	Options    string // per-mount options, e.g. "rw,nosuid,nodev,noexec,noatime"
}

// Lookup returns the entry mounted on path (the last one wins: it is on top).
func Lookup(path string) (Entry, bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Entry{}, false, err
	}
	var e Entry
	found := false
	err = scan(func(x Entry) {
		if x.MountPoint == abs {
			e, found = x, true
		}
	})
	return e, found, err
}

// Under returns the entries mounted at or below dir, deepest and latest first, the
// order in which they can be unmounted.
func Under(dir string) ([]Entry, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	err = scan(func(x Entry) {
		if x.MountPoint == abs || strings.HasPrefix(x.MountPoint, abs+"/") {
			out = append(out, x)
		}
	})
	// Later lines are mounted later; reverse so the last mounted comes first, then
	// order deeper mount points before their parents.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	sortDeepestFirst(out)
	return out, err
}

func sortDeepestFirst(es []Entry) {
	depth := func(e Entry) int { return strings.Count(e.MountPoint, "/") }
	// insertion sort keeps the latest-first order among equal depths
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && depth(es[j]) > depth(es[j-1]); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// MountPoints returns every mount point of the table, read once: for callers that
// ask about many paths (IsMountPoint reads the whole table for each).
func MountPoints() (map[string]bool, error) {
	out := map[string]bool{}
	err := scan(func(x Entry) { out[x.MountPoint] = true })
	return out, err
}

// IsMountPoint reports whether path is a mount point. It costs a few system calls
// whatever the size of the mount table: opening path from its parent without
// crossing a mount (openat2 RESOLVE_NO_XDEV) fails with EXDEV exactly when
// something is mounted on it, a bind mount of the same filesystem included. Only
// where openat2 is refused (kernels before 5.6, seccomp) does it read
// /proc/self/mountinfo, which costs a parse of every mount.
func IsMountPoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if abs == "/" {
		return true, nil
	}
	if ok, err := crossesMount(abs); !errors.Is(err, errNoOpenat2) {
		return ok, err
	}
	_, ok, err := Lookup(abs)
	return ok, err
}

var errNoOpenat2 = errors.New("openat2 unavailable")

// crossesMount reports whether reaching abs from its parent crosses a mount.
func crossesMount(abs string) (bool, error) {
	parent, err := unix.Open(filepath.Dir(abs), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return false, nil
		}
		return false, &os.PathError{Op: "open", Path: filepath.Dir(abs), Err: err}
	}
	defer unix.Close(parent)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_XDEV}
	for {
		fd, err := unix.Openat2(parent, filepath.Base(abs), how)
		switch {
		case err == nil:
			unix.Close(fd)
			return false, nil
		case errors.Is(err, unix.EXDEV):
			return true, nil
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
			return false, nil
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
			return false, errNoOpenat2
		default:
			return false, &os.PathError{Op: "openat2", Path: abs, Err: err}
		}
	}
}

// Source returns the device mounted on path.
func Source(path string) (string, error) {
	e, ok, err := Lookup(path)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%s is not a mount point", path)
	}
	return e.Source, nil
}

// reads counts the reads of the mount table.
var reads atomic.Int64

// Reads returns how many times this process has read the whole mount table, for
// tests that hold a path to a cost that does not grow with the number of mounts.
func Reads() int64 { return reads.Load() }

func scan(fn func(Entry)) error {
	reads.Add(1)
	// The calling thread's table: a thread may have a mount namespace of its own
	// (storage/btrfs runs tools on one), and /proc/self is the main thread's.
	f, err := os.Open("/proc/thread-self/mountinfo")
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.Open("/proc/self/mountinfo") // before Linux 3.17
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseLine(sc.Text()); ok {
			fn(e)
		}
	}
	return sc.Err()
}

// parseLine parses "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue".
func parseLine(line string) (Entry, bool) {
	fields := strings.Fields(line)
	if len(fields) < 10 {
		return Entry{}, false
	}
	e := Entry{Root: unescape(fields[3]), MountPoint: unescape(fields[4]), Options: fields[5]}
	for i, fl := range fields {
		if fl == "-" && i+2 < len(fields) {
			e.FSType, e.Source = fields[i+1], unescape(fields[i+2])
			return e, true
		}
	}
	return Entry{}, false
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
