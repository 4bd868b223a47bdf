// Package storetest is the conformance suite every store.Backend passes (SQLite
// and PostgreSQL; see store_test.go in the store package), like storagetest for
// the storage backends: documents, indexes, sequences and rollups behave the
// same, failed transactions leave nothing, a View sees one snapshot, and
// concurrent writers cannot break the invariants Basin's writes check before
// they write: 50 creates racing for the last endpoint address, the last GiB of a
// pool or one share name, through the intent service the API uses, leave
// exactly one winner each.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Opener makes an empty database for one test and returns a function that opens
// it (again: each call opens the same database; the suite closes what it opens).
type Opener func(t *testing.T) Open

// Open opens a test's database.
type Open func() (store.Backend, error)

// Run runs the suite.
func Run(t *testing.T, newDB Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"DocumentsPersistAndList", testDocuments},
		{"NamesOrderBytewise", testNameOrder},
		{"FailedUpdateWritesNothing", testFailedUpdate},
		{"UpdatesAreSerialised", testSerialised},
		{"ViewSeesOneSnapshot", testViewSnapshot},
		{"IndexesFollowPutAndDelete", testIndexes},
		{"PoolUsageFollowsAMove", testPoolMove},
		{"NFSShareNamesByNetwork", testNFSShareNames},
		{"Rollups", testRollups},
		{"ConcurrentOpens", testConcurrentOpens},
		{"Leases", testLeases},
		{"ExpiryByIndex", testExpiry},
		{"RaceForLastEndpoint", testRaceEndpoint},
		{"RaceForLastGiB", testRaceGiB},
		{"RaceForShareName", testRaceShareName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newDB(t)) })
	}
}

const loc = "projects/p/locations/l"

var ctx = context.Background()

type doc struct {
	N int `json:"n"`
}

// opened opens the database and closes it when the test ends.
func opened(t *testing.T, open Open) store.Backend {
	t.Helper()
	s := mustOpen(t, open)
	t.Cleanup(func() { s.Close() })
	return s
}

