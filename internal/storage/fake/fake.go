// Package fake is an in-memory storage.Backend that models the state a real backend
// keeps — volume filesystems and their sizes, live data, the copy a revert sets
// aside, snapshots, mounts and the bytes files hold (shared between a volume's live
// data and its snapshots as btrfs extents are) — so controller tests assert outcomes
// rather than call sequences. It passes the same conformance suite as the real
// backend (storage/storagetest).
//
// Tests can fail any method (Fail), block a mutating call inside the backend (Gate),
// stop a revert at a step as a crash would (SetFailpoint), check that two
// mutating calls on one volume never overlapped (MaxConcurrent), turn a volume's
// filesystem or the whole store read-only or have it report I/O errors as a
// failing disk would (SetFault, SetStoreFault), and leave a create's unfinished
// filesystem behind (LeaveUnfinished).
package fake

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/basin-nas/basin/internal/storage"
)

// extent is one written file content; copies (snapshots, clones, reverts) share it,
// as btrfs shares extents, so usage counts it once per volume.
type extent struct{ data []byte }

// tree is a directory of files: the live data, a snapshot or a set-aside copy.
type tree struct {
	mode  fs.FileMode
	files map[string]*extent
}

func (t *tree) copy() *tree {
	return &tree{mode: t.mode, files: maps.Clone(t.files)}
}

type snapshot struct {
	data    *tree
	mounted bool
}

type volume struct {
	size    int64
	live    *tree // nil: no live data (a revert cut short after setting it aside)
	aside   *tree // the copy an unfinished revert set aside
	mounted bool
	base    int64 // bytes used besides files (SetUsed)
	from    *storage.SnapshotRef
	snaps   map[string]*snapshot
	snapDir bool // the snapshot directory is mounted
	fault   storage.Fault
	// unfinished: a create cut short left this filesystem (the real backend's
	// ".new" image); it holds nothing and is not a volume yet.
	unfinished bool
	// copying: the EnsureVolume calls a background clone still answers
	// ErrInProgress (CloneCalls); it is no volume yet.
	copying int
	// copyTotal is the bytes a background clone copies (its Progress.Total).
	copyTotal int64
}

// size is the bytes of t's files.
func (t *tree) size() int64 {
	var n int64
	for _, e := range t.files {
		n += int64(len(e.data))
	}
	return n
}

// progress is what a background clone with copying calls left answers: as
// far as the calls made of CloneCalls.
func (b *Backend) progress(v *volume) error {
	return &storage.Progress{Done: v.copyTotal * int64(b.CloneCalls-1-v.copying) / int64(b.CloneCalls), Total: v.copyTotal}
}

// emptyFS is what a new, empty volume uses: its filesystem's own metadata.
const emptyFS = 16 << 10

// Backend is the fake. Its zero value is not usable; call New.
type Backend struct {
	// Gate, if set, is called with the method's name and the volume's key at the
	// start of every mutating call, before the call takes effect, outside any lock:
	// a test blocks in it to hold an operation inside the backend. Set it before
	// the calls it should see.
	Gate func(op, key string)
	// StoreSize is the store's size StoreSpace reports; 0 = 1 PiB. Volumes are
	// thick: each takes its capacity from it, and a create or growth past it
	// fails with storage.ErrStoreFull, as on the real backend.
	StoreSize int64
	// CloneCalls, if above 0, makes clones copy in the background as CephFS's
	// do: a clone's EnsureVolume answers storage.ErrInProgress this many times
	// before the clone is whole (and observed), and Capabilities says
	// AsyncClone. Set it before the clones it should see.
	CloneCalls int

	mu          sync.Mutex
	fenced      []string // addresses FenceClients cut off, in order, until UnfenceClients
	vols        map[string]*volume
	failures    map[string]error
	calls       map[string]int
	inflight    map[string]int
	maxInflight map[string]int
	failpoint   func(op, key, step string) error
	notes       map[string]string // SetSpaceNote
	storeFault  storage.Fault
}

var _ storage.Backend = (*Backend)(nil)

// New returns an empty fake store.
func New() *Backend {
	return &Backend{vols: map[string]*volume{}, failures: map[string]error{}, calls: map[string]int{},
		inflight: map[string]int{}, maxInflight: map[string]int{}, notes: map[string]string{}}
}

