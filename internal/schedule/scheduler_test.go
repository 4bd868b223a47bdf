package schedule

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/controller"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

// fakeClock is a clock that moves only when the test moves it, and counts its
// timers.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	created int
	most    int // the most timers armed at once
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.created++
	c.most = max(c.most, len(c.timers))
	return t.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, t)
		if i >= 0 {
			c.timers = slices.Delete(c.timers, i, i+1)
		}
		return i >= 0
	}
}

// set moves the clock to t and fires the timers due by then.
func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.timers = slices.DeleteFunc(c.timers, func(tm *fakeTimer) bool {
		if tm.at.After(t) {
			return false
		}
		tm.c <- t
		return true
	})
}

func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// lab is a scheduler with a real controller over the fake storage backend, a
// real store and the intent layer the API uses.
type lab struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	be    *fake.Backend
	clock *fakeClock
	s     *Scheduler
	mu    sync.Mutex
	ev    []Event
}

func newLab(t *testing.T, limits model.Limits) *lab {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l := &lab{t: t, ctx: context.Background(), st: st, be: fake.New(), clock: &fakeClock{now: at("2026-11-22 10:00")}}
	ctrl := controller.New(controller.Options{Store: st, Backend: l.be, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-ctrl.Ready()
	if limits == (model.Limits{}) {
		limits = model.DefaultLimits()
	}
	l.s = New(Options{Store: st, Intents: intent.New(intent.Options{Limits: limits}), Wake: ctrl.Wake, Clock: l.clock,
		Audit: func(_ context.Context, e Event) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }})
	return l
}

func vname(id string) string { return model.LocationName("p1", "l1") + "/volumes/" + id }

// volume makes a READY volume with policy, its storage included.
func (l *lab) volume(id string, policy *model.SnapshotPolicy) {
	l.t.Helper()
	v := &model.Volume{Meta: model.Meta{Project: "p1", Location: "l1", ID: id, State: model.StateReady, CreateTime: l.clock.Now()},
		ShareName: id, StoragePool: "pool1", CapacityGib: 1, Protocols: []model.Protocol{model.ProtocolNFSv3}, Key: "k" + id, SnapshotPolicy: policy}
	if err := l.be.EnsureVolume(l.ctx, v.Key, 1<<30, nil); err != nil {
		l.t.Fatal(err)
	}
	if err := l.be.Mount(l.ctx, v.Key); err != nil {
		l.t.Fatal(err)
	}
	if err := l.st.Update(l.ctx, func(tx store.Tx) error { return store.PutVolume(tx, v) }); err != nil {
		l.t.Fatal(err)
	}
}

// setPolicy changes a volume's policy, as an update through the API would.
func (l *lab) setPolicy(id string, policy *model.SnapshotPolicy) {
	l.t.Helper()
	err := l.st.Update(l.ctx, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, vname(id))
		if err != nil {
			return err
		}
		v.SnapshotPolicy = policy
		return store.PutVolume(tx, v)
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// pass moves the clock to when, makes a pass, and waits until the controller has
// carried out every operation it recorded.
func (l *lab) pass(when string) {
	l.t.Helper()
	l.clock.set(at(when))
	if err := l.s.Pass(l.ctx); err != nil {
		l.t.Logf("pass at %s: %v", when, err)
	}
	l.settle()
}

func (l *lab) settle() {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		l.st.View(l.ctx, func(tx store.Tx) error {
			ops, err := store.PendingOperations(tx)
			n = len(ops)
			return err
		})
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("%d operations still pending", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// snapshots lists a volume's snapshot IDs, sorted.
func (l *lab) snapshots(id string) []string {
	l.t.Helper()
	var out []string
	l.st.View(l.ctx, func(tx store.Tx) error {
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, vname(id))
		for _, s := range snaps {
			out = append(out, s.ID)
		}
		return err
	})
	slices.Sort(out)
	return out
}

func (l *lab) wantSnapshots(id string, want ...string) {
	l.t.Helper()
	slices.Sort(want)
	if got := l.snapshots(id); !slices.Equal(got, want) {
		l.t.Fatalf("%s has snapshots %v, want %v", id, got, want)
	}
	// The storage holds exactly what the records say.
	got := l.be.State().Snapshots["k"+id]
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		l.t.Fatalf("%s's storage holds snapshots %v, want %v", id, got, want)
	}
}

func (l *lab) volumeDetails(id string) string {
	l.t.Helper()
	var v *model.Volume
	l.st.View(l.ctx, func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, vname(id))
		return err
	})
	return v.Details
}

