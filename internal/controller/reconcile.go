package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// resync re-applies the desired state of every volume that no operation owns,
// refreshes usage, expires old operations and, at start, collects orphans. It runs
// beside the operation workers: a volume it is repairing is locked like an
// operation's target (and skipped if an operation holds it), so the two never act
// on one volume at once, and an operation on another volume never waits for it.
//
// Its cost per volume is constant: the backend and each network's sandbox are
// observed once per pass, a converged volume costs no command and no store write,
// and usage changes are written in one transaction at the end.
func (c *Controller) resync(ctx context.Context, collect bool) error {
	start := time.Now()
	var vols []*model.Volume
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		vols, err = store.List[model.Volume](tx, store.KindVolume, "")
		return err
	})
	if err != nil {
		return err
	}
	vols = c.mineOnly(vols)
	c.setRecords(vols) // the health pass's names and states
	observed, err := c.be.ObserveVolumes(ctx)
	if err != nil {
		return err
	}
	memberErr := errors.Join(c.resyncMembers(ctx), c.resyncKerberos(ctx, vols))
	views := &viewCache{c: c, views: map[string]ExportView{}, shares: map[string]map[string]map[string]string{}}
	var (
		mu       sync.Mutex
		errs     []error
		updates  []usageUpdate
		wg       sync.WaitGroup
		sem      = make(chan struct{}, c.opts.Workers)
		repaired atomic.Int64
	)
	for _, v := range vols {
		if v.State.Busy() {
			continue // its operation owns it
		}
		ls := lockSet{Exclusive: []string{v.Name()}, Shared: []string{v.PoolName()}}
		if !c.locks.tryAcquire(ls) {
			continue // an operation started on it since the list was read
		}
		if !c.mine(v) {
			c.locks.release(ls) // moved to another node since the list was read (failover.go)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() {
				c.locks.release(ls)
				<-sem
				wg.Done()
			}()
			u, err := c.resyncVolume(ctx, v.Name(), observed, views, &repaired)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("volume %s: %w", v.Name(), err))
			}
			if u != nil {
				updates = append(updates, *u)
			}
		}()
	}
	wg.Wait()
	c.Wake()    // operations that waited for a volume resync held
	c.KickQoS() // a rebuilt sandbox has lost its tree
	errs = append(errs, memberErr, c.writeUsage(ctx, updates), c.expireOperations(ctx), c.expireAudit(ctx))
	if collect {
		errs = append(errs, c.collectOrphans(ctx))
	}
	c.log.Debug("resync pass", "volumes", len(vols), "repaired", repaired.Load(), "took", time.Since(start))
	return errors.Join(errs...)
}

// viewCache observes each network's sandbox, and each of its Samba instances'
// shares, at most once per pass.
type viewCache struct {
	c      *Controller
	mu     sync.Mutex
	views  map[string]ExportView
	shares map[string]map[string]map[string]string // memberKey(network, ad) → SMBShares
}

// smbShares is SMBShares of (network, ad), read once per pass.
func (vc *viewCache) smbShares(ctx context.Context, network, ad string) (map[string]map[string]string, error) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	k := memberKey(network, ad)
	if s, ok := vc.shares[k]; ok {
		return s, nil
	}
	s, err := vc.c.opts.SMB.SMBShares(ctx, network, ad)
	if err != nil {
		return nil, err
	}
	vc.shares[k] = s
	return s, nil
}

// forgetShares drops (network, ad)'s listing once a volume's steps changed it.
func (vc *viewCache) forgetShares(network, ad string) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	delete(vc.shares, memberKey(network, ad))
}

func (vc *viewCache) get(ctx context.Context, network string) (ExportView, error) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if v, ok := vc.views[network]; ok {
		return v, nil
	}
	v, err := vc.c.dp.View(ctx, network)
	if err != nil {
		return nil, err
	}
	vc.views[network] = v
	return v, nil
}

// usageUpdate is a volume's usage as observed, where it differs from its records.
type usageUpdate struct {
	volume    string
	used      int64
	snapshots map[string]float64 // snapshot name -> exclusive bytes
	details   *string            // the volume's state details, when its space note changed
}

