package api

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

func ids(list []any) []string {
	var out []string
	for _, it := range list {
		n := it.(map[string]any)["name"].(string)
		out = append(out, n[strings.LastIndex(n, "/")+1:])
	}
	return out
}

// collect pages through a list with the given query and returns every ID.
func (e *env) collect(path, field string, q url.Values) (all []string, pages int) {
	e.t.Helper()
	for {
		r := e.ok("GET", path+"?"+q.Encode(), nil)
		items, _ := r[field].([]any)
		all = append(all, ids(items)...)
		pages++
		next, _ := r["nextPageToken"].(string)
		if next == "" {
			return all, pages
		}
		q.Set("pageToken", next)
		if pages > 100 {
			e.t.Fatal("paging does not end")
		}
	}
}

func TestPagingFilterOrder(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 1000, nil)
	e.pool("pool2", 1000, map[string]any{"serviceLevel": "EXTREME"})
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("vol%02d", i)
		pool := "pool1"
		if i%2 == 1 {
			pool = "pool2"
		}
		e.volume(id, pool, 10+i, map[string]any{"labels": map[string]string{"parity": []string{"even", "odd"}[i%2]}})
		want = append(want, id)
	}
	got, pages := e.collect(loc+"/volumes", "volumes", url.Values{"pageSize": {"3"}})
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("paged list = %v in %d pages", got, pages)
	}
	got, _ = e.collect(loc+"/volumes", "volumes", url.Values{"pageSize": {"2"}, "orderBy": {"name desc"}})
	rev := slices.Clone(want)
	slices.Reverse(rev)
	if !slices.Equal(got, rev) {
		t.Fatalf("name desc = %v", got)
	}
	got, _ = e.collect(loc+"/volumes", "volumes", url.Values{"orderBy": {"capacity_gib desc"}})
	if got[0] != "vol06" || got[6] != "vol00" {
		t.Fatalf("capacity desc = %v", got)
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{`labels.parity = "odd"`, []string{"vol01", "vol03", "vol05"}},
		{`storagePool = pool1 AND capacityGib > 12`, []string{"vol04", "vol06"}},
		{`storage_pool=pool2 OR capacityGib<=10`, []string{"vol00", "vol01", "vol03", "vol05"}},
		{`NOT serviceLevel = PREMIUM`, []string{"vol01", "vol03", "vol05"}},
		{`-(labels.parity = even)`, []string{"vol01", "vol03", "vol05"}},
		{`state = READY labels.parity=even capacityGib < 14`, []string{"vol00", "vol02"}},
		{`labels:parity`, want},
		{`labels:missing`, nil},
		{`shareName = "vol0*"`, want},
		{`name = "projects/p1/locations/us-east4/volumes/vol03"`, []string{"vol03"}},
		{`protocols = NFSV3`, want},
		{`kerberosEnabled = true`, nil},
		{`kerberosEnabled = false`, want},
	} {
		got, _ := e.collect(loc+"/volumes", "volumes", url.Values{"filter": {tc.filter}, "pageSize": {"2"}})
		if !slices.Equal(got, tc.want) {
			t.Errorf("filter %q = %v, want %v", tc.filter, got, tc.want)
		}
	}
	// Tokens are bound to their query.
	r := e.ok("GET", loc+"/volumes?pageSize=2", nil)
	tok := r["nextPageToken"].(string)
	e.fails("GET", loc+"/volumes?pageSize=2&filter=state%3DREADY&pageToken="+tok, nil, 400, "INVALID_ARGUMENT")
	e.fails("GET", loc+"/storagePools?pageToken="+tok, nil, 400, "INVALID_ARGUMENT")
	// Tokens are stable under inserts and deletes: the next page resumes after the
	// last item seen, skipping nothing that still exists.
	e.run("DELETE", loc+"/volumes/vol00", nil)
	e.volume("vol005", "pool1", 1, nil) // sorts before the cursor: not in later pages
	r = e.ok("GET", loc+"/volumes?pageSize=2&pageToken="+tok, nil)
	if got := ids(r["volumes"].([]any)); !slices.Equal(got, []string{"vol02", "vol03"}) {
		t.Fatalf("page after concurrent changes = %v", got)
	}
	// Listing across locations with "-".
	if got, _ := e.collect("/v1/projects/p1/locations/-/volumes", "volumes", url.Values{}); len(got) != 7 {
		t.Fatalf("wildcard list = %v", got)
	}
	// pageSize above 1000 is clamped, not refused.
	e.ok("GET", loc+"/volumes?pageSize=5000", nil)
}

