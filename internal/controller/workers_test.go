package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

func (h *harness) startWith(t *testing.T, opts Options) *Controller {
	opts.Store, opts.Backend = h.st, h.be
	if h.dp != nil {
		opts.DataPlane = AdaptDataPlane(h.dp)
	}
	if opts.Resync == 0 {
		opts.Resync = time.Hour
	}
	c, _ := runController(t, opts)
	return c
}

// runController runs a controller of opts until stop (or the test's end) and
// waits for its first pass.
func runController(t *testing.T, opts Options) (*Controller, func()) {
	c := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	<-c.Ready()
	return c, stop
}

func (h *harness) opDone(t *testing.T, name string) *model.Operation {
	t.Helper()
	var op model.Operation
	if err := h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, name, &op) }); err != nil {
		t.Fatal(err)
	}
	return &op
}

// A domain join that takes its time (here: blocks for up to 30 s) holds up no
// other volume's operation: 20 volume creates in other pools, created after the
// joining pool's, all finish while the join is still running.
func TestSlowJoinHoldsUpNoVolume(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	f.block, f.entered = make(chan struct{}), make(chan struct{})
	defer close(f.block)
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})

	ad := newAD("ad1")
	p := newSMBPool("pool-smb", ad.Name())
	adOp := newOp(model.OpPoolCreate, p.Name(), t0)
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutAD(tx, ad); err != nil {
			return err
		}
		if err := store.PutPool(tx, p); err != nil {
			return err
		}
		return store.PutOperation(tx, adOp)
	})
	c.Wake()
	<-f.entered

	var names []string
	h.seed(t, func(tx store.Tx) error {
		for i := range 20 {
			v := newVolume(fmt.Sprintf("vol%02d", i))
			v.StoragePool = []string{"pool-a", "pool-b"}[i%2]
			op := newOp(model.OpVolumeCreate, v.Name(), t0.Add(time.Duration(i+1)*time.Second))
			op.ID = fmt.Sprintf("op-vol-%02d", i)
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
			if err := store.PutOperation(tx, op); err != nil {
				return err
			}
			names = append(names, op.Name())
		}
		return nil
	})
	c.Wake()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range names {
		if !c.WaitDone(ctx, n) {
			t.Fatalf("volume create %s did not finish while the domain join blocked", n)
		}
		if op := h.opDone(t, n); op.Error != nil {
			t.Fatalf("%s failed: %+v", n, op.Error)
		}
	}
	if op := h.opDone(t, adOp.Name()); op.Done {
		t.Fatal("the joining pool's operation finished early: the test proves nothing")
	}
	if got := len(h.be.State().Volumes); got != 20 {
		t.Fatalf("%d volumes made, want 20", got)
	}
}

// Two operations on one volume never overlap inside the backend, while operations
// on different volumes do run side by side; each resource's operations run in the
// order they were created.
func TestOneOperationPerVolumeAtATime(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	inflight, most := 0, 0
	var order []string
	h.be.Gate = func(op, key string) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if op == "Resize" {
			order = append(order, key)
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // widen the window for an overlap
		mu.Lock()
		inflight--
		mu.Unlock()
	}
	c := h.startWith(t, Options{Workers: 8})
	vols := []*model.Volume{newVolume("va"), newVolume("vb")}
	var last []string
	h.seed(t, func(tx store.Tx) error {
		at := t0
		for _, v := range vols {
			at = at.Add(time.Second)
			op := newOp(model.OpVolumeCreate, v.Name(), at)
			op.ID = "create-" + v.ID
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
			if err := store.PutOperation(tx, op); err != nil {
				return err
			}
		}
		// Then, on each volume, interleaved: snapshots and updates.
		for i := range 6 {
			for _, v := range vols {
				at = at.Add(time.Second)
				var op *model.Operation
				if i%2 == 0 {
					s := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: fmt.Sprintf("s%d", i), CreateTime: at, State: model.StateCreating}, Volume: v.ID}
					if err := store.PutSnapshot(tx, s); err != nil {
						return err
					}
					op = newOp(model.OpSnapshotCreate, s.Name(), at)
				} else {
					op = newOp(model.OpVolumeUpdate, v.Name(), at)
				}
				op.ID = fmt.Sprintf("op-%s-%d", v.ID, i)
				if err := store.PutOperation(tx, op); err != nil {
					return err
				}
				last = append(last, op.Name())
			}
		}
		return nil
	})
	c.Wake()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range last {
		if !c.WaitDone(ctx, n) {
			t.Fatalf("%s not done", n)
		}
		if op := h.opDone(t, n); op.Error != nil {
			t.Fatalf("%s failed: %+v", n, op.Error)
		}
	}
	for _, v := range vols {
		if n := h.be.MaxConcurrent(v.Key); n != 1 {
			t.Errorf("volume %s: %d calls in the backend at once", v.ID, n)
		}
		if got := len(h.be.State().Snapshots[v.Key]); got != 3 {
			t.Errorf("volume %s: %d snapshots, want 3", v.ID, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("operations on different volumes never ran side by side (at most %d at once)", most)
	}
}

// An operation of a kind no handler knows fails with a clear status and leaves
// every resource alone; it is never run as if it were another kind.
func TestUnknownOperationKindFails(t *testing.T) {
	h := newHarness(t)
	ad := &model.ActiveDirectory{Meta: model.Meta{Project: "p", Location: "l", ID: "ad1", CreateTime: t0, State: model.StateReady}}
	op := newOp("quota.create", ad.Name(), t0)
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutAD(tx, ad); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	})
	h.start(t)
	got := h.opDone(t, op.Name())
	if !got.Done || got.Error == nil || got.Error.Code != 12 {
		t.Fatalf("operation: %+v", got)
	}
	var cur model.ActiveDirectory
	if err := h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindActiveDirectory, ad.Name(), &cur) }); err != nil || cur.State != model.StateReady {
		t.Fatalf("the directory was touched: %+v %v", cur, err)
	}
}