func (l *lab) events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

// manual takes a snapshot on request, as the API does.
func (l *lab) manual(vol, id string) {
	l.t.Helper()
	if _, err := l.s.opts.Intents.CreateSnapshot(l.ctx, l.st, intent.SnapshotCreate{Project: "p1", Location: "l1", Volume: vol, ID: id}); err != nil {
		l.t.Fatal(err)
	}
	l.s.wake()
	l.settle()
}

func policy(mod func(p *model.SnapshotPolicy)) *model.SnapshotPolicy {
	on := true
	p := &model.SnapshotPolicy{Enabled: &on}
	mod(p)
	return p
}

// Each kind of schedule takes its snapshot at its boundary, named after it, not a
// minute before, and once.
func TestEachScheduleFiresAtItsBoundary(t *testing.T) {
	for _, c := range []struct {
		kind     string
		sched    *model.Schedule
		boundary string
	}{
		{model.ScheduleHourly, &model.Schedule{SnapshotsToKeep: f(5), Minute: f(15)}, "2026-11-22 10:15"},
		{model.ScheduleDaily, &model.Schedule{SnapshotsToKeep: f(5), Hour: f(1), Minute: f(30)}, "2026-11-23 01:30"},
		// 2026-11-22 is a Sunday: the next Thursday is the 26th.
		{model.ScheduleWeekly, &model.Schedule{SnapshotsToKeep: f(5), Day: str("Thursday"), Hour: f(2), Minute: f(45)}, "2026-11-26 02:45"},
		{model.ScheduleMonthly, &model.Schedule{SnapshotsToKeep: f(5), DaysOfMonth: str("1,15"), Hour: f(3)}, "2026-12-01 03:00"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			l := newLab(t, model.Limits{})
			l.volume("vol1", policy(func(p *model.SnapshotPolicy) {
				switch c.kind {
				case model.ScheduleHourly:
					p.Hourly = c.sched
				case model.ScheduleDaily:
					p.Daily = c.sched
				case model.ScheduleWeekly:
					p.Weekly = c.sched
				case model.ScheduleMonthly:
					p.Monthly = c.sched
				}
			}))
			b := at(c.boundary)
			l.pass("2026-11-22 10:00")
			l.pass(b.Add(-time.Minute).Format("2006-01-02 15:04"))
			l.wantSnapshots("vol1")
			l.pass(c.boundary)
			name := c.kind + "-" + b.Format("20060102-1504")
			l.wantSnapshots("vol1", name)
			l.pass(b.Add(30 * time.Second).Format("2006-01-02 15:04"))
			l.wantSnapshots("vol1", name)
			var sn *model.Snapshot
			l.st.View(l.ctx, func(tx store.Tx) (err error) {
				sn, err = store.Get[model.Snapshot](tx, store.KindSnapshot, vname("vol1")+"/snapshots/"+name)
				return err
			})
			if sn.Schedule != c.kind || !sn.ScheduledFor.Equal(b) || sn.State != model.StateReady {
				t.Fatalf("snapshot %+v: want READY, taken by the %s schedule for %s", sn, c.kind, b)
			}
			if ev := l.events(); len(ev) != 1 || ev[0].Method != MethodCreate || ev[0].Err != nil || ev[0].Operation == "" {
				t.Fatalf("audit events %+v", ev)
			}
		})
	}
}

