package controller

import (
	"context"
	"errors"
	"strings"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// snapshotHandler runs snapshot operations. Each touches its own snapshot only:
// its cost does not grow with the number of snapshots the volume has.
type snapshotHandler struct{ c *Controller }

func (snapshotHandler) kinds() []model.OpKind {
	return []model.OpKind{model.OpSnapshotCreate, model.OpSnapshotUpdate, model.OpSnapshotDelete}
}
func (snapshotHandler) storeKind() string { return store.KindSnapshot }

// locks: the snapshot's volume, exclusively (snapshot exports and a revert of one
// volume never interleave).
func (snapshotHandler) locks(_ store.Tx, op *model.Operation) (lockSet, error) {
	ls := lockSet{Exclusive: []string{op.Target}}
	if vol, _, ok := strings.Cut(op.Target, "/snapshots/"); ok {
		ls.Exclusive = append(ls.Exclusive, vol)
	}
	return ls, nil
}

func (h snapshotHandler) run(ctx context.Context, op *model.Operation) error {
	if op.Kind == model.OpSnapshotDelete {
		return h.c.snapshotDelete(ctx, op)
	}
	return h.c.snapshotEnsure(ctx, op)
}

func (h snapshotHandler) undo(ctx context.Context, op *model.Operation) error {
	if op.Kind != model.OpSnapshotCreate {
		return nil
	}
	c := h.c
	s, v, err := c.snapshotParent(ctx, op)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c.snapshotsToShare(ctx, v, readyBut(s))
	if err := c.syncSnapshotExport(ctx, v, s, none); err != nil {
		return err
	}
	return c.be.DeleteSnapshot(ctx, v.Key, s.ID)
}

// snapshotsToShare brings v's SMB share's previous versions to the snapshots
// include accepts. A snapshot operation does not fail for the share: an SMB
// server that cannot be reached now is brought up to date by the next resync
// (observeShare compares the entries).
func (c *Controller) snapshotsToShare(ctx context.Context, v *model.Volume, include func(*model.Snapshot) bool) {
	if !smbShowsSnapshots(v) {
		return
	}
	if err := c.shareWith(ctx, v, include); err != nil {
		c.log.Warn("previous versions not updated", "volume", v.Name(), "err", err)
	}
}

// readyOr accepts the READY snapshots and s; readyBut the READY ones but s.
func readyOr(s *model.Snapshot) func(*model.Snapshot) bool {
	return func(x *model.Snapshot) bool { return x.State == model.StateReady || x.Name() == s.Name() }
}

func readyBut(s *model.Snapshot) func(*model.Snapshot) bool {
	return func(x *model.Snapshot) bool { return x.State == model.StateReady && x.Name() != s.Name() }
}

func (c *Controller) snapshotParent(ctx context.Context, op *model.Operation) (*model.Snapshot, *model.Volume, error) {
	var s *model.Snapshot
	var v *model.Volume
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if s, err = store.Get[model.Snapshot](tx, store.KindSnapshot, op.Target); err != nil {
			return err
		}
		v, err = store.Get[model.Volume](tx, store.KindVolume, s.VolumeName())
		return err
	})
	return s, v, err
}

func (c *Controller) snapshotEnsure(ctx context.Context, op *model.Operation) error {
	s, v, err := c.snapshotParent(ctx, op)
	if err != nil {
		return err
	}
	if op.Kind == model.OpSnapshotCreate {
		if c.cancelled(ctx, op) {
			return errCancelled
		}
		if err := c.be.EnsureSnapshot(ctx, v.Key, s.ID); err != nil {
			return err
		}
		all := func(*model.Snapshot) bool { return true }
		if err := c.syncSnapshotExport(ctx, v, s, all); err != nil {
			return err
		}
		// Shown as a previous version before the operation completes.
		c.snapshotsToShare(ctx, v, readyOr(s))
	}
	// What the snapshot alone holds (a new one: its own tree root). Observation
	// reads counters, runs nothing.
	obs, err := c.be.ObserveSnapshots(ctx, v.Key)
	if err != nil {
		return err
	}
	used := obs[s.ID].ExclusiveBytes
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		cur, err := store.Get[model.Snapshot](tx, store.KindSnapshot, op.Target)
		if err != nil {
			return nil, err
		}
		cur.State, cur.Details, cur.UsedBytes = model.StateReady, "", float64(used)
		return cur, store.PutSnapshot(tx, cur)
	})
}

func (c *Controller) snapshotDelete(ctx context.Context, op *model.Operation) error {
	s, v, err := c.snapshotParent(ctx, op)
	if errors.Is(err, model.ErrNotFound) {
		return c.complete(ctx, op, func(tx store.Tx) (any, error) { return nil, deleteSnapshotRecord(tx, op.Target) })
	}
	if err != nil {
		return err
	}
	// Hidden from SMB clients first, then unmounted, then gone.
	c.snapshotsToShare(ctx, v, readyBut(s))
	if err := c.syncSnapshotExport(ctx, v, s, none); err != nil {
		return err
	}
	if err := c.be.DeleteSnapshot(ctx, v.Key, s.ID); err != nil {
		return err
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) { return nil, deleteSnapshotRecord(tx, op.Target) })
}

// deleteSnapshotRecord deletes a snapshot's record and frees the export ID it may
// still hold.
func deleteSnapshotRecord(tx store.Tx, name string) error {
	cur, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := releaseExportID(tx, name, cur.ExportID); err != nil {
		return err
	}
	return tx.Delete(store.KindSnapshot, name)
}
