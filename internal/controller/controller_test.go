package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dpfake "github.com/basin-nas/basin/internal/dataplane/fake"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

func TestPlanVolume(t *testing.T) {
	want := VolumeWant{CapacityBytes: 10 << 30, Mode: 0o770, Export: true}
	full := Observation{VolumeStatus: storage.VolumeStatus{Exists: true, Mounted: true, CapacityBytes: 10 << 30, Mode: 0o770}, Exported: true}
	cases := []struct {
		name string
		obs  func(s *Observation)
		want []StepOp
	}{
		{"nothing yet", func(s *Observation) { *s = Observation{} },
			[]StepOp{StepCreateVolume, StepSetMode, StepMount, StepExport}},
		{"crashed before mount", func(s *Observation) { s.Mounted, s.Exported = false, false }, []StepOp{StepMount, StepExport}},
		{"crashed before export", func(s *Observation) { s.Exported = false }, []StepOp{StepExport}},
		{"unmounted under its export", func(s *Observation) { s.Mounted = false }, []StepOp{StepUnexport, StepMount, StepExport}},
		{"resized", func(s *Observation) { s.CapacityBytes = 5 << 30 }, []StepOp{StepResize}},
		{"resize cut short", func(s *Observation) { s.CapacityBytes = -1 }, []StepOp{StepResize}},
		{"mode drifted", func(s *Observation) { s.Mode = 0o755 }, []StepOp{StepSetMode}},
		{"converged", func(s *Observation) {}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := full
			tc.obs(&obs)
			if got := ops(PlanVolume(want, obs)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Steps carry their arguments.
	steps := PlanVolume(VolumeWant{CapacityBytes: 3 << 30, Mode: 0o700, From: &storage.SnapshotRef{VolumeKey: "k", Snapshot: "s"}}, Observation{})
	if steps[0].Bytes != 3<<30 || steps[0].From.Snapshot != "s" || steps[1].Mode != 0o700 {
		t.Fatalf("steps lost their arguments: %v", steps)
	}
	noNFS := want
	noNFS.Export = false
	if got := PlanVolume(noNFS, Observation{VolumeStatus: full.VolumeStatus}); got != nil {
		t.Fatalf("SMB-only volume: %v", got)
	}
	// Where NT ACLs decide, the root's mode is set when the volume is made
	// and then left to them: Windows narrowing the root's ACL changes the
	// mode Samba derives, and a chmod back would make Samba drop the ACL.
	once := want
	once.ModeOnce = true
	drifted := full
	drifted.Mode = 0o750
	if got := ops(PlanVolume(once, drifted)); len(got) != 0 {
		t.Fatalf("NT ACL volume whose mode changed from Windows: %v, want nothing", got)
	}
	if got := ops(PlanVolume(once, Observation{})); !slices.Equal(got, []StepOp{StepCreateVolume, StepSetMode, StepMount, StepExport}) {
		t.Fatalf("NT ACL volume made: %v", got)
	}
}

// What an NT-ACL volume wants of its root's mode: set by its own create, even
// one resumed after the volume was made; never by a later operation or a
// resync; never on a clone of an NT-ACL volume, whose root keeps the
// snapshot's NT ACL (a clone of a volume of mode bits has none to keep).
func TestWantOfNTACLMode(t *testing.T) {
	c := &Controller{}
	ntfs := &model.Volume{CapacityGib: 1, UnixPermissions: "0777", Protocols: []model.Protocol{model.ProtocolSMB}}
	unix := &model.Volume{CapacityGib: 1, UnixPermissions: "0770", Protocols: []model.Protocol{model.ProtocolNFSv3}}
	create := &model.Operation{Kind: model.OpVolumeCreate}
	clone := &model.Operation{Kind: model.OpVolumeCreate, Params: model.OpParams{SourceKey: "k", SourceSnapshot: "s", SourceNTACLs: true}}
	cloneOfUnix := &model.Operation{Kind: model.OpVolumeCreate, Params: model.OpParams{SourceKey: "k", SourceSnapshot: "s"}}
	update := &model.Operation{Kind: model.OpVolumeUpdate}
	made := Observation{VolumeStatus: storage.VolumeStatus{Exists: true, Mounted: true, CapacityBytes: 1 << 30, Mode: 0o755}}
	shared := made
	shared.Shared = true
	setsMode := func(v *model.Volume, op *model.Operation, obs Observation) bool {
		return slices.Contains(ops(PlanVolume(c.wantOf(v, op), obs)), StepSetMode)
	}
	for _, tc := range []struct {
		what string
		v    *model.Volume
		op   *model.Operation
		obs  Observation
		want bool
	}{
		{"NTFS volume's create", ntfs, create, Observation{}, true},
		{"NTFS volume's create resumed once made", ntfs, create, made, true},
		{"NTFS volume's create resumed once shared (the root may be narrowed)", ntfs, create, shared, false},
		{"NTFS volume's update", ntfs, update, made, false},
		{"NTFS volume's resync", ntfs, nil, made, false},
		{"NTFS clone", ntfs, clone, Observation{}, false},
		{"NTFS clone resumed once made", ntfs, clone, made, false},
		{"NTFS clone of a UNIX volume (no NT ACL to keep)", ntfs, cloneOfUnix, Observation{}, true},
		{"UNIX clone", unix, clone, Observation{}, true},
		{"UNIX volume's resync", unix, nil, made, true},
	} {
		if got := setsMode(tc.v, tc.op, tc.obs); got != tc.want {
			t.Errorf("%s: sets the root's mode %t, want %t", tc.what, got, tc.want)
		}
	}
}

// An SMB volume's share comes after its mount, is made again when its settings
// drifted, and goes before an unmount, a revert's swap and a delete (Samba holds
// the directory).
func TestPlanShare(t *testing.T) {
	want := VolumeWant{CapacityBytes: 10 << 30, Share: true}
	full := Observation{VolumeStatus: storage.VolumeStatus{Exists: true, Mounted: true, CapacityBytes: 10 << 30}, Shared: true, ShareCurrent: true}
	cases := []struct {
		name string
		obs  func(s *Observation)
		want []StepOp
	}{
		{"nothing yet", func(s *Observation) { *s = Observation{} }, []StepOp{StepCreateVolume, StepMount, StepShare}},
		{"settings drifted", func(s *Observation) { s.ShareCurrent = false }, []StepOp{StepShare}},
		{"share lost", func(s *Observation) { s.Shared, s.ShareCurrent = false, false }, []StepOp{StepShare}},
		{"unmounted under its share", func(s *Observation) { s.Mounted = false }, []StepOp{StepUnshare, StepMount, StepShare}},
		{"converged", func(s *Observation) {}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := full
			tc.obs(&obs)
			if got := ops(PlanVolume(want, obs)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := ops(PlanVolumeDelete(full)); !slices.Equal(got, []StepOp{StepUnexport, StepUnshare, StepDeleteVolume}) {
		t.Fatalf("delete: %v", got)
	}
	got := ops(PlanRevert(false, "s1", want, full))
	if i, j := slices.Index(got, StepUnshare), slices.Index(got, StepRevert); i < 0 || i > j || got[len(got)-1] != StepShare {
		t.Fatalf("revert: %v: want the share taken down before the swap and made again at the end", got)
	}
}

// A revert's plan at every point a crash can leave it: before the marker, it is
// redone from the start (the backend's Revert is resumable, which its conformance
// suite tests at each of its own crash points); after it, only what is left.
func TestPlanRevertAtEveryCrashPoint(t *testing.T) {
	want := VolumeWant{CapacityBytes: 1 << 30, Mode: 0o750, Export: true}
	base := storage.VolumeStatus{CapacityBytes: 1 << 30, Mode: 0o750}
	full := []StepOp{StepUnexport, StepUnmount, StepRevert, StepMarkReverted, StepDeleteNewer, StepMount, StepExport}
	cases := []struct {
		name     string
		reverted bool
		obs      Observation
		want     []StepOp
	}{
		{"not started", false, with(base, true, true, true), full},
		{"after unexport", false, with(base, true, true, false), full},
		{"after unmount", false, with(base, true, false, false), full},
		{"inside revert (live set aside)", false, with(base, false, false, false), full},
		{"after revert", false, with(base, true, false, false), full},
		{"after mark", true, with(base, true, false, false), []StepOp{StepDeleteNewer, StepMount, StepExport}},
		{"after mount", true, with(base, true, true, false), []StepOp{StepDeleteNewer, StepExport}},
		{"after export", true, with(base, true, true, true), []StepOp{StepDeleteNewer}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			steps := PlanRevert(tc.reverted, "s1", want, tc.obs)
			if got := ops(steps); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for _, s := range steps {
				if (s.Op == StepRevert || s.Op == StepDeleteNewer) && s.Snapshot != "s1" {
					t.Fatalf("%v does not name the snapshot", s)
				}
			}
		})
	}
}

func with(s storage.VolumeStatus, exists, mounted, exported bool) Observation {
	s.Exists, s.Mounted = exists, mounted
	return Observation{VolumeStatus: s, Exported: exported}
}

func TestPlanVolumeDelete(t *testing.T) {
	if got := ops(PlanVolumeDelete(Observation{})); !slices.Equal(got, []StepOp{StepUnexport}) {
		t.Fatalf("nothing to delete: %v", got)
	}
	if got := ops(PlanVolumeDelete(Observation{VolumeStatus: storage.VolumeStatus{CapacityBytes: 1 << 30}})); !slices.Equal(got, []StepOp{StepUnexport, StepDeleteVolume}) {
		t.Fatalf("filesystem without live data (mid-revert): %v", got)
	}
}

type harness struct {
	st store.Store
	be *fake.Backend
	dp *dpfake.DataPlane
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
	c, _ := runController(t, Options{Store: h.st, Backend: h.be, Resync: time.Hour})
	return c
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *harness) seed(t *testing.T, fn func(tx store.Tx) error) {
	if err := h.st.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// seedCreate stores v and an unfinished operation creating it, and returns the
// operation.
func (h *harness) seedCreate(t *testing.T, v *model.Volume) *model.Operation {
	op := newOp(model.OpVolumeCreate, v.Name(), t0)
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	})
	return op
}

func newVolume(id string) *model.Volume {
	return &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: id, CreateTime: t0, State: model.StateCreating},
		ShareName: id, StoragePool: "pool", CapacityGib: 2, Protocols: []model.Protocol{1}, UnixPermissions: "0750", Key: "k" + id}
}

func newOp(kind model.OpKind, target string, at time.Time) *model.Operation {
	return &model.Operation{Project: "p", Location: "l", ID: "op-" + at.Format("150405.000"), Kind: kind, Target: target, CreateTime: at, Params: model.OpParams{Version: model.OpParamsVersion}}
}

// A create interrupted half-way (filesystem made, not mounted) is finished on start.
func TestResumeHalfDoneCreate(t *testing.T) {
	h := newHarness(t)
	v := newVolume("vol1")
	op := h.seedCreate(t, v)
	ctx := context.Background()
	h.be.EnsureVolume(ctx, v.Key, 2<<30, nil)
	h.start(t)
	var got model.Operation
	h.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &got) })
	if !got.Done || got.Error != nil {
		t.Fatalf("operation not completed: %+v", got)
	}
	st := h.be.State()
	if !st.Volumes[v.Key] || st.Sizes[v.Key] != 2<<30 || st.Modes[v.Key] != 0o750 {
		t.Fatalf("storage not converged: %+v", st)
	}
	if h.be.CallCount("EnsureVolume") != 1 || h.be.CallCount("Resize") != 0 {
		t.Fatal("resume repeated steps that were already done")
	}
}

