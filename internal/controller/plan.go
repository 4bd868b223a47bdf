package controller

import (
	"fmt"
	"io/fs"

	"github.com/basin-nas/basin/internal/storage"
)

// StepOp names one idempotent action on the storage backend or the data plane.
type StepOp string

// Step operations, in the order plans use them.
const (
	StepCreateVolume StepOp = "create-volume"
	StepResize       StepOp = "resize"
	StepSetMode      StepOp = "set-mode"
	StepUnmount      StepOp = "unmount"
	StepRevert       StepOp = "revert-to-snapshot"
	StepMarkReverted StepOp = "mark-reverted"
	StepDeleteNewer  StepOp = "delete-newer-snapshots"
	StepMount        StepOp = "mount"
	StepDeleteVolume StepOp = "delete-volume"
	StepExport       StepOp = "export"
	StepUnexport     StepOp = "unexport"
	StepShare        StepOp = "share"   // the volume's SMB share, as wanted
	StepUnshare      StepOp = "unshare" // removes it, cutting open sessions
)

// Step is one planned action with the arguments it carries: a plan is complete
// data, and applying a step needs nothing but the step and the volume it is for.
type Step struct {
	Op       StepOp
	Bytes    int64                // create-volume, resize: the filesystem's size
	Mode     fs.FileMode          // set-mode
	From     *storage.SnapshotRef // create-volume: the snapshot a clone copies
	Snapshot string               // revert-to-snapshot, delete-newer-snapshots
}

func (s Step) String() string {
	switch s.Op {
	case StepCreateVolume, StepResize:
		return fmt.Sprintf("%s(%d)", s.Op, s.Bytes)
	case StepSetMode:
		return fmt.Sprintf("%s(%#o)", s.Op, s.Mode)
	case StepRevert, StepDeleteNewer:
		return fmt.Sprintf("%s(%s)", s.Op, s.Snapshot)
	}
	return string(s.Op)
}

// VolumeWant is the desired state of a volume.
type VolumeWant struct {
	CapacityBytes int64
	Mode          fs.FileMode // 0 = leave as is
	// ModeOnce: Mode is the root's when the volume is made, and is not
	// kept (a volume whose NT ACLs decide: Samba derives the mode from
	// them, and putting it back would make Samba drop them).
	ModeOnce bool
	// ModeUntilShared: Mode is kept only while the volume has no SMB share
	// (a create of such a volume, resumed: once its share exists an SMB
	// client may have narrowed the root already).
	ModeUntilShared bool
	Export          bool                 // served over NFS
	Share           bool                 // served over SMB
	From            *storage.SnapshotRef // created as a clone of this snapshot
}

// Observation is what the backend and the data plane report of a volume.
type Observation struct {
	storage.VolumeStatus
	// Exported: the volume's export is loaded exactly as desired and reachable.
	Exported bool
	// Shared: the volume has an SMB share (in its Samba instance's registry,
	// whatever its settings); ShareCurrent: with exactly the wanted settings.
	Shared, ShareCurrent bool
}

// PlanVolume returns the steps that bring an existing-or-not volume to want. It is
// pure: the same observation always yields the same steps, and an observation of a
// converged volume yields none, so re-running after a crash at any step is safe.
func PlanVolume(want VolumeWant, obs Observation) []Step {
	var steps []Step
	remount := !obs.Exists || !obs.Mounted
	if remount && obs.Exported {
		// Ganesha holds the unmounted directory: drop the export, re-add it after.
		steps = append(steps, Step{Op: StepUnexport})
		obs.Exported = false
	}
	if remount && obs.Shared {
		// So would Samba.
		steps = append(steps, Step{Op: StepUnshare})
		obs.Shared = false
	}
	if !obs.Exists {
		steps = append(steps, Step{Op: StepCreateVolume, Bytes: want.CapacityBytes, From: want.From})
	} else if obs.CapacityBytes != want.CapacityBytes {
		steps = append(steps, Step{Op: StepResize, Bytes: want.CapacityBytes})
	}
	if want.Mode != 0 && (!obs.Exists || (obs.Mode != want.Mode && !want.ModeOnce && !(want.ModeUntilShared && obs.Shared))) {
		steps = append(steps, Step{Op: StepSetMode, Mode: want.Mode})
	}
	if remount {
		steps = append(steps, Step{Op: StepMount})
	}
	if want.Export && !obs.Exported {
		steps = append(steps, Step{Op: StepExport})
	}
	if want.Share && !(obs.Shared && obs.ShareCurrent) {
		steps = append(steps, Step{Op: StepShare})
	}
	return steps
}

// PlanRevert returns the steps that make a writable copy of snapshot snap the
// volume's live data. reverted is the persisted marker that the backend's revert
// finished: before it, everything is (re)done from the start, which the backend's
// resumable Revert makes safe; after it, only cleanup and serving remain.
func PlanRevert(reverted bool, snap string, want VolumeWant, obs Observation) []Step {
	var steps []Step
	if !reverted {
		// Clients must not see the swap: unexport first; they get stale handles
		// afterwards, never another file system's data under old handles.
		steps = append(steps, Step{Op: StepUnexport})
		if obs.Shared {
			steps = append(steps, Step{Op: StepUnshare})
		}
		steps = append(steps, Step{Op: StepUnmount}, Step{Op: StepRevert, Snapshot: snap}, Step{Op: StepMarkReverted})
		// After the swap the live data is new: it needs mounting and exporting again.
		obs.Exists, obs.Mounted, obs.Exported, obs.Shared = true, false, false, false
	}
	steps = append(steps, Step{Op: StepDeleteNewer, Snapshot: snap})
	want.Mode = 0 // a revert restores the snapshot's permissions too
	want.From = nil
	return append(steps, PlanVolume(want, obs)...)
}

// PlanVolumeDelete returns the steps that remove a volume's export and storage.
func PlanVolumeDelete(obs Observation) []Step {
	steps := []Step{{Op: StepUnexport}} // idempotent; a half-made export leaves files too
	if obs.Shared {
		steps = append(steps, Step{Op: StepUnshare})
	}
	if obs.Exists || obs.Mounted || obs.CapacityBytes != 0 {
		steps = append(steps, Step{Op: StepDeleteVolume})
	}
	return steps
}

// ops lists the operations of steps, for logs and tests.
func ops(steps []Step) []StepOp {
	out := make([]StepOp, len(steps))
	for i, s := range steps {
		out[i] = s.Op
	}
	return out
}