// Retention keeps exactly snapshotsToKeep of each schedule, the newest; it never
// deletes a snapshot taken on request, even one named as the schedule names
// its own.
func TestRetentionKeepsExactlyN(t *testing.T) {
	l := newLab(t, model.Limits{})
	l.volume("vol1", policy(func(p *model.SnapshotPolicy) {
		p.Hourly = &model.Schedule{SnapshotsToKeep: f(3)}
		p.Daily = &model.Schedule{SnapshotsToKeep: f(2), Hour: f(0)}
	}))
	l.pass("2026-11-22 10:00")
	// On request: one with a name of its own, one named as a later hourly
	// snapshot would be, one as an hourly the retention will pass over.
	l.manual("vol1", "mine")
	l.manual("vol1", "hourly-20261122-1200")
	l.manual("vol1", "hourly-20261121-0900")
	var hourly []string
	for h := 1; h <= 40; h++ {
		when := at("2026-11-22 10:00").Add(time.Duration(h) * time.Hour)
		l.pass(when.Format("2006-01-02 15:04"))
		if when.Format("1504") != "1200" || when.Day() != 22 {
			hourly = append(hourly, "hourly-"+when.Format("20060102-1504"))
		}
	}
	// Retention follows each snapshot once its operation is done: at the pass
	// after it (a minute later at the most).
	l.pass("2026-11-24 02:01")
	// The 12:00 boundary found a snapshot of that name taken on request: it
	// failed, and the schedule went on at the next one.
	want := append([]string{"mine", "hourly-20261122-1200", "hourly-20261121-0900", "daily-20261123-0000", "daily-20261124-0000"},
		hourly[len(hourly)-3:]...)
	l.wantSnapshots("vol1", want...)
	var failed []Event
	for _, e := range l.events() {
		if e.Err != nil {
			failed = append(failed, e)
		}
	}
	if len(failed) != 1 || !strings.HasSuffix(failed[0].Resource, "/hourly-20261122-1200") {
		t.Fatalf("failures %+v: want the one at 12:00", failed)
	}
	// Lowering snapshotsToKeep takes effect with the schedule's next snapshot.
	l.setPolicy("vol1", policy(func(p *model.SnapshotPolicy) {
		p.Hourly = &model.Schedule{SnapshotsToKeep: f(1)}
		p.Daily = &model.Schedule{SnapshotsToKeep: f(2), Hour: f(0)}
	}))
	l.pass("2026-11-24 02:30")
	l.wantSnapshots("vol1", want...)
	l.pass("2026-11-24 03:00")
	l.pass("2026-11-24 03:01")
	l.wantSnapshots("vol1", "mine", "hourly-20261122-1200", "hourly-20261121-0900", "daily-20261123-0000", "daily-20261124-0000",
		"hourly-20261124-0300")
}

// After three days down, each schedule takes one snapshot — for the latest
// boundary it missed — and not one per boundary.
func TestCatchUpAfterOutage(t *testing.T) {
	l := newLab(t, model.Limits{})
	l.volume("vol1", policy(func(p *model.SnapshotPolicy) {
		p.Hourly = &model.Schedule{SnapshotsToKeep: f(48), Minute: f(5)}
		p.Daily = &model.Schedule{SnapshotsToKeep: f(7), Hour: f(6)}
		p.Weekly = &model.Schedule{SnapshotsToKeep: f(4), Day: str("Tuesday"), Hour: f(1)}
		p.Monthly = &model.Schedule{SnapshotsToKeep: f(12), DaysOfMonth: str("23,24")}
	}))
	l.pass("2026-11-22 10:00") // Sunday: schedules start
	l.pass("2026-11-22 10:05")
	l.wantSnapshots("vol1", "hourly-20261122-1005")
	// Down from 10:06 on Sunday until Wednesday 10:30.
	l.pass("2026-11-25 10:30")
	l.wantSnapshots("vol1", "hourly-20261122-1005", "hourly-20261125-1005", "daily-20261125-0600", "weekly-20261124-0100",
		"monthly-20261124-0000")
	l.pass("2026-11-25 10:59")
	l.wantSnapshots("vol1", "hourly-20261122-1005", "hourly-20261125-1005", "daily-20261125-0600", "weekly-20261124-0100",
		"monthly-20261124-0000")
	l.pass("2026-11-25 11:05")
	if n := len(l.snapshots("vol1")); n != 6 {
		t.Fatalf("%d snapshots after the next hourly boundary, want 6", n)
	}
}

