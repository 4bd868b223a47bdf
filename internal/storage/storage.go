// Package storage defines what Basin asks of a node's storage backend: volumes with a
// capacity limit that covers their snapshots, O(1) read-only snapshots, writable
// clones and in-place revert. storage/btrfs implements it on a btrfs filesystem;
// storage/fake models the same state in memory for fast controller tests.
//
// Every method is idempotent: asking for what already holds (a volume that exists, a
// snapshot that is gone) succeeds without doing anything. Drivers know nothing of
// the API or the store: they deal in keys (stable storage names) and quota groups.
package storage

import (
	"context"
	"io/fs"
)

// SnapshotRef names a snapshot of a volume.
type SnapshotRef struct {
	VolumeKey string
	Snapshot  string
}

// VolumeStatus is what the backend observes of a volume.
type VolumeStatus struct {
	Exists       bool        // the live subvolume exists
	Mounted      bool        // it is mounted on its own mount point
	QgroupExists bool        // its quota group exists
	LimitBytes   int64       // the quota group's limit; 0 = none
	UsedBytes    int64       // bytes referenced by the volume and its snapshots
	Mode         fs.FileMode // permission bits of the volume root
	Retired      bool        // a retired copy (from an unfinished revert) exists
}

// SnapshotStatus is what the backend observes of a snapshot.
type SnapshotStatus struct {
	Exists         bool
	Mounted        bool
	ExclusiveBytes int64 // bytes held only by this snapshot
}

// Backend is a node store. Keys and snapshot names are [A-Za-z0-9-]+.
type Backend interface {
	Volume(ctx context.Context, key string, qgroup uint64, retireTag string) (VolumeStatus, error)
	CreateQgroup(ctx context.Context, qgroup uint64) error
	// CreateVolume creates the live subvolume inside qgroup, empty or as a writable
	// snapshot of from.
	CreateVolume(ctx context.Context, key string, qgroup uint64, from *SnapshotRef) error
	SetLimit(ctx context.Context, qgroup uint64, bytes int64) error
	SetMode(ctx context.Context, key string, mode fs.FileMode) error
	Mount(ctx context.Context, key string) error
	// MountPath is where a volume is (or will be) mounted.
	MountPath(key string) string
	Unmount(ctx context.Context, key string) error
	// DeleteVolume removes the live subvolume, its snapshots, any retired copy, its
	// mount point and its quota group.
	DeleteVolume(ctx context.Context, key string, qgroup uint64) error

	Snapshot(ctx context.Context, key, snap string) (SnapshotStatus, error)
	// MountSnapshot mounts a snapshot read-only on SnapshotMountPath (for NFS
	// clients' .snapshot access); UnmountSnapshot undoes it. Both are idempotent.
	MountSnapshot(ctx context.Context, key, snap string) error
	UnmountSnapshot(ctx context.Context, key, snap string) error
	SnapshotMountPath(key, snap string) string
	// SnapshotMounted is a cheap check (no commands run) for MountSnapshot's work.
	SnapshotMounted(key, snap string) (bool, error)
	CreateSnapshot(ctx context.Context, key, snap string, qgroup uint64) error
	DeleteSnapshot(ctx context.Context, key, snap string) error

	// Retire moves the live subvolume aside under tag (first step of a revert);
	// PurgeRetired deletes it (last step).
	Retire(ctx context.Context, key, tag string) error
	PurgeRetired(ctx context.Context, key, tag string) error

	// Inventory lists what exists, for orphan collection.
	Inventory(ctx context.Context) (Inventory, error)
	// DestroyQgroup removes a level-1 quota group that no volume uses.
	DestroyQgroup(ctx context.Context, qgroup uint64) error
}

// Inventory is everything a backend holds.
type Inventory struct {
	Volumes   []string            // keys with a live subvolume, retired copy or mount point
	Snapshots map[string][]string // key -> snapshot names
	Qgroups   []uint64            // level-1 quota groups
}