func TestOperations(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	list := e.ok("GET", loc+"/operations", nil)["operations"].([]any)
	if len(list) != 2 {
		t.Fatalf("operations = %v", list)
	}
	newest := list[0].(map[string]any)
	if newest["metadata"].(map[string]any)["target"] != "projects/p1/locations/us-east4/volumes/vol1" {
		t.Fatalf("operations not newest first: %v", list)
	}
	if got := e.ok("GET", loc+"/operations?filter=done%3Dfalse", nil)["operations"]; got != nil {
		t.Fatalf("done=false should be empty: %v", got)
	}
	if got := e.ok("GET", loc+"/operations?filter=done%3Dtrue", nil)["operations"].([]any); len(got) != 2 {
		t.Fatalf("done=true = %v", got)
	}
	// Deleting an operation removes the record, never the resource.
	id := ids([]any{newest})[0]
	if r := e.ok("DELETE", loc+"/operations/"+id, nil); len(r) != 0 {
		t.Fatalf("delete answered %v, want {}", r)
	}
	e.fails("GET", loc+"/operations/"+id, nil, 404, "NOT_FOUND")
	e.ok("GET", loc+"/volumes/vol1", nil)
	// Cancelling a finished operation is a harmless no-op.
	other := ids([]any{list[1]})[0]
	e.ok("POST", loc+"/operations/"+other+":cancel", map[string]any{})
	if op := e.ok("GET", loc+"/operations/"+other, nil); op["error"] != nil || op["response"] == nil {
		t.Fatalf("cancel changed a finished operation: %v", op)
	}
}

func TestCancelVolumeCreateRollsBack(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.SyncWait = time.Millisecond })
	e.pool("pool1", 100, nil)
	release := e.be.Block("Mount") // the create stops just before mounting
	op := e.ok("POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": 10, "protocols": []string{"NFSV3"}})
	if op["done"] == true {
		t.Fatal("operation finished before the gate")
	}
	waitFor(t, func() bool { return e.be.CallCount("Mount") > 0 })
	if v := e.ok("GET", loc+"/volumes/vol1", nil); v["state"] != "CREATING" {
		t.Fatalf("state while creating = %v", v["state"])
	}
	e.fails("DELETE", loc+"/operations/"+ids([]any{op})[0], nil, 400, "FAILED_PRECONDITION")
	e.ok("POST", "/v1/"+op["name"].(string)+":cancel", map[string]any{})
	release()
	op = e.wait(op)
	errObj, _ := op["error"].(map[string]any)
	if errObj["code"] != 1.0 || op["metadata"].(map[string]any)["requestedCancellation"] != true {
		t.Fatalf("cancelled operation = %v", op)
	}
	if _, has := errObj["status"]; has {
		t.Fatal("operation error must not carry a status string (strict parsers)")
	}
	e.fails("GET", loc+"/volumes/vol1", nil, 404, "NOT_FOUND")
	if st := e.be.State(); len(st.Volumes) != 0 || len(st.Sizes) != 0 {
		t.Fatalf("cancelled create left storage: %+v", st)
	}
	if ex := e.dp.Exports(); len(ex) != 0 {
		t.Fatalf("cancelled create left exports loaded: %v", ex)
	}
	// The ID (and the share name) is free again.
	e.volume("vol1", "pool1", 10, nil)
}

func TestBusyResourceRefusesSecondOperation(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.SyncWait = time.Millisecond })
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	release := e.be.Block("Resize")
	op := e.ok("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 20})
	waitFor(t, func() bool { return e.be.CallCount("Resize") > 0 })
	e.fails("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": 30}, 400, "FAILED_PRECONDITION")
	e.fails("DELETE", loc+"/volumes/vol1", nil, 400, "FAILED_PRECONDITION")
	e.fails("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", nil, 400, "FAILED_PRECONDITION")
	release()
	if op = e.wait(op); op["error"] != nil {
		t.Fatalf("update failed: %v", op)
	}
}

