package intent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// SnapshotCreate asks for a snapshot of a volume.
type SnapshotCreate struct {
	Project, Location string
	Volume            string // the volume's ID
	ID                string // the new snapshot's ID
	Description       string
	Labels            map[string]string
	// Schedule and ScheduledFor are set by the snapshot scheduler alone: the
	// schedule taking the snapshot (model.ScheduleHourly…) and its boundary. They
	// are recorded on the snapshot (its provenance) and are not on the wire.
	Schedule     string
	ScheduledFor time.Time
}

// CreateSnapshot records a snapshot to take: the volume must be READY, the ID free
// and the volume below the snapshot limit; the store must have its reserve free.
func (s *Service) CreateSnapshot(ctx context.Context, st store.Store, req SnapshotCreate) (*model.Operation, error) {
	if err := CheckPathID("Volume", req.Volume); err != nil {
		return nil, err
	}
	if err := CheckID("snapshotId", req.ID); err != nil {
		return nil, err
	}
	switch req.Schedule {
	case "", model.ScheduleHourly, model.ScheduleDaily, model.ScheduleWeekly, model.ScheduleMonthly:
	default:
		return nil, model.Invalid("schedule", "%q is not a snapshot schedule", req.Schedule)
	}
	vol := model.LocationName(req.Project, req.Location) + "/volumes/" + req.Volume
	sn := &model.Snapshot{Meta: model.Meta{Project: req.Project, Location: req.Location, ID: req.ID, CreateTime: s.opts.Now().UTC(),
		State: model.StateCreating, Labels: req.Labels, Desc: req.Description}, Schedule: req.Schedule}
	if req.Schedule != "" {
		sn.ScheduledFor = req.ScheduledFor.UTC()
	}
	if err := CheckMeta(&sn.Meta); err != nil {
		return nil, err
	}
	op := s.newOperation(req.Project, req.Location, model.OpSnapshotCreate, vol+"/snapshots/"+req.ID)
	return record(ctx, st, op, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, vol)
		if err != nil {
			return err
		}
		sn.Volume = v.ID
		if v.State != model.StateReady {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s, not READY", v.ID, v.State)
		}
		if _, err := store.Get[model.Snapshot](tx, store.KindSnapshot, sn.Name()); err == nil {
			return model.Errorf(model.ErrAlreadyExists, "Snapshot '%s' already exists", sn.Name())
		}
		snaps, err := tx.Names(store.KindSnapshot, vol)
		if err != nil {
			return err
		}
		if len(snaps) >= s.opts.Limits.MaxSnapshotsPerVol {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s already has %d snapshots, the most a volume may have", v.ID, len(snaps))
		}
		// No store space is checked: a snapshot lives in its volume's own space,
		// and a full volume borrows headroom from the store's reserve for it.
		return tx.Insert(store.KindSnapshot, sn.Name(), vol, sn)
	})
}

// SnapshotUpdate asks to change a snapshot's description or labels.
type SnapshotUpdate struct {
	Project, Location, Volume, ID string
	// Patch changes the snapshot as read in the transaction (the fields an update
	// mask names); its error is answered as is.
	Patch func(sn *model.Snapshot) error
}

// UpdateSnapshot records a change to a snapshot that is not busy.
func (s *Service) UpdateSnapshot(ctx context.Context, st store.Store, req SnapshotUpdate) (*model.Operation, error) {
	if err := CheckPathID("Snapshot", req.ID); err != nil {
		return nil, err
	}
	name := model.LocationName(req.Project, req.Location) + "/volumes/" + req.Volume + "/snapshots/" + req.ID
	op := s.newOperation(req.Project, req.Location, model.OpSnapshotUpdate, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		sn, err := getIdle(tx, store.KindSnapshot, name, "snapshot", req.ID, func(r *model.Snapshot) *model.Meta { return &r.Meta })
		if err != nil {
			return err
		}
		prev, _ := json.Marshal(sn)
		if err := req.Patch(sn); err != nil {
			return err
		}
		op.Prev = prev
		if err := CheckMeta(&sn.Meta); err != nil {
			return err
		}
		sn.State = model.StateUpdating
		return store.PutSnapshot(tx, sn)
	})
}

// SnapshotDelete asks to delete a snapshot.
type SnapshotDelete struct {
	Project, Location, Volume, ID string
}

// DeleteSnapshot records a snapshot's deletion: it must not be busy, its volume not
// being restored or deleted, and no volume still being cloned from it.
func (s *Service) DeleteSnapshot(ctx context.Context, st store.Store, req SnapshotDelete) (*model.Operation, error) {
	if err := CheckPathID("Snapshot", req.ID); err != nil {
		return nil, err
	}
	vol := model.LocationName(req.Project, req.Location) + "/volumes/" + req.Volume
	name := vol + "/snapshots/" + req.ID
	op := s.newOperation(req.Project, req.Location, model.OpSnapshotDelete, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		sn, err := getIdle(tx, store.KindSnapshot, name, "snapshot", req.ID, func(r *model.Snapshot) *model.Meta { return &r.Meta })
		if err != nil {
			return err
		}
		v, err := store.Get[model.Volume](tx, store.KindVolume, vol)
		if err != nil {
			return err
		}
		if v.State == model.StateRestoring || v.State == model.StateDeleting {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s", v.ID, v.State)
		}
		if err := refuseIfCloning(tx, sn); err != nil {
			return err
		}
		sn.State = model.StateDeleting
		return store.PutSnapshot(tx, sn)
	})
}

// refuseIfCloning refuses to remove a snapshot a volume is still being cloned from.
func refuseIfCloning(tx store.Tx, sn *model.Snapshot) error {
	clones, err := store.VolumesCloning(tx, sn.Name())
	if err != nil {
		return err
	}
	if len(clones) > 0 {
		return model.Errorf(model.ErrFailedPrecondition, "volume %s is being cloned from snapshot %s", lastSegment(clones[0]), sn.ID)
	}
	return nil
}
