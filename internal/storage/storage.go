// Package storage defines what Basin asks of a node's storage backend, in the
// controller's vocabulary: volumes, each its own filesystem whose size is the
// volume's capacity, O(1) read-only snapshots inside it, writable clones and an
// in-place revert. storage/btrfs implements it with one btrfs filesystem per
// volume; storage/fake models the same state in memory for fast controller tests;
// storage/storagetest is the one conformance suite both run.
//
// The controller names volumes by key and snapshots by name and nothing else: every
// identifier a driver needs of its own (image files, loop devices, subvolume and
// quota group ids, the copy a revert sets aside) stays inside the driver.
//
// Observation (ObserveVolumes, ObserveVolume, ObserveSnapshots, Usage,
// ObserveHealth) runs no process. Every mutating method is idempotent: asking for what already holds (a
// volume that exists, a snapshot that is gone) succeeds without doing anything, and
// one cut short by a crash finishes when called again. Callers run at most one
// mutating call per volume at a time. Drivers know nothing of the API or the store:
// they deal in keys and byte counts.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
)

// ErrTooSmall is returned when a volume cannot shrink to the size asked for: its
// data and snapshots do not fit.
var ErrTooSmall = errors.New("the volume's data does not fit in the size asked for")

// ErrNoSpace is returned when a volume is too full for what was asked (a
// snapshot's own metadata).
var ErrNoSpace = errors.New("the volume is full")

// ErrInProgress is returned by EnsureVolume while a clone it started is still
// being copied (Capabilities.AsyncClone): ask again later; the copy goes on
// without the caller.
var ErrInProgress = errors.New("in progress: ask again later")

// Progress is an ErrInProgress that says how far the work has come: Done of
// Total bytes copied, each 0 when the backend cannot tell (CephFS knows a
// clone's source size but not how much of it is copied).
type Progress struct {
	Done, Total int64
}

func (p *Progress) Error() string {
	switch {
	case p.Total > 0 && p.Done > 0:
		return fmt.Sprintf("in progress: %d of %d bytes", p.Done, p.Total)
	case p.Total > 0:
		return fmt.Sprintf("in progress: %d bytes to copy", p.Total)
	}
	return ErrInProgress.Error()
}

// Is makes errors.Is(p, ErrInProgress) true.
func (p *Progress) Is(target error) bool { return target == ErrInProgress }

// Capabilities says where a backend differs from the O(1), exactly accounted
// model btrfs gives.
type Capabilities struct {
	// ExactUsage: used bytes count data, metadata and snapshots and are right
	// at once, and each snapshot's exclusive bytes are known (btrfs quota
	// groups). Without it used bytes are the live data only and right after a
	// few seconds, and snapshots' exclusive bytes read 0 (CephFS's recursive
	// statistics).
	ExactUsage bool
	// AsyncClone: a clone is a copy made in the background, in time
	// proportional to the snapshot's data; EnsureVolume returns ErrInProgress
	// until it is whole.
	AsyncClone bool
	// RevertCopies: Revert copies the snapshot's data into the live data, in
	// time proportional to it (without it, Revert is O(1)).
	RevertCopies bool
}

// Attachment is what an NFS server needs to serve a volume from the cluster
// itself instead of a local mount (Ganesha's FSAL_CEPH): the file system, the
// volume's path in it, and the volume's own cephx user (without "client.")
// and key, whose caps confine it to that path.
type Attachment struct {
	FS, Path string
	UserID   string
	Secret   string
}

// Attacher is a Backend whose volumes NFS serves through Attachment (SMB
// still serves MountPath, a local mount).
type Attacher interface {
	Attachment(ctx context.Context, key string) (Attachment, error)
	// SnapshotAttachment is a snapshot's, for its read-only export: the
	// volume's user, the snapshot's path.
	SnapshotAttachment(ctx context.Context, key, snap string) (Attachment, error)
}

// SnapshotRef names a snapshot of a volume.
type SnapshotRef struct {
	VolumeKey string
	Snapshot  string
}

// ClientFencer is storage several nodes share that can cut the clients of
// one node off (failover): before another node serves a lost node's volumes,
// the lost node's clients, which may still hold locks and caching rights on
// the volumes' files, are cut off, at once and for good, and they lose what
// they held.
type ClientFencer interface {
	// FenceClients cuts off every client that reaches the storage from one of
	// addrs (a node's addresses), until UnfenceClients.
	FenceClients(ctx context.Context, addrs []string) error
	// UnfenceClients lets clients from addrs in again: the node they belong
	// to starts afresh.
	UnfenceClients(ctx context.Context, addrs []string) error
}