// A pass cut short after it recorded a snapshot but before it saved its state
// finds that snapshot, its own, at the next pass: no failure, no second one.
func TestPassCutShortIsResumed(t *testing.T) {
	l := newLab(t, model.Limits{})
	l.volume("vol1", policy(func(p *model.SnapshotPolicy) { p.Hourly = &model.Schedule{SnapshotsToKeep: f(2)} }))
	l.pass("2026-11-22 10:00")
	b := at("2026-11-22 11:00")
	if _, err := l.s.opts.Intents.CreateSnapshot(l.ctx, l.st, intent.SnapshotCreate{Project: "p1", Location: "l1", Volume: "vol1",
		ID: "hourly-20261122-1100", Schedule: model.ScheduleHourly, ScheduledFor: b}); err != nil {
		t.Fatal(err)
	}
	l.s.wake()
	l.pass("2026-11-22 11:00")
	l.pass("2026-11-22 11:01")
	l.wantSnapshots("vol1", "hourly-20261122-1100")
	for _, e := range l.events() {
		if e.Err != nil {
			t.Fatalf("a failure recorded: %+v", e)
		}
	}
	for _, h := range []string{"12:00", "13:00", "14:00"} {
		l.pass("2026-11-22 " + h)
	}
	l.pass("2026-11-22 14:01")
	l.wantSnapshots("vol1", "hourly-20261122-1300", "hourly-20261122-1400")
}

// A disabled policy stops taking snapshots; enabled again, or edited, it starts
// at its next boundary, never with one for a boundary that passed meanwhile.
func TestDisableAndEditTakeEffectAtTheNextBoundary(t *testing.T) {
	l := newLab(t, model.Limits{})
	hourly := func(minute float64) *model.SnapshotPolicy {
		return policy(func(p *model.SnapshotPolicy) { p.Hourly = &model.Schedule{SnapshotsToKeep: f(10), Minute: f(minute)} })
	}
	l.volume("vol1", hourly(15))
	l.pass("2026-11-22 10:00")
	l.pass("2026-11-22 10:15")
	l.wantSnapshots("vol1", "hourly-20261122-1015")
	off := hourly(15)
	*off.Enabled = false
	l.setPolicy("vol1", off)
	l.pass("2026-11-22 11:15")
	l.pass("2026-11-22 12:15")
	l.wantSnapshots("vol1", "hourly-20261122-1015")
	l.setPolicy("vol1", hourly(15))
	l.pass("2026-11-22 12:20") // 12:15 passed while it was off: not taken
	l.wantSnapshots("vol1", "hourly-20261122-1015")
	l.pass("2026-11-22 13:15")
	l.wantSnapshots("vol1", "hourly-20261122-1015", "hourly-20261122-1315")
	// Edited to minute 45 at 13:20: nothing for 12:45, the first at 13:45.
	l.setPolicy("vol1", hourly(45))
	l.pass("2026-11-22 13:20")
	l.pass("2026-11-22 13:44")
	l.wantSnapshots("vol1", "hourly-20261122-1015", "hourly-20261122-1315")
	l.pass("2026-11-22 13:45")
	l.wantSnapshots("vol1", "hourly-20261122-1015", "hourly-20261122-1315", "hourly-20261122-1345")
	// No policy at all: nothing, and nothing kept about it.
	l.setPolicy("vol1", nil)
	l.pass("2026-11-22 14:45")
	l.wantSnapshots("vol1", "hourly-20261122-1015", "hourly-20261122-1315", "hourly-20261122-1345")
	l.st.View(l.ctx, func(tx store.Tx) error {
		if names, _ := tx.Names(store.KindSnapshotSchedule, ""); len(names) != 0 {
			t.Errorf("scheduler state kept for a volume without a policy: %v", names)
		}
		return nil
	})
}

