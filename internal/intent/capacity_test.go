package intent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// probeCapacity answers the capacity reads, and first checks that no write
// transaction is open: it writes to the store itself, which SQLite's one
// connection would hold back until the open transaction ended (here: never,
// since it waits for this read), so a read made inside a transaction fails on
// its deadline.
type probeCapacity struct {
	st         store.Store
	free, used int64
	spaceReads int
	usageReads int
}

func (p *probeCapacity) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := p.st.Update(ctx, func(store.Tx) error { return nil }); err != nil {
		return errors.New("a capacity read inside a store transaction")
	}
	return nil
}

func (p *probeCapacity) StoreSpace(ctx context.Context) (int64, int64, error) {
	p.spaceReads++
	return 1 << 40, p.free, p.probe(ctx)
}

func (p *probeCapacity) VolumeUsedBytes(ctx context.Context, _ string) (int64, error) {
	p.usageReads++
	return p.used, p.probe(ctx)
}

// The storage reads a write's checks need (the store's space for a create or a
// growth, a volume's usage for a shrink) are made before its transaction, never
// inside it (on PostgreSQL every node's writes wait while one is open); a
// write that needs none makes none, and the checks still refuse what they did.
func TestCapacityReadsOutsideTransactions(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	c := &probeCapacity{st: st, free: 100 << 30}
	s := New(Options{Capacity: c})
	loc := model.LocationName("p", "l")
	if _, err := s.CreatePool(ctx, st, PoolCreate{Pool: &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "pool1"},
		ServiceLevel: model.LevelPremium, CapacityGib: 100, Network: "projects/p/global/networks/default"}}); err != nil {
		t.Fatal(err)
	}
	poolReady(t, st, loc+"/storagePools/pool1")
	if _, err := s.CreateVolume(ctx, st, VolumeCreate{Volume: &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: "v1"},
		ShareName: "v1", StoragePool: "pool1", CapacityGib: 10, Protocols: []model.Protocol{model.ProtocolNFSv3}}}); err != nil {
		t.Fatal(err)
	}
	ready := func() {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error {
			v, err := store.Get[model.Volume](tx, store.KindVolume, loc+"/volumes/v1")
			if err != nil {
				return err
			}
			v.State = model.StateReady
			return store.PutVolume(tx, v)
		}); err != nil {
			t.Fatal(err)
		}
	}
	ready()
	resize := func(gib int64) error {
		_, err := s.UpdateVolume(ctx, st, VolumeUpdate{Project: "p", Location: "l", ID: "v1",
			Patch: func(_ store.Tx, v *model.Volume) error { v.CapacityGib = gib; return nil }})
		return err
	}
	if err := resize(20); err != nil {
		t.Fatalf("growth: %v", err)
	}
	ready()
	c.used = 15 << 30
	if err := resize(12); !errors.Is(err, model.ErrFailedPrecondition) {
		t.Fatalf("shrink below the usage read: %v, want a refusal", err)
	}
	if err := resize(16); err != nil {
		t.Fatalf("shrink above the usage: %v", err)
	}
	ready()
	spaceReads, usageReads := c.spaceReads, c.usageReads
	if spaceReads != 3 || usageReads != 2 {
		t.Errorf("%d space reads (pool create, volume create, growth), %d usage reads (two shrinks); want 3 and 2", spaceReads, usageReads)
	}
	// A change of neither size nor space reads nothing.
	if _, err := s.UpdateVolume(ctx, st, VolumeUpdate{Project: "p", Location: "l", ID: "v1",
		Patch: func(_ store.Tx, v *model.Volume) error { v.Desc = "d"; return nil }}); err != nil {
		t.Fatal(err)
	}
	if c.spaceReads != spaceReads || c.usageReads != usageReads {
		t.Errorf("a description change read the storage")
	}
}

// poolReady sets pool's state to READY, as its create operation would.
func poolReady(t *testing.T, st store.Store, pool string) {
	t.Helper()
	if err := st.Update(context.Background(), func(tx store.Tx) error {
		pl, err := store.Get[model.Pool](tx, store.KindPool, pool)
		if err != nil {
			return err
		}
		pl.State = model.StateReady
		return store.PutPool(tx, pl)
	}); err != nil {
		t.Fatal(err)
	}
}
