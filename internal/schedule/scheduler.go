// Package schedule runs volumes' snapshot policies: at each boundary of an
// hourly, daily, weekly or monthly schedule (UTC) it records a snapshot named
// after the schedule and the boundary ("hourly-20261122-1400") through the intent
// layer, as the API records one, so it is validated, persisted, carried out by
// the controller, resumable and audited; once it is taken, the schedule's oldest
// snapshots beyond its snapshotsToKeep are deleted the same way. Only snapshots
// the scheduler took are ever deleted: each records the schedule that took it
// (model.Snapshot.Schedule), which nothing on the wire can set.
//
// One timer serves every volume: a pass at each minute looks at all volumes'
// policies, so an edit takes effect at its next boundary, a disabled policy
// stops at once, and a volume's failure (a snapshot limit, a full volume or
// store) is its own: shown on its state details and in the audit log, while the
// pass goes on. Each schedule's last boundary handled is kept in the store
// (KindSnapshotSchedule), so after downtime a schedule takes one snapshot for
// the latest boundary it missed, not one per boundary. Nodes sharing a store
// take turns under a lease (Pass).
//
// Imported by the daemon only.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Options configures a Scheduler.
type Options struct {
	// NodeID names this node as the holder of the scheduler's lease: nodes
	// sharing a store take turns, one pass at a time (see Pass); "" = "local".
	NodeID string
	// LeaseTTL is how long a pass's hold on the lease lasts; 0 = 90 s (a pass a
	// minute renews it).
	LeaseTTL time.Duration
	Store    store.Store
	// Intents records snapshots as the API does (the API's own intent layer).
	Intents *intent.Service
	// Wake, if set, is called after an operation was recorded (the controller's
	// Wake).
	Wake func()
	// Audit, if set, records what the scheduler did or failed to do.
	Audit func(ctx context.Context, e Event)
	// Clock is the scheduler's time; nil = the wall clock.
	Clock  Clock
	Logger *slog.Logger
}

// Event is a snapshot the scheduler recorded or deleted, or failed to, for the
// audit log.
type Event struct {
	Project string
	// Method is the permission a caller would need to do the same:
	// "netapp.snapshots.create" or "netapp.snapshots.delete".
	Method    string
	Resource  string // the snapshot's name
	Operation string // the operation's ID, when one was recorded
	Err       error  // nil: done (or recorded)
}

// Methods of Events.
const (
	MethodCreate = "netapp.snapshots.create"
	MethodDelete = "netapp.snapshots.delete"
)

// Scheduler takes and deletes scheduled snapshots. Run it once.
type Scheduler struct {
	opts  Options
	clock Clock
	log   *slog.Logger
}

// New returns a Scheduler.
func New(opts Options) *Scheduler {
	if opts.NodeID == "" {
		opts.NodeID = "local"
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 90 * time.Second
	}
	s := &Scheduler{opts: opts, clock: opts.Clock, log: opts.Logger}
	if s.clock == nil {
		s.clock = RealClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// Run makes a pass at once (catching up what downtime missed) and then at the
// start of every minute, until ctx ends; it returns nil then. It holds one timer
// at a time, whatever the number of volumes.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("snapshot schedules", "err", err)
		}
		now := s.clock.Now()
		c, stop := s.clock.Timer(now.Truncate(time.Minute).Add(time.Minute).Sub(now))
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-c:
		}
	}
}

// state is the scheduler's record of one volume (a KindSnapshotSchedule
// document named by the volume).
type state struct {
	Volume string `json:"volume"`
	// Schedules holds each running schedule's timing signature and the latest
	// boundary it handled (took a snapshot for, or failed to).
	Schedules map[string]*handled `json:"schedules,omitempty"`
	// Pending are the snapshots recorded whose operations had not finished.
	Pending []pending `json:"pending,omitempty"`
}

type handled struct {
	Sig  string    `json:"sig"`
	Last time.Time `json:"last"`
}

type pending struct {
	Schedule  string `json:"schedule"`
	Snapshot  string `json:"snapshot"`  // its name
	Operation string `json:"operation"` // the operation's name
}

// leaseName is the store lease (store.TakeLease) the passes run under.
const leaseName = "snapshot-scheduler"

