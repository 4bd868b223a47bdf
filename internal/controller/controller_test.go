package controller

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

func TestPlanVolume(t *testing.T) {
	want := VolumeWant{LimitBytes: 10 << 30, Mode: 0o770, Export: true}
	full := Observation{VolumeStatus: storage.VolumeStatus{Exists: true, Mounted: true, QgroupExists: true, LimitBytes: 10 << 30, Mode: 0o770}, Exported: true}
	cases := []struct {
		name string
		obs  func(s *Observation)
		want []Step
	}{
		{"nothing yet", func(s *Observation) { *s = Observation{} },
			[]Step{StepCreateQgroup, StepSetLimit, StepCreateVolume, StepSetMode, StepMount, StepExport}},
		{"crashed after qgroup", func(s *Observation) { *s = Observation{VolumeStatus: storage.VolumeStatus{QgroupExists: true}} },
			[]Step{StepSetLimit, StepCreateVolume, StepSetMode, StepMount, StepExport}},
		{"crashed before mount", func(s *Observation) { s.Mounted, s.Exported = false, false }, []Step{StepMount, StepExport}},
		{"crashed before export", func(s *Observation) { s.Exported = false }, []Step{StepExport}},
		{"unmounted under its export", func(s *Observation) { s.Mounted = false }, []Step{StepUnexport, StepMount, StepExport}},
		{"resized", func(s *Observation) { s.LimitBytes = 5 << 30 }, []Step{StepSetLimit}},
		{"mode drifted", func(s *Observation) { s.Mode = 0o755 }, []Step{StepSetMode}},
		{"converged", func(s *Observation) {}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := full
			tc.obs(&obs)
			if got := PlanVolume(want, obs); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	noNFS := want
	noNFS.Export = false
	if got := PlanVolume(noNFS, Observation{VolumeStatus: full.VolumeStatus}); got != nil {
		t.Fatalf("SMB-only volume: %v", got)
	}
}

func TestPlanRevertAtEveryCrashPoint(t *testing.T) {
	want := VolumeWant{LimitBytes: 1 << 30, Export: true}
	base := storage.VolumeStatus{QgroupExists: true, LimitBytes: 1 << 30}
	cases := []struct {
		name    string
		swapped bool
		obs     Observation
		want    []Step
	}{
		{"not started", false, with(base, true, true, false, true), []Step{StepUnexport, StepRetire, StepRestore, StepMarkSwapped, StepPurgeRetired, StepDeleteNewer, StepMount, StepExport}},
		{"after unexport", false, with(base, true, true, false, false), []Step{StepUnexport, StepRetire, StepRestore, StepMarkSwapped, StepPurgeRetired, StepDeleteNewer, StepMount, StepExport}},
		{"after retire", false, with(base, false, false, true, false), []Step{StepUnexport, StepRestore, StepMarkSwapped, StepPurgeRetired, StepDeleteNewer, StepMount, StepExport}},
		{"after restore", false, with(base, true, false, true, false), []Step{StepUnexport, StepMarkSwapped, StepPurgeRetired, StepDeleteNewer, StepMount, StepExport}},
		{"after mark", true, with(base, true, false, true, false), []Step{StepPurgeRetired, StepDeleteNewer, StepMount, StepExport}},
		{"after purge", true, with(base, true, false, false, false), []Step{StepDeleteNewer, StepMount, StepExport}},
		{"after mount", true, with(base, true, true, false, false), []Step{StepDeleteNewer, StepExport}},
		{"after export", true, with(base, true, true, false, true), []Step{StepDeleteNewer}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlanRevert(tc.swapped, want, tc.obs); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func with(s storage.VolumeStatus, exists, mounted, retired, exported bool) Observation {
	s.Exists, s.Mounted, s.Retired = exists, mounted, retired
	return Observation{VolumeStatus: s, Exported: exported}
}

func TestPlanVolumeDelete(t *testing.T) {
	if got := PlanVolumeDelete(Observation{}); !slices.Equal(got, []Step{StepUnexport}) {
		t.Fatalf("nothing to delete: %v", got)
	}
	if got := PlanVolumeDelete(Observation{VolumeStatus: storage.VolumeStatus{QgroupExists: true}}); !slices.Equal(got, []Step{StepUnexport, StepDeleteVolume}) {
		t.Fatalf("leftover qgroup: %v", got)
	}
}

type harness struct {
	st store.Store
	be *fake.Backend
}

func newHarness(t *testing.T) *harness {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &harness{st: st, be: fake.New()}
}

// start runs a controller until the test ends and waits for its first pass.
func (h *harness) start(t *testing.T) *Controller {
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-c.Ready()
	return c
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *harness) seed(t *testing.T, fn func(tx store.Tx) error) {
	if err := h.st.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func newVolume(id string, q uint64) *model.Volume {
	return &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: id, CreateTime: t0, State: model.StateCreating},
		ShareName: id, StoragePool: "pool", CapacityGib: 2, Protocols: []model.Protocol{1}, UnixPermissions: "0750", Key: "k" + id, Qgroup: q}
}

func newOp(kind model.OpKind, target string, at time.Time) *model.Operation {
	return &model.Operation{Project: "p", Location: "l", ID: "op-" + at.Format("150405.000"), Kind: kind, Target: target, CreateTime: at, Params: map[string]string{}}
}

// A create interrupted half-way (qgroup and subvolume made, not mounted, no limit)
// is finished on start.
func TestResumeHalfDoneCreate(t *testing.T) {
	h := newHarness(t)
	v := newVolume("vol1", 1)
	op := newOp(model.OpVolumeCreate, v.Name(), t0)
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	})
	ctx := context.Background()
	h.be.CreateQgroup(ctx, 1)
	h.be.CreateVolume(ctx, v.Key, 1, nil)
	h.start(t)
	var got model.Operation
	h.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &got) })
	if !got.Done || got.Error != nil {
		t.Fatalf("operation not completed: %+v", got)
	}
	st := h.be.State()
	if !st.Volumes[v.Key] || st.Qgroups[1] != 2<<30 || st.Modes[v.Key] != 0o750 {
		t.Fatalf("storage not converged: %+v", st)
	}
	if h.be.CallCount("CreateVolume") != 1 || h.be.CallCount("CreateQgroup") != 1 {
		t.Fatal("resume repeated steps that were already done")
	}
}

