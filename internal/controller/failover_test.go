package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
	dpfake "github.com/basin-nas/basin/internal/dataplane/fake"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/store"
)

// planHostings, case by case: who serves a node's volumes on a network.
func TestPlanHostings(t *testing.T) {
	now := t0.Add(time.Hour)
	node := func(id, shared string, nets ...string) *model.Node {
		n := &model.Node{ID: id, SharedStorage: shared, StartTime: t0}
		for _, nw := range nets {
			n.Networks = append(n.Networks, model.Network{Name: nw})
		}
		return n
	}
	group := func(network, home string, volumes int) *hostingGroup {
		return &hostingGroup{network: network, home: home, volumes: volumes}
	}
	type tc struct {
		name     string
		nodes    []*model.Node
		serving  []string
		drained  []string
		hostings []*model.Hosting
		groups   []*hostingGroup
		want     []string // "network@home host from released reason epoch"
	}
	ceph := "ceph:fsid/fs/basin"
	abc := []*model.Node{node("a", ceph, "n1", "n2"), node("b", ceph, "n1", "n2"), node("c", ceph, "n1")}
	cases := []tc{
		{name: "all serving: nothing moves", nodes: abc, serving: []string{"a", "b", "c"},
			groups: []*hostingGroup{group("n1", "a", 2), group("n1", "b", 1)}},
		{name: "a lost: its group goes to the least loaded node, to be released once a is cut off", nodes: abc, serving: []string{"b", "c"},
			groups: []*hostingGroup{group("n1", "a", 2), group("n1", "b", 1)},
			want:   []string{"n1@a c a false lost 1"}},
		{name: "a lost: a network only b has goes to b", nodes: abc, serving: []string{"b", "c"},
			groups: []*hostingGroup{group("n2", "a", 1), group("n1", "b", 5)},
			want:   []string{"n2@a b a false lost 1"}},
		{name: "a drained: moves, waiting for a's release", nodes: abc, serving: []string{"a", "b", "c"}, drained: []string{"a"},
			groups: []*hostingGroup{group("n1", "a", 1)},
			want:   []string{"n1@a b a false drained 1"}},
		{name: "local storage never moves", nodes: []*model.Node{node("a", "", "n1"), node("b", "", "n1")}, serving: []string{"b"},
			groups: []*hostingGroup{group("n1", "a", 1)}},
		{name: "another cluster's storage: no fit, stays", nodes: []*model.Node{node("a", ceph, "n1"), node("b", "ceph:other", "n1")}, serving: []string{"b"},
			groups: []*hostingGroup{group("n1", "a", 1)}},
		{name: "no node has the network: stays", nodes: abc, serving: []string{"c"},
			groups: []*hostingGroup{group("n2", "a", 1)}},
		{name: "two groups of a lost node spread by load", nodes: abc, serving: []string{"b", "c"},
			groups: []*hostingGroup{group("n1", "a", 3), group("n2", "a", 1), group("n1", "c", 2)},
			want:   []string{"n1@a b a false lost 1", "n2@a b a false lost 1"}},
		{name: "home back, not yet long enough: stays on b", nodes: []*model.Node{{ID: "a", SharedStorage: ceph, StartTime: now.Add(-time.Second), Networks: []model.Network{{Name: "n1"}}}, node("b", ceph, "n1")},
			serving: []string{"a", "b"}, hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: true, Epoch: 1, Reason: model.HostingLost}},
			groups: []*hostingGroup{group("n1", "a", 1)}},
		{name: "home back long enough: given back, waiting for b's release", nodes: abc, serving: []string{"a", "b"},
			hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: true, Epoch: 1, Reason: model.HostingLost}},
			groups:   []*hostingGroup{group("n1", "a", 1)},
			want:     []string{"n1@a a b false home 2"}},
		{name: "home back but drained: stays", nodes: abc, serving: []string{"a", "b"}, drained: []string{"a"},
			hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: true, Epoch: 1}},
			groups:   []*hostingGroup{group("n1", "a", 1)}},
		{name: "the new host dies before a released: the next waits for a still", nodes: abc, serving: []string{"a", "c"}, drained: []string{"a"},
			hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: false, Epoch: 3}},
			groups:   []*hostingGroup{group("n1", "a", 1)},
			want:     []string{"n1@a c a false lost 4"}},
		{name: "the old host dies before it released: left to fenceLost", nodes: abc, serving: []string{"b", "c"},
			hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: false, Epoch: 3, Reason: model.HostingDrained}},
			groups:   []*hostingGroup{group("n1", "a", 1)}},
		{name: "undrained before a released: a keeps serving, nothing to wait for", nodes: abc, serving: []string{"a", "b"},
			hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: false, Epoch: 3, Reason: model.HostingDrained}},
			groups:   []*hostingGroup{group("n1", "a", 1)},
			want:     []string{"n1@a a  true home 4"}},
		{name: "a release under way is left alone", nodes: abc, serving: []string{"a", "b"}, drained: []string{"a"},
			hostings: []*model.Hosting{{Network: "n1", Home: "a", Host: "b", From: "a", Released: false, Epoch: 3}},
			groups:   []*hostingGroup{group("n1", "a", 1)}},
		{name: "nowhere to go: a lost host's group stays", nodes: abc, serving: nil,
			groups: []*hostingGroup{group("n1", "a", 1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := hostingInput{now: now, givebackAfter: time.Minute, nodes: map[string]*model.Node{}, serving: map[string]bool{},
				drained: map[string]bool{}, hostings: map[string]*model.Hosting{}, groups: map[string]*hostingGroup{}}
			for _, n := range c.nodes {
				in.nodes[n.ID] = n
			}
			for _, id := range c.serving {
				in.serving[id] = true
			}
			for _, id := range c.drained {
				in.drained[id] = true
			}
			for _, h := range c.hostings {
				in.hostings[model.HostingName(h.Network, h.Home)] = h
			}
			for _, g := range c.groups {
				in.groups[model.HostingName(g.network, g.home)] = g
			}
			var got []string
			for _, h := range planHostings(in) {
				got = append(got, fmt.Sprintf("%s %s %s %t %s %d", model.HostingName(h.Network, h.Home), h.Host, h.From, h.Released, h.Reason, h.Epoch))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

// failNode is a store whose writes fail while cut is set: the node is cut off
// from the database.
type failNode struct {
	store.Store
	cut atomic.Bool
}

func (f *failNode) Update(ctx context.Context, fn func(store.Tx) error) error {
	if f.cut.Load() {
		return errors.New("database out of reach")
	}
	return f.Store.Update(ctx, fn)
}

func (f *failNode) View(ctx context.Context, fn func(store.Tx) error) error {
	if f.cut.Load() {
		return errors.New("database out of reach")
	}
	return f.Store.View(ctx, fn)
}

// failoverNodes is two or three failover nodes on one store and one storage
// (the fake backend standing for CephFS), each with a data plane of its own.
type failoverNodes struct {
	h        *harness
	dps      map[string]*dpfake.DataPlane
	cs       map[string]*Controller
	stops    map[string]func()
	sts      map[string]*failNode
	mu       sync.Mutex
	fence    map[string]string // node → why it fenced itself
	fencedAt map[string]time.Time
	guards   map[string]*guardedDP
}

const testServeLease = 600 * time.Millisecond

func newFailoverNodes(t *testing.T, ids ...string) *failoverNodes {
	f := &failoverNodes{h: newHarness(t), dps: map[string]*dpfake.DataPlane{}, cs: map[string]*Controller{}, stops: map[string]func(){},
		sts: map[string]*failNode{}, fence: map[string]string{}, fencedAt: map[string]time.Time{}, guards: map[string]*guardedDP{}}
	f.h.seed(t, func(tx store.Tx) error {
		for _, id := range ids {
			n := &model.Node{ID: id, SharedStorage: "ceph:test", StartTime: t0, HeartbeatTime: time.Now(), Networks: []model.Network{{Name: "default"}},
				FenceAddrs: []string{"10.20.0." + id}}
			if err := tx.Put(store.KindNode, id, "", n); err != nil {
				return err
			}
		}
		return nil
	})
	return f
}

// guardedDP is a node's data plane that records an export made while
// another node's addresses were not cut off the storage (and that node was
// lost, having served what is exported).
type guardedDP struct {
	*dpfake.DataPlane
	check func() error
	mu    sync.Mutex
	bad   []error
}

func (g *guardedDP) Export(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) error {
	if err := g.check(); err != nil {
		g.mu.Lock()
		g.bad = append(g.bad, err)
		g.mu.Unlock()
	}
	return g.DataPlane.Export(ctx, network, addr, ex)
}

func (f *failoverNodes) start(t *testing.T, id string) {
	dp := dpfake.New()
	dp.Mounted = f.h.be.Mounted
	g := &guardedDP{DataPlane: dp, check: func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for other, why := range f.fence {
			if other != id && why != "" && !slices.Contains(f.h.be.Fenced(), "10.20.0."+other) {
				return fmt.Errorf("%s exported while %s, which fenced itself, was not cut off the storage", id, other)
			}
		}
		return nil
	}}
	f.guards[id] = g
	st := &failNode{Store: f.h.st}
	c, stop := runController(t, Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil)).With("node", id), NodeID: id, Cluster: true, Failover: true,
		FenceAddrs: []string{"10.20.0." + id}, Store: st, Backend: f.h.be, DataPlane: AdaptDataPlane[*dataplane.View](g),
		Resync: time.Hour, ResumeWait: 100 * time.Millisecond, OpLease: time.Hour, ServeLease: testServeLease, GivebackAfter: time.Millisecond,
		Fence: func(why string) {
			f.mu.Lock()
			f.fence[id] = why
			f.fencedAt[id] = time.Now()
			f.mu.Unlock()
		}})
	f.dps[id], f.cs[id], f.stops[id], f.sts[id] = dp, c, stop, st
}

