package api

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/model"
)

// poolUse is what a pool reports of its volumes: volumeCapacityGib, volumeCount and
// availableThroughputMibps (MANUAL pools only; "" elsewhere).
func (e *env) poolUse(id string) (capGib string, count float64, avail any) {
	e.t.Helper()
	p := e.ok("GET", loc+"/storagePools/"+id, nil)
	c, _ := p["volumeCapacityGib"].(string)
	n, _ := p["volumeCount"].(float64)
	return c, n, p["availableThroughputMibps"]
}

// noThroughputFloor serves capacity × level exactly, however small the volume.
func noThroughputFloor(o *Options) {
	o.Limits = model.DefaultLimits()
	o.Limits.MinVolumeThroughput = 0
}

// A small AUTO volume's ceiling is the floor, not capacity × level.
func TestThroughputFloor(t *testing.T) {
	e := newEnv(t)
	e.pool("prem", 100, nil)
	e.pool("ext", 2048, map[string]any{"serviceLevel": "EXTREME"})
	if v := e.volume("small", "prem", 10, nil); v["throughputMibps"] != 4.0 { // 10 GiB × 64 MiB/s per TiB = 0.625
		t.Errorf("a 10 GiB PREMIUM volume shows %v MiB/s, want the floor, 4", v["throughputMibps"])
	}
	if v := e.volume("large", "ext", 1024, nil); v["throughputMibps"] != 128.0 {
		t.Errorf("a 1 TiB EXTREME volume shows %v MiB/s, want 128", v["throughputMibps"])
	}
}

// Moving a volume to another pool (updateMask=storagePool) is an update in place:
// the volume keeps its storage, endpoint and export, the pools' usage moves with it,
// and its throughput ceiling follows the new pool's service level.
func TestVolumeMoveBetweenPools(t *testing.T) {
	e := newEnv(t, noThroughputFloor)
	e.pool("prem", 100, nil)
	e.pool("ext", 100, map[string]any{"serviceLevel": "EXTREME"})
	v := e.volume("vol1", "prem", 10, map[string]any{"exportPolicy": map[string]any{"rules": []any{
		map[string]any{"allowedClients": "10.99.0.0/24", "accessType": "READ_WRITE", "nfsv3": true}}}})
	if v["serviceLevel"] != "PREMIUM" || v["throughputMibps"] != 0.625 { // 10 GiB × 64 MiB/s per TiB
		t.Fatalf("created: %v", v)
	}
	before := e.volumeRecord("vol1")
	if before.ExportID == 0 || before.Endpoint == "" {
		t.Fatalf("the volume has no export yet: %+v", before)
	}
	if err := e.be.WriteFile(before.Key, "data", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if c, n, _ := e.poolUse("prem"); c != "10" || n != 1 {
		t.Fatalf("prem before: %s GiB, %v volumes", c, n)
	}
	if c, n, _ := e.poolUse("ext"); c != "" || n != 0 {
		t.Fatalf("ext before: %s GiB, %v volumes", c, n)
	}
	ensures, history := e.be.CallCount("EnsureVolume"), len(e.dp.History())

	moved := e.run("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "ext"})
	if moved["storagePool"] != "ext" || moved["serviceLevel"] != "EXTREME" || moved["throughputMibps"] != 1.25 { // × 128
		t.Fatalf("moved: %v", moved)
	}
	if c, n, _ := e.poolUse("prem"); c != "" || n != 0 {
		t.Fatalf("prem after: %s GiB, %v volumes; want none", c, n)
	}
	if c, n, _ := e.poolUse("ext"); c != "10" || n != 1 {
		t.Fatalf("ext after: %s GiB, %v volumes", c, n)
	}
	after := e.volumeRecord("vol1")
	if after.Key != before.Key || after.Endpoint != before.Endpoint || after.ExportID != before.ExportID || after.Network != before.Network {
		t.Fatalf("the move changed the volume's identity: before %+v, after %+v", before, after)
	}
	if data, err := e.be.ReadFile(after.Key, "data"); err != nil || string(data) != "kept" {
		t.Fatalf("the volume's data after the move: %q, %v", data, err)
	}
	if n := e.be.CallCount("EnsureVolume"); n != ensures {
		t.Errorf("EnsureVolume called %d more times: the volume was re-created", n-ensures)
	}
	for _, h := range e.dp.History()[history:] {
		if strings.HasPrefix(h, "unexport") {
			t.Errorf("the move took the export down: %v", e.dp.History()[history:])
		}
	}
	if ex, ok := e.dp.Exports()[before.ExportID]; !ok || ex.Addr.String() != before.Endpoint {
		t.Errorf("export %d after the move: %+v, %v", before.ExportID, ex, ok)
	}

	// The target's capacity counts the volume: 95 GiB more does not fit in prem
	// once vol2 is there.
	e.volume("vol2", "prem", 95, nil)
	r := e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "prem"}, 400, "FAILED_PRECONDITION")
	if msg := errMessage(r); !strings.Contains(msg, "capacityGib") || !strings.Contains(msg, "prem") {
		t.Errorf("refusal %q does not name capacityGib and the pool", msg)
	}
	// A pool that does not exist.
	r = e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "nope"}, 400, "INVALID_ARGUMENT")
	if f := fieldViolation(r); f != "storagePool" {
		t.Errorf("unknown pool: field %q, want storagePool", f)
	}
	if c, n, _ := e.poolUse("ext"); c != "10" || n != 1 || e.volumeRecord("vol1").StoragePool != "ext" {
		t.Fatalf("a refused move changed something: ext %s GiB, %v volumes", c, n)
	}
	// And back, with a resize in the same update.
	e.run("DELETE", loc+"/volumes/vol2", nil)
	back := e.run("PATCH", loc+"/volumes/vol1?updateMask=storagePool,capacityGib", map[string]any{"storagePool": "prem", "capacityGib": 20})
	if back["storagePool"] != "prem" || back["serviceLevel"] != "PREMIUM" || back["throughputMibps"] != 1.25 { // 20 GiB × 64
		t.Fatalf("moved back: %v", back)
	}
	if c, _, _ := e.poolUse("prem"); c != "20" {
		t.Fatalf("prem after moving back: %s GiB", c)
	}
	if c, n, _ := e.poolUse("ext"); c != "" || n != 0 {
		t.Fatalf("ext after moving back: %s GiB, %v volumes", c, n)
	}
	if r := e.volumeRecord("vol1"); r.Key != before.Key || r.Endpoint != before.Endpoint || r.ExportID != before.ExportID {
		t.Fatalf("moving back changed the volume's identity: %+v", r)
	}
}