// spaceDetailsPrefix starts the state details the resync writes from the
// backend's space note (storage.VolumeStatus.SpaceNote): it replaces only its own.
const spaceDetailsPrefix = "Space: "

// spaceDetails returns the state details v should have for its space note, and
// whether they differ from what it has. Details of another's (an operation's,
// the scheduler's) are left alone.
func spaceDetails(v *model.Volume, note string) (string, bool) {
	if v.State != model.StateReady || (v.Details != "" && !strings.HasPrefix(v.Details, spaceDetailsPrefix)) {
		return "", false
	}
	want := ""
	if note != "" {
		want = spaceDetailsPrefix + note
	}
	return want, want != v.Details
}

// resyncVolume repairs one volume (which the caller has locked) and reports its
// usage where it differs from the records.
func (c *Controller) resyncVolume(ctx context.Context, name string, observed map[string]storage.VolumeStatus, views *viewCache, repaired *atomic.Int64) (*usageUpdate, error) {
	var v *model.Volume
	var snaps []*model.Snapshot
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if v, err = store.Get[model.Volume](tx, store.KindVolume, name); err != nil {
			return err
		}
		snaps, err = store.List[model.Snapshot](tx, store.KindSnapshot, name)
		return err
	})
	if errors.Is(err, model.ErrNotFound) || (err == nil && v.State.Busy()) {
		return nil, nil // deleted, or an operation was created for it meanwhile
	}
	if err != nil {
		return nil, err
	}
	obs := Observation{VolumeStatus: observed[v.Key]}
	var view ExportView
	// A volume without its attachment (its storage lost) is not exported.
	if ex, ok, err := c.servedExport(ctx, v); ok && err == nil {
		if view, err = views.get(ctx, v.Network); err != nil {
			return nil, err
		}
		if addr, err := netip.ParseAddr(v.Endpoint); err == nil && v.ExportID != 0 {
			obs.Exported = view.Exported(addr, ex)
		}
	}
	ad, err := c.observeShare(ctx, v, &obs, views.smbShares)
	if err != nil {
		return nil, err
	}
	steps := PlanVolume(c.wantOf(v, nil), obs)
	if takesDown(steps) {
		// Something that serves the volume would go first, on the word of a pass
		// over every volume, and the steps that bring it back may not finish (a
		// read-only filesystem, a database that cannot commit, a full disk): ask
		// the backend about this volume alone before believing it.
		fresh, err := c.be.ObserveVolume(ctx, v.Key)
		if err != nil {
			return nil, err
		}
		obs.VolumeStatus = fresh
		steps = PlanVolume(c.wantOf(v, nil), obs)
		if obs.Exported && takesDown(steps) {
			// The data plane checked that the export stands on the very mount it
			// was loaded onto: it serves the volume's data, whatever the backend
			// says of its storage. Only an operation takes that down.
			return nil, fmt.Errorf("storage observed %+v while its export serves it; left as it is", fresh)
		}
	}
	if len(steps) > 0 {
		c.log.Info("re-applying volume state", "volume", v.Name(), "steps", steps)
		repaired.Add(1)
		if ad != "" {
			views.forgetShares(v.Network, ad)
		}
		if err := c.runSteps(ctx, nil, v, steps); err != nil {
			return nil, err
		}
		view = nil // what the pass observed no longer holds for this volume
	}
	if err := c.syncSnapshotExports(ctx, v, snaps, nil, view); err != nil {
		return nil, fmt.Errorf("snapshot exports: %w", err)
	}
	u, err := c.be.Usage(ctx, v.Key)
	if err != nil {
		return nil, err
	}
	up := usageUpdate{volume: v.Name(), used: u.UsedBytes, snapshots: map[string]float64{}}
	for _, s := range snaps {
		if b, ok := u.SnapshotExclusive[s.ID]; ok && s.State == model.StateReady && float64(b) != s.UsedBytes {
			up.snapshots[s.Name()] = float64(b)
		}
	}
	if d, changed := spaceDetails(v, obs.SpaceNote); changed {
		up.details = &d
		c.log.Info("volume space note", "volume", v.Name(), "note", obs.SpaceNote)
	}
	if up.used == v.UsedBytes && len(up.snapshots) == 0 && up.details == nil {
		return nil, nil
	}
	return &up, nil
}

