package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// GET /v1/nodes lists the registered nodes, UP while their heartbeat is fresh
// and DOWN once it is older than model.NodeDownAfter; it is the service
// administrator's alone: a project's roles/owner does not grant it.
func TestListNodes(t *testing.T) {
	ie := newIAMEnv(t)
	now := time.Now().UTC()
	if err := ie.st.Update(context.Background(), func(tx store.Tx) error {
		for _, n := range []model.Node{
			{ID: "node-b", APIURL: "http://10.0.0.2:8780/", StartTime: now.Add(-time.Hour), HeartbeatTime: now.Add(-2 * model.NodeDownAfter)},
			{ID: "node-a", APIURL: "http://10.0.0.1:8780/", StartTime: now.Add(-time.Hour), HeartbeatTime: now.Add(-time.Second)},
		} {
			if err := tx.Put(store.KindNode, n.ID, "", &n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := ie.call(ie.owner, "GET", "/v1/nodes", nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := got["nodes"].([]any)
	if len(nodes) != 2 {
		t.Fatalf("nodes: %v", got)
	}
	for i, want := range [][3]string{{"nodes/node-a", "UP", "http://10.0.0.1:8780/"}, {"nodes/node-b", "DOWN", "http://10.0.0.2:8780/"}} {
		n := nodes[i].(map[string]any)
		if n["name"] != want[0] || n["state"] != want[1] || n["apiUrl"] != want[2] {
			t.Errorf("node %d: %v, want %v", i, n, want)
		}
	}
	projectOwner, email := ie.account("projowner")
	ie.bind(map[string][]string{iam.RoleOwner: {iam.Member(email)}})
	_, err = ie.call(projectOwner, "GET", "/v1/nodes", nil)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusForbidden || !strings.Contains(ae.Message, "administrator") {
		t.Fatalf("a project's roles/owner: %v, want 403", err)
	}
}

// In a cluster a volume's zone is its node, and while that node is DOWN the
// volume reads ERROR, naming the node; it reads as it was once the node is
// back.
func TestVolumeOnDownNode(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Cluster, o.NodeID = true, "n1" })
	now := time.Now().UTC()
	putNode := func(beat time.Time) {
		t.Helper()
		if err := e.st.Update(context.Background(), func(tx store.Tx) error {
			return tx.Put(store.KindNode, "n2", "", &model.Node{ID: "n2", HeartbeatTime: beat})
		}); err != nil {
			t.Fatal(err)
		}
	}
	putNode(now.Add(-2 * model.NodeDownAfter))
	if err := e.st.Update(context.Background(), func(tx store.Tx) error {
		return putVolumeOn(tx, "n2", now)
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the node cache's second
	v := e.ok("GET", loc+"/volumes/vol1", nil)
	if v["zone"] != "n2" || v["state"] != "ERROR" || !strings.Contains(v["stateDetails"].(string), "node n2") {
		t.Fatalf("volume on a DOWN node: zone %v, state %v, details %v", v["zone"], v["state"], v["stateDetails"])
	}
	putNode(time.Now().UTC())
	time.Sleep(1100 * time.Millisecond) // the node cache's second
	v = e.ok("GET", loc+"/volumes/vol1", nil)
	if v["zone"] != "n2" || v["state"] != "READY" || v["stateDetails"] != nil {
		t.Fatalf("volume once its node is back: zone %v, state %v, details %v", v["zone"], v["state"], v["stateDetails"])
	}
}

// basin nodes drain and undrain: the owner marks a node drained and back,
// idempotently; a node whose storage no other node reaches cannot be drained;
// an unknown node is 404; the nodes list shows what is drained and which node
// serves whose volumes. A volume of a DOWN node that another node serves
// reads READY, naming the node serving it; ERROR once that node is DOWN too.
func TestDrainNode(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Cluster, o.NodeID = true, "n1" })
	now := time.Now().UTC()
	put := func(fn func(tx store.Tx) error) {
		t.Helper()
		if err := e.st.Update(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	}
	put(func(tx store.Tx) error {
		for _, n := range []*model.Node{
			{ID: "n1", SharedStorage: "ceph:x/fs/g", HeartbeatTime: now},
			{ID: "n2", SharedStorage: "ceph:x/fs/g", HeartbeatTime: now.Add(-2 * model.NodeDownAfter)},
			{ID: "n3", HeartbeatTime: now},
		} {
			if err := tx.Put(store.KindNode, n.ID, "", n); err != nil {
				return err
			}
		}
		return putVolumeOn(tx, "n2", now)
	})
	for range 2 { // idempotent
		n := e.ok("POST", "/v1/nodes/n1:drain", nil)
		if n["nodeId"] != "n1" || n["drained"] != true {
			t.Fatalf("drain: %v", n)
		}
	}
	if r := e.fails("POST", "/v1/nodes/n3:drain", nil, http.StatusBadRequest, "FAILED_PRECONDITION"); !strings.Contains(r.raw, "own disk") {
		t.Fatalf("drain of a node with storage of its own: %s", r.raw)
	}
	if r := e.fails("POST", "/v1/nodes/nope:drain", nil, http.StatusNotFound, "NOT_FOUND"); !strings.Contains(r.raw, `node \"nope\" not found`) {
		t.Fatalf("drain of an unknown node: %s", r.raw)
	}
	// n2 is lost; n1 serves its volumes.
	put(func(tx store.Tx) error {
		return tx.Put(store.KindHosting, model.HostingName("default", "n2"), "", &model.Hosting{Network: "default", Home: "n2", Host: "n1", From: "n2",
			Released: true, Epoch: 1, Reason: model.HostingLost, Since: now})
	})
	nodes := e.ok("GET", "/v1/nodes", nil)["nodes"].([]any)
	n1, n2 := nodes[0].(map[string]any), nodes[1].(map[string]any)
	if n1["drained"] != true || fmt.Sprint(n1["serving"]) != "[default@n2]" || fmt.Sprint(n2["served"]) != "[default@n1]" || n2["drained"] != nil {
		t.Fatalf("nodes: %v", nodes)
	}
	// A move waiting for its release shows as moving on both nodes, and
	// served or serving on neither.
	put(func(tx store.Tx) error {
		return tx.Put(store.KindHosting, model.HostingName("other", "n1"), "", &model.Hosting{Network: "other", Home: "n1", Host: "n2", From: "n1",
			Epoch: 1, Reason: model.HostingDrained, Since: now})
	})
	nodes = e.ok("GET", "/v1/nodes", nil)["nodes"].([]any)
	n1, n2 = nodes[0].(map[string]any), nodes[1].(map[string]any)
	if fmt.Sprint(n1["moving"]) != "[other@n1]" || fmt.Sprint(n2["moving"]) != "[other@n1]" || fmt.Sprint(n2["serving"]) != "<nil>" {
		t.Fatalf("nodes with a move under way: %v", nodes)
	}
	time.Sleep(1100 * time.Millisecond) // the node cache's second
	v := e.ok("GET", loc+"/volumes/vol1", nil)
	if v["state"] != "READY" || !strings.Contains(fmt.Sprint(v["stateDetails"]), "served by node n1") || !strings.Contains(fmt.Sprint(v["stateDetails"]), "node n2 was lost") {
		t.Fatalf("volume of a lost node served by another: state %v, details %v", v["state"], v["stateDetails"])
	}
	put(func(tx store.Tx) error {
		return tx.Put(store.KindNode, "n1", "", &model.Node{ID: "n1", SharedStorage: "ceph:x/fs/g", HeartbeatTime: now.Add(-2 * model.NodeDownAfter)})
	})
	time.Sleep(1100 * time.Millisecond)
	v = e.ok("GET", loc+"/volumes/vol1", nil)
	if v["state"] != "ERROR" || !strings.Contains(fmt.Sprint(v["stateDetails"]), "node n1") {
		t.Fatalf("volume whose serving node is DOWN: state %v, details %v", v["state"], v["stateDetails"])
	}
	for range 2 {
		if n := e.ok("POST", "/v1/nodes/n1:undrain", nil); n["drained"] != nil {
			t.Fatalf("undrain: %v", n)
		}
	}
}

// putVolumeOn stores a READY NFS volume vol1 (and its pool) placed on node.
func putVolumeOn(tx store.Tx, node string, now time.Time) error {
	p := &model.Pool{Meta: model.Meta{Project: "p1", Location: "us-east4", ID: "pool1", State: model.StateReady, CreateTime: now},
		ServiceLevel: model.LevelPremium, CapacityGib: 100, Network: "projects/p1/global/networks/default"}
	if err := store.PutPool(tx, p); err != nil {
		return err
	}
	return store.PutVolume(tx, &model.Volume{Meta: model.Meta{Project: "p1", Location: "us-east4", ID: "vol1", State: model.StateReady, CreateTime: now},
		ShareName: "vol1", StoragePool: "pool1", CapacityGib: 1, Protocols: []model.Protocol{model.ProtocolNFSv3}, Network: "default",
		Endpoint: "10.99.0.10", Node: node, Key: "kvol1"})
}