// A revert interrupted after the live subvolume was retired is finished on start.
func TestResumeRevertAfterRetire(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	v := newVolume("vol1", 3)
	v.State = model.StateRestoring
	snaps := []*model.Snapshot{
		{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", CreateTime: t0, State: model.StateReady}, Volume: "vol1"},
		{Meta: model.Meta{Project: "p", Location: "l", ID: "s2", CreateTime: t0.Add(time.Minute), State: model.StateReady}, Volume: "vol1"},
	}
	op := newOp(model.OpVolumeRevert, v.Name(), t0.Add(time.Hour))
	op.Params["snapshot"], op.Params["started"] = "s1", "1"
	h.seed(t, func(tx store.Tx) error {
		for _, s := range snaps {
			if err := store.PutSnapshot(tx, s); err != nil {
				return err
			}
		}
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	})
	h.be.CreateQgroup(ctx, 3)
	h.be.SetLimit(ctx, 3, 2<<30)
	h.be.CreateVolume(ctx, v.Key, 3, nil)
	h.be.CreateSnapshot(ctx, v.Key, "s1", 3)
	h.be.CreateSnapshot(ctx, v.Key, "s2", 3)
	h.be.Retire(ctx, v.Key, op.ID) // the crash happened here
	h.start(t)
	st := h.be.State()
	if !st.Volumes[v.Key] || st.Sources[v.Key].Snapshot != "s1" || len(st.Retired) != 0 {
		t.Fatalf("revert not finished: %+v", st)
	}
	if !slices.Equal(st.Snapshots[v.Key], []string{"s1"}) {
		t.Fatalf("newer snapshot not deleted: %v", st.Snapshots[v.Key])
	}
	var cur *model.Volume
	h.st.View(ctx, func(tx store.Tx) (err error) {
		cur, err = store.Get[model.Volume](tx, store.KindVolume, v.Name())
		return err
	})
	if cur.State != model.StateReady {
		t.Fatalf("volume state %s", cur.State)
	}
}

// Storage that no record accounts for is removed at start; storage of records is not.
func TestCollectOrphans(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	v := newVolume("vol1", 1)
	v.State = model.StateReady
	h.seed(t, func(tx store.Tx) error {
		tx.NextSeq("qgroup")
		tx.NextSeq("qgroup")
		return store.PutVolume(tx, v)
	})
	h.be.CreateQgroup(ctx, 1)
	h.be.CreateVolume(ctx, v.Key, 1, nil)
	h.be.CreateSnapshot(ctx, v.Key, "stray", 1) // snapshot without a record
	h.be.CreateQgroup(ctx, 2)                   // orphan: numbered by Basin, unused
	h.be.CreateVolume(ctx, "korphan", 2, nil)   // orphan volume
	h.be.CreateQgroup(ctx, 99)                  // not Basin's numbering: left alone
	h.start(t)
	st := h.be.State()
	if _, ok := st.Volumes["korphan"]; ok {
		t.Fatal("orphan volume kept")
	}
	if _, ok := st.Qgroups[2]; ok {
		t.Fatal("orphan qgroup kept")
	}
	if _, ok := st.Qgroups[99]; !ok {
		t.Fatal("foreign qgroup destroyed")
	}
	if len(st.Snapshots[v.Key]) != 0 {
		t.Fatal("stray snapshot kept")
	}
	if !st.Volumes[v.Key] || st.Qgroups[1] != 2<<30 {
		t.Fatalf("the real volume was not kept and re-applied: %+v", st)
	}
}

// An operation interrupted by shutdown stays pending and is finished by the next
// controller.
func TestShutdownLeavesOperationResumable(t *testing.T) {
	h := newHarness(t)
	v := newVolume("vol1", 1)
	op := newOp(model.OpVolumeCreate, v.Name(), t0)
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	})
	release := h.be.Gate("Mount")
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	for h.be.CallCount("Mount") == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel() // shutdown while the step blocks
	<-done
	release()
	var got model.Operation
	h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &got) })
	if got.Done {
		t.Fatalf("interrupted operation was finished: %+v", got)
	}
	h.start(t)
	h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &got) })
	if !got.Done || got.Error != nil || !h.be.State().Volumes[v.Key] {
		t.Fatalf("not resumed: %+v %+v", got, h.be.State())
	}
}

func TestExpiresOldAuditEntries(t *testing.T) {
	h := newHarness(t)
	old := &model.AuditEntry{ID: "1", Project: "p", Time: time.Now().Add(-100 * 24 * time.Hour)}
	recent := &model.AuditEntry{ID: "2", Project: "p", Time: time.Now().Add(-time.Hour)}
	h.seed(t, func(tx store.Tx) error {
		tx.Put(store.KindAudit, "projects/p/auditLogs/1", "projects/p", old)
		return tx.Put(store.KindAudit, "projects/p/auditLogs/2", "projects/p", recent)
	})
	h.start(t)
	var left []*model.AuditEntry
	h.st.View(context.Background(), func(tx store.Tx) (err error) {
		left, err = store.List[model.AuditEntry](tx, store.KindAudit, "")
		return err
	})
	if len(left) != 1 || left[0].ID != "2" {
		t.Fatalf("entries left: %+v", left)
	}
}