// Fail makes every later call of method fail with err (nil clears it).
func (b *Backend) Fail(method string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.failures, method)
	} else {
		b.failures[method] = err
	}
}

// SetFailpoint makes Revert call fn after each of its steps ("unmounted",
// "set-aside", "copied"); an error from fn stops Revert there, leaving what a crash
// at that point would leave. nil clears it.
func (b *Backend) SetFailpoint(fn func(op, key, step string) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failpoint = fn
}

// CallCount returns how often method was called.
func (b *Backend) CallCount(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[method]
}

// MaxConcurrent returns the most mutating calls on volume key that were ever in the
// backend at once (1 when calls never overlapped).
func (b *Backend) MaxConcurrent(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxInflight[key]
}

// observe starts an observing call: counted and failable, never gated. On success
// b.mu is held.
func (b *Backend) observe(ctx context.Context, op string) error {
	b.mu.Lock()
	b.calls[op]++
	err := b.failures[op]
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		b.mu.Unlock()
	}
	return err
}

// begin starts a mutating call on key: counted, gated, failable. On success b.mu is
// held and the caller must defer b.end(key).
func (b *Backend) begin(ctx context.Context, op, key string) error {
	b.mu.Lock()
	b.calls[op]++
	b.inflight[key]++
	b.maxInflight[key] = max(b.maxInflight[key], b.inflight[key])
	gate := b.Gate
	b.mu.Unlock()
	if gate != nil {
		gate(op, key)
	}
	b.mu.Lock()
	err := b.failures[op]
	if err == nil {
		err = ctx.Err()
	}
	if err == nil && writes[op] && b.readOnly(key) {
		err = &fs.PathError{Op: op, Path: b.MountPath(key), Err: syscall.EROFS}
	}
	if err != nil {
		b.inflight[key]--
		b.mu.Unlock()
	}
	return err
}

// writes are the mutating calls that write into a volume's filesystem, which a
// read-only filesystem refuses. Calls with nothing to do write nothing, as on
// the real backend: EnsureVolume of a volume that exists (refused for a new one
// in a read-only store), DeleteSnapshot of an absent snapshot, DeleteVolume of
// an absent volume.
var writes = map[string]bool{"Resize": true, "SetMode": true, "Revert": true, "EnsureSnapshot": true}

// readOnly reports whether volume key's filesystem, or the store, is read-only.
func (b *Backend) readOnly(key string) bool {
	if b.storeFault.Reason == storage.FaultReadOnly {
		return true
	}
	v, ok := b.vols[key]
	return ok && v.fault.Reason == storage.FaultReadOnly
}

func (b *Backend) end(key string) {
	b.inflight[key]--
	b.mu.Unlock()
}

// used is what a volume's files take, each shared extent once.
func (v *volume) used() int64 {
	seen := map[*extent]bool{}
	n := v.base
	add := func(t *tree) {
		if t == nil {
			return
		}
		for _, e := range t.files {
			if !seen[e] {
				seen[e] = true
				n += int64(len(e.data))
			}
		}
	}
	add(v.live)
	add(v.aside)
	for _, s := range v.snaps {
		add(s.data)
	}
	return n
}

// exclusive is what snapshot snap alone holds.
func (v *volume) exclusive(snap string) int64 {
	others := map[*extent]bool{}
	mark := func(t *tree) {
		if t != nil {
			for _, e := range t.files {
				others[e] = true
			}
		}
	}
	mark(v.live)
	mark(v.aside)
	for n, s := range v.snaps {
		if n != snap {
			mark(s.data)
		}
	}
	var x int64
	seen := map[*extent]bool{}
	for _, e := range v.snaps[snap].data.files {
		if !others[e] && !seen[e] {
			seen[e] = true
			x += int64(len(e.data))
		}
	}
	return x
}

func (b *Backend) status(key string, v *volume) storage.VolumeStatus {
	if v == nil || v.live == nil || v.unfinished || v.copying > 0 {
		return storage.VolumeStatus{}
	}
	return storage.VolumeStatus{Exists: true, Mounted: v.mounted, CapacityBytes: v.size, UsedBytes: v.used(), Mode: v.live.mode,
		SpaceNote: b.notes[key]}
}

