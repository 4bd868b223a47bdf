package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// failingStore is a store whose writes fail, as SQLite's do on a full disk
// ("database or disk is full"), while reads still work; set readErr to fail
// reads too, or short to drop kinds from every list (a list that came back short).
type failingStore struct {
	store.Store
	writeErr, readErr error
	short             map[string]bool // kinds whose lists come back empty
}

func (s *failingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if s.writeErr != nil {
		return s.writeErr
	}
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(shortTx{tx, s.short}) })
}

func (s *failingStore) View(ctx context.Context, fn func(store.Tx) error) error {
	if s.readErr != nil {
		return s.readErr
	}
	return s.Store.View(ctx, func(tx store.Tx) error { return fn(shortTx{tx, s.short}) })
}

type shortTx struct {
	store.Tx
	short map[string]bool
}

func (t shortTx) List(kind, parent string) ([][]byte, error) {
	if t.short[kind] {
		return nil, nil
	}
	return t.Tx.List(kind, parent)
}

// shortObservation is a backend whose pass over every volume comes back short
// without an error, as btrfs's did on main when the store's directory could not
// be read (filepath.Glob drops I/O errors): every volume seems gone.
type shortObservation struct{ storage.Backend }

func (shortObservation) ObserveVolumes(context.Context) (map[string]storage.VolumeStatus, error) {
	return map[string]storage.VolumeStatus{}, nil
}

// servedVolumes makes n NFS volumes through their operations and returns them.
func servedVolumes(t *testing.T, h *harness, c *Controller, n int) []*model.Volume {
	t.Helper()
	var vols []*model.Volume
	for i := range n {
		v := nfsVolume(fmt.Sprintf("vol%d", i), false, model.ProtocolNFSv3)
		v.Endpoint = fmt.Sprintf("10.99.0.%d", 10+i)
		if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), t0.Add(time.Duration(i)*time.Second)), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
			t.Fatalf("create: %+v", op.Error)
		}
		vols = append(vols, v)
	}
	if got := len(h.dp.Exports()); got != n {
		t.Fatalf("%d exports, want %d", got, n)
	}
	return vols
}

// A reconcile pass that cannot finish — the database cannot commit, the backend's
// pass over every volume came back short — leaves what serves as it is. On main
// it unexported every volume: each seemed gone, so its plan began with unexport;
// the export that was to follow needed a database write, which failed.
func TestReconcileThatCannotFinishUnexportsNothing(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	servedVolumes(t, h, c, 3)
	full := errors.New("commit: database or disk is full (13)")
	fs := &failingStore{Store: h.st, writeErr: full}
	broken := New(Options{Store: fs, Backend: shortObservation{h.be}, DataPlane: AdaptDataPlane(dp), Resync: time.Hour, StepAttempts: 1})
	for range 2 {
		broken.resync(context.Background(), true)
	}
	if got := len(dp.Exports()); got != 3 {
		t.Fatalf("%d of 3 exports left after a reconcile that could not finish; history %v", got, dp.History())
	}
	if st := h.be.State(); len(st.Volumes) != 3 {
		t.Fatalf("storage lost: %+v", st)
	}
}

// Orphan collection deletes nothing that holds data because a list of records
// came back short (a store bug, or a database restored from an older backup):
// a missing record is no proof that a volume's data is garbage.
func TestOrphanCollectionKeepsDataWhenRecordsAreMissing(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	ctx := context.Background()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	vols := servedVolumes(t, h, c, 2)
	sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", CreateTime: t0.Add(time.Hour), State: model.StateCreating}, Volume: vols[0].ID}
	if op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), t0.Add(time.Hour)), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) }); op.Error != nil {
		t.Fatalf("snapshot: %+v", op.Error)
	}
	for _, short := range []string{store.KindSnapshot, store.KindVolume} {
		fs := &failingStore{Store: h.st, short: map[string]bool{short: true}}
		c := New(Options{Store: fs, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
		c.resync(ctx, true)
		st := h.be.State()
		if len(st.Volumes) != 2 || len(st.Snapshots[vols[0].Key]) != 1 {
			t.Fatalf("with the %s list short, orphan collection deleted data: %+v", short, st)
		}
	}
}