func (f *failoverNodes) fenced(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fence[id]
}

// exports lists, per node, the pseudo paths its data plane serves.
func (f *failoverNodes) exports() map[string][]string {
	out := map[string][]string{}
	for id, dp := range f.dps {
		for _, e := range dp.Exports() {
			out[id] = append(out[id], e.Export.Pseudo)
		}
		slices.Sort(out[id])
	}
	return out
}

func (f *failoverNodes) hosting(t *testing.T, network, home string) *model.Hosting {
	var h *model.Hosting
	f.h.st.View(context.Background(), func(tx store.Tx) (err error) {
		h, err = store.Get[model.Hosting](tx, store.KindHosting, model.HostingName(network, home))
		if errors.Is(err, model.ErrNotFound) {
			h, err = nil, nil
		}
		return err
	})
	return h
}

// A node cut off from the database fences itself before its serving lease
// can lapse; the leader then moves its volumes to the other node, which
// serves them, and their operations run there.
func TestFailoverLostNode(t *testing.T) {
	f := newFailoverNodes(t, "a", "b")
	v := nfsVolume("v1", false, model.ProtocolNFSv3)
	v.Node = "a"
	op := f.h.seedCreate(t, v)
	f.start(t, "a") // holds the controller lease: started first
	f.start(t, "b")
	waitFor(t, "the create on a", func() bool { return f.h.opDone(t, op.Name()).Done })
	if got := f.exports(); !slices.Equal(got["a"], []string{"/v1"}) || len(got["b"]) != 0 {
		t.Fatalf("exports %v; want /v1 on a only", got)
	}
	f.sts["a"].cut.Store(true)
	waitFor(t, "a fencing itself", func() bool { return f.fenced("a") != "" })
	if !f.cs["a"].Fenced() || f.cs["a"].mine(v) {
		t.Fatalf("a fenced but still counts v1 as its own")
	}
	// Once a's serving lease lapsed, b moves v1 to itself and serves it
	// (a's controller lease, which lasts longer, has nothing to do with it).
	waitFor(t, "v1 served by b", func() bool { return slices.Equal(f.exports()["b"], []string{"/v1"}) })
	h := f.hosting(t, "default", "a")
	if h == nil || h.Host != "b" || h.From != "a" || !h.Released || h.Reason != model.HostingLost {
		t.Fatalf("hosting %+v; want host b from a, released, lost", h)
	}
	if got := f.h.be.Fenced(); !slices.Equal(got, []string{"10.20.0.a"}) {
		t.Fatalf("addresses cut off the storage: %v; want a's", got)
	}
	if bad := f.guards["b"].bad; len(bad) > 0 {
		t.Fatal(bad[0])
	}
	f.mu.Lock()
	at := f.fencedAt["a"]
	f.mu.Unlock()
	if !at.Before(h.Since) {
		t.Fatalf("b took a's volumes at %s, before a fenced itself at %s", h.Since.Format(time.StampMicro), at.Format(time.StampMicro))
	}
	// An operation on v1 now runs on b.
	up := newOp(model.OpVolumeUpdate, v.Name(), t0.Add(time.Minute))
	f.h.seed(t, func(tx store.Tx) error {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if err != nil {
			return err
		}
		cur.CapacityGib, cur.State = 3, model.StateUpdating
		if err := store.PutVolume(tx, cur); err != nil {
			return err
		}
		return store.PutOperation(tx, up)
	})
	f.cs["b"].Wake()
	waitFor(t, "the update on b", func() bool { return f.h.opDone(t, up.Name()).Done })
	if o := f.h.opDone(t, up.Name()); o.Owner != "b" || o.Error != nil {
		t.Fatalf("update ran on %q with error %v; want b, no error", o.Owner, o.Error)
	}
	// a started again, reaching the database: its addresses are let back
	// into the storage, and v1 comes back to it (GivebackAfter is a
	// millisecond here), b letting it go first.
	f.stops["a"]()
	f.start(t, "a")
	if got := f.h.be.Fenced(); len(got) != 0 {
		t.Fatalf("after a's restart, still cut off the storage: %v", got)
	}
	waitFor(t, "v1 back on a", func() bool {
		e := f.exports()
		return slices.Equal(e["a"], []string{"/v1"}) && len(e["b"]) == 0
	})
}