// Backend is a node store in the controller's vocabulary. Keys (a volume's stable
// storage name, chosen by Basin) and snapshot names are [A-Za-z0-9-]+; everything
// else a driver needs to name (image files, loop devices, qgroup numbers, subvolume
// ids, the copy a revert sets aside) is the driver's own and never leaves it.
//
// Observation never runs a process: it reads the mount table, statfs and sysfs (or
// the driver's equivalent), so a reconcile pass costs no fork per volume.
type Backend interface {
	// ObserveVolumes reports every volume the backend holds, in one pass.
	ObserveVolumes(ctx context.Context) (map[string]VolumeStatus, error)
	// ObserveVolume reports one volume (Exists false if it has none).
	ObserveVolume(ctx context.Context, key string) (VolumeStatus, error)
	// EnsureVolume creates the volume's filesystem of sizeBytes if it does not exist,
	// empty or holding a writable copy of snapshot from (a clone).
	EnsureVolume(ctx context.Context, key string, sizeBytes int64, from *SnapshotRef) error
	// Resize grows or shrinks the volume's filesystem; ErrTooSmall if it cannot shrink.
	Resize(ctx context.Context, key string, sizeBytes int64) error
	SetMode(ctx context.Context, key string, mode fs.FileMode) error
	// Mount mounts the live data on MountPath (nosuid, nodev, noexec); Unmount undoes it.
	Mount(ctx context.Context, key string) error
	Unmount(ctx context.Context, key string) error
	// MountPath is where a volume is (or will be) mounted.
	MountPath(key string) string
	// DeleteVolume removes the volume's filesystem with its snapshots and mount points.
	DeleteVolume(ctx context.Context, key string) error
	// Revert makes a writable copy of snapshot snap the live data. It is resumable:
	// interrupted at any point and called again, it finishes the same revert; called
	// again after it finished, it reverts again (the same result when nothing wrote
	// in between). Whatever it sets aside meanwhile is its own and is gone on return.
	Revert(ctx context.Context, key, snap string) error

	// ObserveSnapshots reports every snapshot of a volume, in one pass.
	ObserveSnapshots(ctx context.Context, key string) (map[string]SnapshotStatus, error)
	// EnsureSnapshot takes a read-only snapshot of the live data; ErrNoSpace if
	// the volume is too full to.
	EnsureSnapshot(ctx context.Context, key, snap string) error
	DeleteSnapshot(ctx context.Context, key, snap string) error
	// MountSnapshot mounts a snapshot read-only on SnapshotMountPath (where NFS
	// exports it and SMB shows it as a previous version) and, while the volume's
	// snapshot directory is mounted, lists it there; UnmountSnapshot undoes both.
	// Both are idempotent.
	MountSnapshot(ctx context.Context, key, snap string) error
	UnmountSnapshot(ctx context.Context, key, snap string) error
	SnapshotMountPath(key, snap string) string
	// MountSnapshotDir mounts the volume's snapshot directory on SnapshotDirPath:
	// a small filesystem of its own, read-only where it is mounted, holding one
	// empty directory named after each mounted snapshot (NFS clients' .snapshot:
	// each entry is where the snapshot's export is reached, see docs/architecture.md).
	// UnmountSnapshotDir undoes it. Both are idempotent.
	MountSnapshotDir(ctx context.Context, key string) error
	UnmountSnapshotDir(ctx context.Context, key string) error
	SnapshotDirPath(key string) string

	// Usage reads a volume's usage now: data and snapshots, and each snapshot's
	// exclusive bytes.
	Usage(ctx context.Context, key string) (Usage, error)
	// Inventory lists what exists, for orphan collection.
	Inventory(ctx context.Context) (Inventory, error)
	// StoreSpace reports what the node store holds for volumes (what pools may
	// commit at an overcommit ratio of 1: its size less its own overhead and what
	// it keeps) and what volumes may still be given. EnsureVolume and Resize
	// refuse, with ErrStoreFull, what the store cannot give without taking space
	// promised to other volumes.
	StoreSpace(ctx context.Context) (sizeBytes, freeBytes int64, err error)

	// ObserveHealth reports whether the node store and each open volume's
	// filesystem can still be trusted with writes (health.go).
	ObserveHealth(ctx context.Context) (Health, error)

	// Capabilities says how the backend differs from btrfs's model.
	Capabilities() Capabilities
}

// Usage is a volume's space use.
type Usage struct {
	UsedBytes         int64            // data and snapshots
	SnapshotExclusive map[string]int64 // snapshot name -> bytes held only by it
}

// VolumeStatus is what the backend observes of a volume.
type VolumeStatus struct {
	Exists        bool        // the volume's filesystem and its live data exist
	Mounted       bool        // the live data is mounted on MountPath, from the volume's own filesystem
	CapacityBytes int64       // the filesystem's size
	UsedBytes     int64       // bytes used by the volume and its snapshots
	Mode          fs.FileMode // permission bits of the volume root
	// SpaceNote says, in words for the volume's user, why its filesystem is
	// not what its capacity promises (thin provisioning on a full store); "" if
	// it is.
	SpaceNote string
}

// SnapshotStatus is what the backend observes of a snapshot.
type SnapshotStatus struct {
	Exists         bool
	Mounted        bool  // mounted read-only on SnapshotMountPath
	ExclusiveBytes int64 // bytes held only by this snapshot
}

// Inventory is everything a backend holds.
type Inventory struct {
	Volumes   []string            // keys with a filesystem or mount point
	Snapshots map[string][]string // key -> snapshot names
	// Complete holds the keys whose filesystem was made to the end, so may hold
	// data; the other keys of Volumes are the leftovers of a create cut short or
	// mount points alone.
	Complete map[string]bool
}

// ErrStoreFull is returned when the node's store cannot hold what was asked (a
// volume, its growth or a clone) without taking space promised to others.
var ErrStoreFull = errors.New("the node's store has no room left for it")
