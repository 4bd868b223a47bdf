package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// resync re-applies the desired state of every volume that has no operation in
// flight, refreshes usage, expires old operations and, at start, collects orphans.
func (c *Controller) resync(ctx context.Context, collect bool) error {
	var vols []*model.Volume
	var ops []*model.Operation
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if vols, err = store.List[model.Volume](tx, store.KindVolume, ""); err != nil {
			return err
		}
		ops, err = store.List[model.Operation](tx, store.KindOperation, "")
		return err
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		if v.State.Busy() {
			continue // its operation owns it
		}
		obs, err := c.observe(ctx, v, "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if steps := PlanVolume(c.wantOf(v), obs); len(steps) > 0 {
			c.log.Info("re-applying volume state", "volume", v.Name(), "steps", steps)
			if err := c.runSteps(ctx, nil, v, steps); err != nil {
				errs = append(errs, fmt.Errorf("volume %s: %w", v.Name(), err))
				continue
			}
			if obs, err = c.observe(ctx, v, ""); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := c.syncSnapshotExports(ctx, v, nil); err != nil {
			errs = append(errs, fmt.Errorf("volume %s snapshot exports: %w", v.Name(), err))
		}
		if err := c.refreshUsage(ctx, v, obs.UsedBytes); err != nil {
			errs = append(errs, err)
		}
	}
	cutoff := c.opts.Now().Add(-c.opts.Retention)
	for _, o := range ops {
		if o.Done && o.EndTime.Before(cutoff) {
			if err := c.st.Update(ctx, func(tx store.Tx) error { return tx.Delete(store.KindOperation, o.Name()) }); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, c.expireAudit(ctx))
	if collect {
		if err := c.collectOrphans(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) refreshUsage(ctx context.Context, v *model.Volume, used int64) error {
	snaps, err := c.snapshotsOf(ctx, v)
	if err != nil {
		return err
	}
	snapUsed := map[string]float64{}
	for _, s := range snaps {
		if s.State != model.StateReady {
			continue
		}
		obs, err := c.be.Snapshot(ctx, v.Key, s.ID)
		if err != nil {
			return err
		}
		if float64(obs.ExclusiveBytes) != s.UsedBytes {
			snapUsed[s.Name()] = float64(obs.ExclusiveBytes)
		}
	}
	if used == v.UsedBytes && len(snapUsed) == 0 {
		return nil
	}
	return c.st.Update(ctx, func(tx store.Tx) error {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if err != nil {
			return nil // deleted meanwhile
		}
		if cur.UsedBytes != used {
			cur.UsedBytes = used
			if err := store.PutVolume(tx, cur); err != nil {
				return err
			}
		}
		for name, u := range snapUsed {
			s, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
			if err != nil {
				continue
			}
			s.UsedBytes = u
			if err := store.PutSnapshot(tx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// collectOrphans deletes storage that no volume or snapshot record accounts for: the
// leftovers of a bug or of a store restored from an older backup. Records in a
// transitional state count as accounted for; their operations own them.
func (c *Controller) collectOrphans(ctx context.Context) error {
	inv, err := c.be.Inventory(ctx)
	if err != nil {
		return err
	}
	byKey := map[string]*model.Volume{}
	snapsOf := map[string]map[string]bool{}
	err = c.st.View(ctx, func(tx store.Tx) error {
		vols, err := store.List[model.Volume](tx, store.KindVolume, "")
		if err != nil {
			return err
		}
		for _, v := range vols {
			byKey[v.Key] = v
			snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, v.Name())
			if err != nil {
				return err
			}
			snapsOf[v.Key] = map[string]bool{}
			for _, s := range snaps {
				snapsOf[v.Key][s.ID] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, key := range inv.Volumes {
		if _, ok := byKey[key]; !ok {
			c.log.Warn("deleting orphan volume storage", "key", key)
			errs = append(errs, c.be.DeleteVolume(ctx, key))
		}
	}
	for key, snaps := range inv.Snapshots {
		if _, ok := byKey[key]; !ok {
			continue // deleted with its volume above
		}
		for _, s := range snaps {
			if !snapsOf[key][s] {
				c.log.Warn("deleting orphan snapshot", "key", key, "snapshot", s)
				errs = append(errs, c.be.DeleteSnapshot(ctx, key, s))
			}
		}
	}
	return errors.Join(errs...)
}

// expireAudit deletes audit entries older than the retention.
func (c *Controller) expireAudit(ctx context.Context) error {
	cutoff := c.opts.Now().Add(-c.opts.AuditRetention)
	return c.st.Update(ctx, func(tx store.Tx) error {
		entries, err := store.List[model.AuditEntry](tx, store.KindAudit, "")
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Time.Before(cutoff) {
				if err := tx.Delete(store.KindAudit, "projects/"+e.Project+"/auditLogs/"+e.ID); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