// A volume at its snapshot limit, or too full for a snapshot, fails its
// scheduled snapshot: the failure is on its state details and in the audit log,
// and other volumes' schedules run on. A later success clears the details.
func TestFailuresAreShownAndStopNoOtherVolume(t *testing.T) {
	limits := model.DefaultLimits()
	limits.MaxSnapshotsPerVol = 2
	l := newLab(t, limits)
	hourly := policy(func(p *model.SnapshotPolicy) { p.Hourly = &model.Schedule{SnapshotsToKeep: f(1)} })
	l.volume("full", hourly)
	l.volume("ok", hourly)
	l.pass("2026-11-22 10:00")
	l.manual("full", "m1")
	l.manual("full", "m2")
	l.pass("2026-11-22 11:00")
	l.wantSnapshots("ok", "hourly-20261122-1100")
	l.wantSnapshots("full", "m1", "m2")
	if d := l.volumeDetails("full"); !strings.Contains(d, "hourly-20261122-1100 failed") || !strings.Contains(d, "2 snapshots") {
		t.Fatalf("state details of the volume at its limit: %q", d)
	}
	if d := l.volumeDetails("ok"); d != "" {
		t.Fatalf("state details of the other volume: %q", d)
	}
	var audited bool
	for _, e := range l.events() {
		if e.Err != nil && e.Method == MethodCreate && strings.HasSuffix(e.Resource, "volumes/full/snapshots/hourly-20261122-1100") {
			audited = true
		}
	}
	if !audited {
		t.Fatalf("the failure is not in the audit events: %+v", l.events())
	}

	// Room again: the next boundary succeeds and clears the details.
	if _, err := l.s.opts.Intents.DeleteSnapshot(l.ctx, l.st, intent.SnapshotDelete{Project: "p1", Location: "l1", Volume: "full", ID: "m1"}); err != nil {
		t.Fatal(err)
	}
	l.s.wake()
	l.settle()
	l.pass("2026-11-22 12:00")
	l.pass("2026-11-22 12:01") // the pass after a snapshot settles it
	l.wantSnapshots("full", "m2", "hourly-20261122-1200")
	if d := l.volumeDetails("full"); d != "" {
		t.Fatalf("state details after a success: %q", d)
	}

	// The volume is full: the snapshot's operation fails; the next pass shows it.
	l.be.Fail("EnsureSnapshot", fmt.Errorf("snapshot: %w", storage.ErrNoSpace))
	l.pass("2026-11-22 13:00")
	l.be.Fail("EnsureSnapshot", nil)
	l.pass("2026-11-22 13:01")
	if d := l.volumeDetails("ok"); !strings.Contains(d, "hourly-20261122-1300 failed: the volume is full") {
		t.Fatalf("state details of a full volume: %q", d)
	}
	l.wantSnapshots("ok", "hourly-20261122-1200")
	l.pass("2026-11-22 14:00")
	l.pass("2026-11-22 14:01")
	l.wantSnapshots("ok", "hourly-20261122-1400")
	if d := l.volumeDetails("ok"); d != "" {
		t.Fatalf("state details after a success: %q", d)
	}
}