func TestFailedCreateIsCleanedUp(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.be.Fail("Mount", fmt.Errorf("mount: device busy"))
	op := e.wait(e.ok("POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": 10, "protocols": []string{"NFSV3"}}))
	errObj, _ := op["error"].(map[string]any)
	// The cause stays in the server log; the caller learns the step and the operation.
	if msg, _ := errObj["message"].(string); errObj["code"] != 13.0 || strings.Contains(msg, "device busy") || !strings.Contains(msg, `"mount"`) {
		t.Fatalf("failed operation = %v", op)
	}
	e.fails("GET", loc+"/volumes/vol1", nil, 404, "NOT_FOUND")
	if st := e.be.State(); len(st.Volumes) != 0 || len(st.Sizes) != 0 {
		t.Fatalf("failed create left storage: %+v", st)
	}
	e.be.Fail("Mount", nil)
	e.volume("vol1", "pool1", 10, nil)
}

func TestActiveDirectory(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cret-Passw0rd"
	ad := e.run("POST", loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "corp.example.com", "dns": "10.0.0.2,10.0.0.3",
		"netBiosPrefix": "nas", "username": "admin", "password": secret, "aesEncryption": true})
	if ad["state"] != "READY" || ad["domain"] != "corp.example.com" {
		t.Fatalf("ad = %v", ad)
	}
	e.pool("pool1", 100, map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/ad1"})
	for _, path := range []string{loc + "/activeDirectories/ad1", loc + "/activeDirectories", loc + "/operations"} {
		if r := e.do("GET", path, nil); strings.Contains(r.raw, secret) || strings.Contains(r.raw, "password") {
			t.Fatalf("GET %s leaks the password: %s", path, r.raw)
		}
	}
	if got := e.ok("GET", loc+"/activeDirectories/ad1", nil)["state"]; got != "IN_USE" {
		t.Fatalf("referenced AD state = %v, want IN_USE", got)
	}
	e.fails("DELETE", loc+"/activeDirectories/ad1", nil, 400, "FAILED_PRECONDITION")
	// SMB volumes are allowed in a pool with an AD.
	e.volume("smb1", "pool1", 10, map[string]any{"protocols": []string{"SMB"}})
	if v := e.ok("GET", loc+"/volumes/smb1", nil); v["securityStyle"] != "NTFS" || v["activeDirectory"] != "projects/p1/locations/us-east4/activeDirectories/ad1" {
		t.Fatalf("smb volume = %v", v)
	}
	// A volume's root starts open to everyone where NT ACLs decide (SMB-only
	// and NTFS volumes: Everyone, Full control, as the services make it), and
	// 0770 where mode bits do.
	e.volume("ntfs1", "pool1", 10, map[string]any{"protocols": []string{"SMB", "NFSV3"}, "securityStyle": "NTFS"})
	e.volume("unix1", "pool1", 10, map[string]any{"protocols": []string{"SMB", "NFSV3"}})
	for id, want := range map[string][2]string{"smb1": {"NTFS", "0777"}, "ntfs1": {"NTFS", "0777"}, "unix1": {"UNIX", "0770"}} {
		if v := e.ok("GET", loc+"/volumes/"+id, nil); v["securityStyle"] != want[0] || v["unixPermissions"] != want[1] {
			t.Errorf("volume %s: securityStyle %v, unixPermissions %v; want %v", id, v["securityStyle"], v["unixPermissions"], want)
		}
	}
	// Their mode is theirs to change only where mode bits decide; on the
	// others Windows ACLs do (a chmod would make Samba drop them).
	for _, id := range []string{"smb1", "ntfs1"} {
		if r := e.fails("PATCH", loc+"/volumes/"+id+"?updateMask=unixPermissions", map[string]any{"unixPermissions": "0700"}, 400, "INVALID_ARGUMENT"); !strings.Contains(r.raw, "unixPermissions") {
			t.Errorf("PATCH %s unixPermissions: %s, want the field named", id, r.raw)
		}
	}
	// The same mode written otherwise is no change (a client sending back
	// what it read, in its own notation).
	e.run("PATCH", loc+"/volumes/ntfs1?updateMask=unixPermissions", map[string]any{"unixPermissions": "777"})
	e.run("PATCH", loc+"/volumes/unix1?updateMask=unixPermissions", map[string]any{"unixPermissions": "0750"})
	// Continuously available shares keep locks and caching from NFS clients:
	// SMB-only volumes alone.
	if r := e.fails("POST", loc+"/volumes?volumeId=ca1", map[string]any{"shareName": "ca1", "storagePool": "pool1", "capacityGib": "10",
		"protocols": []string{"SMB", "NFSV3"}, "smbSettings": []string{"CONTINUOUSLY_AVAILABLE"}}, 400, "INVALID_ARGUMENT"); !strings.Contains(r.raw, "smbSettings") {
		t.Errorf("a dual-protocol CA volume: %s, want smbSettings named", r.raw)
	}
	e.volume("ca2", "pool1", 10, map[string]any{"protocols": []string{"SMB"}, "smbSettings": []string{"CONTINUOUSLY_AVAILABLE"}})
	e.run("PATCH", loc+"/activeDirectories/ad1?updateMask=site", map[string]any{"site": "s1"})
	if got := e.ok("GET", loc+"/activeDirectories/ad1", nil)["site"]; got != "s1" {
		t.Fatalf("site = %v", got)
	}
}