func mustOpen(t *testing.T, open Open) store.Backend {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func update(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func view(t *testing.T, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.View(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func vol(id, share, pool string, gib int64, endpoint string) *model.Volume {
	return &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: id, State: model.StateReady},
		ShareName: share, StoragePool: pool, CapacityGib: gib, Network: "default", Endpoint: endpoint}
}

func op(id string, created time.Time, done bool) *model.Operation {
	return &model.Operation{Project: "p", Location: "l", ID: id, CreateTime: created, Done: done}
}

func testDocuments(t *testing.T, open Open) {
	s := mustOpen(t, open)
	update(t, s, func(tx store.Tx) error {
		for _, n := range []string{"p/b", "p/a", "q/c"} {
			if err := tx.Insert("k", n, n[:1], doc{N: len(n)}); err != nil {
				return err
			}
		}
		return tx.Put("other", "p/a", "p", doc{N: 9}) // same name, another kind
	})
	err := s.Update(ctx, func(tx store.Tx) error { return tx.Insert("k", "p/a", "p", doc{}) })
	if !errors.Is(err, model.ErrAlreadyExists) {
		t.Fatalf("duplicate insert: %v, want ErrAlreadyExists", err)
	}
	s.Close()
	s = opened(t, open) // reopening runs the migrations again, harmlessly
	view(t, s, func(tx store.Tx) error {
		raws, err := tx.List("k", "p")
		if err != nil || len(raws) != 2 || string(raws[0]) != `{"n":3}` {
			t.Errorf("List(k, p) = %s, %v", raws, err)
		}
		all, err := store.List[doc](tx, "k", "")
		if err != nil || len(all) != 3 {
			t.Errorf("List(k, all) = %v, %v", all, err)
		}
		names, err := tx.Names("k", "")
		if err != nil || !slices.Equal(names, []string{"p/a", "p/b", "q/c"}) {
			t.Errorf("Names(k) = %q, %v", names, err)
		}
		if d, err := store.Get[doc](tx, "other", "p/a"); err != nil || d.N != 9 {
			t.Errorf("Get(other, p/a) = %v, %v", d, err)
		}
		if err := tx.Get("k", "nope", &doc{}); !errors.Is(err, model.ErrNotFound) {
			t.Errorf("Get of a missing document: %v, want ErrNotFound", err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if err := tx.Delete("k", "p/a"); err != nil {
			return err
		}
		return tx.Delete("k", "never-was")
	})
	view(t, s, func(tx store.Tx) error {
		if names, _ := tx.Names("k", "p"); !slices.Equal(names, []string{"p/b"}) {
			t.Errorf("after delete: %q", names)
		}
		return nil
	})
}

// Names list in byte order on every store (so that pages are the same), whatever
// the database's collation: upper before lower case, ASCII before the rest.
func testNameOrder(t *testing.T, open Open) {
	s := opened(t, open)
	names := []string{"b", "B", "a-1", "a_1", "a1", "é", "z", "Z9", "~"}
	update(t, s, func(tx store.Tx) error {
		for _, n := range names {
			if err := tx.Put("k", n, "", doc{}); err != nil {
				return err
			}
		}
		return nil
	})
	want := slices.Clone(names)
	slices.Sort(want) // Go compares strings bytewise
	view(t, s, func(tx store.Tx) error {
		got, err := tx.Names("k", "")
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Names = %q, %v; want %q", got, err, want)
		}
		return nil
	})
}

func testFailedUpdate(t *testing.T, open Open) {
	s := opened(t, open)
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.Put("k", "a", "", doc{N: 1}); err != nil {
			return err
		}
		if err := store.PutVolume(tx, vol("v", "v", "p1", 5, "10.99.0.10")); err != nil {
			return err
		}
		if _, err := tx.NextSeq("q"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want the function's error", err)
	}
	view(t, s, func(tx store.Tx) error {
		if err := tx.Get("k", "a", &doc{}); !errors.Is(err, model.ErrNotFound) {
			t.Error("a rolled-back write is visible")
		}
		if n, _ := tx.Seq("q"); n != 0 {
			t.Errorf("rolled-back sequence = %d", n)
		}
		if u, _ := store.UsageOfPool(tx, loc+"/storagePools/p1"); u != (store.PoolUsage{}) {
			t.Errorf("rolled-back index entries count: %+v", u)
		}
		return nil
	})
}

// Concurrent read-modify-write transactions are serialised: no lost updates.
func testSerialised(t *testing.T, open Open) {
	s := opened(t, open)
	update(t, s, func(tx store.Tx) error { return tx.Put("k", "c", "", doc{}) })
	const n = 50
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := s.Update(ctx, func(tx store.Tx) error {
				d, err := store.Get[doc](tx, "k", "c")
				if err != nil {
					return err
				}
				d.N++
				if _, err := tx.NextSeq("s"); err != nil {
					return err
				}
				return tx.Put("k", "c", "", d)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	view(t, s, func(tx store.Tx) error {
		d, _ := store.Get[doc](tx, "k", "c")
		seq, _ := tx.Seq("s")
		if d.N != n || seq != n {
			t.Errorf("counter %d, sequence %d; want %d, %d", d.N, seq, n, n)
		}
		return nil
	})
}

// A View reads one snapshot: a write committed while it runs is not half seen.
// (On SQLite, whose one connection serialises everything, the write waits for
// the View instead; the View gives up waiting for it after two seconds.)
func testViewSnapshot(t *testing.T, open Open) {
	s := opened(t, open)
	update(t, s, func(tx store.Tx) error {
		if err := tx.Put("k", "a", "", doc{N: 1}); err != nil {
			return err
		}
		return tx.Put("k", "b", "", doc{N: 1})
	})
	read, written := make(chan struct{}), make(chan error, 1)
	var a, b *doc
	err := s.View(ctx, func(tx store.Tx) error {
		var err error
		if a, err = store.Get[doc](tx, "k", "a"); err != nil {
			return err
		}
		go func() {
			<-read
			written <- s.Update(ctx, func(tx store.Tx) error {
				if err := tx.Put("k", "a", "", doc{N: 2}); err != nil {
					return err
				}
				return tx.Put("k", "b", "", doc{N: 2})
			})
		}()
		close(read)
		select {
		case err := <-written:
			if err != nil {
				return err
			}
			written <- nil
		case <-time.After(2 * time.Second):
		}
		b, err = store.Get[doc](tx, "k", "b")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if a.N != b.N {
		t.Errorf("one View read a=%d and b=%d: two snapshots", a.N, b.N)
	}
	view(t, s, func(tx store.Tx) error {
		if d, _ := store.Get[doc](tx, "k", "b"); d == nil || d.N != 2 {
			t.Errorf("after the write: b = %v", d)
		}
		return nil
	})
}

func testIndexes(t *testing.T, open Open) {
	s := opened(t, open)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	update(t, s, func(tx store.Tx) error {
		for _, v := range []*model.Volume{vol("a", "Share-A", "p1", 100, "10.99.0.10"), vol("b", "b", "p1", 50, "10.99.0.11"), vol("c", "c", "p2", 7, "10.99.0.12")} {
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
		}
		for _, o := range []*model.Operation{op("late", t0.Add(time.Hour), false), op("done", t0, true), op("early", t0, false)} {
			if err := store.PutOperation(tx, o); err != nil {
				return err
			}
		}
		return nil
	})
	check := func(wantShare []string, wantUsage store.PoolUsage, wantEndpoints []string, wantPending []string) {
		t.Helper()
		view(t, s, func(tx store.Tx) error {
			got, err := store.VolumesWithShareName(tx, loc, "share-a")
			if err != nil || !slices.Equal(got, wantShare) {
				t.Errorf("VolumesWithShareName = %q, %v; want %q", got, err, wantShare)
			}
			u, err := store.UsageOfPool(tx, loc+"/storagePools/p1")
			if err != nil || u != wantUsage {
				t.Errorf("UsageOfPool = %+v, %v; want %+v", u, err, wantUsage)
			}
			eps, err := store.EndpointsInUse(tx, "default")
			var keys []string
			for k := range eps {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if err != nil || !slices.Equal(keys, wantEndpoints) {
				t.Errorf("EndpointsInUse = %v, %v; want %v", keys, err, wantEndpoints)
			}
			ops, err := store.PendingOperations(tx)
			var ids []string
			for _, o := range ops {
				ids = append(ids, o.ID)
			}
			if err != nil || !slices.Equal(ids, wantPending) {
				t.Errorf("PendingOperations = %v, %v; want %v", ids, err, wantPending)
			}
			return nil
		})
	}
	check([]string{loc + "/volumes/a"}, store.PoolUsage{Volumes: 2, CapacityGib: 150}, []string{"10.99.0.10", "10.99.0.11", "10.99.0.12"}, []string{"early", "late"})
	update(t, s, func(tx store.Tx) error {
		if err := store.PutVolume(tx, vol("a", "other", "p1", 30, "10.99.0.10")); err != nil {
			return err
		}
		if err := tx.Delete(store.KindVolume, loc+"/volumes/b"); err != nil {
			return err
		}
		return store.PutOperation(tx, op("early", t0, true))
	})
	check([]string{}, store.PoolUsage{Volumes: 1, CapacityGib: 30}, []string{"10.99.0.10", "10.99.0.12"}, []string{"late"})
}

// A volume moved to another pool counts in the new pool's usage and no longer in
// the old one's: capacity and assigned throughput (a fraction, kept exactly).
func testPoolMove(t *testing.T, open Open) {
	s := opened(t, open)
	v := vol("a", "a", "p1", 100, "10.99.0.10")
	v.ThroughputMibps = 12.5
	put := func() { t.Helper(); update(t, s, func(tx store.Tx) error { return store.PutVolume(tx, v) }) }
	usage := func(pool string) (u store.PoolUsage) {
		t.Helper()
		view(t, s, func(tx store.Tx) (err error) { u, err = store.UsageOfPool(tx, loc+"/storagePools/"+pool); return err })
		return u
	}
	put()
	if u := usage("p1"); u != (store.PoolUsage{Volumes: 1, CapacityGib: 100, ThroughputMibps: 12.5}) {
		t.Fatalf("p1 before: %+v", u)
	}
	v.StoragePool = "p2"
	put()
	if u := usage("p1"); u != (store.PoolUsage{}) {
		t.Fatalf("p1 after the move: %+v, want nothing", u)
	}
	if u := usage("p2"); u != (store.PoolUsage{Volumes: 1, CapacityGib: 100, ThroughputMibps: 12.5}) {
		t.Fatalf("p2 after the move: %+v", u)
	}
	v.StoragePool, v.ThroughputMibps = "p3", 0
	put()
	if u := usage("p2"); u != (store.PoolUsage{}) {
		t.Fatalf("p2 after the second move: %+v", u)
	}
	if u := usage("p3"); u != (store.PoolUsage{Volumes: 1, CapacityGib: 100}) {
		t.Fatalf("p3: %+v", u)
	}
}

// NFS share names are indexed by network, across projects (keys holding a NUL
// byte); SMB-only volumes are not in that index.
func testNFSShareNames(t *testing.T, open Open) {
	s := opened(t, open)
	mk := func(project, id, share string, protos ...model.Protocol) *model.Volume {
		v := vol(id, share, "p1", 1, "")
		v.Project, v.Protocols = project, protos
		return v
	}
	update(t, s, func(tx store.Tx) error {
		for _, v := range []*model.Volume{mk("p", "a", "Data", model.ProtocolNFSv3), mk("q", "b", "data", model.ProtocolNFSv4, model.ProtocolSMB),
			mk("r", "c", "data", model.ProtocolSMB), mk("r", "d", "other", model.ProtocolNFSv3)} {
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
		}
		return nil
	})
	want := []string{"projects/p/locations/l/volumes/a", "projects/q/locations/l/volumes/b"}
	view(t, s, func(tx store.Tx) error {
		got, err := store.NFSVolumesWithShareName(tx, "default", "DATA")
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("NFSVolumesWithShareName = %q, %v; want %q", got, err, want)
		}
		if got, _ := store.NFSVolumesWithShareName(tx, "elsewhere", "data"); len(got) != 0 {
			t.Errorf("another network: %q", got)
		}
		if got, _ := store.NFSVolumesWithShareName(tx, "default\x00data", ""); len(got) != 0 {
			t.Errorf("a key's parts run together: %q", got)
		}
		return nil
	})
}

// Rollups are kept per series and start, replaced in place, read by range,
// expired by start, survive reopening, and are not resources.
func testRollups(t *testing.T, open Open) {
	st := mustOpen(t, open)
	put := []store.Rollup{{Series: "a", Start: 300, Data: []byte("a300")}, {Series: "a", Start: 600, Data: []byte("a600")},
		{Series: "a", Start: 900, Data: []byte("a900")}, {Series: "b", Start: 600, Data: []byte("b600")}}
	if err := st.PutRollups(ctx, put); err != nil {
		t.Fatal(err)
	}
	if err := st.PutRollups(ctx, []store.Rollup{{Series: "a", Start: 600, Data: []byte("a600'")}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st = opened(t, open)
	got, err := st.Rollups(ctx, "a", 600, 900)
	if err != nil || len(got) != 1 || got[0].Start != 600 || !bytes.Equal(got[0].Data, []byte("a600'")) {
		t.Fatalf("a in [600, 900): %v, %v", got, err)
	}
	n, err := st.ExpireRollups(ctx, 900)
	if err != nil || n != 3 {
		t.Fatalf("expired %d, %v; want 3", n, err)
	}
	for series, want := range map[string]int{"a": 1, "b": 0} {
		if got, _ := st.Rollups(ctx, series, 0, 1<<40); len(got) != want {
			t.Errorf("%s after expiry: %v, want %d", series, got, want)
		}
	}
	view(t, st, func(tx store.Tx) error {
		if names, _ := tx.Names("metric_rollups", ""); len(names) != 0 {
			t.Errorf("rollups listed as resources: %v", names)
		}
		return nil
	})
}

// Nodes starting together on a new database migrate it once, and all work.
func testConcurrentOpens(t *testing.T, open Open) {
	const n = 4
	stores := make([]store.Backend, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = open() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
	}
	for i, s := range stores {
		defer s.Close()
		update(t, s, func(tx store.Tx) error { return tx.Put("k", fmt.Sprint(i), "", doc{N: i}) })
	}
	view(t, stores[0], func(tx store.Tx) error {
		if names, _ := tx.Names("k", ""); len(names) != n {
			t.Errorf("%d documents, want %d", len(names), n)
		}
		return nil
	})
}

// race starts n volume creates at once through the intent service; each names
// its own volume ID (and share name, unless sameShare). It returns how many
// were recorded and the refusals.
func race(t *testing.T, s store.Store, svc *intent.Service, n int, gib int64, sameShare bool) (int, []error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			share := fmt.Sprintf("share-%d", i)
			if sameShare {
				share = "Contested"
			}
			v := &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: fmt.Sprintf("racer-%d", i)},
				ShareName: share, StoragePool: "pool1", CapacityGib: gib, Protocols: []model.Protocol{model.ProtocolNFSv3}}
			<-start
			_, errs[i] = svc.CreateVolume(ctx, s, intent.VolumeCreate{Volume: v})
		})
	}
	close(start)
	wg.Wait()
	won := 0
	var refused []error
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			refused = append(refused, err)
		}
	}
	return won, refused
}

// setupPool stores a READY pool of poolGib on network default, and prefill
// volumes of 1 GiB holding the first endpoint addresses of the range.
func setupPool(t *testing.T, s store.Store, poolGib int64, first, last netip.Addr, prefill int) {
	t.Helper()
	update(t, s, func(tx store.Tx) error {
		pl := &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "pool1", State: model.StateReady},
			ServiceLevel: model.LevelPremium, CapacityGib: poolGib, Network: "projects/p/global/networks/default"}
		if err := store.PutPool(tx, pl); err != nil {
			return err
		}
		a := first
		for i := range prefill {
			if err := store.PutVolume(tx, vol(fmt.Sprintf("held-%d", i), fmt.Sprintf("held-%d", i), "pool1", 1, a.String())); err != nil {
				return err
			}
			a = a.Next()
		}
		return nil
	})
}