// 1,000 volumes with hourly schedules cost the scheduler one timer (and no
// goroutine each): Run holds one timer at a time, and its passes take every
// volume's snapshot at the boundary.
func TestThousandVolumesOneTimer(t *testing.T) {
	l := newLab(t, model.Limits{})
	const n = 1000
	hourly := policy(func(p *model.SnapshotPolicy) { p.Hourly = &model.Schedule{SnapshotsToKeep: f(2)} })
	for i := range n {
		l.volume(fmt.Sprintf("v%04d", i), hourly)
	}
	l.clock.set(at("2026-11-22 10:30"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.s.Run(ctx); close(done) }()
	waitArmed := func() {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for l.clock.armed() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the scheduler armed no timer")
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Each minute up to 11:00, and the pass at 11:00 takes 1,000 snapshots.
	for m := 0; m <= 30; m++ {
		waitArmed()
		if g := schedulerGoroutines(); g != 1 {
			t.Fatalf("%d goroutines run the scheduler's code, want 1", g)
		}
		l.clock.set(at("2026-11-22 10:30").Add(time.Duration(m+1) * time.Minute))
	}
	waitArmed()
	l.settle()
	cancel()
	<-done
	var taken int
	l.st.View(l.ctx, func(tx store.Tx) error {
		names, err := tx.Names(store.KindSnapshot, "")
		taken = len(names)
		return err
	})
	if taken != n {
		t.Fatalf("%d snapshots taken at 11:00, want %d", taken, n)
	}
	if l.clock.most != 1 {
		t.Fatalf("%d timers armed at once, want 1", l.clock.most)
	}
	t.Logf("%d timers made over 32 passes, at most %d armed at once", l.clock.created, l.clock.most)
	// What an idle pass over 1,000 volumes costs (logged, not asserted).
	l.clock.set(at("2026-11-22 11:01:30"))
	start := time.Now()
	if err := l.s.Pass(l.ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("a pass over %d volumes with nothing due took %v", n, time.Since(start))
}

// schedulerGoroutines counts the goroutines running a Scheduler's methods.
func schedulerGoroutines() int {
	buf := make([]byte, 1<<24)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/schedule.(*Scheduler)") {
			n++
		}
	}
	return n
}

// Two nodes' schedulers on one store, passing at the same boundaries at once:
// they take turns under the scheduler's lease (it lapses between the hours, so
// either may run each), one snapshot is taken per boundary, no failure is shown
// on the volume, and retention keeps exactly snapshotsToKeep.
func TestTwoSchedulersOneSnapshotPerBoundary(t *testing.T) {
	l := newLab(t, model.Limits{})
	l.volume("vol1", policy(func(p *model.SnapshotPolicy) { p.Hourly = &model.Schedule{SnapshotsToKeep: f(2)} }))
	var ev2 []Event
	var mu sync.Mutex
	other := New(Options{NodeID: "node-b", Store: l.st, Intents: l.s.opts.Intents, Wake: l.s.opts.Wake, Clock: l.clock,
		Audit: func(_ context.Context, e Event) { mu.Lock(); ev2 = append(ev2, e); mu.Unlock() }})
	for _, when := range []string{"2026-11-22 10:00", "2026-11-22 11:00", "2026-11-22 12:00", "2026-11-22 13:00"} {
		l.clock.set(at(when))
		var wg sync.WaitGroup
		for _, s := range []*Scheduler{l.s, other} {
			wg.Go(func() { s.Pass(l.ctx) })
		}
		wg.Wait()
		l.settle()
		// A second pass each settles what the other recorded.
		for _, s := range []*Scheduler{l.s, other} {
			if err := s.Pass(l.ctx); err != nil {
				t.Errorf("pass at %s: %v", when, err)
			}
		}
		l.settle()
	}
	// Without the lease, a pass's state written over the other's loses the
	// pending snapshot whose settling runs the retention: 11:00 would stay.
	l.wantSnapshots("vol1", "hourly-20261122-1200", "hourly-20261122-1300")
	if d := l.volumeDetails("vol1"); d != "" {
		t.Errorf("volume details %q, want none", d)
	}
	creates := 0
	for _, e := range append(l.events(), ev2...) {
		if e.Err != nil {
			t.Errorf("event %+v failed", e)
		}
		if e.Method == MethodCreate {
			creates++
		}
	}
	if creates != 3 {
		t.Errorf("%d snapshot creates recorded for 3 boundaries (the first pass, at 10:00, starts the schedule)", creates)
	}
}
