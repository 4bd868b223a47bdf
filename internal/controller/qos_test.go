package controller

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
	qosfake "github.com/basin-nas/basin/internal/qos/fake"
	"github.com/basin-nas/basin/internal/store"
)

var testLink = qos.Link{Netns: "basin-test", Dev: "eth0"}

func qosOptions(d qos.Driver, up *bool) *QoS {
	return &QoS{Driver: d, Overhead: 1, Limits: model.DefaultLimits(),
		Networks: func() []string { return []string{"default", "idle"} },
		Link: func(n string) (qos.Link, bool) {
			if n == "default" && (up == nil || *up) {
				return testLink, true
			}
			return qos.Link{}, false
		}}
}

func liveClass(t *testing.T, d *qosfake.Driver, key string) (qos.Class, bool) {
	t.Helper()
	tr, err := d.Read(context.Background(), testLink)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tr.Classes {
		if c.Key == key {
			return c, true
		}
	}
	return qos.Class{}, false
}

func lastChanges(d *qosfake.Driver) []qos.Change {
	a := d.Applies()
	if len(a) == 0 {
		return nil
	}
	return a[len(a)-1].Changes
}

// The tree follows the store: a resize and a move between AUTO pools change the
// volume's class in place (nothing deleted or added, so running I/O goes on), a
// project cap reshapes the shares, a deleted volume loses its class, and a
// network whose sandbox is not running is left alone.
func TestApplyQoSFollowsDesiredState(t *testing.T) {
	h := newHarness(t)
	d := qosfake.New()
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour, QoS: qosOptions(d, nil)})
	ctx := context.Background()
	prem := &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "prem"}, ServiceLevel: model.LevelPremium, QosType: model.QosAuto, CapacityGib: 10240, Network: "projects/p/global/networks/default"}
	ext := &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "ext"}, ServiceLevel: model.LevelExtreme, QosType: model.QosAuto, CapacityGib: 10240, Network: "projects/p/global/networks/default"}
	v := newVolume("v1")
	v.StoragePool, v.CapacityGib, v.Endpoint, v.Network, v.State = "prem", 1024, "10.99.0.10", "default", model.StateReady
	w := newVolume("v2")
	w.StoragePool, w.CapacityGib, w.Endpoint, w.Network, w.State = "prem", 1024, "10.99.0.11", "default", model.StateReady
	h.seed(t, func(tx store.Tx) error {
		for _, p := range []*model.Pool{prem, ext} {
			if err := store.PutPool(tx, p); err != nil {
				return err
			}
		}
		return errorsJoin(store.PutVolume(tx, v), store.PutVolume(tx, w))
	})
	apply := func() {
		t.Helper()
		if err := c.ApplyQoS(ctx); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	if cl, ok := liveClass(t, d, v.Name()); !ok || cl.Ceil != 64<<20 || !slices.Equal(cl.Addrs, addrsOf("10.99.0.10")) {
		t.Fatalf("after the first apply: %+v, %v", cl, ok)
	}
	inPlace := func(what string, keys ...string) {
		t.Helper()
		var changed []string
		for _, ch := range lastChanges(d) {
			if ch.Op != qos.OpChangeClass {
				t.Fatalf("%s: %v, want only in-place changes", what, lastChanges(d))
			}
			changed = append(changed, ch.Key)
		}
		slices.Sort(changed)
		if !slices.Equal(changed, keys) {
			t.Fatalf("%s changed %v, want %v", what, changed, keys)
		}
	}
	// Grow v1 to 2 TiB: its ceiling doubles, in place (and its project's sum).
	v.CapacityGib = 2048
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
	apply()
	inPlace("a resize", "projects/p/locations/l", v.Name())
	if cl, _ := liveClass(t, d, v.Name()); cl.Ceil != 128<<20 {
		t.Fatalf("after the resize: ceil %d", cl.Ceil)
	}
	// Move it to the Extreme pool: 256 MiB/s, in place.
	v.StoragePool = "ext"
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
	apply()
	inPlace("a move", "projects/p/locations/l", v.Name())
	if cl, _ := liveClass(t, d, v.Name()); cl.Ceil != 256<<20 {
		t.Fatalf("after the move: ceil %d", cl.Ceil)
	}
	// Nothing changed: nothing is sent.
	apply()
	if ch := lastChanges(d); len(ch) != 0 {
		t.Fatalf("an unchanged store changed %v", ch)
	}
	// A project cap of 100 MiB/s: shares 80/20 of it, each may borrow to its limit.
	h.seed(t, func(tx store.Tx) error {
		return store.PutSettings(tx, &model.Settings{Project: "p", Location: "l", ThroughputCapMibps: 100})
	})
	apply()
	pc, _ := liveClass(t, d, "projects/p/locations/l")
	a, _ := liveClass(t, d, v.Name())
	b, _ := liveClass(t, d, w.Name())
	if pc.Ceil != 100<<20 || a.Rate+b.Rate > pc.Rate || a.Rate != 80<<20 || b.Rate != 20<<20 || a.Ceil != 100<<20 || b.Ceil != 64<<20 {
		t.Fatalf("under a cap: project %+v, v1 %+v, v2 %+v", pc, a, b)
	}
	// Deleted: its class goes.
	h.seed(t, func(tx store.Tx) error { return tx.Delete(store.KindVolume, v.Name()) })
	apply()
	if _, ok := liveClass(t, d, v.Name()); ok {
		t.Fatal("a deleted volume keeps its class")
	}
	for _, a := range d.Applies() {
		if a.Link != testLink {
			t.Fatalf("applied to %v, a network whose sandbox is not running", a.Link)
		}
	}
}

// After an operation the controller applies the tree on its own, and a failing
// driver is tried again.
func TestOperationsKickQoS(t *testing.T) {
	h := newHarness(t)
	d := qosfake.New()
	up := true
	c := h.startWith(t, Options{QoS: qosOptions(d, &up)})
	pool := &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "pool"}, ServiceLevel: model.LevelPremium, QosType: model.QosAuto, CapacityGib: 10240, Network: "projects/p/global/networks/default"}
	v := newVolume("v1")
	v.CapacityGib, v.Endpoint, v.Network = 1024, "10.99.0.10", "default"
	d.FailOn("Apply", errTest)
	op := newOp(model.OpVolumeCreate, v.Name(), t0)
	h.seed(t, func(tx store.Tx) error {
		return errorsJoin(store.PutPool(tx, pool), store.PutVolume(tx, v), store.PutOperation(tx, op))
	})
	c.Wake()
	time.Sleep(200 * time.Millisecond)
	d.FailOn("Apply", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if cl, ok := liveClass(t, d, v.Name()); ok && cl.Ceil == 64<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the volume's class never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errTest = errors.New("injected")

func errorsJoin(errs ...error) error { return errors.Join(errs...) }

func addrsOf(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}
