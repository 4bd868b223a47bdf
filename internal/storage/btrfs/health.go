package btrfs

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/storage"
)

// Health, without running a process: per filesystem a statfs of each place Basin
// mounted it read-write (the flags say whether it is read-only now: btrfs turns
// itself read-only when a write fails, e.g. when the disk under a loop device's
// image fills, and so does an administrator's `mount -o remount,ro`), and the
// error counters of its devices from sysfs
// (/sys/fs/btrfs/<fsid>/devinfo/<devid>/error_stats, what `btrfs device stats`
// prints). btrfs keeps those counters on disk, so a filesystem is faulted only
// when they grow past what they were when this Basin first saw it, and healthy
// again once an administrator resets them (`btrfs device stats -z`) or Basin
// restarts. A volume is checked only while its filesystem is mounted as it was
// opened: statfs of an empty mount point would report the data directory's.

// healthState is what ObserveHealth remembers between passes. Its zero value is
// ready to use.
type healthState struct {
	mu sync.Mutex
	// baseline: a filesystem's devices' errors when it was first seen, by fsid.
	baseline map[string]int64
	// sysfs is /sys/fs/btrfs ("" = that); tests give a directory of their own.
	sysfs string
}

// ObserveHealth implements storage.Backend.
func (b *Backend) ObserveHealth(ctx context.Context) (storage.Health, error) {
	h := storage.Health{Store: b.storeHealth(), Volumes: map[string]storage.Fault{}}
	b.mu.Lock()
	vols := maps.Clone(b.vols)
	b.mu.Unlock()
	for key, v := range vols {
		if err := ctx.Err(); err != nil {
			return h, err
		}
		if v.topDev == 0 || statDev(b.fsPath(key)) != v.topDev {
			continue // not open as it was: the resync's to repair, not a fault
		}
		paths := []string{b.fsPath(key)}
		// The live mount too, if it shows this volume's live data (its own flags:
		// a remount of that mount alone makes it read-only there).
		if live := statDev(b.livePath(key)); live != 0 && statDev(b.MountPath(key)) == live {
			paths = append(paths, b.MountPath(key))
		}
		h.Volumes[key] = b.health.check(v.uuid, paths)
	}
	return h, nil
}

// storeHealth checks the node store: its image's btrfs, or the filesystem of the
// directory it was given (whose device counters are read only if it is a btrfs).
func (b *Backend) storeHealth() storage.Fault {
	dir := b.imagesDir()
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return storage.Fault{Reason: storage.FaultIOErrors, Detail: fmt.Sprintf("statfs of the store %s: %v", dir, err)}
	}
	if s.Type != unix.BTRFS_SUPER_MAGIC {
		return readOnly(dir, s)
	}
	fsid, err := fsidOf(dir)
	if err != nil {
		return storage.Fault{Reason: storage.FaultIOErrors, Detail: fmt.Sprintf("the store %s: %v", dir, err)}
	}
	return b.health.check(fsid, []string{dir})
}

// readOnly is the fault of a filesystem Basin mounted read-write whose statfs on
// path says it is read-only now.
func readOnly(path string, s unix.Statfs_t) storage.Fault {
	if s.Flags&unix.ST_RDONLY == 0 {
		return storage.Fault{}
	}
	return storage.Fault{Reason: storage.FaultReadOnly, Detail: path + " is read-only, though Basin mounted it read-write"}
}

// check returns the fault of btrfs filesystem fsid, mounted read-write on paths.
func (hs *healthState) check(fsid string, paths []string) storage.Fault {
	for _, p := range paths {
		var s unix.Statfs_t
		if err := unix.Statfs(p, &s); err != nil {
			return storage.Fault{Reason: storage.FaultIOErrors, Detail: fmt.Sprintf("statfs %s: %v", p, err)}
		}
		if f := readOnly(p, s); !f.OK() {
			return f
		}
	}
	counts, err := hs.errorStats(fsid)
	if err != nil {
		// A filesystem without the counters (an older kernel) is judged by its
		// flags alone.
		return storage.Fault{}
	}
	total := sum(counts)
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.baseline == nil {
		hs.baseline = map[string]int64{}
	}
	base, seen := hs.baseline[fsid]
	if !seen || total < base { // first seen, or reset by the administrator
		hs.baseline[fsid] = total
		return storage.Fault{}
	}
	if total == base {
		return storage.Fault{}
	}
	return storage.Fault{Reason: storage.FaultIOErrors, Detail: fmt.Sprintf("the devices of btrfs %s (%s) reported %d I/O errors since Basin first saw it: %s",
		fsid, paths[0], total-base, formatCounts(counts))}
}

// errorStats sums each counter of error_stats over the devices of filesystem fsid.
func (hs *healthState) errorStats(fsid string) (map[string]int64, error) {
	root := hs.sysfs
	if root == "" {
		root = "/sys/fs/btrfs"
	}
	files, err := filepath.Glob(filepath.Join(root, fsid, "devinfo", "*", "error_stats"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no error counters for btrfs %s", fsid)
	}
	out := map[string]int64{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		counts, err := parseErrorStats(string(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for k, n := range counts {
			out[k] += n
		}
	}
	return out, nil
}

// parseErrorStats reads a device's error_stats: lines of a counter's name and
// value ("write_errs 0").
func parseErrorStats(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("unexpected line %q", strings.TrimSpace(line))
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("unexpected count in %q", strings.TrimSpace(line))
		}
		out[f[0]] += n
	}
	return out, nil
}

func sum(counts map[string]int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}

func formatCounts(counts map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}
