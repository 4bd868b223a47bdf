package intent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// In a cluster a new volume goes to the live node with the pool's network that
// holds the fewest volumes and has room; its endpoint comes from that node's
// range; a clone goes where its source is; with every such node down the
// create is refused UNAVAILABLE and nothing is recorded.
func TestPlacement(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clk := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	capa := &probeCapacity{st: st, free: 1 << 40}
	s := New(Options{Capacity: capa, NodeID: "n1", Cluster: true, Now: clk.Now})
	net := func(name, cidr string) model.Network {
		return model.NetworksOrDefault([]model.Network{{Name: name, Prefix: netip.MustParsePrefix(cidr)}})[0]
	}
	putNode := func(n model.Node) {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error { return tx.Put(store.KindNode, n.ID, "", &n) }); err != nil {
			t.Fatal(err)
		}
	}
	up, down := clk.now.Add(-5*time.Second), clk.now.Add(-2*model.NodeDownAfter)
	putNode(model.Node{ID: "n1", HeartbeatTime: up, Networks: []model.Network{net("default", "10.99.1.0/24")}, StoreBytes: 1 << 40, FreeBytes: 1 << 40})
	putNode(model.Node{ID: "n2", HeartbeatTime: up, Networks: []model.Network{net("default", "10.99.2.0/24")}, StoreBytes: 1 << 40, FreeBytes: 1 << 40})
	putNode(model.Node{ID: "n3", HeartbeatTime: down, Networks: []model.Network{net("default", "10.99.3.0/24")}, StoreBytes: 1 << 40, FreeBytes: 1 << 40})
	putNode(model.Node{ID: "n4", HeartbeatTime: up, Networks: []model.Network{net("other", "10.99.4.0/24")}, StoreBytes: 1 << 40, FreeBytes: 1 << 40})

	// Pools commit against every node's store: 4 TiB here, more than this
	// node's 1 TiB.
	if _, err := s.CreatePool(ctx, st, PoolCreate{Pool: &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: "pool1"},
		ServiceLevel: model.LevelPremium, CapacityGib: 3000, Network: "projects/p/global/networks/default"}}); err != nil {
		t.Fatalf("a pool larger than one node's store, within the cluster's: %v", err)
	}
	loc := model.LocationName("p", "l")
	poolReady(t, st, loc+"/storagePools/pool1")
	create := func(id string, restore *RestoreSource) (*model.Volume, error) {
		_, err := s.CreateVolume(ctx, st, VolumeCreate{Volume: &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: id},
			ShareName: id, StoragePool: "pool1", CapacityGib: 10, Protocols: []model.Protocol{model.ProtocolNFSv3}}, Restore: restore})
		if err != nil {
			return nil, err
		}
		var v model.Volume
		err = st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindVolume, loc+"/volumes/"+id, &v) })
		return &v, err
	}
	on := map[string]int{}
	for i := range 6 {
		v, err := create(fmt.Sprintf("v%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		on[v.Node]++
		want := map[string]string{"n1": "10.99.1.", "n2": "10.99.2."}[v.Node]
		if want == "" || v.Endpoint[:len(want)] != want {
			t.Errorf("%s on node %q at %s: want n1 (10.99.1.x) or n2 (10.99.2.x)", v.ID, v.Node, v.Endpoint)
		}
	}
	if on["n1"] != 3 || on["n2"] != 3 {
		t.Errorf("six volumes placed %v; want three on each live node with the network", on)
	}

	// A clone of a snapshot of a volume on n2 goes to n2, full or not.
	var src model.Volume
	if err := st.Update(ctx, func(tx store.Tx) error {
		vols, err := store.List[model.Volume](tx, store.KindVolume, "")
		if err != nil {
			return err
		}
		for _, v := range vols {
			if v.Node == "n2" {
				src = *v
			}
		}
		src.State = model.StateReady
		if err := store.PutVolume(tx, &src); err != nil {
			return err
		}
		return store.PutSnapshot(tx, &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", State: model.StateReady}, Volume: src.ID})
	}); err != nil {
		t.Fatal(err)
	}
	clone, err := create("c1", &RestoreSource{Snapshot: src.Name() + "/snapshots/s1"})
	if err != nil {
		t.Fatal(err)
	}
	if clone.Node != "n2" {
		t.Errorf("clone of a snapshot on n2 placed on %q", clone.Node)
	}

	// n2 says its store is full: new volumes go to n1 though n2 has fewer.
	putNode(model.Node{ID: "n2", HeartbeatTime: up, Networks: []model.Network{net("default", "10.99.2.0/24")}, StoreBytes: 1 << 40, FreeBytes: 1 << 30})
	for i := range 2 {
		v, err := create(fmt.Sprintf("f%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if v.Node != "n1" {
			t.Errorf("with n2 full, %s placed on %q", v.ID, v.Node)
		}
	}

	// n1 drained: new volumes go to n2 (room again), and with both drained
	// the create is refused UNAVAILABLE, naming them.
	putNode(model.Node{ID: "n2", HeartbeatTime: up, Networks: []model.Network{net("default", "10.99.2.0/24")}, StoreBytes: 1 << 40, FreeBytes: 1 << 40})
	drain := func(id string) {
		t.Helper()
		if err := st.Update(ctx, func(tx store.Tx) error { return tx.Put(store.KindDrain, id, "", &model.Drain{Node: id}) }); err != nil {
			t.Fatal(err)
		}
	}
	drain("n1")
	if v, err := create("d1", nil); err != nil || v.Node != "n2" {
		t.Errorf("with n1 drained: %v on %q, want n2", err, v.Node)
	}
	drain("n2")
	if _, err := create("d2", nil); !errors.Is(err, model.ErrUnavailable) || !strings.Contains(err.Error(), "drained (n1, n2)") {
		t.Errorf("every node drained: %v, want UNAVAILABLE naming them", err)
	}
	if err := st.Update(ctx, func(tx store.Tx) error {
		return errors.Join(tx.Delete(store.KindDrain, "n1"), tx.Delete(store.KindDrain, "n2"))
	}); err != nil {
		t.Fatal(err)
	}

	// Every node with the network down: refused, nothing recorded.
	clk.now = clk.now.Add(time.Hour)
	_, err = create("late", nil)
	if !errors.Is(err, model.ErrUnavailable) {
		t.Fatalf("every node down: %v, want UNAVAILABLE", err)
	}
	if err := st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindVolume, loc+"/volumes/late", new(model.Volume)) }); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("a refused create left a record: %v", err)
	}
}