// Pass looks at every volume once, at the clock's time: it settles the snapshots
// earlier passes recorded (their outcome, then retention), and records a snapshot
// for every schedule whose boundary has come. A volume's failure does not stop
// the others'; the pass returns them joined.
//
// Nodes sharing a store take turns: a pass first takes (or renews) the
// scheduler's lease, and does nothing while another node holds it; every state
// it writes checks, in the same transaction, that it still holds it, so a node
// that lost the lease mid-pass cannot write over the state of the node that
// took it (and lose a pending snapshot's retention). A snapshot is recorded
// under its boundary's name, so two passes at one boundary cannot take two.
func (s *Scheduler) Pass(ctx context.Context) error {
	now := s.clock.Now().UTC()
	var lease store.Lease
	held := false
	err := s.opts.Store.Update(ctx, func(tx store.Tx) (err error) {
		lease, held, err = store.TakeLease(tx, leaseName, s.opts.NodeID, now, s.opts.LeaseTTL)
		return err
	})
	if err != nil || !held {
		return err
	}
	ctx = context.WithValue(ctx, leaseKey{}, lease)
	var vols []*model.Volume
	states := map[string]*state{}
	err = s.opts.Store.View(ctx, func(tx store.Tx) (err error) {
		if vols, err = store.List[model.Volume](tx, store.KindVolume, ""); err != nil {
			return err
		}
		sts, err := store.List[state](tx, store.KindSnapshotSchedule, "")
		for _, st := range sts {
			states[st.Volume] = st
		}
		return err
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		st := states[v.Name()]
		delete(states, v.Name())
		if err := s.volume(ctx, now, v, st); err != nil {
			s.log.Warn("snapshot schedules of a volume", "volume", v.Name(), "err", err)
			errs = append(errs, fmt.Errorf("volume %s: %w", v.Name(), err))
		}
	}
	// What is left is the state of volumes deleted since.
	if len(states) > 0 {
		errs = append(errs, s.update(ctx, func(tx store.Tx) error {
			for name := range states {
				if err := tx.Delete(store.KindSnapshotSchedule, name); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	return errors.Join(errs...)
}

// volume runs one volume's schedules at now; st is its record (nil: none yet).
func (s *Scheduler) volume(ctx context.Context, now time.Time, v *model.Volume, st *state) error {
	if st == nil {
		st = &state{Volume: v.Name()}
	}
	before, _ := json.Marshal(st)
	if st.Schedules == nil {
		st.Schedules = map[string]*handled{}
	}
	specs := Specs(v.SnapshotPolicy)
	var errs []error
	// Snapshots recorded earlier: once done, their outcome, then retention.
	var waiting []pending
	for _, p := range st.Pending {
		done, failure, err := s.outcome(ctx, p)
		if err != nil {
			errs = append(errs, err)
			waiting = append(waiting, p)
			continue
		}
		if !done {
			waiting = append(waiting, p)
			continue
		}
		if failure != nil {
			s.failed(ctx, v, p.Snapshot, failure)
			continue
		}
		errs = append(errs, s.note(ctx, v.Name(), ""))
		if spec, ok := specs[p.Schedule]; ok {
			errs = append(errs, s.retain(ctx, v, spec))
		}
	}
	st.Pending = waiting
	for _, kind := range Kinds {
		spec, on := specs[kind]
		h := st.Schedules[kind]
		if !on {
			delete(st.Schedules, kind) // stopped: turned on again, it starts afresh
			continue
		}
		b := spec.Last(now)
		if h == nil || h.Sig != spec.Sig() {
			// New or edited: from its next boundary on.
			st.Schedules[kind] = &handled{Sig: spec.Sig(), Last: b}
			continue
		}
		if !h.Last.Before(b) || v.State.Busy() || slices.ContainsFunc(st.Pending, func(p pending) bool { return p.Schedule == kind }) {
			continue // handled; or the volume (or the last snapshot) busy: next pass
		}
		// Due: one snapshot for the latest boundary, however many were missed.
		h.Last = b
		name := v.Name() + "/snapshots/" + spec.Name(b)
		op, err := s.opts.Intents.CreateSnapshot(ctx, s.opts.Store, intent.SnapshotCreate{Project: v.Project, Location: v.Location,
			Volume: v.ID, ID: spec.Name(b), Schedule: kind, ScheduledFor: b,
			Description: fmt.Sprintf("Taken by the %s schedule for %s UTC", kind, b.Format("2006-01-02 15:04"))})
		if errors.Is(err, model.ErrAlreadyExists) && s.took(ctx, name, kind, b) {
			// Recorded by a pass cut short before it saved its state: its
			// operation settles it; the next snapshot's retention counts it.
			continue
		}
		if err != nil {
			s.failed(ctx, v, name, err)
			continue
		}
		s.log.Info("scheduled snapshot", "volume", v.Name(), "snapshot", spec.Name(b), "operation", op.ID)
		s.audit(ctx, Event{Project: v.Project, Method: MethodCreate, Resource: name, Operation: op.ID})
		st.Pending = append(st.Pending, pending{Schedule: kind, Snapshot: name, Operation: op.Name()})
		s.wake()
	}
	if after, _ := json.Marshal(st); string(after) != string(before) {
		errs = append(errs, s.update(ctx, func(tx store.Tx) error {
			if len(st.Schedules) == 0 && len(st.Pending) == 0 {
				return tx.Delete(store.KindSnapshotSchedule, st.Volume)
			}
			return tx.Put(store.KindSnapshotSchedule, st.Volume, v.Name(), st)
		}))
	}
	return errors.Join(errs...)
}

type leaseKey struct{}

// update writes the scheduler's state under the pass's lease (ctx's): it fails
// with store.ErrLeaseLost if another node holds it now.
func (s *Scheduler) update(ctx context.Context, fn func(tx store.Tx) error) error {
	l, _ := ctx.Value(leaseKey{}).(store.Lease)
	return s.opts.Store.Update(ctx, func(tx store.Tx) error {
		if err := store.HoldsLease(tx, leaseName, l.Holder, l.Epoch); err != nil {
			return err
		}
		return fn(tx)
	})
}

// took reports whether snapshot name is the one the schedule kind took for
// boundary b.
func (s *Scheduler) took(ctx context.Context, name, kind string, b time.Time) bool {
	var sn *model.Snapshot
	err := s.opts.Store.View(ctx, func(tx store.Tx) (err error) {
		sn, err = store.Get[model.Snapshot](tx, store.KindSnapshot, name)
		return err
	})
	return err == nil && sn.Schedule == kind && sn.ScheduledFor.Equal(b)
}

// outcome reports whether p's operation is done and, if it failed, why. An
// operation no longer stored (expired) counts as done.
func (s *Scheduler) outcome(ctx context.Context, p pending) (done bool, failure error, err error) {
	var op model.Operation
	err = s.opts.Store.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, p.Operation, &op) })
	if errors.Is(err, model.ErrNotFound) {
		return true, nil, nil
	}
	if err != nil || !op.Done {
		return false, nil, err
	}
	if op.Error != nil {
		return true, op.Error.Err(), nil
	}
	return true, nil, nil
}

// retain deletes the oldest of the snapshots spec's schedule took on v beyond the
// spec.Keep newest. Snapshots it did not take (Schedule unset) are never counted
// or touched, nor are those busy with an operation (the next retention sees them).
func (s *Scheduler) retain(ctx context.Context, v *model.Volume, spec Spec) error {
	var snaps []*model.Snapshot
	err := s.opts.Store.View(ctx, func(tx store.Tx) (err error) {
		snaps, err = store.List[model.Snapshot](tx, store.KindSnapshot, v.Name())
		return err
	})
	if err != nil {
		return err
	}
	snaps = slices.DeleteFunc(snaps, func(sn *model.Snapshot) bool { return sn.Schedule != spec.Kind })
	slices.SortFunc(snaps, func(a, b *model.Snapshot) int {
		if c := b.ScheduledFor.Compare(a.ScheduledFor); c != 0 {
			return c
		}
		return b.CreateTime.Compare(a.CreateTime)
	})
	if len(snaps) <= spec.Keep {
		return nil
	}
	for _, sn := range snaps[spec.Keep:] {
		if sn.State != model.StateReady {
			continue
		}
		op, err := s.opts.Intents.DeleteSnapshot(ctx, s.opts.Store, intent.SnapshotDelete{Project: v.Project, Location: v.Location, Volume: v.ID, ID: sn.ID})
		e := Event{Project: v.Project, Method: MethodDelete, Resource: sn.Name(), Err: err}
		if err == nil {
			e.Operation = op.ID
			s.log.Info("scheduled snapshot retired", "volume", v.Name(), "snapshot", sn.ID, "operation", op.ID)
			s.wake()
		} else {
			s.log.Warn("scheduled snapshot not retired", "volume", v.Name(), "snapshot", sn.ID, "err", err)
		}
		s.audit(ctx, e)
	}
	return nil
}

// detailsPrefix starts every state detail the scheduler writes on a volume; only
// those it clears.
const detailsPrefix = "Scheduled snapshot "

// failed records that the scheduled snapshot name (a resource name) could not be
// taken: in the audit log, and on the volume's state details.
func (s *Scheduler) failed(ctx context.Context, v *model.Volume, name string, cause error) {
	s.log.Warn("scheduled snapshot failed", "volume", v.Name(), "snapshot", name, "err", cause)
	s.audit(ctx, Event{Project: v.Project, Method: MethodCreate, Resource: name, Err: cause})
	msg, ok := model.UserMessage(cause)
	if !ok {
		msg = "internal error; the server log has the details"
	}
	id := name[strings.LastIndex(name, "/")+1:]
	if err := s.note(ctx, v.Name(), fmt.Sprintf("%s%s failed: %s", detailsPrefix, id, msg)); err != nil {
		s.log.Warn("state details not written", "volume", v.Name(), "err", err)
	}
}

// note sets the volume's state details to msg, or with msg "" clears what the
// scheduler wrote there. It writes only on a READY volume and never over details
// of another's (an operation's).
func (s *Scheduler) note(ctx context.Context, volume, msg string) error {
	return s.opts.Store.Update(ctx, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, volume)
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if v.State != model.StateReady || v.Details == msg || (v.Details != "" && !strings.HasPrefix(v.Details, detailsPrefix)) {
			return nil
		}
		v.Details = msg
		return store.PutVolume(tx, v)
	})
}

func (s *Scheduler) audit(ctx context.Context, e Event) {
	if s.opts.Audit != nil {
		s.opts.Audit(ctx, e)
	}
}

func (s *Scheduler) wake() {
	if s.opts.Wake != nil {
		s.opts.Wake()
	}
}