func service(first, last netip.Addr) *intent.Service {
	return intent.New(intent.Options{Networks: []model.Network{{Name: "default", Prefix: netip.MustParsePrefix("10.99.0.0/24"),
		FirstEndpoint: first, LastEndpoint: last}}})
}

// countVolumes returns the volumes stored in pool1, and their endpoints.
func countVolumes(t *testing.T, s store.Store) (n int, endpoints map[string]int) {
	endpoints = map[string]int{}
	view(t, s, func(tx store.Tx) error {
		vs, err := store.List[model.Volume](tx, store.KindVolume, loc)
		for _, v := range vs {
			n++
			endpoints[v.Endpoint]++
		}
		return err
	})
	return n, endpoints
}

func wantOneWinner(t *testing.T, won int, refused []error, why string) {
	t.Helper()
	if won != 1 {
		t.Errorf("%d of %d creates won %s, want exactly 1", won, won+len(refused), why)
	}
	wantRefusals(t, refused)
}

// wantRefusals fails unless every error is a refusal (not a store failure).
func wantRefusals(t *testing.T, refused []error) {
	t.Helper()
	for _, err := range refused {
		if !errors.Is(err, model.ErrFailedPrecondition) && !errors.Is(err, model.ErrAlreadyExists) && !errors.Is(err, model.ErrInvalid) {
			t.Errorf("a losing create failed with %v, want a refusal", err)
			return
		}
	}
}