// A reconcile pass over 200 converged volumes with snapshots observes the backend
// and the network's sandbox once each (the real ones then fork a constant number of
// processes: see dataplane's and btrfs's counting tests), runs no step and asks the
// backend about no single volume or snapshot beyond its usage.
func TestResyncObservesOncePerPass(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	ctx := context.Background()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	at := t0
	const n = 200
	for i := range n {
		v := newVolume(fmt.Sprintf("vol%03d", i))
		v.Protocols = []model.Protocol{model.ProtocolNFSv3}
		v.Endpoint, v.Network = fmt.Sprintf("10.99.%d.%d", 1+i/200, 10+i%200), "default"
		v.SnapshotDirectory = true
		v.ExportRules = []model.ExportRule{{AllowedClients: ptr("10.99.0.0/16"), AccessType: ptr(model.AccessReadWrite), NFSv3: ptr(true)}}
		at = at.Add(time.Second)
		if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), at), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
			t.Fatalf("create: %+v", op.Error)
		}
		for j := range 2 {
			at = at.Add(time.Second)
			sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: fmt.Sprintf("s%d", j), CreateTime: at, State: model.StateCreating}, Volume: v.ID}
			if op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), at), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) }); op.Error != nil {
				t.Fatalf("snapshot: %+v", op.Error)
			}
		}
	}
	if got := len(dp.Exports()); got != 4*n { // each volume, its snapshot directory and its 2 snapshots
		t.Fatalf("%d exports loaded, want %d", got, 4*n)
	}
	count := func() map[string]int {
		m := map[string]int{"views": dp.Views(), "history": len(dp.History())}
		for _, k := range []string{"ObserveVolumes", "ObserveVolume", "ObserveSnapshots", "Usage", "EnsureVolume", "Mount", "MountSnapshot", "MountSnapshotDir", "Resize", "SetMode"} {
			m[k] = h.be.CallCount(k)
		}
		return m
	}
	before := count()
	if err := c.resync(ctx, false); err != nil {
		t.Fatal(err)
	}
	after := count()
	want := map[string]int{"views": 1, "ObserveVolumes": 1, "Usage": n}
	for k := range after {
		if d := after[k] - before[k]; d != want[k] {
			t.Errorf("%s: %d calls in one pass, want %d", k, d, want[k])
		}
	}
	// And a volume that drifted is repaired by the same pass, alone.
	var drifted *model.Volume
	h.st.View(ctx, func(tx store.Tx) (err error) {
		drifted, err = store.Get[model.Volume](tx, store.KindVolume, "projects/p/locations/l/volumes/vol007")
		return err
	})
	must(t, h.be.Unmount(ctx, drifted.Key))
	before = count()
	if err := c.resync(ctx, false); err != nil {
		t.Fatal(err)
	}
	after = count()
	if d := after["Mount"] - before["Mount"]; d != 1 {
		t.Errorf("%d mounts to repair one volume", d)
	}
	if d := after["views"] - before["views"]; d > 2 {
		t.Errorf("%d views to repair one volume", d)
	}
}