// A volume moves only within its network: its endpoint address belongs to it.
func TestVolumeMoveStaysOnItsNetwork(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Networks = []model.Network{{Name: "default", Prefix: netip.MustParsePrefix("10.99.0.0/24")},
			{Name: "other", Prefix: netip.MustParsePrefix("10.99.1.0/24")}}
	})
	e.pool("pool1", 100, nil)
	e.pool("far", 100, map[string]any{"network": "projects/p1/global/networks/other"})
	e.volume("vol1", "pool1", 10, nil)
	r := e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "far"}, 400, "FAILED_PRECONDITION")
	if msg := errMessage(r); !strings.HasPrefix(msg, "storagePool:") || !strings.Contains(msg, "other") || !strings.Contains(msg, "default") {
		t.Errorf("refusal %q does not name storagePool and both networks", msg)
	}
	if v := e.volumeRecord("vol1"); v.StoragePool != "pool1" || v.State != model.StateReady {
		t.Fatalf("a refused move changed the volume: %+v", v)
	}
}

// MANUAL QoS pools: a volume moving in brings a throughputMibps that fits the
// pool's budget; one moving out to an AUTO pool gets capacity × service level and
// gives its share back.
func TestVolumeMoveManualQoS(t *testing.T) {
	e := newEnv(t)
	// EXTREME 1 TiB: a budget of 128 MiB/s.
	e.pool("man", 1024, map[string]any{"serviceLevel": "EXTREME", "qosType": "MANUAL"})
	e.pool("man2", 1024, map[string]any{"serviceLevel": "EXTREME", "qosType": "MANUAL"})
	e.pool("auto", 1024, nil)
	e.volume("big", "man", 100, map[string]any{"throughputMibps": 100})
	e.volume("vol1", "auto", 256, nil)
	if _, _, avail := e.poolUse("man"); avail != 28.0 {
		t.Fatalf("man available before: %v", avail)
	}

	// AUTO → MANUAL without a throughput: required.
	r := e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "man"}, 400, "INVALID_ARGUMENT")
	if f := fieldViolation(r); f != "throughputMibps" {
		t.Errorf("no throughput: field %q, want throughputMibps", f)
	}
	// Over the budget: 100 + 50 > 128.
	r = e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool,throughputMibps", map[string]any{"storagePool": "man", "throughputMibps": 50}, 400, "FAILED_PRECONDITION")
	if msg := errMessage(r); !strings.HasPrefix(msg, "throughputMibps:") || !strings.Contains(msg, "28.00") {
		t.Errorf("over budget: %q does not name throughputMibps and what is left", msg)
	}
	if _, _, avail := e.poolUse("man"); avail != 28.0 || e.volumeRecord("vol1").StoragePool != "auto" {
		t.Fatalf("a refused move changed something: man available %v", avail)
	}
	// Within it.
	in := e.run("PATCH", loc+"/volumes/vol1?updateMask=storagePool,throughputMibps", map[string]any{"storagePool": "man", "throughputMibps": 20})
	if in["throughputMibps"] != 20.0 || in["storagePool"] != "man" {
		t.Fatalf("moved into man: %v", in)
	}
	if _, _, avail := e.poolUse("man"); avail != 8.0 {
		t.Fatalf("man available after the move in: %v, want 8", avail)
	}
	// MANUAL → MANUAL keeps the assignment and checks it against the new budget.
	e.run("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "man2"})
	if _, _, avail := e.poolUse("man2"); avail != 108.0 {
		t.Fatalf("man2 available: %v, want 108", avail)
	}
	if _, _, avail := e.poolUse("man"); avail != 28.0 {
		t.Fatalf("man available after the move out: %v, want 28", avail)
	}
	e.volume("big2", "man", 100, map[string]any{"throughputMibps": 20}) // man: 8 left, vol1 holds 20
	r = e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "man"}, 400, "FAILED_PRECONDITION")
	if msg := errMessage(r); !strings.HasPrefix(msg, "throughputMibps:") {
		t.Errorf("MANUAL → full MANUAL: %q does not name throughputMibps", msg)
	}
	// MANUAL → AUTO: capacity × level (256 GiB × Premium's 64 MiB/s per TiB), the
	// assignment dropped.
	out := e.run("PATCH", loc+"/volumes/vol1?updateMask=storagePool", map[string]any{"storagePool": "auto"})
	if out["throughputMibps"] != 16.0 || out["storagePool"] != "auto" {
		t.Fatalf("moved to auto: %v", out)
	}
	if v := e.volumeRecord("vol1"); v.ThroughputMibps != 0 {
		t.Fatalf("stored throughput in an AUTO pool: %v", v.ThroughputMibps)
	}
	if _, _, avail := e.poolUse("man2"); avail != 128.0 {
		t.Fatalf("man2 available after the move out: %v, want 128", avail)
	}
	// Setting a throughput while moving to an AUTO pool is still refused.
	e.run("PATCH", loc+"/volumes/vol1?updateMask=storagePool,throughputMibps", map[string]any{"storagePool": "man2", "throughputMibps": 30})
	r = e.fails("PATCH", loc+"/volumes/vol1?updateMask=storagePool,throughputMibps", map[string]any{"storagePool": "auto", "throughputMibps": 40}, 400, "INVALID_ARGUMENT")
	if f := fieldViolation(r); f != "throughputMibps" {
		t.Errorf("throughput set into an AUTO pool: field %q", f)
	}
}