// 50 creates race for the last 5 endpoint addresses of the range: 5 win, each
// with an address of its own (each racer reads the lowest free address, so
// without serialised writes several take the same one).
func testRaceEndpoint(t *testing.T, open Open) {
	s := opened(t, open)
	first, last := netip.MustParseAddr("10.99.0.10"), netip.MustParseAddr("10.99.0.19")
	setupPool(t, s, 1000, first, last, 5)
	won, refused := race(t, s, service(first, last), 50, 1, false)
	if won != 5 {
		t.Errorf("%d of 50 creates won the last 5 endpoint addresses, want 5", won)
	}
	wantRefusals(t, refused)
	n, eps := countVolumes(t, s)
	if n != 10 || len(eps) != 10 || eps["10.99.0.19"] != 1 {
		t.Errorf("%d volumes on endpoints %v; want 10, each on its own address", n, eps)
	}
}

func testRaceGiB(t *testing.T, open Open) {
	s := opened(t, open)
	first, last := netip.MustParseAddr("10.99.0.10"), netip.MustParseAddr("10.99.0.127")
	setupPool(t, s, 50, first, last, 49) // 49 × 1 GiB of 50
	won, refused := race(t, s, service(first, last), 50, 1, false)
	wantOneWinner(t, won, refused, "the last GiB of the pool")
	view(t, s, func(tx store.Tx) error {
		u, err := store.UsageOfPool(tx, loc+"/storagePools/pool1")
		if err != nil || u.CapacityGib != 50 || u.Volumes != 50 {
			t.Errorf("pool usage %+v, %v; want 50 GiB in 50 volumes", u, err)
		}
		return nil
	})
}