// SetSpaceNote sets what ObserveVolume(s) says of a volume's space ("" clears it),
// as the real backend does when a thin volume cannot grow.
func (b *Backend) SetSpaceNote(key, note string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notes[key] = note
}

// storeSize is StoreSize or its default. The caller holds mu.
func (b *Backend) storeSize() int64 {
	if b.StoreSize == 0 {
		return 1 << 50
	}
	return b.StoreSize
}

// room refuses to give n more bytes when the volumes' capacities would pass the
// store's size. The caller holds mu.
func (b *Backend) room(n int64) error {
	var given int64
	for _, v := range b.vols {
		given += v.size
	}
	if given+n > b.storeSize() {
		return fmt.Errorf("%d bytes more: %w", n, storage.ErrStoreFull)
	}
	return nil
}

// ObserveVolumes implements storage.Backend.
func (b *Backend) ObserveVolumes(ctx context.Context) (map[string]storage.VolumeStatus, error) {
	if err := b.observe(ctx, "ObserveVolumes"); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	out := map[string]storage.VolumeStatus{}
	for k, v := range b.vols {
		if st := b.status(k, v); st.Exists {
			out[k] = st
		}
	}
	return out, nil
}

// ObserveVolume implements storage.Backend.
func (b *Backend) ObserveVolume(ctx context.Context, key string) (storage.VolumeStatus, error) {
	if err := b.observe(ctx, "ObserveVolume"); err != nil {
		return storage.VolumeStatus{}, err
	}
	defer b.mu.Unlock()
	return b.status(key, b.vols[key]), nil
}

// EnsureVolume implements storage.Backend. A volume whose live data a cut-short
// revert set aside gets it back, as on the real backend.
func (b *Backend) EnsureVolume(ctx context.Context, key string, size int64, from *storage.SnapshotRef) error {
	if err := b.begin(ctx, "EnsureVolume", key); err != nil {
		return err
	}
	defer b.end(key)
	if v, ok := b.vols[key]; ok && !v.unfinished {
		if v.copying > 0 {
			v.copying--
			return b.progress(v)
		}
		return v.recover(key)
	}
	if b.storeFault.Reason == storage.FaultReadOnly {
		return &fs.PathError{Op: "create", Path: key, Err: syscall.EROFS}
	}
	if err := b.room(size); err != nil {
		return err
	}
	v := &volume{size: size, base: emptyFS, live: &tree{mode: 0o755, files: map[string]*extent{}}, snaps: map[string]*snapshot{}}
	if from != nil {
		src, ok := b.vols[from.VolumeKey]
		if !ok || src.snaps[from.Snapshot] == nil {
			return fmt.Errorf("source snapshot %s@%s does not exist", from.VolumeKey, from.Snapshot)
		}
		v.live = src.snaps[from.Snapshot].data.copy()
		f := *from
		v.from = &f
		if b.CloneCalls > 0 {
			v.copying, v.copyTotal = b.CloneCalls-1, v.live.size()
			b.vols[key] = v
			return b.progress(v)
		}
	}
	b.vols[key] = v
	return nil
}

// recover puts back live data a cut-short revert set aside.
func (v *volume) recover(key string) error {
	if v.live == nil && v.aside != nil {
		v.live, v.aside = v.aside, nil
	}
	if v.live == nil {
		return fmt.Errorf("volume %s has a filesystem without live data", key)
	}
	return nil
}

func (b *Backend) vol(key string) (*volume, error) {
	v, ok := b.vols[key]
	if !ok {
		return nil, fmt.Errorf("volume %s does not exist", key)
	}
	return v, nil
}

// Resize implements storage.Backend.
func (b *Backend) Resize(ctx context.Context, key string, size int64) error {
	if err := b.begin(ctx, "Resize", key); err != nil {
		return err
	}
	defer b.end(key)
	v, err := b.vol(key)
	if err != nil {
		return err
	}
	if size < v.size && size < v.used() {
		return fmt.Errorf("shrink %s: %w", key, storage.ErrTooSmall)
	}
	if size > v.size {
		if err := b.room(size - v.size); err != nil {
			return err
		}
	}
	v.size = size
	return nil
}