// A drained node's volumes move while it serves: it takes them out of its
// data plane and acknowledges before the other node loads them, so the two
// never serve one at once; undrained, they come back the same way.
func TestFailoverDrain(t *testing.T) {
	f := newFailoverNodes(t, "a", "b")
	var ops []*model.Operation
	for i, id := range []string{"v1", "v2"} {
		v := nfsVolume(id, false, model.ProtocolNFSv3)
		v.Node, v.Endpoint = "a", "10.99.0."+strings.TrimPrefix(id, "v")
		op := newOp(model.OpVolumeCreate, v.Name(), t0.Add(time.Duration(i)*time.Second))
		f.h.seed(t, func(tx store.Tx) error {
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
			return store.PutOperation(tx, op)
		})
		ops = append(ops, op)
	}
	f.start(t, "a")
	f.start(t, "b")
	for _, op := range ops {
		waitFor(t, "a create", func() bool { return f.h.opDone(t, op.Name()).Done })
	}
	// Watch both data planes throughout: never both serving one volume.
	stop := make(chan struct{})
	var both atomic.Value
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			e := f.exports()
			for _, p := range e["a"] {
				if slices.Contains(e["b"], p) {
					both.Store(p)
				}
			}
		}
	}()
	defer close(stop)
	f.h.seed(t, func(tx store.Tx) error {
		return tx.Put(store.KindDrain, "a", "", &model.Drain{Node: "a", Since: time.Now()})
	})
	waitFor(t, "v1 and v2 on b", func() bool {
		e := f.exports()
		return slices.Equal(e["b"], []string{"/v1", "/v2"}) && len(e["a"]) == 0
	})
	if h := f.hosting(t, "default", "a"); h == nil || h.Host != "b" || !h.Released || h.Reason != model.HostingDrained {
		t.Fatalf("hosting %+v; want host b, released, drained", h)
	}
	if f.fenced("a") != "" || f.fenced("b") != "" {
		t.Fatalf("a drain fenced a node: %q %q", f.fenced("a"), f.fenced("b"))
	}
	// Undrained: given back (GivebackAfter is a millisecond here).
	f.h.seed(t, func(tx store.Tx) error { return tx.Delete(store.KindDrain, "a") })
	waitFor(t, "v1 and v2 back on a", func() bool {
		e := f.exports()
		return slices.Equal(e["a"], []string{"/v1", "/v2"}) && len(e["b"]) == 0
	})
	if p := both.Load(); p != nil {
		t.Fatalf("%v was served by both nodes at once", p)
	}
}