// A volume read, changed and sent back whole (PATCH without updateMask) moves too:
// the throughputMibps it shows in an AUTO pool is its ceiling, not a setting.
func TestVolumeMoveRoundTrip(t *testing.T) {
	e := newEnv(t, noThroughputFloor)
	e.pool("prem", 100, nil)
	e.pool("ext", 100, map[string]any{"serviceLevel": "EXTREME"})
	e.pool("man", 1024, map[string]any{"serviceLevel": "EXTREME", "qosType": "MANUAL"})
	e.volume("vol1", "prem", 10, nil)
	body := e.ok("GET", loc+"/volumes/vol1", nil)
	if body["throughputMibps"] != 0.625 {
		t.Fatalf("shown: %v", body["throughputMibps"])
	}
	body["storagePool"], body["description"] = "ext", "moved"
	moved := e.run("PATCH", loc+"/volumes/vol1", body)
	if moved["storagePool"] != "ext" || moved["throughputMibps"] != 1.25 || moved["description"] != "moved" {
		t.Fatalf("moved: %v", moved)
	}
	// Into a MANUAL pool the shown value is taken as the assignment.
	body = e.ok("GET", loc+"/volumes/vol1", nil)
	body["storagePool"] = "man"
	in := e.run("PATCH", loc+"/volumes/vol1", body)
	if in["throughputMibps"] != 1.25 || e.volumeRecord("vol1").ThroughputMibps != 1.25 {
		t.Fatalf("into man: %v", in)
	}
	// A value other than the ceiling is still refused in an AUTO pool.
	body = e.ok("GET", loc+"/volumes/vol1", nil)
	body["storagePool"], body["throughputMibps"] = "prem", 3
	r := e.fails("PATCH", loc+"/volumes/vol1", body, 400, "INVALID_ARGUMENT")
	if f := fieldViolation(r); f != "throughputMibps" {
		t.Errorf("field %q, want throughputMibps", f)
	}
}