// A revert interrupted inside the backend (the live data set aside, the copy not
// made) is finished on start: the data is the snapshot's, newer snapshots are gone,
// nothing is left aside.
func TestResumeRevertInterruptedInBackend(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	v := newVolume("vol1")
	v.State = model.StateRestoring
	snaps := []*model.Snapshot{
		{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", CreateTime: t0, State: model.StateReady}, Volume: "vol1"},
		{Meta: model.Meta{Project: "p", Location: "l", ID: "s2", CreateTime: t0.Add(time.Minute), State: model.StateReady}, Volume: "vol1"},
	}
	op := newOp(model.OpVolumeRevert, v.Name(), t0.Add(time.Hour))
	op.Params.Snapshot, op.Params.Started = "s1", true
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
	must(t, h.be.EnsureVolume(ctx, v.Key, 2<<30, nil))
	must(t, h.be.Mount(ctx, v.Key))
	must(t, h.be.WriteFile(v.Key, "a", []byte("one")))
	must(t, h.be.EnsureSnapshot(ctx, v.Key, "s1"))
	must(t, h.be.WriteFile(v.Key, "a", []byte("two")))
	must(t, h.be.EnsureSnapshot(ctx, v.Key, "s2"))
	crash := errors.New("crash")
	h.be.SetFailpoint(func(op, key, step string) error {
		if step == "set-aside" {
			return crash
		}
		return nil
	})
	if err := h.be.Revert(ctx, v.Key, "s1"); !errors.Is(err, crash) {
		t.Fatalf("revert: %v", err)
	}
	h.be.SetFailpoint(nil)
	if !h.be.SetAside(v.Key) {
		t.Fatal("the crash left nothing aside: the test does not test what it says")
	}
	h.start(t)
	st := h.be.State()
	if !st.Volumes[v.Key] || len(st.SetAside) != 0 {
		t.Fatalf("revert not finished: %+v", st)
	}
	if data, err := h.be.ReadFile(v.Key, "a"); err != nil || string(data) != "one" {
		t.Fatalf("data after revert: %q, %v", data, err)
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

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// What a create cut short left, which no record accounts for and which holds no
// data, is removed at start; a whole volume or a snapshot without a record is
// kept (TestOrphanCollectionKeepsDataWhenRecordsAreMissing says why); storage of
// records is kept and re-applied.
func TestCollectOrphans(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	v := newVolume("vol1")
	v.State = model.StateReady
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
	h.be.EnsureVolume(ctx, v.Key, 1<<30, nil)
	h.be.EnsureSnapshot(ctx, v.Key, "stray")      // snapshot without a record
	h.be.EnsureVolume(ctx, "korphan", 1<<30, nil) // whole volume without a record
	h.be.LeaveUnfinished("kleftover")             // a create cut short
	h.start(t)
	st := h.be.State()
	inv, err := h.be.Inventory(ctx)
	must(t, err)
	if slices.Contains(inv.Volumes, "kleftover") {
		t.Fatal("an unfinished create's leftovers kept")
	}
	if _, ok := st.Volumes["korphan"]; !ok {
		t.Fatal("a whole volume without a record deleted")
	}
	if !slices.Equal(st.Snapshots[v.Key], []string{"stray"}) {
		t.Fatal("a snapshot without a record deleted")
	}
	if !st.Volumes[v.Key] || st.Sizes[v.Key] != 2<<30 {
		t.Fatalf("the real volume was not kept and re-applied: %+v", st)
	}
}

// An operation interrupted by shutdown stays pending and is finished by the next
// controller.
func TestShutdownLeavesOperationResumable(t *testing.T) {
	h := newHarness(t)
	v := newVolume("vol1")
	op := h.seedCreate(t, v)
	release := make(chan struct{})
	h.be.Gate = func(op, key string) {
		if op == "Mount" {
			<-release
		}
	}
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	for h.be.CallCount("Mount") == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel() // shutdown while the step blocks
	close(release)
	<-done
	h.be.Gate = nil
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

// Finished operations past the retention go, found by index, however many
// (more than one batch); unfinished and recent ones stay.
func TestExpiresOldOperationsInBatches(t *testing.T) {
	h := newHarness(t)
	n := 2*expireBatch + 7
	h.seed(t, func(tx store.Tx) error {
		for i := range n {
			o := newOp(model.OpSnapshotDelete, "projects/p/locations/l/volumes/v/snapshots/s", t0)
			o.ID, o.Done, o.EndTime = fmt.Sprintf("old-%d", i), true, time.Now().Add(-8*24*time.Hour)
			if err := store.PutOperation(tx, o); err != nil {
				return err
			}
		}
		recent := newOp(model.OpSnapshotDelete, "projects/p/locations/l/volumes/v/snapshots/s", t0)
		recent.ID, recent.Done, recent.EndTime = "recent", true, time.Now().Add(-time.Hour)
		return store.PutOperation(tx, recent)
	})
	h.start(t)
	var left []string
	h.st.View(context.Background(), func(tx store.Tx) (err error) {
		left, err = tx.Names(store.KindOperation, "")
		return err
	})
	if len(left) != 1 || !strings.HasSuffix(left[0], "/operations/recent") {
		t.Fatalf("%d operations left (%.3q…), want the recent one", len(left), left[:min(3, len(left))])
	}
}

func (h *harness) withDataPlane() *dpfake.DataPlane {
	h.dp = dpfake.New()
	h.dp.Mounted = h.be.Mounted // an export stands only on its mount, as in a sandbox
	return h.dp
}

// Export IDs stay in 1..65535 and never collide with one in use, past 70,000 handed
// out: the old never-reused sequence overflowed Ganesha's 16 bits at 65,536.
func TestExportIDsWrapWithoutCollision(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	const total = 70_500
	live := map[uint64]string{} // id -> holder, the IDs in use
	var order []uint64
	seen := map[uint64]bool{}
	for i := 0; i < total; i += 500 {
		err := h.st.Update(ctx, func(tx store.Tx) error {
			for j := i; j < i+500; j++ {
				holder := fmt.Sprintf("projects/p/locations/l/volumes/v%d", j)
				id, err := allocExportID(tx, holder, 0)
				if err != nil {
					return err
				}
				if id < 1 || id > nfs.MaxExportID {
					return fmt.Errorf("allocation %d: id %d out of range", j, id)
				}
				if o, ok := live[id]; ok {
					return fmt.Errorf("allocation %d: id %d is still held by %s", j, id, o)
				}
				// Allocating again for the same holder returns the same ID.
				if again, err := allocExportID(tx, holder, id); err != nil || again != id {
					return fmt.Errorf("re-allocation for %s gave %d, %v; want %d", holder, again, err, id)
				}
				live[id], seen[id] = holder, true
				order = append(order, id)
				// Keep a few thousand in use; release the oldest beyond that, and a
				// long-lived holder every so often stays for good.
				if len(order) > 3000 {
					old := order[0]
					order = order[1:]
					if old%97 == 0 {
						continue
					}
					if err := releaseExportID(tx, live[old], old); err != nil {
						return err
					}
					delete(live, old)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < nfs.MaxExportID-len(live) {
		t.Fatalf("only %d distinct IDs used over %d allocations: the allocator does not wrap", len(seen), total)
	}
	// The table holds exactly the live IDs, each with its holder.
	h.st.View(ctx, func(tx store.Tx) error {
		for id, holder := range live {
			if ok, err := holdsExportID(tx, holder, id); err != nil || !ok {
				t.Errorf("id %d: table does not name %s", id, holder)
			}
		}
		raws, _ := tx.List(store.KindExportID, "")
		if len(raws) != len(live) {
			t.Errorf("table holds %d IDs, %d are in use", len(raws), len(live))
		}
		return nil
	})
	// Releasing by someone who does not hold the ID changes nothing.
	h.st.Update(ctx, func(tx store.Tx) error {
		for id := range live {
			if err := releaseExportID(tx, "projects/p/locations/l/volumes/intruder", id); err != nil {
				t.Fatal(err)
			}
			if ok, _ := holdsExportID(tx, live[id], id); !ok {
				t.Fatalf("a release by a non-holder freed id %d", id)
			}
			break
		}
		return nil
	})
}

// run stores op (and, through seed, its target) and executes it to the end.
func (h *harness) run(t *testing.T, c *Controller, op *model.Operation, seed func(tx store.Tx) error) *model.Operation {
	t.Helper()
	ctx := context.Background()
	h.seed(t, func(tx store.Tx) error {
		if seed != nil {
			if err := seed(tx); err != nil {
				return err
			}
		}
		return store.PutOperation(tx, op)
	})
	c.execute(ctx, c.handlers[op.Kind], op)
	var got model.Operation
	if err := h.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &got) }); err != nil {
		t.Fatal(err)
	}
	return &got
}

// A snapshot holds an export ID only while its directory is exported, and IDs keep
// clear of every export loaded, through hundreds of volume and snapshot creates and
// deletes that wrap around the 16-bit range.
func TestSnapshotExportIDsThroughOperations(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	ctx := context.Background()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	v := nfsVolume("vol1", true, model.ProtocolNFSv3)
	// Start just below the top of the range, so the IDs wrap during the test.
	h.seed(t, func(tx store.Tx) error {
		return tx.Put(store.KindExportIDCursor, "last", "", exportIDCursor{Last: nfs.MaxExportID - 40})
	})
	if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), t0), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
		t.Fatalf("create: %+v", op.Error)
	}
	at := t0
	var kept []string
	for i := range 300 {
		at = at.Add(time.Second)
		sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: fmt.Sprintf("s%d", i), CreateTime: at, State: model.StateCreating}, Volume: "vol1"}
		op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), at), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) })
		if op.Error != nil {
			t.Fatalf("snapshot %d: %+v", i, op.Error)
		}
		checkExports(t, h, dp)
		// Volumes come and go in between, each holding an ID while it lives.
		if i%5 == 0 {
			other := newVolume(fmt.Sprintf("other%d", i))
			other.Protocols, other.Endpoint, other.Network, other.ExportRules = v.Protocols, fmt.Sprintf("10.99.0.%d", 11+i%100), "default", v.ExportRules
			if op := h.run(t, c, newOp(model.OpVolumeCreate, other.Name(), at), func(tx store.Tx) error { return store.PutVolume(tx, other) }); op.Error != nil {
				t.Fatalf("create volume %d: %+v", i, op.Error)
			}
			checkExports(t, h, dp)
			if i >= 10 {
				gone := fmt.Sprintf("projects/p/locations/l/volumes/other%d", i-10)
				h.seed(t, func(tx store.Tx) error {
					cur, err := store.Get[model.Volume](tx, store.KindVolume, gone)
					if err != nil {
						return err
					}
					cur.State = model.StateDeleting
					return store.PutVolume(tx, cur)
				})
				if op := h.run(t, c, newOp(model.OpVolumeDelete, gone, at), nil); op.Error != nil {
					t.Fatalf("delete volume %d: %+v", i-10, op.Error)
				}
				checkExports(t, h, dp)
			}
		}
		if i%10 == 0 {
			kept = append(kept, sn.Name())
			continue
		}
		at = at.Add(time.Second)
		if op := h.run(t, c, newOp(model.OpSnapshotDelete, sn.Name(), at), nil); op.Error != nil {
			t.Fatalf("delete snapshot %d: %+v", i, op.Error)
		}
		checkExports(t, h, dp)
	}
	// Turning the snapshot directory off gives every snapshot's ID back.
	v.SnapshotDirectory = false
	h.seed(t, func(tx store.Tx) error {
		cur, _ := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		cur.SnapshotDirectory, cur.State = false, model.StateUpdating
		return store.PutVolume(tx, cur)
	})
	if op := h.run(t, c, newOp(model.OpVolumeUpdate, v.Name(), at.Add(time.Second)), nil); op.Error != nil {
		t.Fatalf("update: %+v", op.Error)
	}
	checkExports(t, h, dp)
	h.st.View(ctx, func(tx store.Tx) error {
		for _, name := range kept {
			s, _ := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
			if s.ExportID != 0 {
				t.Errorf("snapshot %s keeps export id %d with its directory no longer exported", name, s.ExportID)
			}
		}
		vols, _ := store.List[model.Volume](tx, store.KindVolume, "")
		raws, _ := tx.List(store.KindExportID, "")
		if len(raws) != len(vols) {
			t.Errorf("%d export IDs held; want %d (the volumes')", len(raws), len(vols))
		}
		return nil
	})
	var vols []*model.Volume
	h.st.View(ctx, func(tx store.Tx) (err error) {
		vols, err = store.List[model.Volume](tx, store.KindVolume, "")
		return err
	})
	if n := len(dp.Exports()); n != len(vols) {
		t.Fatalf("%d exports loaded; want the %d volumes' alone", n, len(vols))
	}
}

