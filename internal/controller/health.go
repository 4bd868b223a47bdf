package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/tick"
)

// Storage health. Beside the resync, a loop observes every HealthInterval
// whether the node store and each volume's filesystem can still be trusted with
// writes (storage.Backend.ObserveHealth: no process, and nothing of the
// database, which may be what the failing disk holds). A volume whose filesystem,
// or whose store, turned read-only or reported I/O errors is in ERROR with
// words for its users, until a pass finds it healthy again: the API shows the
// state over what the volume's record holds (VolumeFault), /readyz fails
// (NotReady), the metrics count it (VolumesInError), and each change is logged
// with what was observed and recorded by OnHealthChange (the audit log). The
// state is kept in memory, not in the database: a database on the full disk
// could not record it, and a restart observes it again before it is ready.
// Nothing is taken down: a read-only volume still serves reads.

// Reasons a volume is in ERROR, as the metrics label them.
const (
	ReasonReadOnly      = "read_only"       // its filesystem turned read-only
	ReasonIOErrors      = "io_errors"       // its device reported I/O errors
	ReasonStoreReadOnly = "store_read_only" // the node store turned read-only
	ReasonStoreIOErrors = "store_io_errors" // the node store's device reported I/O errors
	// ReasonOperationFailed: an operation on the volume failed (its record's
	// state); the others override it while they last.
	ReasonOperationFailed = "operation_failed"
)

// ErrorReasons lists every reason, in a fixed order.
var ErrorReasons = []string{ReasonReadOnly, ReasonIOErrors, ReasonStoreReadOnly, ReasonStoreIOErrors, ReasonOperationFailed}

// faultWords are what users read in a faulted volume's stateDetails: what
// happened and what the administrator can do, without host paths or devices
// (the server log has those).
var faultWords = map[string]string{
	ReasonReadOnly: "The volume's filesystem has turned read-only (the kernel does so when a write fails, for example " +
		"when the disk under the volume store is full): its data can be read, writes fail. The administrator must fix " +
		"the cause, then remount the volume read-write or restart Basin.",
	ReasonIOErrors: "The volume's storage reported I/O errors: data written recently may not have been kept. The " +
		"administrator must check the disk and the server log, then reset the volume's error counters or restart Basin.",
	ReasonStoreReadOnly: "The node's volume store has turned read-only (the kernel does so when a write fails, for " +
		"example when its disk is full): every volume's data can be read, writes fail. The administrator must free " +
		"space or fix the disk, then restart Basin.",
	ReasonStoreIOErrors: "The node's volume store reported I/O errors: data written recently to its volumes may not " +
		"have been kept. The administrator must check the disk and the server log, then restart Basin.",
}

// HealthChange is a volume going into ERROR because its storage failed, or back.
type HealthChange struct {
	Time    time.Time
	Volume  string // the volume's resource name
	Project string
	// Reason is why it is in ERROR (one of ErrorReasons); "" when it is
	// healthy again.
	Reason string
	// Details is what its stateDetails say ("" when healthy again).
	Details string
}

// maxPendingChanges bounds the changes kept for OnHealthChange while it fails.
const maxPendingChanges = 4096

// healthState is what the last health pass observed.
type healthState struct {
	mu     sync.RWMutex
	store  string            // the store's reason ("" = healthy)
	faults map[string]string // volume key → reason, for failing volumes
	counts map[string]int    // reason → volumes in ERROR
	// names: the volumes' records by key, as the last resync pass read them
	// (nil: none read yet).
	names map[string]*model.Volume
	// announced: the reason last logged and recorded per volume key.
	announced map[string]string
	pending   []HealthChange // not yet recorded by OnHealthChange
	// recordFailing: OnHealthChange failed last time (logged once).
	recordFailing bool
}

// VolumeFault returns why the storage of the volume with storage key cannot be
// trusted with writes, in words for its users; "" if it can (as far as the last
// health pass saw).
func (c *Controller) VolumeFault(key string) string {
	c.health.mu.RLock()
	defer c.health.mu.RUnlock()
	return faultWords[c.health.faults[key]]
}

// NotReady returns, in a few plain words, why this node should not be given new
// work: its store or some volume's storage is failing. "" if neither (readiness
// is otherwise the daemon's to decide). It names no volume: /readyz answers
// anyone.
func (c *Controller) NotReady() string {
	c.health.mu.RLock()
	defer c.health.mu.RUnlock()
	switch c.health.store {
	case ReasonStoreReadOnly:
		return "the volume store is read-only"
	case ReasonStoreIOErrors:
		return "the volume store reports I/O errors"
	}
	if n := len(c.health.faults); n > 0 {
		return fmt.Sprintf("%d volume(s) in ERROR: storage read-only or reporting I/O errors", n)
	}
	return ""
}

// VolumesInError returns how many volumes are in ERROR, by reason (every one of
// ErrorReasons, zero included), as of the last health pass.
func (c *Controller) VolumesInError() map[string]int {
	c.health.mu.RLock()
	defer c.health.mu.RUnlock()
	out := make(map[string]int, len(ErrorReasons))
	for _, r := range ErrorReasons {
		out[r] = c.health.counts[r]
	}
	return out
}

func (c *Controller) healthLoop(ctx context.Context) {
	tick.Every(ctx, c.opts.HealthInterval, func() { c.healthPass(ctx) })
}