func TestLocations(t *testing.T) {
	e := newEnv(t)
	r := e.ok("GET", "/v1/projects/p1/locations", nil)
	if got := ids(r["locations"].([]any)); !slices.Equal(got, []string{"us-east4", "us-west1"}) {
		t.Fatalf("locations = %v", got)
	}
	l := e.ok("GET", "/v1/projects/p1/locations/us-west1", nil)
	if l["locationId"] != "us-west1" || l["metadata"].(map[string]any)["@type"] != "type.googleapis.com/google.cloud.netapp.v1.LocationMetadata" {
		t.Fatalf("location = %v", l)
	}
}

func TestHealthAndReady(t *testing.T) {
	ready := false
	e := newEnv(t, func(o *Options) { o.Ready = func() bool { return ready } })
	if r := e.probe("/healthz"); r.status != 200 || r.raw != "ok\n" || r.header.Get("X-Request-Id") == "" {
		t.Fatalf("healthz = %d %q %v", r.status, r.raw, r.header)
	}
	if r := e.probe("/readyz"); r.status != 503 {
		t.Fatalf("readyz before ready = %d", r.status)
	}
	ready = true
	if r := e.probe("/readyz"); r.status != 200 || r.raw != "ready\n" {
		t.Fatalf("readyz = %d %q", r.status, r.raw)
	}
	// The API serves /v1/ only; the probes are handlers of their own.
	if r := e.do("GET", "/healthz", nil); r.status != 404 {
		t.Fatalf("API /healthz = %d", r.status)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEndpoints(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Networks = []model.Network{{Name: "default", Prefix: netip.MustParsePrefix("10.99.0.0/24")},
			{Name: "tiny", Prefix: netip.MustParsePrefix("10.99.7.0/28")},
			{Name: "ranged", Prefix: netip.MustParsePrefix("10.99.8.0/24"), FirstEndpoint: netip.MustParseAddr("10.99.8.200"), LastEndpoint: netip.MustParseAddr("10.99.8.201")}}
	})
	e.pool("pool1", 100, nil)
	e.pool("small", 100, map[string]any{"network": "projects/p1/global/networks/tiny"})
	ip := func(v map[string]any) string {
		mo, _ := v["mountOptions"].([]any)
		if len(mo) == 0 {
			t.Fatalf("no mountOptions: %v", v)
		}
		return mo[0].(map[string]any)["ipAddress"].(string)
	}
	var got []string
	for _, id := range []string{"a", "b", "c"} {
		got = append(got, ip(e.volume(id, "pool1", 1, nil)))
	}
	if !slices.Equal(got, []string{"10.99.0.10", "10.99.0.11", "10.99.0.12"}) {
		t.Fatalf("endpoints = %v", got)
	}
	// Addresses are released on delete and the lowest free one is reused.
	e.run("DELETE", loc+"/volumes/b", nil)
	if a := ip(e.volume("d", "pool1", 1, nil)); a != "10.99.0.11" {
		t.Fatalf("after delete: %s", a)
	}
	v := e.volume("v4", "pool1", 1, map[string]any{"protocols": []string{"NFSV3", "NFSV4"}})
	mo := v["mountOptions"].([]any)
	m3, m4 := mo[0].(map[string]any), mo[1].(map[string]any)
	if m3["protocol"] != "NFSV3" || m4["protocol"] != "NFSV4" || m3["exportFull"] != "10.99.0.13:/v4" || m3["export"] != "/v4" ||
		!strings.Contains(m3["instructions"].(string), "vers=3") || !strings.Contains(m4["instructions"].(string), "vers=4.1") {
		t.Fatalf("mountOptions = %v", mo)
	}
	// A /28 without a range has endpoints .2 to .7 (its lower half, after the
	// host's address): six volumes, then a clear error.
	var tiny []string
	for i := range 6 {
		tiny = append(tiny, ip(e.volume(fmt.Sprintf("t%d", i), "small", 1, nil)))
	}
	if tiny[0] != "10.99.7.2" || tiny[5] != "10.99.7.7" {
		t.Fatalf("endpoints in a /28: %v", tiny)
	}
	r := e.fails("POST", loc+"/volumes?volumeId=t6", map[string]any{"shareName": "t6", "storagePool": "small", "capacityGib": 1, "protocols": []string{"NFSV3"}}, 400, "FAILED_PRECONDITION")
	if !strings.Contains(r.raw, "no free endpoint") {
		t.Fatalf("exhausted network: %s", r.raw)
	}
	// A configured range is kept to, ends included.
	e.pool("rpool", 100, map[string]any{"network": "projects/p1/global/networks/ranged"})
	if a, b := ip(e.volume("r0", "rpool", 1, nil)), ip(e.volume("r1", "rpool", 1, nil)); a != "10.99.8.200" || b != "10.99.8.201" {
		t.Fatalf("endpoints in 10.99.8.200-10.99.8.201: %s, %s", a, b)
	}
	r = e.fails("POST", loc+"/volumes?volumeId=r2", map[string]any{"shareName": "r2", "storagePool": "rpool", "capacityGib": 1, "protocols": []string{"NFSV3"}}, 400, "FAILED_PRECONDITION")
	if !strings.Contains(r.raw, "10.99.8.200-10.99.8.201") {
		t.Fatalf("exhausted range: %s", r.raw)
	}
	if n := e.count("volumes"); n != 12 {
		t.Fatalf("%d volumes, want 12 (nothing half-created)", n)
	}
	// A volume cannot move to a pool on another network.
	e.fails("PATCH", loc+"/volumes/a?updateMask=storagePool", map[string]any{"storagePool": "small"}, 400, "FAILED_PRECONDITION")
}