// checkExports asserts that every loaded export's ID is held, in the store, by the
// resource the export serves, and that no two records hold the same ID.
func checkExports(t *testing.T, h *harness, dp *dpfake.DataPlane) {
	t.Helper()
	h.st.View(context.Background(), func(tx store.Tx) error {
		holders := map[uint64]string{}
		vols, _ := store.List[model.Volume](tx, store.KindVolume, "")
		for _, v := range vols {
			if v.ExportID != 0 {
				holders[v.ExportID] = v.Name()
			}
			if v.SnapshotDirExportID != 0 {
				if o, ok := holders[v.SnapshotDirExportID]; ok {
					t.Fatalf("export id %d held by both %s and %s's snapshot directory", v.SnapshotDirExportID, o, v.Name())
				}
				holders[v.SnapshotDirExportID] = snapshotDirHolder(v)
			}
			snaps, _ := store.List[model.Snapshot](tx, store.KindSnapshot, v.Name())
			for _, s := range snaps {
				if s.ExportID == 0 {
					continue
				}
				if o, ok := holders[s.ExportID]; ok {
					t.Fatalf("export id %d held by both %s and %s", s.ExportID, o, s.Name())
				}
				holders[s.ExportID] = s.Name()
			}
		}
		for id, e := range dp.Exports() {
			if id < 1 || id > nfs.MaxExportID {
				t.Fatalf("export id %d loaded", id)
			}
			h, ok := holders[id]
			if !ok {
				t.Fatalf("export %d (%s) is loaded but no record holds its ID", id, e.Export.Pseudo)
			}
			if held, _ := holdsExportID(tx, h, id); !held {
				t.Fatalf("export %d: the ID table does not name %s", id, h)
			}
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }

// An operation that fails shows its caller a message without commands, paths or
// stderr; the server log has them, with the operation's ID.
func TestOperationErrorsAreUserSafe(t *testing.T) {
	h := newHarness(t)
	var logged bytes.Buffer
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour, StepAttempts: 1, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	secret := &runner.Error{Argv: []string{"mount", "-t", "btrfs", "/dev/loop7", "/var/lib/basin/mounts/vk"}, ExitCode: 32, Stderr: "mount: /var/lib/basin/mounts/vk: wrong fs type"}
	h.be.Fail("Mount", secret)
	v := newVolume("vol1")
	op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), t0), func(tx store.Tx) error { return store.PutVolume(tx, v) })
	if op.Error == nil {
		t.Fatal("the create did not fail")
	}
	for _, leak := range []string{"/var/lib", "/dev/loop", "btrfs", "wrong fs type", "exit"} {
		if strings.Contains(op.Error.Message, leak) {
			t.Errorf("operation error %q shows %q", op.Error.Message, leak)
		}
	}
	if op.Error.Code != 13 || !strings.Contains(op.Error.Message, op.ID) || !strings.Contains(op.Error.Message, string(StepMount)+"\"") {
		t.Errorf("operation error %+v: want code 13 naming the step and the operation", op.Error)
	}
	if !strings.Contains(logged.String(), "wrong fs type") || !strings.Contains(logged.String(), op.ID) {
		t.Errorf("the server log lacks the detail or the operation ID:\n%s", logged.String())
	}
}