// takesDown reports whether steps stop serving a volume before they serve it
// again.
func takesDown(steps []Step) bool {
	return slices.ContainsFunc(steps, func(s Step) bool {
		return s.Op == StepUnexport || s.Op == StepUnshare || s.Op == StepUnmount
	})
}

// writeUsage stores the usage a pass found changed, in one transaction.
func (c *Controller) writeUsage(ctx context.Context, updates []usageUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	var noted []*model.Volume
	err := c.st.Update(ctx, func(tx store.Tx) error {
		noted = noted[:0]
		for _, up := range updates {
			cur, err := store.Get[model.Volume](tx, store.KindVolume, up.volume)
			if err != nil {
				continue // deleted meanwhile
			}
			changed := cur.UsedBytes != up.used
			cur.UsedBytes = up.used
			if up.details != nil {
				if d, ok := spaceDetails(cur, strings.TrimPrefix(*up.details, spaceDetailsPrefix)); ok {
					cur.Details, changed = d, true
					noted = append(noted, cur)
				}
			}
			if changed {
				if err := store.PutVolume(tx, cur); err != nil {
					return err
				}
			}
			for name, b := range up.snapshots {
				s, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
				if err != nil {
					continue
				}
				s.UsedBytes = b
				if err := store.PutSnapshot(tx, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil && c.opts.SpaceNoted != nil {
		for _, v := range noted {
			c.opts.SpaceNoted(ctx, v, strings.TrimPrefix(v.Details, spaceDetailsPrefix))
		}
	}
	return err
}

// expireOperations deletes finished operations older than the retention.
func (c *Controller) expireOperations(ctx context.Context) error {
	return c.expire(ctx, c.opts.Now().Add(-c.opts.Retention), store.KindOperation, store.ExpiredOperations)
}

// expireBatch bounds how many records one expiry transaction deletes, so that
// a backlog (after downtime) never holds the store's write lock for long.
const expireBatch = 500

// expire deletes the records of kind that expired before cutoff (found by
// index, never by decoding every record), a batch per transaction.
func (c *Controller) expire(ctx context.Context, cutoff time.Time, kind string, expired func(store.Tx, time.Time, int) ([]string, error)) error {
	for {
		n := 0
		err := c.st.Update(ctx, func(tx store.Tx) error {
			names, err := expired(tx, cutoff, expireBatch)
			if err != nil {
				return err
			}
			n = len(names)
			for _, name := range names {
				if err := tx.Delete(kind, name); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || n < expireBatch {
			return err
		}
	}
}

// collectOrphans deletes storage that no volume record accounts for and that
// holds no data: what a create cut short left (an unfinished filesystem, mount
// points). A whole volume or a snapshot without a record is kept and reported:
// a record that is missing proves nothing about the data (a database restored
// from an older backup, or a list that came back short, would otherwise delete
// volumes that serve). Records in a transitional state count as accounted for;
// their operations own them.
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
		switch _, ok := byKey[key]; {
		case ok:
		case inv.Complete[key]:
			c.log.Warn("keeping a volume's storage that no record accounts for (a bug, or a database restored from an older backup); "+
				"it is not served: delete it by hand once sure it holds nothing wanted", "key", key)
		default:
			c.log.Info("deleting what a volume create cut short left", "key", key)
			errs = append(errs, c.be.DeleteVolume(ctx, key))
		}
	}
	for key, snaps := range inv.Snapshots {
		if _, ok := byKey[key]; !ok {
			continue
		}
		for _, s := range snaps {
			if !snapsOf[key][s] {
				c.log.Warn("keeping a snapshot that no record accounts for (a bug, or a database restored from an older backup); "+
					"it counts against the volume's capacity: delete it by hand once sure it holds nothing wanted", "key", key, "snapshot", s)
			}
		}
	}
	return errors.Join(errs...)
}

// expireAudit deletes audit entries older than the retention.
func (c *Controller) expireAudit(ctx context.Context) error {
	return c.expire(ctx, c.opts.Now().Add(-c.opts.AuditRetention), store.KindAudit, store.ExpiredAudit)
}
