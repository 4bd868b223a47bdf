package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

// Two nodes on one store: each runs the operations of the volumes placed on
// it and none of the other's, each repairs only its own volumes (its resync
// never makes the other's storage here), and a volume made before placement is
// adopted by the node whose store holds it, not by the other.
func TestClusterNodesServeTheirOwnVolumes(t *testing.T) {
	h := newHarness(t)
	be1, be2 := h.be, fake.New()
	// Made before volumes were placed: its storage is on n2.
	old := newVolume("old")
	old.State = model.StateReady
	if err := be2.EnsureVolume(context.Background(), old.Key, 2<<30, nil); err != nil {
		t.Fatal(err)
	}
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, old) })
	v1, v2 := newVolume("v1"), newVolume("v2")
	v1.Node, v2.Node = "n1", "n2"
	op1 := h.seedCreate(t, v1)
	op2 := newOp(model.OpVolumeCreate, v2.Name(), t0.Add(time.Second))
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, v2); err != nil {
			return err
		}
		return store.PutOperation(tx, op2)
	})
	node := func(id string, be *fake.Backend) {
		runController(t, Options{NodeID: id, Cluster: true, Store: h.st, Backend: be, Resync: 20 * time.Millisecond, ResumeWait: 100 * time.Millisecond})
	}
	// n1 alone first: it must not run n2's create, nor adopt n2's old volume.
	node("n1", be1)
	get := func(name string) (op model.Operation) {
		h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, name, &op) })
		return op
	}
	waitFor(t, "n1's create", func() bool { return get(op1.Name()).Done })
	time.Sleep(100 * time.Millisecond) // resync passes
	if op := get(op2.Name()); op.Done || op.Owner != "" {
		t.Fatalf("n1 ran n2's operation: %+v", op)
	}
	node("n2", be2)
	waitFor(t, "n2's create", func() bool { return get(op2.Name()).Done })
	time.Sleep(100 * time.Millisecond)
	keys := func(be *fake.Backend) []string {
		obs, err := be.ObserveVolumes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for k, st := range obs {
			if st.Exists {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		return ks
	}
	if got := keys(be1); !slices.Equal(got, []string{v1.Key}) {
		t.Errorf("n1's store holds %v; want only %s", got, v1.Key)
	}
	if got := keys(be2); !slices.Equal(got, []string{old.Key, v2.Key}) {
		t.Errorf("n2's store holds %v; want %s and %s", got, old.Key, v2.Key)
	}
	for _, want := range []struct{ name, op, node string }{{v1.Name(), op1.Name(), "n1"}, {v2.Name(), op2.Name(), "n2"}, {old.Name(), "", "n2"}} {
		var v model.Volume
		h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindVolume, want.name, &v) })
		if v.Node != want.node || v.State != model.StateReady {
			t.Errorf("%s: node %q state %s; want %s, READY", want.name, v.Node, v.State, want.node)
		}
		if want.op != "" {
			if op := get(want.op); op.Owner != want.node {
				t.Errorf("%s ran on %q, want %s", want.op, op.Owner, want.node)
			}
		}
	}
}

// nodeShares splits a project's cap and a Flex pool's budget between nodes in
// proportion to their volumes' part, so that what the nodes shape adds up to
// the cap.
func TestNodeSharesAddUp(t *testing.T) {
	lim := model.DefaultLimits()
	prem := &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "prem"}, ServiceLevel: model.LevelPremium, CapacityGib: 10000}
	pools := map[string]*model.Pool{prem.Name(): prem}
	var all []*model.Volume
	for i, n := range []string{"a", "a", "b", "c"} {
		v := newVolume(string(rune('w' + i)))
		v.StoragePool, v.CapacityGib, v.Node, v.Endpoint = "prem", int64(1000*(i+1)), n, "10.99.0.1"
		all = append(all, v)
	}
	total := 0.0
	limits := map[string]float64{}
	for _, v := range all {
		limits[v.Node] += model.VolumeThroughputMibps(v, prem, lim)
	}
	for _, n := range []string{"a", "b", "c"} {
		var mine []*model.Volume
		for _, v := range all {
			if v.Node == n {
				mine = append(mine, v)
			}
		}
		caps := map[string]float64{model.LocationName("p", "l"): 64}
		nodeShares(all, mine, pools, caps, lim)
		got := caps[model.LocationName("p", "l")]
		want := 64 * limits[n] / (limits["a"] + limits["b"] + limits["c"])
		if got < want-1e-9 || got > want+1e-9 {
			t.Errorf("node %s: cap share %.3f MiB/s, want %.3f", n, got, want)
		}
		total += got
	}
	if total < 64-1e-9 || total > 64+1e-9 {
		t.Errorf("the nodes' shares add up to %.3f MiB/s, want 64", total)
	}
}