// SetMode implements storage.Backend.
func (b *Backend) SetMode(ctx context.Context, key string, mode fs.FileMode) error {
	if err := b.begin(ctx, "SetMode", key); err != nil {
		return err
	}
	defer b.end(key)
	v, err := b.vol(key)
	if err != nil {
		return err
	}
	if v.live == nil {
		return fmt.Errorf("volume %s has no live data", key)
	}
	v.live.mode = mode.Perm()
	return nil
}

// Mount implements storage.Backend.
func (b *Backend) Mount(ctx context.Context, key string) error {
	if err := b.begin(ctx, "Mount", key); err != nil {
		return err
	}
	defer b.end(key)
	v, err := b.vol(key)
	if err != nil {
		return err
	}
	if err := v.recover(key); err != nil {
		return err
	}
	v.mounted = true
	return nil
}

// Unmount implements storage.Backend.
func (b *Backend) Unmount(ctx context.Context, key string) error {
	if err := b.begin(ctx, "Unmount", key); err != nil {
		return err
	}
	defer b.end(key)
	if v, ok := b.vols[key]; ok {
		v.mounted = false
	}
	return nil
}

// MountPath implements storage.Backend.
func (b *Backend) MountPath(key string) string { return "/fake/mounts/" + key }

// DeleteVolume implements storage.Backend.
func (b *Backend) DeleteVolume(ctx context.Context, key string) error {
	if err := b.begin(ctx, "DeleteVolume", key); err != nil {
		return err
	}
	defer b.end(key)
	if _, ok := b.vols[key]; ok && b.storeFault.Reason == storage.FaultReadOnly {
		return &fs.PathError{Op: "DeleteVolume", Path: key, Err: syscall.EROFS}
	}
	delete(b.vols, key)
	return nil
}

// Revert implements storage.Backend with the real backend's steps: unmount, set
// the live data aside, copy the snapshot in as live, drop the set-aside copy.
func (b *Backend) Revert(ctx context.Context, key, snap string) error {
	if err := b.begin(ctx, "Revert", key); err != nil {
		return err
	}
	defer b.end(key)
	v, err := b.vol(key)
	if err != nil {
		return err
	}
	step := func(name string) error {
		if b.failpoint == nil {
			return nil
		}
		return b.failpoint("Revert", key, name)
	}
	s := v.snaps[snap]
	if v.live != nil && v.aside == nil {
		if s == nil {
			return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
		}
		v.mounted = false
		if err := step("unmounted"); err != nil {
			return err
		}
		v.live, v.aside = nil, v.live
		if err := step("set-aside"); err != nil {
			return err
		}
	}
	if v.live == nil {
		if v.aside == nil {
			return fmt.Errorf("volume %s has a filesystem without live data", key)
		}
		if s == nil {
			v.live, v.aside = v.aside, nil
			return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
		}
		v.live = s.data.copy()
		if err := step("copied"); err != nil {
			return err
		}
	}
	v.aside = nil
	return nil
}

// ObserveSnapshots implements storage.Backend.
func (b *Backend) ObserveSnapshots(ctx context.Context, key string) (map[string]storage.SnapshotStatus, error) {
	if err := b.observe(ctx, "ObserveSnapshots"); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	out := map[string]storage.SnapshotStatus{}
	if v, ok := b.vols[key]; ok {
		for n, s := range v.snaps {
			out[n] = storage.SnapshotStatus{Exists: true, Mounted: s.mounted, ExclusiveBytes: v.exclusive(n)}
		}
	}
	return out, nil
}

// EnsureSnapshot implements storage.Backend.
func (b *Backend) EnsureSnapshot(ctx context.Context, key, snap string) error {
	if err := b.begin(ctx, "EnsureSnapshot", key); err != nil {
		return err
	}
	defer b.end(key)
	v, err := b.vol(key)
	if err != nil {
		return err
	}
	if v.snaps[snap] != nil {
		return nil
	}
	if v.live == nil {
		return fmt.Errorf("volume %s has no live data", key)
	}
	v.snaps[snap] = &snapshot{data: v.live.copy()}
	return nil
}

