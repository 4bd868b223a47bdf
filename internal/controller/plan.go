package controller

import (
	"io/fs"

	"github.com/basin-nas/basin/internal/storage"
)

// Step is one idempotent action on the storage backend or the data plane.
type Step string

// Steps, in the order plans use them.
const (
	StepCreateVolume Step = "create-volume"
	StepResize       Step = "resize"
	StepSetMode      Step = "set-mode"
	StepMount        Step = "mount"
	StepRetire       Step = "retire-live"
	StepRestore      Step = "restore-from-snapshot"
	StepMarkSwapped  Step = "mark-swapped"
	StepPurgeRetired Step = "purge-retired"
	StepDeleteNewer  Step = "delete-newer-snapshots"
	StepDeleteVolume Step = "delete-volume"
	StepSnapshot     Step = "create-snapshot"
	StepDeleteSnap   Step = "delete-snapshot"
	StepExport       Step = "export"
	StepUnexport     Step = "unexport"
)

// VolumeWant is the desired state of a volume.
type VolumeWant struct {
	CapacityBytes int64
	Mode          fs.FileMode // 0 = leave as is
	Export        bool        // served over NFS
}

// Observation is what the backend and the data plane report of a volume.
type Observation struct {
	storage.VolumeStatus
	// Exported: the volume's export is loaded exactly as desired and reachable.
	Exported bool
}

// PlanVolume returns the steps that bring an existing-or-not volume to want. It is
// pure: the same observation always yields the same steps, and an observation of a
// converged volume yields none, so re-running after a crash at any step is safe.
func PlanVolume(want VolumeWant, obs Observation) []Step {
	var steps []Step
	remount := !obs.Exists || !obs.Mounted
	if remount && obs.Exported {
		// Ganesha holds the unmounted directory: drop the export, re-add it after.
		steps = append(steps, StepUnexport)
		obs.Exported = false
	}
	if !obs.Exists {
		steps = append(steps, StepCreateVolume) // made at the wanted capacity
	} else if obs.CapacityBytes != want.CapacityBytes {
		steps = append(steps, StepResize)
	}
	if want.Mode != 0 && (!obs.Exists || obs.Mode != want.Mode) {
		steps = append(steps, StepSetMode)
	}
	if remount {
		steps = append(steps, StepMount)
	}
	if want.Export && !obs.Exported {
		steps = append(steps, StepExport)
	}
	return steps
}

// PlanRevert returns the steps that swap a volume's live subvolume for a writable
// copy of a snapshot. swapped is the persisted marker that the swap finished; without
// it "live exists, nothing retired" is ambiguous between not started and done.
func PlanRevert(swapped bool, want VolumeWant, obs Observation) []Step {
	var steps []Step
	if !swapped {
		// Clients must not see the swap: unexport first; they get stale handles
		// afterwards, never another file system's data under old handles.
		steps = append(steps, StepUnexport)
		obs.Exported = false
		switch {
		case !obs.Retired && obs.Exists: // not started
			steps = append(steps, StepRetire, StepRestore)
		case !obs.Exists: // retired (or lost): restore
			steps = append(steps, StepRestore)
		}
		steps = append(steps, StepMarkSwapped)
		// After the swap the live subvolume is new: it needs mounting again.
		obs.Exists, obs.Mounted = true, false
	}
	if obs.Retired || !swapped {
		steps = append(steps, StepPurgeRetired)
	}
	steps = append(steps, StepDeleteNewer)
	want.Mode = 0 // a revert restores the snapshot's permissions too
	return append(steps, PlanVolume(want, obs)...)
}

// PlanVolumeDelete returns the steps that remove a volume's export and storage.
func PlanVolumeDelete(obs Observation) []Step {
	steps := []Step{StepUnexport} // idempotent; a half-made export leaves files too
	if obs.Exists || obs.Mounted || obs.CapacityBytes != 0 || obs.Retired {
		steps = append(steps, StepDeleteVolume)
	}
	return steps
}