func TestExportsFollowVolumes(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	rule := func(clients, access string, v3, v4 bool, root string) map[string]any {
		return map[string]any{"allowedClients": clients, "accessType": access, "nfsv3": v3, "nfsv4": v4, "hasRootAccess": root}
	}
	e.volume("vol1", "pool1", 10, map[string]any{"protocols": []string{"NFSV3", "NFSV4"}, "exportPolicy": map[string]any{"rules": []any{
		rule("10.99.0.101", "READ_WRITE", true, true, "true"),
		rule("10.99.0.0/24", "READ_ONLY", true, false, "false"),
		map[string]any{"allowedClients": "10.99.0.200", "accessType": "READ_WRITE", "nfsv4": true, "squashMode": "ALL_SQUASH", "anonUid": "4242"},
	}}})
	rec := e.volumeRecord("vol1")
	ex, ok := e.dp.Exports()[rec.ExportID]
	if !ok {
		t.Fatalf("volume not exported: %v", e.dp.Exports())
	}
	if ex.Network != "default" || ex.Addr.String() != "10.99.0.10" || ex.Export.Pseudo != "/vol1" || ex.Export.Path != "/fake/mounts/"+rec.Key {
		t.Fatalf("export = %+v", ex)
	}
	cl := ex.Export.Clients
	if len(cl) != 3 || cl[0].Access != "RW" || cl[0].Squash != "No_Root_Squash" || cl[1].Access != "RO" || cl[1].Squash != "Root_Squash" ||
		!slices.Equal(cl[1].Protocols, []int{3}) || cl[2].Squash != "All_Squash" || cl[2].AnonUID != 4242 || !slices.Equal(cl[2].Protocols, []int{4}) {
		t.Fatalf("clients = %+v", cl)
	}
	// A policy change reaches the export; the volume keeps its endpoint.
	e.run("PATCH", loc+"/volumes/vol1?updateMask=exportPolicy", map[string]any{"exportPolicy": map[string]any{"rules": []any{rule("10.99.0.102", "READ_ONLY", true, true, "true")}}})
	if cl := e.dp.Exports()[rec.ExportID].Export.Clients; len(cl) != 1 || cl[0].Clients[0] != "10.99.0.102" {
		t.Fatalf("after update: %+v", cl)
	}
	// No policy: exported, but nobody matches.
	e.volume("closed", "pool1", 1, nil)
	if ex := e.dp.Exports()[e.volumeRecord("closed").ExportID]; len(ex.Export.Clients) != 0 {
		t.Fatalf("a volume without a policy lets clients in: %+v", ex)
	}
	// Revert unexports before swapping and exports again after.
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", nil)
	before := len(e.dp.History())
	e.run("POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "s1"})
	if h := e.dp.History()[before:]; !slices.Equal(h, []string{"unexport /vol1", "export /vol1"}) {
		t.Fatalf("revert export history = %v", h)
	}
	e.run("DELETE", loc+"/volumes/vol1?force=true", nil)
	if _, ok := e.dp.Exports()[rec.ExportID]; ok {
		t.Fatal("deleted volume still exported")
	}
}

func TestSnapshotDirectoryExports(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, map[string]any{"snapshotDirectory": true, "protocols": []string{"NFSV3", "NFSV4"},
		"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.99.0.0/24", "accessType": "READ_WRITE", "nfsv3": true, "nfsv4": true}}}})
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s2", nil)
	pseudos := func() []string {
		var out []string
		for _, x := range e.dp.Exports() {
			out = append(out, x.Export.Pseudo)
		}
		slices.Sort(out)
		return out
	}
	if got := pseudos(); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1", "/vol1/.snapshot/s2"}) {
		t.Fatalf("exports = %v", got)
	}
	for _, x := range e.dp.Exports() {
		if strings.Contains(x.Export.Pseudo, ".snapshot") && (x.Export.Clients[0].Access != "RO" || x.Addr.String() != "10.99.0.10") {
			t.Fatalf("snapshot export is not read-only on the volume's endpoint: %+v", x)
		}
	}
	key := e.volumeRecord("vol1").Key
	if got := e.be.State().SnapshotMounts; !slices.Equal(got, []string{key + "@s1", key + "@s2"}) {
		t.Fatalf("snapshot mounts = %v", got)
	}
	// Reverting to s1 deletes s2 and its export.
	e.run("POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "s1"})
	if got := pseudos(); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1"}) {
		t.Fatalf("after revert = %v", got)
	}
	e.run("DELETE", loc+"/volumes/vol1/snapshots/s1", nil)
	if got := pseudos(); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot"}) {
		t.Fatalf("after snapshot delete = %v", got)
	}
	// Turning the directory off takes snapshot exports down; deleting the volume,
	// everything.
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s3", nil)
	e.run("PATCH", loc+"/volumes/vol1?updateMask=snapshotDirectory", map[string]any{"snapshotDirectory": false})
	if got := pseudos(); !slices.Equal(got, []string{"/vol1"}) || len(e.be.State().SnapshotMounts) != 0 || len(e.be.State().SnapshotDirs) != 0 {
		t.Fatalf("snapshotDirectory off: %v %v %v", got, e.be.State().SnapshotMounts, e.be.State().SnapshotDirs)
	}
	e.run("PATCH", loc+"/volumes/vol1?updateMask=snapshotDirectory", map[string]any{"snapshotDirectory": true})
	e.run("DELETE", loc+"/volumes/vol1?force=true", nil)
	if got := pseudos(); len(got) != 0 || len(e.be.State().SnapshotMounts) != 0 || len(e.be.State().SnapshotDirs) != 0 {
		t.Fatalf("after delete: %v %v %v", got, e.be.State().SnapshotMounts, e.be.State().SnapshotDirs)
	}
}
