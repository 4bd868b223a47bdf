package api

import (
	"errors"
	"strings"
	"testing"
)

func withCapacity(c Capacity, ratio float64) envOpt {
	return func(o *Options) {
		o.Capacity, o.OvercommitRatio = c, ratio
	}
}

func (e *env) count(collection string) int {
	e.t.Helper()
	l, _ := e.ok("GET", loc+"/"+collection, nil)[collection].([]any)
	return len(l)
}

// Σ pool capacity on the node may not exceed ratio × the store's size, across every
// project and location.
func TestOvercommitGuard(t *testing.T) {
	c := newFakeCapacity(6, 6)
	e := newEnv(t, withCapacity(c, 1.0))
	body := func(gib int) map[string]any {
		return map[string]any{"serviceLevel": "PREMIUM", "capacityGib": gib, "network": "projects/p1/global/networks/default"}
	}
	r := e.fails("POST", loc+"/storagePools?storagePoolId=huge", body(100000), 400, "FAILED_PRECONDITION")
	if msg := errMessage(r); !strings.Contains(msg, "capacityGib") || !strings.Contains(msg, "6 GiB") {
		t.Errorf("refusal does not name the field and the store size: %s", msg)
	}
	e.pool("pool1", 3, nil)
	e.run("POST", "/v1/projects/p2/locations/us-west1/storagePools?storagePoolId=pool2", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 2, "network": "projects/p2/global/networks/default"})
	e.fails("POST", loc+"/storagePools?storagePoolId=pool3", body(2), 400, "FAILED_PRECONDITION") // 3+2+2 > 6
	e.fails("PATCH", loc+"/storagePools/pool1?updateMask=capacityGib", map[string]any{"capacityGib": 5}, 400, "FAILED_PRECONDITION")
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=capacityGib", map[string]any{"capacityGib": 4}) // 4+2 = 6
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=capacityGib", map[string]any{"capacityGib": 1}) // shrinking is always fine
	e.pool("pool3", 3, nil)                                                                            // 1+2+3 = 6
	if n := e.count("storagePools"); n != 2 {
		t.Fatalf("%d pools in p1, want 2 (nothing half-created)", n)
	}

	// A ratio above 1 lets pools promise more than the store holds.
	c2 := newFakeCapacity(6, 6)
	e2 := newEnv(t, withCapacity(c2, 2.5))
	e2.pool("pool1", 15, nil)
	e2.fails("POST", loc+"/storagePools?storagePoolId=pool2", body(1), 400, "FAILED_PRECONDITION")
}

// Volume creates, clones and growths need the store to have room for them; a
// snapshot needs none (it lives in its volume's space), nor what frees space.
func TestStoreRoom(t *testing.T) {
	c := newFakeCapacity(100, 50)
	e := newEnv(t, withCapacity(c, 1.0))
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	c.set(func(c *fakeCapacity) { c.free = 3 << 30 }) // room for 3 GiB more
	src := "projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"
	for name, call := range map[string]struct {
		method, path string
		body         any
	}{
		"volume create": {"POST", loc + "/volumes?volumeId=vol2", map[string]any{"shareName": "vol2", "storagePool": "pool1", "capacityGib": 4, "protocols": []string{"NFSV3"}}},
		"clone":         {"POST", loc + "/volumes?volumeId=clone1", map[string]any{"shareName": "clone1", "storagePool": "pool1", "capacityGib": 10, "protocols": []string{"NFSV3"}, "restoreParameters": map[string]any{"sourceSnapshot": src}}},
		"grow":          {"PATCH", loc + "/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 14}},
	} {
		r := e.fails(call.method, call.path, call.body, 400, "FAILED_PRECONDITION")
		if msg := errMessage(r); !strings.Contains(msg, "capacityGib") || !strings.Contains(msg, "3 GiB") {
			t.Errorf("%s: refusal does not name the field and the room left: %s", name, msg)
		}
	}
	// What fits, frees space or takes none still works.
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s2", map[string]any{})
	e.run("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 13})
	e.run("PATCH", loc+"/volumes/vol1?updateMask=description", map[string]any{"description": "d"})
	e.run("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 9})
	e.run("DELETE", loc+"/volumes/vol1/snapshots/s1", nil)
	if n := e.count("volumes"); n != 1 {
		t.Fatalf("%d volumes, want 1 (nothing half-created)", n)
	}
	e.volume("vol2", "pool1", 3, nil)
}

// thinCapacity is a store that provisions thin: a new volume takes at most 1 GiB.
type thinCapacity struct{ *fakeCapacity }

func (thinCapacity) Allocation(capacity int64) int64 { return min(capacity, 1<<30) }

// With thin provisioning a volume takes only what its filesystem starts with.
func TestStoreRoomThin(t *testing.T) {
	c := newFakeCapacity(100, 2)
	e := newEnv(t, withCapacity(thinCapacity{c}, 4))
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 50, nil) // takes 1 GiB of the 2 free
	e.run("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 60})
	c.set(func(c *fakeCapacity) { c.free = 512 << 20 })
	e.fails("POST", loc+"/volumes?volumeId=vol2", map[string]any{"shareName": "vol2", "storagePool": "pool1", "capacityGib": 5, "protocols": []string{"NFSV3"}}, 400, "FAILED_PRECONDITION")
}

// A shrink reads the volume's usage fresh: the stored usedGib may be stale.
func TestShrinkBelowFreshUsage(t *testing.T) {
	c := newFakeCapacity(100, 50)
	e := newEnv(t, withCapacity(c, 1.0))
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 50, nil)
	key := e.volumeRecord("vol1").Key
	c.set(func(c *fakeCapacity) { c.used[key] = 30 << 30 }) // the store's view; UsedBytes in the record is still 0
	r := e.fails("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 20}, 400, "FAILED_PRECONDITION")
	if msg := errMessage(r); !strings.Contains(msg, "capacityGib") || !strings.Contains(msg, "30 GiB") {
		t.Errorf("refusal: %s", msg)
	}
	if v := e.ok("GET", loc+"/volumes/vol1", nil); v["capacityGib"] != "50" || v["state"] != "READY" {
		t.Fatalf("refused shrink changed the volume: %v", v)
	}
	e.run("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 30})
}

// When the store cannot be read, changes that need it fail safely: a generic 500,
// nothing written.
func TestCapacityUnreadable(t *testing.T) {
	c := newFakeCapacity(100, 50)
	e := newEnv(t, withCapacity(c, 1.0))
	e.pool("pool1", 10, nil)
	c.set(func(c *fakeCapacity) {
		c.err = errors.New("btrfs filesystem usage /var/lib/basin/store: exit status 1")
	})
	r := e.fails("POST", loc+"/storagePools?storagePoolId=pool2", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 1, "network": "projects/p1/global/networks/default"}, 500, "INTERNAL")
	if strings.Contains(r.raw, "btrfs") || strings.Contains(r.raw, "/var/lib") {
		t.Errorf("internal cause reaches the user: %s", r.raw)
	}
	e.fails("POST", loc+"/volumes?volumeId=v1", map[string]any{"shareName": "v1", "storagePool": "pool1", "capacityGib": 1, "protocols": []string{"NFSV3"}}, 500, "INTERNAL")
	if e.count("storagePools") != 1 || e.count("volumes") != 0 {
		t.Fatal("something was created")
	}
	// Changes that need no space reading still work.
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=description", map[string]any{"description": "d"})
}