// DeleteSnapshot implements storage.Backend.
func (b *Backend) DeleteSnapshot(ctx context.Context, key, snap string) error {
	if err := b.begin(ctx, "DeleteSnapshot", key); err != nil {
		return err
	}
	defer b.end(key)
	if v, ok := b.vols[key]; ok && v.snaps[snap] != nil {
		if b.readOnly(key) {
			return &fs.PathError{Op: "DeleteSnapshot", Path: b.SnapshotMountPath(key, snap), Err: syscall.EROFS}
		}
		delete(v.snaps, snap) // as the real one: unmounted first
	}
	return nil
}

// MountSnapshot implements storage.Backend.
func (b *Backend) MountSnapshot(ctx context.Context, key, snap string) error {
	if err := b.begin(ctx, "MountSnapshot", key); err != nil {
		return err
	}
	defer b.end(key)
	v, ok := b.vols[key]
	if !ok || v.snaps[snap] == nil {
		return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
	}
	v.snaps[snap].mounted = true
	return nil
}

// UnmountSnapshot implements storage.Backend.
func (b *Backend) UnmountSnapshot(ctx context.Context, key, snap string) error {
	if err := b.begin(ctx, "UnmountSnapshot", key); err != nil {
		return err
	}
	defer b.end(key)
	if v, ok := b.vols[key]; ok && v.snaps[snap] != nil {
		v.snaps[snap].mounted = false
	}
	return nil
}

// SnapshotMountPath implements storage.Backend.
func (b *Backend) SnapshotMountPath(key, snap string) string {
	return "/fake/mounts/" + key + "@" + snap
}