// A shrink the data does not fit is refused with FAILED_PRECONDITION, and the
// volume stays as it was (not ERROR).
func TestShrinkBelowUsedFailsCleanly(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour})
	v := newVolume("vol1")
	v.CapacityGib = 4
	if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), t0), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
		t.Fatal(op.Error)
	}
	h.be.SetUsed(v.Key, 3<<30)
	var prev []byte
	h.seed(t, func(tx store.Tx) error {
		cur, _ := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		prev, _ = json.Marshal(cur)
		cur.CapacityGib, cur.State = 2, model.StateUpdating
		return store.PutVolume(tx, cur)
	})
	upd := newOp(model.OpVolumeUpdate, v.Name(), t0.Add(time.Minute))
	upd.Prev = prev
	op := h.run(t, c, upd, nil)
	if op.Error == nil || op.Error.Code != 9 || !strings.Contains(op.Error.Message, "capacityGib") {
		t.Fatalf("shrink below used: %+v", op.Error)
	}
	var cur *model.Volume
	h.st.View(ctx, func(tx store.Tx) (err error) {
		cur, err = store.Get[model.Volume](tx, store.KindVolume, v.Name())
		return err
	})
	if cur.State != model.StateReady || cur.CapacityGib != 4 {
		t.Fatalf("after a refused shrink the volume is %s with %d GiB; want READY with 4", cur.State, cur.CapacityGib)
	}
	if h.be.State().Sizes[v.Key] != 4<<30 {
		t.Fatal("the filesystem was resized")
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Two nodes on one store: an operation node A runs is left alone by node B while
// A's lease runs; once it lapsed (A paused), B claims it (a new epoch) and
// finishes it; when A goes on, its late writes are refused and it undoes
// nothing, and the operation is finished once, by B. A goes on to finish its
// steps, or to fail them (which, unfenced, would undo the create B finished).
func TestOperationLeaseAndFencing(t *testing.T) {
	t.Run("late finish", func(t *testing.T) { testLeaseAndFencing(t, false) })
	t.Run("late failure", func(t *testing.T) { testLeaseAndFencing(t, true) })
}

func testLeaseAndFencing(t *testing.T, lateFailure bool) {
	h := newHarness(t)
	v := newVolume("vol1")
	op := h.seedCreate(t, v)
	clock := &fakeClock{now: time.Now()}
	release := make(chan struct{})
	var gated atomic.Bool
	h.be.Gate = func(step, key string) {
		if step == "Mount" && gated.CompareAndSwap(false, true) {
			<-release // node A, paused inside its first mount
		}
	}
	node := func(id string) (*Controller, func()) {
		c := New(Options{NodeID: id, OpLease: 30 * time.Second, Now: clock.Now, Store: h.st, Backend: h.be, Resync: time.Hour,
			ResumeWait: 100 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		return c, func() { cancel(); <-done }
	}
	get := func() (got model.Operation) {
		h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &got) })
		return got
	}
	_, stopA := node("a")
	defer stopA()
	for !gated.Load() {
		time.Sleep(time.Millisecond)
	}
	if got := get(); got.Owner != "a" || got.Epoch != 1 {
		t.Fatalf("node A runs it: owner %q epoch %d", got.Owner, got.Epoch)
	}
	b, stopB := node("b")
	defer stopB()
	<-b.Ready()
	b.Wake()
	time.Sleep(200 * time.Millisecond)
	if got := get(); got.Done || got.Owner != "a" || h.be.CallCount("Mount") != 1 {
		t.Fatalf("node B took an operation A holds: %+v, %d mounts", got, h.be.CallCount("Mount"))
	}

	clock.Add(31 * time.Second) // A's lease lapses
	b.Wake()
	waitFor(t, "node B to finish it", func() bool { return get().Done })
	got := get()
	if got.Owner != "b" || got.Epoch != 2 || got.Error != nil {
		t.Fatalf("after the takeover: owner %q epoch %d error %v", got.Owner, got.Epoch, got.Error)
	}
	clock.Add(time.Second) // so that a second completion would show
	if lateFailure {
		h.be.Fail("Mount", errors.New("mount failed"))
	}
	close(release) // A goes on
	if lateFailure {
		// A's mount and its two retries (100 and 200 ms apart) fail, then
		// A's run ends.
		waitFor(t, "node A's retries", func() bool { return h.be.CallCount("Mount") == 4 })
	}
	time.Sleep(300 * time.Millisecond)
	after := get()
	if !after.Done || after.Owner != "b" || after.Epoch != 2 || after.Error != nil || !after.EndTime.Equal(got.EndTime) {
		t.Fatalf("node A's late writes landed: %+v", after)
	}
	if !h.be.State().Volumes[v.Key] || h.be.CallCount("DeleteVolume") != 0 {
		t.Fatalf("node A undid B's work: %+v, %d deletes", h.be.State(), h.be.CallCount("DeleteVolume"))
	}
	var vol *model.Volume
	err := h.st.View(context.Background(), func(tx store.Tx) (err error) {
		vol, err = store.Get[model.Volume](tx, store.KindVolume, v.Name())
		return err
	})
	if err != nil || vol.State != model.StateReady {
		t.Fatalf("volume after both: %+v, %v", vol, err)
	}
}
