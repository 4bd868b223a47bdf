package api

import "testing"

// TestSwitchPool: :switch swaps a pool's zone and replicaZone (upstream's "switch
// the active/replica zone"), answering the pool through its operation; a pool
// without a replica zone is refused, a missing one is not found, and a busy one
// waits its turn like any update.
func TestSwitchPool(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, map[string]any{"zone": "us-east4-a", "replicaZone": "us-east4-b"})
	got := e.run("POST", loc+"/storagePools/pool1:switch", map[string]any{})
	if got["zone"] != "us-east4-b" || got["replicaZone"] != "us-east4-a" {
		t.Fatalf("switch answered %v", got)
	}
	p := e.ok("GET", loc+"/storagePools/pool1", nil)
	if p["zone"] != "us-east4-b" || p["replicaZone"] != "us-east4-a" || p["state"] != "READY" {
		t.Fatalf("after switch: %v", p)
	}
	e.run("POST", loc+"/storagePools/pool1:switch", map[string]any{})
	if p := e.ok("GET", loc+"/storagePools/pool1", nil); p["zone"] != "us-east4-a" || p["replicaZone"] != "us-east4-b" {
		t.Fatalf("after switching back: %v", p)
	}

	e.pool("pool2", 100, nil)
	r := e.fails("POST", loc+"/storagePools/pool2:switch", map[string]any{}, 400, "FAILED_PRECONDITION")
	if msg := r.body["error"].(map[string]any)["message"]; msg != "storage pool pool2 has no replica zone to switch to" {
		t.Fatalf("message %q", msg)
	}
	e.fails("POST", loc+"/storagePools/nope:switch", map[string]any{}, 404, "NOT_FOUND")
}