func testRaceShareName(t *testing.T, open Open) {
	s := opened(t, open)
	first, last := netip.MustParseAddr("10.99.0.10"), netip.MustParseAddr("10.99.0.127")
	setupPool(t, s, 1000, first, last, 0)
	won, refused := race(t, s, service(first, last), 50, 1, true)
	wantOneWinner(t, won, refused, "share name Contested")
	view(t, s, func(tx store.Tx) error {
		got, err := store.VolumesWithShareName(tx, loc, "contested")
		if err != nil || len(got) != 1 {
			t.Errorf("volumes with the share name: %q, %v; want one", got, err)
		}
		return nil
	})
}

// A lease has one holder at a time: renewed at the same epoch, refused to
// another while it runs, taken by another once it lapsed (a new epoch), after
// which — and only after which — the old holder's writes under it are refused.
func testLeases(t *testing.T, open Open) {
	s := opened(t, open)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	take := func(holder string, at time.Time) (l store.Lease, ok bool) {
		t.Helper()
		update(t, s, func(tx store.Tx) (err error) {
			l, ok, err = store.TakeLease(tx, "work", holder, at, time.Minute)
			return err
		})
		return l, ok
	}
	holds := func(holder string, epoch int64) error {
		return s.Update(ctx, func(tx store.Tx) error { return store.HoldsLease(tx, "work", holder, epoch) })
	}
	a, ok := take("a", t0)
	if !ok || a.Epoch != 1 || a.Holder != "a" {
		t.Fatalf("first take: %+v, %v", a, ok)
	}
	if a2, ok := take("a", t0.Add(30*time.Second)); !ok || a2.Epoch != 1 || !a2.Expire.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("renewal: %+v, %v", a2, ok)
	}
	if b, ok := take("b", t0.Add(80*time.Second)); ok || b.Holder != "a" {
		t.Fatalf("b took a running lease: %+v", b)
	}
	if err := holds("a", 1); err != nil {
		t.Fatalf("a's write while it holds: %v", err)
	}
	b, ok := take("b", t0.Add(91*time.Second))
	if !ok || b.Epoch != 2 || b.Holder != "b" {
		t.Fatalf("b after the lease lapsed: %+v, %v", b, ok)
	}
	if err := holds("a", 1); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a's late write: %v, want ErrLeaseLost", err)
	}
	if err := holds("b", 2); err != nil {
		t.Fatalf("b's write: %v", err)
	}
}