// Cluster-scope operations (a pool's) run on the node holding the controller
// lease alone; when it stops renewing, another node takes the lease once it
// lapses and runs them.
func TestControllerLease(t *testing.T) {
	h := newHarness(t)
	lease := 300 * time.Millisecond
	node := func(id string) (*Controller, func()) {
		return runController(t, Options{NodeID: id, Cluster: true, OpLease: lease, Store: h.st, Backend: fake.New(), Resync: time.Hour, ResumeWait: 100 * time.Millisecond})
	}
	poolOp := func(id string, at time.Time) *model.Operation {
		p := &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: id, State: model.StateCreating, CreateTime: at},
			ServiceLevel: model.LevelPremium, CapacityGib: 10, Network: "projects/p/global/networks/default"}
		op := newOp(model.OpPoolCreate, p.Name(), at)
		h.seed(t, func(tx store.Tx) error {
			if err := store.PutPool(tx, p); err != nil {
				return err
			}
			return store.PutOperation(tx, op)
		})
		return op
	}
	get := func(name string) (op model.Operation) {
		h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, name, &op) })
		return op
	}
	a, stopA := node("a")
	b, stopB := node("b")
	defer stopB()
	op1 := poolOp("pool1", t0)
	b.Wake()
	a.Wake()
	waitFor(t, "the first pool's create", func() bool { return get(op1.Name()).Done })
	if o := get(op1.Name()); o.Owner != "a" {
		t.Fatalf("pool create ran on %q; want a, which holds the controller lease", o.Owner)
	}
	stopA() // a stops cleanly: it gives the lease up
	op2 := poolOp("pool2", t0.Add(time.Second))
	b.Wake()
	waitFor(t, "the second pool's create, on b", func() bool { return get(op2.Name()).Done })
	if o := get(op2.Name()); o.Owner != "b" || o.Error != nil {
		t.Fatalf("after a stopped: owner %q error %v; want b, no error", o.Owner, o.Error)
	}
}

// A holder that stops cleanly gives the controller lease up: another node
// takes it at its next try, not a whole lease later.
func TestControllerLeaseGivenUpOnStop(t *testing.T) {
	h := newHarness(t)
	node := func(id string) func() {
		_, stop := runController(t, Options{NodeID: id, Cluster: true, OpLease: time.Hour, Store: h.st, Backend: fake.New(), Resync: time.Hour, ResumeWait: 100 * time.Millisecond})
		return stop
	}
	holder := func() string {
		var l store.Lease
		h.st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindLease, controllerLease, &l) })
		return l.Holder
	}
	stopA := node("a")
	if holder() != "a" {
		t.Fatalf("lease held by %q, want a", holder())
	}
	stopA()
	// b's first try, at its start, finds the lease free though it was
	// taken for an hour.
	defer node("b")()
	if got := holder(); got != "b" {
		t.Fatalf("after a stopped cleanly the lease is %q's; want b's", got)
	}
}

// In a cluster each node joins a policy's domain as a machine of its own
// (Members keyed network@node), so one node's join never resets another's
// machine password; each node's SMB volumes are served by its own machine.
func TestClusterSMBMachinePerNode(t *testing.T) {
	h := newHarness(t)
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	p.State = model.StateReady
	seedPoolAD(t, h, p, ad)
	fa, fb := newFakeSMB(), newFakeSMB()
	node := func(id string, f *fakeSMB) {
		runController(t, Options{NodeID: id, Cluster: true, Store: h.st, Backend: fake.New(), SMB: f, Secrets: fakeSecrets{}, Resync: 20 * time.Millisecond,
			ResumeWait: 100 * time.Millisecond})
	}
	node("a", fa)
	node("b", fb)
	waitFor(t, "both nodes joined", func() bool {
		m := getAD(t, h, ad.Name()).Members
		return m["default@a"] != "" && m["default@b"] != "" && fa.joinCount() == 1 && fb.joinCount() == 1
	})
	m := getAD(t, h, ad.Name()).Members
	if m["default@a"] == m["default@b"] || len(m) != 2 {
		t.Fatalf("members %v: want one machine per node", m)
	}
	if len(fa.joins) != 1 || len(fb.joins) != 1 || strings.Split(fa.joins[0], "|")[1] != m["default@a"] || strings.Split(fb.joins[0], "|")[1] != m["default@b"] {
		t.Fatalf("joins a %q, b %q; members %v", fa.joins, fb.joins, m)
	}
	// The policy's settings change (its update ran on one node): the other
	// node's instance joins again at its next pass, taking them.
	h.seed(t, func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ad.Name())
		if err != nil {
			return err
		}
		a.Site = "site-2"
		return store.PutAD(tx, a)
	})
	waitFor(t, "both nodes joined again with the new site", func() bool { return fa.joinCount() == 2 && fb.joinCount() == 2 })
	time.Sleep(100 * time.Millisecond)
	if fa.joinCount() != 2 || fb.joinCount() != 2 {
		t.Fatalf("joins a %d, b %d after one settings change; want 2 each", fa.joinCount(), fb.joinCount())
	}
}