// MountSnapshotDir implements storage.Backend.
func (b *Backend) MountSnapshotDir(ctx context.Context, key string) error {
	if err := b.begin(ctx, "MountSnapshotDir", key); err != nil {
		return err
	}
	defer b.end(key)
	v, ok := b.vols[key]
	if !ok {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	v.snapDir = true
	return nil
}

// UnmountSnapshotDir implements storage.Backend.
func (b *Backend) UnmountSnapshotDir(ctx context.Context, key string) error {
	if err := b.begin(ctx, "UnmountSnapshotDir", key); err != nil {
		return err
	}
	defer b.end(key)
	if v, ok := b.vols[key]; ok {
		v.snapDir = false
	}
	return nil
}

// SnapshotDirPath implements storage.Backend.
func (b *Backend) SnapshotDirPath(key string) string { return "/fake/mounts/" + key + "@.snapshot" }

// ListSnapshotDir lists volume key's snapshot directory: its mounted snapshots,
// sorted; an error if the directory is not mounted.
func (b *Backend) ListSnapshotDir(key string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	if !ok || !v.snapDir {
		return nil, &fs.PathError{Op: "open", Path: b.SnapshotDirPath(key), Err: fs.ErrNotExist}
	}
	names := []string{}
	for n, sn := range v.snaps {
		if sn.mounted {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Usage implements storage.Backend.
func (b *Backend) Usage(ctx context.Context, key string) (storage.Usage, error) {
	if err := b.observe(ctx, "Usage"); err != nil {
		return storage.Usage{}, err
	}
	defer b.mu.Unlock()
	v, err := b.vol(key)
	if err != nil {
		return storage.Usage{}, err
	}
	u := storage.Usage{UsedBytes: v.used(), SnapshotExclusive: map[string]int64{}}
	for n := range v.snaps {
		u.SnapshotExclusive[n] = v.exclusive(n)
	}
	return u, nil
}

// Inventory implements storage.Backend.
func (b *Backend) Inventory(ctx context.Context) (storage.Inventory, error) {
	if err := b.observe(ctx, "Inventory"); err != nil {
		return storage.Inventory{}, err
	}
	defer b.mu.Unlock()
	inv := storage.Inventory{Snapshots: map[string][]string{}, Complete: map[string]bool{}}
	for k, v := range b.vols {
		inv.Volumes = append(inv.Volumes, k)
		if !v.unfinished {
			inv.Complete[k] = true
		}
		for n := range v.snaps {
			inv.Snapshots[k] = append(inv.Snapshots[k], n)
		}
		sort.Strings(inv.Snapshots[k])
	}
	sort.Strings(inv.Volumes)
	return inv, nil
}

// StoreSpace implements storage.Backend: a store of StoreSize bytes (default 1 PiB)
// whose free space is what the volumes' capacities leave.
func (b *Backend) StoreSpace(ctx context.Context) (size, free int64, err error) {
	if err := b.observe(ctx, "StoreSpace"); err != nil {
		return 0, 0, err
	}
	defer b.mu.Unlock()
	size, free = b.storeSize(), b.storeSize()
	for _, v := range b.vols {
		free -= v.size
	}
	return size, max(free, 0), nil
}

// SetUsed sets the bytes a volume uses besides its files (for shrink and usage
// tests).
func (b *Backend) SetUsed(key string, used int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vols[key]; ok {
		v.base = used
	}
}

// WriteFile writes a file into a mounted volume's live data, as a client would;
// past the volume's capacity it fails with ENOSPC.
func (b *Backend) WriteFile(key, name string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	if !ok || v.live == nil || !v.mounted {
		return &fs.PathError{Op: "write", Path: b.MountPath(key) + "/" + name, Err: fs.ErrNotExist}
	}
	if b.readOnly(key) {
		return &fs.PathError{Op: "write", Path: b.MountPath(key) + "/" + name, Err: syscall.EROFS}
	}
	var old int64
	if e := v.live.files[name]; e != nil {
		old = int64(len(e.data)) // approximates: as if the old copy were not shared
	}
	if v.used()-old+int64(len(data)) > v.size {
		return &fs.PathError{Op: "write", Path: b.MountPath(key) + "/" + name, Err: syscall.ENOSPC}
	}
	v.live.files[name] = &extent{data: slices.Clone(data)}
	return nil
}

// RemoveFile removes a file from a mounted volume's live data.
func (b *Backend) RemoveFile(key, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	if !ok || v.live == nil || !v.mounted || v.live.files[name] == nil {
		return &fs.PathError{Op: "remove", Path: b.MountPath(key) + "/" + name, Err: fs.ErrNotExist}
	}
	delete(v.live.files, name)
	return nil
}

// ReadFile reads a file of a mounted volume's live data.
func (b *Backend) ReadFile(key, name string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	if !ok || v.live == nil || !v.mounted || v.live.files[name] == nil {
		return nil, &fs.PathError{Op: "open", Path: b.MountPath(key) + "/" + name, Err: fs.ErrNotExist}
	}
	return slices.Clone(v.live.files[name].data), nil
}

// ReadSnapshotFile reads a file of a mounted snapshot.
func (b *Backend) ReadSnapshotFile(key, snap, name string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	if !ok || v.snaps[snap] == nil || !v.snaps[snap].mounted || v.snaps[snap].data.files[name] == nil {
		return nil, &fs.PathError{Op: "open", Path: b.SnapshotMountPath(key, snap) + "/" + name, Err: fs.ErrNotExist}
	}
	return slices.Clone(v.snaps[snap].data.files[name].data), nil
}

// ObserveHealth implements storage.Backend: the faults SetFault and
// SetStoreFault set, for every volume that has a filesystem.
func (b *Backend) ObserveHealth(ctx context.Context) (storage.Health, error) {
	if err := b.observe(ctx, "ObserveHealth"); err != nil {
		return storage.Health{}, err
	}
	defer b.mu.Unlock()
	h := storage.Health{Store: b.storeFault, Volumes: map[string]storage.Fault{}}
	for k, v := range b.vols {
		if !v.unfinished {
			h.Volumes[k] = v.fault
		}
	}
	return h, nil
}

// SetFault gives volume key's filesystem a fault, as a failing disk would: a
// read-only one refuses writes (WriteFile and the mutating calls that write into
// it fail with EROFS), one with I/O errors is only reported so. The zero Fault
// repairs it, as an administrator's remount would.
func (b *Backend) SetFault(key string, f storage.Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vols[key]; ok {
		v.fault = f
	}
}

// SetStoreFault gives the whole store a fault: read-only, it refuses every
// volume's writes and new volumes. The zero Fault repairs it.
func (b *Backend) SetStoreFault(f storage.Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.storeFault = f
}

// LeaveUnfinished leaves what a create of volume key cut short before its
// filesystem was whole would leave: storage that holds nothing, which Inventory
// lists as not Complete and observation does not report as a volume.
func (b *Backend) LeaveUnfinished(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vols[key] = &volume{unfinished: true, snaps: map[string]*snapshot{}}
}

// Mounted reports whether path is mounted: a volume's MountPath while its live
// data is, a snapshot's SnapshotMountPath, a snapshot directory's
// SnapshotDirPath (for the data plane's fake, which serves an export only while
// its path is mounted).
func (b *Backend) Mounted(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	name, ok := strings.CutPrefix(path, "/fake/mounts/")
	if !ok {
		return false
	}
	key, snap, isSnap := strings.Cut(name, "@")
	v := b.vols[key]
	switch {
	case v == nil:
		return false
	case !isSnap:
		return v.mounted && v.live != nil
	case snap == ".snapshot":
		return v.snapDir
	default:
		return v.snaps[snap] != nil && v.snaps[snap].mounted
	}
}

// SetAside reports whether volume key holds a copy an unfinished revert set aside.
func (b *Backend) SetAside(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vols[key]
	return ok && v.aside != nil
}

// State is a snapshot of the fake's contents for assertions.
type State struct {
	Volumes   map[string]bool // key -> mounted (volumes with live data)
	Modes     map[string]fs.FileMode
	Sizes     map[string]int64
	Snapshots map[string][]string
	// SetAside lists volumes holding a copy an unfinished revert set aside.
	SetAside []string
	Sources  map[string]storage.SnapshotRef
	// SnapshotMounts lists mounted snapshots as key@snap.
	SnapshotMounts []string
	// SnapshotDirs lists the volumes whose snapshot directory is mounted.
	SnapshotDirs []string
}

// State returns the current contents.
func (b *Backend) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := State{Volumes: map[string]bool{}, Modes: map[string]fs.FileMode{}, Sizes: map[string]int64{}, Snapshots: map[string][]string{}, Sources: map[string]storage.SnapshotRef{}}
	for k, v := range b.vols {
		if v.live != nil {
			s.Volumes[k] = v.mounted
			s.Modes[k] = v.live.mode
		}
		s.Sizes[k] = v.size
		if v.from != nil {
			s.Sources[k] = *v.from
		}
		if v.aside != nil {
			s.SetAside = append(s.SetAside, k)
		}
		if v.snapDir {
			s.SnapshotDirs = append(s.SnapshotDirs, k)
		}
		for n, sn := range v.snaps {
			s.Snapshots[k] = append(s.Snapshots[k], n)
			if sn.mounted {
				s.SnapshotMounts = append(s.SnapshotMounts, k+"@"+n)
			}
		}
		sort.Strings(s.Snapshots[k])
	}
	sort.Strings(s.SetAside)
	sort.Strings(s.SnapshotMounts)
	sort.Strings(s.SnapshotDirs)
	return s
}

// Block makes every later mutating call of method wait, before it takes effect,
// until release is called. It replaces Gate.
func (b *Backend) Block(method string) (release func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	b.Gate = func(op, _ string) {
		if op == method {
			<-ch
		}
	}
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Capabilities implements storage.Backend: the model of btrfs's, but for
// clones copied in the background (CloneCalls).
func (b *Backend) Capabilities() storage.Capabilities {
	b.mu.Lock()
	defer b.mu.Unlock()
	return storage.Capabilities{ExactUsage: true, AsyncClone: b.CloneCalls > 0}
}

var _ storage.ClientFencer = (*Backend)(nil)

// FenceClients implements storage.ClientFencer: it records the addresses.
func (b *Backend) FenceClients(_ context.Context, addrs []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range addrs {
		if !slices.Contains(b.fenced, a) {
			b.fenced = append(b.fenced, a)
		}
	}
	return nil
}

// UnfenceClients implements storage.ClientFencer.
func (b *Backend) UnfenceClients(_ context.Context, addrs []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fenced = slices.DeleteFunc(b.fenced, func(a string) bool { return slices.Contains(addrs, a) })
	return nil
}

// Fenced returns the addresses cut off now.
func (b *Backend) Fenced() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.fenced)
}
