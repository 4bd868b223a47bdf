// Package fake is an in-memory storage.Backend that models the state a real backend
// keeps (volume filesystems and their sizes, snapshots, mounts), so controller tests assert
// outcomes rather than call sequences. It can fail or pause any named method.
package fake

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/basin-nas/basin/internal/storage"
)

type volume struct {
	mode    fs.FileMode
	mounted bool
	used    int64
	from    *storage.SnapshotRef
}

// Backend is the fake. Its zero value is not usable; call New.
type Backend struct {
	mu       sync.Mutex
	live     map[string]*volume
	retired  map[string]bool // key.tag
	snaps    map[string]map[string]bool
	snapMnt  map[string]bool  // key@snap
	sizes    map[string]int64 // a volume filesystem's size, live data or not
	failures map[string]error
	gates    map[string]chan struct{}
	calls    map[string]int
	// StoreSize is the store's size StoreSpace reports; 0 = 1 TiB.
	StoreSize int64
}

// CallCount returns how often method was called.
func (b *Backend) CallCount(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[method]
}

var _ storage.Backend = (*Backend)(nil)

// New returns an empty fake store.
func New() *Backend {
	return &Backend{
		live: map[string]*volume{}, retired: map[string]bool{}, snaps: map[string]map[string]bool{}, snapMnt: map[string]bool{}, sizes: map[string]int64{},
		failures: map[string]error{}, gates: map[string]chan struct{}{}, calls: map[string]int{},
	}
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

// Gate makes calls of method block until the returned function is called.
func (b *Backend) Gate(method string) (release func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	b.gates[method] = ch
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (b *Backend) enter(ctx context.Context, method string) error {
	b.mu.Lock()
	b.calls[method]++
	gate := b.gates[method]
	err := b.failures[method]
	b.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err == nil {
		b.mu.Lock()
	}
	return err
}

// Volume implements storage.Backend.
func (b *Backend) Volume(ctx context.Context, key string, tag string) (storage.VolumeStatus, error) {
	if err := b.enter(ctx, "Volume"); err != nil {
		return storage.VolumeStatus{}, err
	}
	defer b.mu.Unlock()
	var st storage.VolumeStatus
	if v, ok := b.live[key]; ok {
		st.Exists, st.Mounted, st.Mode, st.CapacityBytes, st.UsedBytes = true, v.mounted, v.mode, b.sizes[key], v.used
	}
	st.Retired = tag != "" && b.retired[key+"."+tag]
	return st, nil
}

// CreateVolume implements storage.Backend.
func (b *Backend) CreateVolume(ctx context.Context, key string, size int64, from *storage.SnapshotRef) error {
	if err := b.enter(ctx, "CreateVolume"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if from != nil && !b.snaps[from.VolumeKey][from.Snapshot] {
		return fmt.Errorf("source snapshot %s@%s does not exist", from.VolumeKey, from.Snapshot)
	}
	if _, ok := b.live[key]; !ok {
		b.live[key] = &volume{mode: 0o755, from: from}
		b.sizes[key] = size
	}
	return nil
}

// Resize implements storage.Backend.
func (b *Backend) Resize(ctx context.Context, key string, size int64) error {
	if err := b.enter(ctx, "Resize"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	v, ok := b.live[key]
	if !ok {
		return fmt.Errorf("volume %s does not exist", key)
	}
	if size < v.used {
		return fmt.Errorf("shrink %s: %w", key, storage.ErrTooSmall)
	}
	b.sizes[key] = size
	return nil
}

// SetUsed sets the bytes a volume uses (for shrink and usage tests).
func (b *Backend) SetUsed(key string, used int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.live[key]; ok {
		v.used = used
	}
}

// VolumeUsedBytes implements storage.Backend.
func (b *Backend) VolumeUsedBytes(ctx context.Context, key string) (int64, error) {
	if err := b.enter(ctx, "VolumeUsedBytes"); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	v, ok := b.live[key]
	if !ok {
		return 0, fmt.Errorf("volume %s does not exist", key)
	}
	return v.used, nil
}

// StoreSpace implements storage.Backend: a store of StoreSize bytes (default 1 TiB)
// whose free space is what the volumes' usage leaves.
func (b *Backend) StoreSpace(ctx context.Context) (size, free int64, err error) {
	if err := b.enter(ctx, "StoreSpace"); err != nil {
		return 0, 0, err
	}
	defer b.mu.Unlock()
	size = b.StoreSize
	if size == 0 {
		size = 1 << 40
	}
	free = size
	for _, v := range b.live {
		free -= v.used
	}
	return size, max(free, 0), nil
}

// SetMode implements storage.Backend.
func (b *Backend) SetMode(ctx context.Context, key string, mode fs.FileMode) error {
	if err := b.enter(ctx, "SetMode"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	v, ok := b.live[key]
	if !ok {
		return fmt.Errorf("volume %s does not exist", key)
	}
	v.mode = mode
	return nil
}

// Mount implements storage.Backend.
func (b *Backend) Mount(ctx context.Context, key string) error {
	if err := b.enter(ctx, "Mount"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	v, ok := b.live[key]
	if !ok {
		return fmt.Errorf("volume %s does not exist", key)
	}
	v.mounted = true
	return nil
}

// MountPath implements storage.Backend.
func (b *Backend) MountPath(key string) string { return "/fake/mounts/" + key }

// Unmount implements storage.Backend.
func (b *Backend) Unmount(ctx context.Context, key string) error {
	if err := b.enter(ctx, "Unmount"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if v, ok := b.live[key]; ok {
		v.mounted = false
	}
	return nil
}

// DeleteVolume implements storage.Backend.
func (b *Backend) DeleteVolume(ctx context.Context, key string) error {
	if err := b.enter(ctx, "DeleteVolume"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	for k := range b.snapMnt {
		if strings.HasPrefix(k, key+"@") {
			delete(b.snapMnt, k)
		}
	}
	delete(b.live, key)
	delete(b.sizes, key)
	delete(b.snaps, key)
	for k := range b.retired {
		if len(k) > len(key) && k[:len(key)+1] == key+"." {
			delete(b.retired, k)
		}
	}
	return nil
}

// SnapshotMountPath implements storage.Backend.
func (b *Backend) SnapshotMountPath(key, snap string) string {
	return "/fake/mounts/" + key + "@" + snap
}

// SnapshotMounted implements storage.Backend.
func (b *Backend) SnapshotMounted(key, snap string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.snapMnt[key+"@"+snap], nil
}

// MountSnapshot implements storage.Backend.
func (b *Backend) MountSnapshot(ctx context.Context, key, snap string) error {
	if err := b.enter(ctx, "MountSnapshot"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if !b.snaps[key][snap] {
		return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
	}
	b.snapMnt[key+"@"+snap] = true
	return nil
}

// UnmountSnapshot implements storage.Backend.
func (b *Backend) UnmountSnapshot(ctx context.Context, key, snap string) error {
	if err := b.enter(ctx, "UnmountSnapshot"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	delete(b.snapMnt, key+"@"+snap)
	return nil
}

// Snapshot implements storage.Backend.
func (b *Backend) Snapshot(ctx context.Context, key, snap string) (storage.SnapshotStatus, error) {
	if err := b.enter(ctx, "Snapshot"); err != nil {
		return storage.SnapshotStatus{}, err
	}
	defer b.mu.Unlock()
	return storage.SnapshotStatus{Exists: b.snaps[key][snap], Mounted: b.snapMnt[key+"@"+snap], ExclusiveBytes: 16384}, nil
}

// CreateSnapshot implements storage.Backend.
func (b *Backend) CreateSnapshot(ctx context.Context, key, snap string) error {
	if err := b.enter(ctx, "CreateSnapshot"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if _, ok := b.live[key]; !ok {
		return fmt.Errorf("volume %s does not exist", key)
	}
	if b.snaps[key] == nil {
		b.snaps[key] = map[string]bool{}
	}
	b.snaps[key][snap] = true
	return nil
}

// DeleteSnapshot implements storage.Backend.
func (b *Backend) DeleteSnapshot(ctx context.Context, key, snap string) error {
	if err := b.enter(ctx, "DeleteSnapshot"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	delete(b.snapMnt, key+"@"+snap) // as the real one: unmounted first
	delete(b.snaps[key], snap)
	return nil
}

// Retire implements storage.Backend.
func (b *Backend) Retire(ctx context.Context, key, tag string) error {
	if err := b.enter(ctx, "Retire"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if _, ok := b.live[key]; ok {
		delete(b.live, key)
		b.retired[key+"."+tag] = true
	}
	return nil
}

// Restore implements storage.Backend.
func (b *Backend) Restore(ctx context.Context, key, snap string) error {
	if err := b.enter(ctx, "Restore"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if !b.snaps[key][snap] {
		return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
	}
	if _, ok := b.live[key]; !ok {
		b.live[key] = &volume{mode: 0o755, from: &storage.SnapshotRef{VolumeKey: key, Snapshot: snap}}
	}
	return nil
}

// PurgeRetired implements storage.Backend.
func (b *Backend) PurgeRetired(ctx context.Context, key, tag string) error {
	if err := b.enter(ctx, "PurgeRetired"); err != nil {
		return err
	}
	defer b.mu.Unlock()
	delete(b.retired, key+"."+tag)
	return nil
}

// Inventory implements storage.Backend.
func (b *Backend) Inventory(ctx context.Context) (storage.Inventory, error) {
	if err := b.enter(ctx, "Inventory"); err != nil {
		return storage.Inventory{}, err
	}
	defer b.mu.Unlock()
	inv := storage.Inventory{Snapshots: map[string][]string{}}
	seen := map[string]bool{}
	for k := range b.live {
		seen[k] = true
	}
	for k, s := range b.snaps {
		for n := range s {
			inv.Snapshots[k] = append(inv.Snapshots[k], n)
		}
		seen[k] = true
	}
	for k := range seen {
		inv.Volumes = append(inv.Volumes, k)
	}
	sort.Strings(inv.Volumes)
	return inv, nil
}

// State is a snapshot of the fake's contents for assertions.
type State struct {
	Volumes   map[string]bool // key -> mounted
	Modes     map[string]fs.FileMode
	Sizes     map[string]int64
	Snapshots map[string][]string
	Retired   []string
	Sources   map[string]storage.SnapshotRef
	// SnapshotMounts lists mounted snapshots as key@snap.
	SnapshotMounts []string
}

// State returns the current contents.
func (b *Backend) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := State{Volumes: map[string]bool{}, Modes: map[string]fs.FileMode{}, Sizes: map[string]int64{}, Snapshots: map[string][]string{}, Sources: map[string]storage.SnapshotRef{}}
	for k, v := range b.live {
		s.Volumes[k] = v.mounted
		s.Modes[k] = v.mode
		s.Sizes[k] = b.sizes[k]
		if v.from != nil {
			s.Sources[k] = *v.from
		}
	}
	for k, m := range b.snaps {
		for n := range m {
			s.Snapshots[k] = append(s.Snapshots[k], n)
		}
		sort.Strings(s.Snapshots[k])
	}
	for k := range b.retired {
		s.Retired = append(s.Retired, k)
	}
	for k := range b.snapMnt {
		s.SnapshotMounts = append(s.SnapshotMounts, k)
	}
	sort.Strings(s.SnapshotMounts)
	return s
}