// A clone the backend copies in the background does not hold a worker while
// the copy goes on: with one worker, another volume's create finishes
// meanwhile. The clone's own volume stays locked (an update of it waits), its
// status says what is copied, and a cancellation is honoured while it copies.
func TestCloneInProgressFreesItsWorker(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	src := newVolume("src")
	if err := h.be.EnsureVolume(ctx, src.Key, 2<<30, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.be.Mount(ctx, src.Key); err != nil {
		t.Fatal(err)
	}
	if err := h.be.WriteFile(src.Key, "data", make([]byte, 3<<20)); err != nil {
		t.Fatal(err)
	}
	if err := h.be.EnsureSnapshot(ctx, src.Key, "s1"); err != nil {
		t.Fatal(err)
	}
	h.be.CloneCalls = 1 << 30 // never whole while the test looks
	c := h.startWith(t, Options{Workers: 1})

	clone := newVolume("clone")
	cop := newOp(model.OpVolumeCreate, clone.Name(), t0)
	cop.ID = "op-clone"
	cop.Params.SourceKey, cop.Params.SourceSnapshot = src.Key, "s1"
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, clone); err != nil {
			return err
		}
		return store.PutOperation(tx, cop)
	})
	c.Wake()
	const copying = "copying the snapshot's data (3.0 MiB)"
	deadline := time.Now().Add(10 * time.Second)
	for h.opDone(t, cop.Name()).StatusMessage != copying {
		if time.Now().After(deadline) {
			t.Fatalf("the clone's status is %q, want %q", h.opDone(t, cop.Name()).StatusMessage, copying)
		}
		time.Sleep(20 * time.Millisecond)
	}

	other := newVolume("other")
	oop := newOp(model.OpVolumeCreate, other.Name(), t0.Add(time.Second))
	oop.ID = "op-other"
	upd := newOp(model.OpVolumeUpdate, clone.Name(), t0.Add(2*time.Second))
	upd.ID = "op-update"
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, other); err != nil {
			return err
		}
		if err := store.PutOperation(tx, oop); err != nil {
			return err
		}
		return store.PutOperation(tx, upd)
	})
	c.Wake()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if !c.WaitDone(wctx, oop.Name()) {
		t.Fatal("another volume's create waited for the clone's copy: the clone holds the only worker")
	}
	if op := h.opDone(t, oop.Name()); op.Error != nil {
		t.Fatalf("the other create failed: %+v", op.Error)
	}
	if h.opDone(t, cop.Name()).Done {
		t.Fatal("the clone finished: the test proves nothing")
	}
	time.Sleep(300 * time.Millisecond) // a parked clone's volume stays locked
	if h.opDone(t, upd.Name()).Done {
		t.Fatal("the clone's update ran while its clone was being copied")
	}
	if n := h.be.CallCount("EnsureVolume"); n < 3 {
		t.Fatalf("the clone was asked %d times", n)
	}

	h.seed(t, func(tx store.Tx) error {
		var op model.Operation
		if err := tx.Get(store.KindOperation, cop.Name(), &op); err != nil {
			return err
		}
		op.RequestedCancellation = true
		return store.PutOperation(tx, &op)
	})
	wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if !c.WaitDone(wctx, cop.Name()) {
		t.Fatal("a cancelled clone went on copying")
	}
	if op := h.opDone(t, cop.Name()); op.Error == nil || op.Error.Code != 1 {
		t.Fatalf("cancelled clone: error %+v, want CANCELLED", op.Error)
	}
	if _, ok := h.be.State().Sizes[clone.Key]; ok {
		t.Fatal("the cancelled clone's storage is left")
	}
	if !c.WaitDone(wctx, upd.Name()) {
		t.Fatal("the clone's update never ran after the clone ended")
	}
}

func TestProgressMessage(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{storage.ErrInProgress, "copying the snapshot's data"},
		{&storage.Progress{Total: 3 << 30}, "copying the snapshot's data (3.00 GiB)"},
		{&storage.Progress{Done: 1 << 30, Total: 4 << 30}, "copying the snapshot's data: 1.00 GiB of 4.00 GiB (25%)"},
		{&storage.Progress{Done: 5 << 20, Total: 4 << 20}, "copying the snapshot's data: 4.0 MiB of 4.0 MiB (100%)"},
		{fmt.Errorf("step: %w", &storage.Progress{Done: 1, Total: 3}), "copying the snapshot's data: 0.0 MiB of 0.0 MiB (33%)"},
	} {
		if got := progressMessage(tc.err); got != tc.want {
			t.Errorf("progressMessage(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
