package api

import (
	"strings"
	"testing"
)

// errMessage returns an error answer's message.
func errMessage(r resp) string {
	e, _ := r.body["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

const adBody = `{"domain":"corp.example.com","dns":"10.0.0.2","netBiosPrefix":"nas","username":"admin","password":"pw"}`

// A reference to another project's (or location's) resource is refused with the same
// answer whether that resource exists or not: no existence oracle across projects.
func TestReferencesStayInTheCallersProject(t *testing.T) {
	e := newEnv(t)
	other := "/v1/projects/p2/locations/us-east4"
	e.run("POST", other+"/activeDirectories?activeDirectoryId=ad1", adBody)
	e.run("POST", "/v1/projects/p1/locations/us-west1/activeDirectories?activeDirectoryId=ad1", adBody)
	e.run("POST", loc+"/activeDirectories?activeDirectoryId=mine", adBody)

	pool := func(id, ad string) map[string]any {
		return map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10", "network": "projects/p1/global/networks/default", "activeDirectory": ad}
	}
	foreign := map[string]string{
		"other project, exists":   "projects/p2/locations/us-east4/activeDirectories/ad1",
		"other project, missing":  "projects/p2/locations/us-east4/activeDirectories/ad2",
		"other location, exists":  "projects/p1/locations/us-west1/activeDirectories/ad1",
		"other location, missing": "projects/p1/locations/us-west1/activeDirectories/ad2",
		"unknown project":         "projects/p3/locations/us-east4/activeDirectories/ad1",
		"not a name":              "activeDirectories/ad1",
		"trailing segments":       "projects/p1/locations/us-east4/activeDirectories/mine/x",
	}
	var first string
	for name, ref := range foreign {
		r := e.fails("POST", loc+"/storagePools?storagePoolId=px", pool("px", ref), 400, "INVALID_ARGUMENT")
		msg := errMessage(r)
		if !strings.Contains(msg, "activeDirectory") {
			t.Errorf("%s: message does not name the field: %s", name, msg)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("%s: message %q differs from %q: it tells foreign resources apart", name, msg, first)
		}
	}
	r := e.fails("POST", loc+"/storagePools?storagePoolId=px", pool("px", "projects/p1/locations/us-east4/activeDirectories/nope"), 400, "INVALID_ARGUMENT")
	if !strings.Contains(errMessage(r), "does not exist") {
		t.Errorf("same-project missing AD: %s", r.raw)
	}

	// Updates that set or change activeDirectory are checked the same way.
	e.pool("pool1", 10, nil)
	for name, ref := range foreign {
		r := e.fails("PATCH", loc+"/storagePools/pool1?updateMask=activeDirectory", map[string]any{"activeDirectory": ref}, 400, "INVALID_ARGUMENT")
		if msg := errMessage(r); msg != first {
			t.Errorf("update, %s: %q, want %q", name, msg, first)
		}
	}
	e.fails("PATCH", loc+"/storagePools/pool1?updateMask=activeDirectory", map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/nope"}, 400, "INVALID_ARGUMENT")
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=activeDirectory", map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/mine"})

	// A policy a pool uses cannot be deleted; the answer names the pool.
	r = e.fails("DELETE", loc+"/activeDirectories/mine", nil, 400, "FAILED_PRECONDITION")
	if !strings.Contains(errMessage(r), "pool1") {
		t.Errorf("AD delete refusal does not name the pool: %s", r.raw)
	}
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=activeDirectory", map[string]any{"activeDirectory": ""})
	e.run("DELETE", loc+"/activeDirectories/mine", nil)

	// Nothing half-created.
	if n := len(e.ok("GET", loc+"/storagePools", nil)["storagePools"].([]any)); n != 1 {
		t.Fatalf("%d pools, want 1", n)
	}
}

func TestCloneSourceStaysInTheCallersProject(t *testing.T) {
	e := newEnv(t)
	other := "/v1/projects/p2/locations/us-east4"
	e.run("POST", other+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100", "network": "projects/p2/global/networks/default"})
	e.run("POST", other+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "10", "protocols": []string{"NFSV3"}})
	e.run("POST", other+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	e.pool("pool1", 100, nil)
	clone := func(src string) map[string]any {
		return map[string]any{"shareName": "c1", "storagePool": "pool1", "capacityGib": "10", "protocols": []string{"NFSV3"},
			"restoreParameters": map[string]any{"sourceSnapshot": src}}
	}
	var first string
	for _, src := range []string{
		"projects/p2/locations/us-east4/volumes/vol1/snapshots/s1",
		"projects/p2/locations/us-east4/volumes/vol1/snapshots/s2",
		"projects/p3/locations/us-east4/volumes/vol1/snapshots/s1",
		"projects/p1/locations/us-west1/volumes/vol1/snapshots/s1",
	} {
		r := e.fails("POST", loc+"/volumes?volumeId=c1", clone(src), 400, "INVALID_ARGUMENT")
		msg := errMessage(r)
		if !strings.Contains(msg, "restoreParameters.sourceSnapshot") {
			t.Errorf("%s: message does not name the field: %s", src, msg)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("%s: message %q differs from %q", src, msg, first)
		}
	}
	r := e.fails("POST", loc+"/volumes?volumeId=c1", clone("projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"), 400, "INVALID_ARGUMENT")
	if !strings.Contains(errMessage(r), "does not exist") {
		t.Errorf("same-project missing snapshot: %s", r.raw)
	}
}

// Networks are the node's, offered to every project under that project's own name:
// projects/{caller}/global/networks/{n}. Another project's name is refused with one
// answer whatever the network.
func TestNetworkReferenceIsTheCallersProject(t *testing.T) {
	e := newEnv(t)
	var first string
	for _, n := range []string{"projects/p2/global/networks/default", "projects/p2/global/networks/elsewhere", "projects/p3/global/networks/default"} {
		r := e.fails("POST", loc+"/storagePools?storagePoolId=px", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10", "network": n}, 400, "INVALID_ARGUMENT")
		msg := errMessage(r)
		if !strings.Contains(msg, "network") {
			t.Errorf("%s: message does not name the field: %s", n, msg)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("%s: message %q differs from %q", n, msg, first)
		}
	}
	e.pool("pool1", 10, nil)
}

// A bare network name (gcloud's --network=name=default) and a bare Active Directory
// ID (--active-directory=ad1) mean the caller's own; both are stored and answered in
// the long form, and an update that repeats the short form changes nothing.
func TestShortNames(t *testing.T) {
	e := newEnv(t)
	e.run("POST", loc+"/activeDirectories?activeDirectoryId=mine", adBody)
	const longNet, longAD = "projects/p1/global/networks/default", "projects/p1/locations/us-east4/activeDirectories/mine"
	p := e.run("POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10",
		"network": "default", "activeDirectory": "mine"})
	if p["network"] != longNet || p["activeDirectory"] != longAD {
		t.Fatalf("created with short names: %v", p)
	}
	got := e.ok("GET", loc+"/storagePools/pool1", nil)
	if got["network"] != longNet || got["activeDirectory"] != longAD {
		t.Fatalf("read back: %v", got)
	}
	// No updateMask: the immutable network repeated in its short form is no change.
	got = e.run("PATCH", loc+"/storagePools/pool1", map[string]any{"network": "default", "activeDirectory": "mine", "description": "d"})
	if got["network"] != longNet || got["activeDirectory"] != longAD || got["description"] != "d" {
		t.Fatalf("updated: %v", got)
	}
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=activeDirectory", map[string]any{"activeDirectory": ""})
	got = e.run("PATCH", loc+"/storagePools/pool1?updateMask=activeDirectory", map[string]any{"activeDirectory": "mine"})
	if got["activeDirectory"] != longAD {
		t.Fatalf("activeDirectory set by ID: %v", got)
	}

	for name, tc := range map[string]struct {
		body map[string]any
		want string
	}{
		"unknown network": {map[string]any{"network": "elsewhere"}, `network "elsewhere" is not configured in this Basin (configured: default)`},
		"unknown policy":  {map[string]any{"network": "default", "activeDirectory": "nope"}, `Active Directory policy "nope" does not exist in projects/p1/locations/us-east4`},
	} {
		body := map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10"}
		for k, v := range tc.body {
			body[k] = v
		}
		r := e.fails("POST", loc+"/storagePools?storagePoolId=px", body, 400, "INVALID_ARGUMENT")
		if !strings.Contains(errMessage(r), tc.want) {
			t.Errorf("%s: %s", name, errMessage(r))
		}
	}
}