// The plan runs every ServeLease/4, and right after a serving lease can
// lapse when that comes first.
func TestFailoverPace(t *testing.T) {
	now := t0.Add(time.Hour)
	c := &Controller{opts: Options{ServeLease: 8 * time.Second, Now: func() time.Time { return now }}}
	for _, tc := range []struct {
		name      string
		nextLapse time.Time
		want      time.Duration
	}{
		{"no plan yet, or it failed", time.Time{}, 2 * time.Second},
		{"every lease renewed", now.Add(8 * time.Second), 2 * time.Second},
		{"a lease lapses before the beat", now.Add(time.Second), time.Second + lapseMargin},
		{"a lease lapsed", now.Add(-time.Second), lapseMargin},
	} {
		c.failover.nextLapse = tc.nextLapse
		if got := c.pace(); got != tc.want {
			t.Errorf("%s: pace %s, want %s", tc.name, got, tc.want)
		}
	}
}

// An SMB-only volume has no export (ExportID 0), but an endpoint address of
// its own on the sandbox (its share's): it leaves the node's data plane with
// the volume, as an NFS volume's does, when the volume moves away (its
// clients' connections reset) and when it is deleted. It stayed on before,
// and after a move both nodes held the address.
func TestSMBOnlyVolumeAddressLeaves(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	v := newVolume("smb1")
	v.Protocols, v.Endpoint, v.Network = []model.Protocol{model.ProtocolSMB}, "10.99.0.30", "default"
	ctx := context.Background()
	if err := c.unserve(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := c.step(ctx, nil, v, Step{Op: StepUnexport}); err != nil {
		t.Fatal(err)
	}
	if got, want := dp.History(), []string{"unaddr 10.99.0.30", "unaddr 10.99.0.30"}; !slices.Equal(got, want) {
		t.Fatalf("data plane calls %v, want the address taken off by the move and by the delete: %v", got, want)
	}
}