// Finished operations and audit entries are found for expiry by their time,
// oldest first and a batch at a time; unfinished operations never are, and an
// operation is found once it finishes.
func testExpiry(t *testing.T, open Open) {
	s := opened(t, open)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	update(t, s, func(tx store.Tx) error {
		for i, o := range []*model.Operation{op("d3", t0, true), op("d1", t0, true), op("d2", t0, true), op("pending", t0, false), op("recent", t0, true)} {
			o.EndTime = t0.Add(time.Duration(i) * time.Hour)
			if o.ID == "recent" {
				o.EndTime = t0.Add(48 * time.Hour)
			}
			if err := store.PutOperation(tx, o); err != nil {
				return err
			}
		}
		for i := range 3 {
			e := &model.AuditEntry{ID: fmt.Sprintf("e%d", i), Project: "p", Time: t0.Add(time.Duration(i) * 24 * time.Hour)}
			if err := tx.Put(store.KindAudit, "projects/p/auditLogs/"+e.ID, "projects/p", e); err != nil {
				return err
			}
		}
		return nil
	})
	cutoff := t0.Add(24 * time.Hour)
	view(t, s, func(tx store.Tx) error {
		got, err := store.ExpiredOperations(tx, cutoff, 10)
		want := []string{loc + "/operations/d3", loc + "/operations/d1", loc + "/operations/d2"}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ExpiredOperations = %q, %v; want %q (by end time)", got, err, want)
		}
		if got, _ := store.ExpiredOperations(tx, cutoff, 2); len(got) != 2 {
			t.Errorf("a batch of 2: %q", got)
		}
		got, err = store.ExpiredAudit(tx, cutoff.Add(time.Second), 10)
		if err != nil || !slices.Equal(got, []string{"projects/p/auditLogs/e0", "projects/p/auditLogs/e1"}) {
			t.Errorf("ExpiredAudit = %q, %v", got, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		o := op("pending", t0, true)
		o.EndTime = t0
		return store.PutOperation(tx, o)
	})
	view(t, s, func(tx store.Tx) error {
		if got, _ := store.ExpiredOperations(tx, cutoff, 10); !slices.Contains(got, loc+"/operations/pending") {
			t.Errorf("a finished operation is not found for expiry: %q", got)
		}
		return nil
	})
}
