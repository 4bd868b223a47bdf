// Package storage defines what Basin asks of a node's storage backend: volumes, each
// its own filesystem whose size is the volume's capacity, O(1) read-only snapshots
// inside it, writable clones and in-place revert. storage/btrfs implements it with one
// btrfs filesystem per volume; storage/fake models the same state in memory for fast
// controller tests.
//
// Every method is idempotent: asking for what already holds (a volume that exists, a
// snapshot that is gone) succeeds without doing anything. Drivers know nothing of
// the API or the store: they deal in keys (stable storage names) and byte counts.
package storage

import (
	"context"
	"errors"
	"io/fs"
)

// ErrTooSmall is returned when a volume cannot shrink to the size asked for: its
// data and snapshots do not fit.
var ErrTooSmall = errors.New("the volume's data does not fit in the size asked for")

// SnapshotRef names a snapshot of a volume.
type SnapshotRef struct {
	VolumeKey string
	Snapshot  string
}

// VolumeStatus is what the backend observes of a volume.
type VolumeStatus struct {
	Exists        bool        // the volume's filesystem and its live data exist
	Mounted       bool        // the live data is mounted on MountPath, from the volume's own filesystem
	CapacityBytes int64       // the filesystem's size
	UsedBytes     int64       // bytes used by the volume and its snapshots
	Mode          fs.FileMode // permission bits of the volume root
	Retired       bool        // a retired copy (from an unfinished revert) exists
}

// SnapshotStatus is what the backend observes of a snapshot.
type SnapshotStatus struct {
	Exists         bool
	Mounted        bool
	ExclusiveBytes int64 // bytes held only by this snapshot
}

// Backend is a node store. Keys and snapshot names are [A-Za-z0-9-]+.
type Backend interface {
	Volume(ctx context.Context, key string, retireTag string) (VolumeStatus, error)
	// CreateVolume creates the volume's filesystem of sizeBytes, empty or holding a
	// writable copy of snapshot from (a clone).
	CreateVolume(ctx context.Context, key string, sizeBytes int64, from *SnapshotRef) error
	// Resize grows or shrinks the volume's filesystem; ErrTooSmall if it cannot shrink.
	Resize(ctx context.Context, key string, sizeBytes int64) error
	SetMode(ctx context.Context, key string, mode fs.FileMode) error
	// Mount mounts the live data on MountPath (nosuid, nodev, noexec).
	Mount(ctx context.Context, key string) error
	// MountPath is where a volume is (or will be) mounted.
	MountPath(key string) string
	Unmount(ctx context.Context, key string) error
	// DeleteVolume removes the volume's filesystem with its snapshots and mount points.
	DeleteVolume(ctx context.Context, key string) error

	Snapshot(ctx context.Context, key, snap string) (SnapshotStatus, error)
	// MountSnapshot mounts a snapshot read-only on SnapshotMountPath (for NFS
	// clients' .snapshot access); UnmountSnapshot undoes it. Both are idempotent.
	MountSnapshot(ctx context.Context, key, snap string) error
	UnmountSnapshot(ctx context.Context, key, snap string) error
	SnapshotMountPath(key, snap string) string
	// SnapshotMounted is a cheap check (no commands run) for MountSnapshot's work.
	SnapshotMounted(key, snap string) (bool, error)
	CreateSnapshot(ctx context.Context, key, snap string) error
	DeleteSnapshot(ctx context.Context, key, snap string) error

	// Retire moves the live data aside under tag (first step of a revert); Restore
	// makes a writable copy of snapshot snap the live data; PurgeRetired deletes the
	// retired copy (last step).
	Retire(ctx context.Context, key, tag string) error
	Restore(ctx context.Context, key, snap string) error
	PurgeRetired(ctx context.Context, key, tag string) error

	// Inventory lists what exists, for orphan collection.
	Inventory(ctx context.Context) (Inventory, error)
	// StoreSpace reports the node store's size and free space.
	StoreSpace(ctx context.Context) (sizeBytes, freeBytes int64, err error)
	// VolumeUsedBytes reads a volume's usage (data and snapshots) now.
	VolumeUsedBytes(ctx context.Context, key string) (int64, error)
}

// Inventory is everything a backend holds.
type Inventory struct {
	Volumes   []string            // keys with a filesystem or mount point
	Snapshots map[string][]string // key -> snapshot names
}