// reasonOf names a backend's fault as a reason for the volume's ERROR.
func reasonOf(f storage.Fault, store bool) string {
	switch {
	case f.OK():
		return ""
	case f.Reason == storage.FaultReadOnly && store:
		return ReasonStoreReadOnly
	case f.Reason == storage.FaultReadOnly:
		return ReasonReadOnly
	case store:
		return ReasonStoreIOErrors
	}
	return ReasonIOErrors
}

// setRecords gives the health pass the volumes' records a resync pass read:
// they name the volumes (for the audit) and hold the state of those whose
// operation failed, without a read of the database every health pass.
func (c *Controller) setRecords(vols []*model.Volume) {
	names := make(map[string]*model.Volume, len(vols))
	for _, v := range vols {
		if v.Key != "" {
			names[v.Key] = v
		}
	}
	c.health.mu.Lock()
	c.health.names = names
	c.health.mu.Unlock()
}

// healthPass observes the storage's health once and applies what changed.
func (c *Controller) healthPass(ctx context.Context) {
	h, err := c.be.ObserveHealth(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot observe the storage's health; keeping what was last observed", "err", err)
		}
		return
	}
	hs := &c.health
	hs.mu.RLock()
	storeReason := reasonOf(h.Store, true)
	faults := map[string]string{} // every volume with a record or open storage that is failing
	for key := range h.Volumes {
		faults[key] = ""
	}
	for key := range hs.names {
		faults[key] = ""
	}
	unnamed := hs.names == nil
	for key := range faults {
		r := storeReason
		if r == "" {
			r = reasonOf(h.Volumes[key], false)
		}
		if r == "" {
			delete(faults, key)
			continue
		}
		faults[key] = r
		unnamed = unnamed || hs.names[key] == nil
	}
	hs.mu.RUnlock()
	if unnamed {
		// A failing volume the last records do not name (made since): read them.
		var vols []*model.Volume
		err := c.st.View(ctx, func(tx store.Tx) (err error) {
			vols, err = store.List[model.Volume](tx, store.KindVolume, "")
			return err
		})
		if err == nil {
			c.setRecords(c.mineOnly(vols))
		} else if ctx.Err() == nil {
			c.log.Debug("cannot read the volumes' records to name failing ones; later", "err", err)
		}
	}

	now := c.opts.Now().UTC()
	hs.mu.Lock()
	if storeReason != hs.store {
		if storeReason != "" {
			c.log.Error("the volume store is failing: every volume is in ERROR", "reason", storeReason, "observed", h.Store.Detail)
		} else {
			c.log.Info("the volume store is healthy again", "was", hs.store)
		}
	}
	counts := map[string]int{}
	for _, r := range faults {
		counts[r]++
	}
	for key, v := range hs.names {
		if faults[key] == "" && v.State == model.StateError {
			counts[ReasonOperationFailed]++
		}
	}
	// Changes are announced (logged, recorded) per named volume; one no record
	// names yet is announced once one does.
	if hs.announced == nil {
		hs.announced = map[string]string{}
	}
	keys := maps.Clone(faults)
	maps.Copy(keys, hs.announced)
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		was, is := hs.announced[key], faults[key]
		v := hs.names[key]
		switch {
		case was == is:
			continue
		case v == nil && is == "":
			delete(hs.announced, key) // gone with its record
			continue
		case v == nil:
			continue
		}
		log := c.log.With("volume", v.Name(), "key", key)
		switch {
		case is == "":
			log.Info("volume's storage is healthy again: READY", "was", was)
		case storeReason != "":
			log.Debug("volume in ERROR: the volume store is failing", "reason", is)
		default:
			log.Warn("volume in ERROR: its storage is failing", "reason", is, "observed", h.Volumes[key].Detail)
		}
		hs.pending = append(hs.pending, HealthChange{Time: now, Volume: v.Name(), Project: v.Project, Reason: is, Details: faultWords[is]})
		if is == "" {
			delete(hs.announced, key)
		} else {
			hs.announced[key] = is
		}
	}
	if over := len(hs.pending) - maxPendingChanges; over > 0 {
		c.log.Warn("dropping health changes that could not be recorded", "dropped", over)
		hs.pending = slices.Delete(hs.pending, 0, over)
	}
	hs.store, hs.faults, hs.counts = storeReason, faults, counts
	pending := hs.pending
	hs.pending = nil
	hs.mu.Unlock()
	c.recordChanges(ctx, pending)
}

// recordChanges hands changes to OnHealthChange in order; those it could not
// record wait for the next pass.
func (c *Controller) recordChanges(ctx context.Context, changes []HealthChange) {
	if c.opts.OnHealthChange == nil {
		return
	}
	for i, ch := range changes {
		if err := c.opts.OnHealthChange(ctx, ch); err != nil {
			c.health.mu.Lock()
			c.health.pending = append(slices.Clone(changes[i:]), c.health.pending...)
			first := !c.health.recordFailing
			c.health.recordFailing = true
			c.health.mu.Unlock()
			if first && ctx.Err() == nil { // once until it works again, not every pass
				c.log.Warn("cannot record volumes' health changes yet; will try again every pass", "waiting", len(changes)-i, "err", err)
			}
			return
		}
	}
	c.health.mu.Lock()
	if c.health.recordFailing {
		c.log.Info("volumes' health changes recorded again")
	}
	c.health.recordFailing = false
	c.health.mu.Unlock()
}
