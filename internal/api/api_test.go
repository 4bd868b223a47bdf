package api

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/model"
)

func TestPoolVolumeSnapshotLifecycle(t *testing.T) {
	e := newEnv(t)
	p := e.pool("pool1", 2048, map[string]any{"labels": map[string]string{"env": "dev"}, "description": "d"})
	if p["state"] != "READY" || p["capacityGib"] != "2048" || p["encryptionType"] != "SERVICE_MANAGED" {
		t.Fatalf("pool response: %v", p)
	}
	v := e.volume("vol1", "pool1", 1024, map[string]any{"unixPermissions": "0755"})
	if v["state"] != "READY" || v["serviceLevel"] != "PREMIUM" || v["network"] != "projects/p1/global/networks/default" {
		t.Fatalf("volume response: %v", v)
	}
	// Premium: 64 MiB/s per TiB of volume capacity.
	if v["throughputMibps"] != 64.0 {
		t.Fatalf("throughputMibps = %v, want 64", v["throughputMibps"])
	}
	rec := e.volumeRecord("vol1")
	st := e.be.State()
	if mounted, ok := st.Volumes[rec.Key]; !ok || !mounted {
		t.Fatalf("volume storage not created and mounted: %+v", st)
	}
	if st.Sizes[rec.Key] != 1024<<30 {
		t.Fatalf("filesystem size = %d, want %d", st.Sizes[rec.Key], int64(1024)<<30)
	}
	if st.Modes[rec.Key] != 0o755 {
		t.Fatalf("mode = %o, want 755", st.Modes[rec.Key])
	}
	got := e.ok("GET", loc+"/storagePools/pool1", nil)
	if got["volumeCapacityGib"] != "1024" || got["volumeCount"] != 1.0 {
		t.Fatalf("pool aggregates: %v", got)
	}

	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{"description": "first"})
	if snaps := e.be.State().Snapshots[rec.Key]; !slices.Equal(snaps, []string{"s1"}) {
		t.Fatalf("snapshots in storage: %v", snaps)
	}
	// Resize: the filesystem follows.
	e.run("PATCH", loc+"/volumes/vol1?updateMask=capacityGib,description", map[string]any{"capacityGib": "1500", "description": "x"})
	if e.be.State().Sizes[rec.Key] != 1500<<30 {
		t.Fatal("resize did not change the filesystem size")
	}
	v = e.ok("GET", loc+"/volumes/vol1", nil)
	if v["capacityGib"] != "1500" || v["description"] != "x" || v["throughputMibps"] != 93.75 {
		t.Fatalf("after update: %v", v)
	}
	// Delete without force is refused while snapshots exist; nothing changes.
	e.fails("DELETE", loc+"/volumes/vol1", nil, 400, "FAILED_PRECONDITION")
	if e.ok("GET", loc+"/volumes/vol1", nil)["state"] != "READY" {
		t.Fatal("refused delete changed the volume")
	}
	e.fails("DELETE", loc+"/storagePools/pool1", nil, 400, "FAILED_PRECONDITION")
	op := e.wait(e.ok("DELETE", loc+"/volumes/vol1?force=true", nil))
	if r := op["response"].(map[string]any); len(r) != 1 || r["@type"] != "type.googleapis.com/google.protobuf.Empty" {
		t.Fatalf("delete response = %v, want Empty", r)
	}
	e.fails("GET", loc+"/volumes/vol1", nil, 404, "NOT_FOUND")
	if st := e.be.State(); len(st.Volumes) != 0 || len(st.Sizes) != 0 || len(st.Snapshots[rec.Key]) != 0 {
		t.Fatalf("storage left behind: %+v", st)
	}
	e.run("DELETE", loc+"/storagePools/pool1", nil)
	e.fails("GET", loc+"/storagePools/pool1", nil, 404, "NOT_FOUND")
}

func TestRevertDeletesNewerSnapshots(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	key := e.volumeRecord("vol1").Key
	for _, s := range []string{"s1", "s2", "s3"} {
		if err := e.be.WriteFile(key, "f", []byte("before "+s)); err != nil {
			t.Fatal(err)
		}
		e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId="+s, map[string]any{})
	}
	e.fails("POST", loc+"/volumes/vol1:revert", map[string]any{}, 400, "INVALID_ARGUMENT")
	e.fails("POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "nope"}, 404, "NOT_FOUND")
	v := e.run("POST", loc+"/volumes/vol1:revert", map[string]any{"snapshotId": "s2"})
	if v["state"] != "READY" {
		t.Fatalf("after revert: %v", v)
	}
	list := e.ok("GET", loc+"/volumes/vol1/snapshots", nil)
	var ids []string
	for _, s := range list["snapshots"].([]any) {
		ids = append(ids, s.(map[string]any)["name"].(string)[len("projects/p1/locations/us-east4/volumes/vol1/snapshots/"):])
	}
	if !slices.Equal(ids, []string{"s1", "s2"}) {
		t.Fatalf("snapshots after revert = %v, want [s1 s2]", ids)
	}
	rec := e.volumeRecord("vol1")
	st := e.be.State()
	if !slices.Equal(st.Snapshots[rec.Key], []string{"s1", "s2"}) || len(st.SetAside) != 0 {
		t.Fatalf("storage after revert: %+v", st)
	}
	if data, err := e.be.ReadFile(rec.Key, "f"); err != nil || string(data) != "before s2" || !st.Volumes[rec.Key] {
		t.Fatalf("live volume is not a mounted copy of s2: %q %v %+v", data, err, st)
	}
}

func TestClone(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	src := "projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"
	c := e.volume("clone1", "pool1", 20, map[string]any{"restoreParameters": map[string]any{"sourceSnapshot": src}})
	cd, _ := c["cloneDetails"].(map[string]any)
	if cd["sourceSnapshot"] != src || cd["sourceVolume"] != "projects/p1/locations/us-east4/volumes/vol1" {
		t.Fatalf("cloneDetails = %v", cd)
	}
	rec := e.volumeRecord("clone1")
	if got := e.be.State().Sources[rec.Key]; got.VolumeKey != e.volumeRecord("vol1").Key || got.Snapshot != "s1" {
		t.Fatalf("clone storage source = %+v", got)
	}
	// The clone needs free pool capacity: 10 + 20 used of 100.
	e.fails("POST", loc+"/volumes?volumeId=clone2", map[string]any{"shareName": "clone2", "storagePool": "pool1", "capacityGib": 71,
		"protocols": []string{"NFSV3"}, "restoreParameters": map[string]any{"sourceSnapshot": src}}, 400, "FAILED_PRECONDITION")
	e.fails("POST", loc+"/volumes?volumeId=clone3", map[string]any{"shareName": "clone3", "storagePool": "pool1", "capacityGib": 1,
		"protocols": []string{"NFSV3"}, "restoreParameters": map[string]any{"sourceSnapshot": src + "x"}}, 400, "INVALID_ARGUMENT")
}

// A clone the backend copies in the background (CephFS) is an operation that
// waits, its status saying so, until the copy is whole; being in progress is
// not a failed attempt (more askings than the controller's step attempts).
func TestCloneCopiedInBackground(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	src := "projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"
	e.be.CloneCalls = 6
	before := e.be.CallCount("EnsureVolume")
	c := e.volume("clone1", "pool1", 20, map[string]any{"restoreParameters": map[string]any{"sourceSnapshot": src}})
	if c["state"] != "READY" {
		t.Fatalf("clone: %v", c)
	}
	if n := e.be.CallCount("EnsureVolume") - before; n < 6 {
		t.Fatalf("the clone's copy was asked after %d calls, want at least 6", n)
	}
	if !e.be.State().Volumes[e.volumeRecord("clone1").Key] {
		t.Fatal("the clone is not mounted")
	}
}

func TestValidationErrors(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 50, nil)
	vol := func(id string, body map[string]any) (string, map[string]any) {
		b := map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "10", "protocols": []any{1}}
		for k, v := range body {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return loc + "/volumes?volumeId=" + id, b
	}
	cases := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		code   string
		field  string // expected in the message
	}{
		{"pool bad id", "POST", loc + "/storagePools?storagePoolId=1bad", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default"}, 400, "INVALID_ARGUMENT", "storagePoolId"},
		{"pool missing id", "POST", loc + "/storagePools", map[string]any{}, 400, "INVALID_ARGUMENT", "storagePoolId"},
		{"pool duplicate", "POST", loc + "/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default"}, 409, "ALREADY_EXISTS", "pool1"},
		{"pool bad enum", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": "GOLD", "capacityGib": "10", "network": "projects/p1/global/networks/default"}, 400, "INVALID_ARGUMENT", "serviceLevel"},
		{"pool enum out of range", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 9, "capacityGib": "10", "network": "projects/p1/global/networks/default"}, 400, "INVALID_ARGUMENT", "serviceLevel"},
		{"pool missing level", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"capacityGib": "10", "network": "projects/p1/global/networks/default"}, 400, "INVALID_ARGUMENT", "serviceLevel"},
		{"pool zero capacity", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 1, "network": "projects/p1/global/networks/default"}, 400, "INVALID_ARGUMENT", "capacityGib"},
		{"pool capacity not a number", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 1, "capacityGib": "ten", "network": "projects/p1/global/networks/default"}, 400, "INVALID_ARGUMENT", "capacityGib"},
		{"pool bad network", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "networks/default"}, 400, "INVALID_ARGUMENT", "network"},
		{"pool unconfigured network", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/elsewhere"}, 400, "INVALID_ARGUMENT", "not configured"},
		{"pool unknown AD", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default", "activeDirectory": "projects/p1/locations/us-east4/activeDirectories/x"}, 400, "INVALID_ARGUMENT", "activeDirectory"},
		{"pool kms", "POST", loc + "/storagePools?storagePoolId=p2", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default", "kmsConfig": "k"}, 400, "INVALID_ARGUMENT", "kmsConfig"},
		{"body not json", "POST", loc + "/storagePools?storagePoolId=p2", "{nope", 400, "INVALID_ARGUMENT", "JSON"},
		{"body array", "POST", loc + "/storagePools?storagePoolId=p2", "[1,2]", 400, "INVALID_ARGUMENT", "object"},
		{"volume below min", "POST", "", map[string]any{"capacityGib": "0"}, 400, "INVALID_ARGUMENT", "capacityGib"},
		{"volume above max", "POST", "", map[string]any{"capacityGib": fmt.Sprint(100*1024 + 1)}, 400, "INVALID_ARGUMENT", "capacityGib"},
		{"volume exceeds pool", "POST", "", map[string]any{"capacityGib": "51"}, 400, "FAILED_PRECONDITION", "capacityGib"},
		{"volume missing share", "POST", "", map[string]any{"shareName": nil}, 400, "INVALID_ARGUMENT", "shareName"},
		{"volume duplicate share", "POST", "", map[string]any{"shareName": "VOL1"}, 409, "ALREADY_EXISTS", "shareName"},
		{"volume missing pool", "POST", "", map[string]any{"storagePool": nil}, 400, "INVALID_ARGUMENT", "storagePool"},
		{"volume unknown pool", "POST", "", map[string]any{"storagePool": "nope"}, 400, "INVALID_ARGUMENT", "storagePool"},
		{"volume no protocols", "POST", "", map[string]any{"protocols": nil}, 400, "INVALID_ARGUMENT", "protocols"},
		{"volume bad protocols", "POST", "", map[string]any{"protocols": []string{"NFSV3", "NFSV4", "SMB"}}, 400, "INVALID_ARGUMENT", "protocols"},
		{"volume iscsi", "POST", "", map[string]any{"protocols": []string{"ISCSI"}}, 400, "INVALID_ARGUMENT", "protocols"},
		{"volume smb without AD", "POST", "", map[string]any{"protocols": []string{"SMB"}}, 400, "FAILED_PRECONDITION", "Active Directory"},
		{"volume bad permissions", "POST", "", map[string]any{"unixPermissions": "999"}, 400, "INVALID_ARGUMENT", "unixPermissions"},
		{"volume bad client", "POST", "", map[string]any{"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.0.0.300", "accessType": "READ_WRITE", "nfsv3": true}}}}, 400, "INVALID_ARGUMENT", "allowedClients"},
		{"volume rule no access", "POST", "", map[string]any{"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.0.0.1", "nfsv3": true}}}}, 400, "INVALID_ARGUMENT", "accessType"},
		{"volume rule no version", "POST", "", map[string]any{"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.0.0.1", "accessType": 2}}}}, 400, "INVALID_ARGUMENT", "nfsv3"},
		{"volume squash without uid", "POST", "", map[string]any{"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.0.0.0/8", "accessType": 2, "nfsv3": true, "squashMode": "ALL_SQUASH"}}}}, 400, "INVALID_ARGUMENT", "anonUid"},
		{"volume kerberos rule", "POST", "", map[string]any{"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.0.0.0/8", "accessType": 2, "nfsv3": true, "kerberos5ReadOnly": true}}}}, 400, "INVALID_ARGUMENT", "kerberos5ReadOnly"},
		{"volume kerberos without AD", "POST", "", map[string]any{"protocols": []string{"NFSV4"}, "kerberosEnabled": true}, 400, "FAILED_PRECONDITION", "Active Directory"},
		{"volume throughput in auto pool", "POST", "", map[string]any{"throughputMibps": 5}, 400, "INVALID_ARGUMENT", "throughputMibps"},
		{"volume unsupported cache", "POST", "", map[string]any{"cacheParameters": map[string]any{"peerVolumeName": "x"}}, 400, "INVALID_ARGUMENT", "cacheParameters"},
		{"volume snapshot hour", "POST", "", map[string]any{"snapshotPolicy": map[string]any{"dailySchedule": map[string]any{"hour": 24}}}, 400, "INVALID_ARGUMENT", "hour"},
		{"volume too many scheduled", "POST", "", map[string]any{"snapshotPolicy": map[string]any{"hourlySchedule": map[string]any{"snapshotsToKeep": 200}, "dailySchedule": map[string]any{"snapshotsToKeep": 56.0}}}, 400, "INVALID_ARGUMENT", "snapshotPolicy"},
		{"volume bad label", "POST", "", map[string]any{"labels": map[string]string{"Env": "x"}}, 400, "INVALID_ARGUMENT", "labels"},
		{"unknown location", "GET", "/v1/projects/p1/locations/mars/volumes", nil, 404, "NOT_FOUND", "mars"},
		{"bad project", "GET", "/v1/projects/a%20b/locations/us-east4/volumes", nil, 400, "INVALID_ARGUMENT", "project"},
		{"unknown collection", "GET", loc + "/widgets", nil, 404, "NOT_FOUND", "widgets"},
		{"get missing volume", "GET", loc + "/volumes/nope", nil, 404, "NOT_FOUND", "nope"},
		{"negative page size", "GET", loc + "/volumes?pageSize=-1", nil, 400, "INVALID_ARGUMENT", "pageSize"},
		{"bad filter", "GET", loc + "/volumes?filter=" + url.QueryEscape("state = (READY"), nil, 400, "INVALID_ARGUMENT", "filter"},
		{"bad order", "GET", loc + "/volumes?orderBy=" + url.QueryEscape("name sideways"), nil, 400, "INVALID_ARGUMENT", "orderBy"},
		{"bad page token", "GET", loc + "/volumes?pageToken=garbage", nil, 400, "INVALID_ARGUMENT", "pageToken"},
		{"restore unimplemented", "POST", loc + "/volumes/vol1:restore", map[string]any{}, 501, "UNIMPLEMENTED", "not implemented"},
		{"replications unimplemented", "GET", loc + "/volumes/vol1/replications", nil, 501, "UNIMPLEMENTED", "not implemented"},
		{"quota rules unimplemented", "GET", loc + "/volumes/vol1/quotaRules", nil, 501, "UNIMPLEMENTED", "not implemented"},
		{"split unimplemented", "GET", loc + "/volumes/vol1:getSplitStatus", nil, 501, "UNIMPLEMENTED", "not implemented"},
		{"backup config unimplemented", "POST", loc + "/storagePools/pool1:updateBackupConfig", map[string]any{}, 501, "UNIMPLEMENTED", "not implemented"},
		{"ontap unimplemented", "GET", loc + "/storagePools/pool1/ontap/api/x", nil, 501, "UNIMPLEMENTED", "not implemented"},
		{"backup vaults unimplemented", "GET", loc + "/backupVaults", nil, 501, "UNIMPLEMENTED", "not implemented"},
		{"switch without replica", "POST", loc + "/storagePools/pool1:switch", map[string]any{}, 400, "FAILED_PRECONDITION", "replica"},
		{"snapshot bad id", "POST", loc + "/volumes/vol1/snapshots?snapshotId=-x", map[string]any{}, 400, "INVALID_ARGUMENT", "snapshotId"},
		{"snapshot long description", "POST", loc + "/volumes/vol1/snapshots?snapshotId=s9", map[string]any{"description": strings.Repeat("d", 2049)}, 400, "INVALID_ARGUMENT", "description"},
		{"snapshot of missing volume", "POST", loc + "/volumes/nope/snapshots?snapshotId=s1", map[string]any{}, 404, "NOT_FOUND", "nope"},
		{"ad missing password", "POST", loc + "/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "corp.example.com", "dns": "10.0.0.2", "netBiosPrefix": "nas", "username": "admin"}, 400, "INVALID_ARGUMENT", "password"},
		{"ad bad dns", "POST", loc + "/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "c", "dns": "dns.example", "netBiosPrefix": "nas", "username": "a", "password": "p"}, 400, "INVALID_ARGUMENT", "dns"},
		{"ad long prefix", "POST", loc + "/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "c", "dns": "10.0.0.2", "netBiosPrefix": "waytoolongprefix", "username": "a", "password": "p"}, 400, "INVALID_ARGUMENT", "netBiosPrefix"},
		{"operation not found", "GET", loc + "/operations/nope", nil, 404, "NOT_FOUND", "nope"},
		{"list wildcard only for lists", "GET", "/v1/projects/p1/locations/-/volumes/vol1", nil, 400, "INVALID_ARGUMENT", "location"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			path, body := tc.path, tc.body
			if path == "" {
				path, body = vol("v"+strings.ReplaceAll(tc.name, " ", ""), tc.body.(map[string]any))
			}
			before := e.be.State()
			r := e.fails(tc.method, path, body, tc.status, tc.code)
			if !strings.Contains(r.raw, tc.field) {
				t.Fatalf("error does not name %q: %s", tc.field, r.raw)
			}
			if after := e.be.State(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("a refused request changed storage: %+v -> %+v", before, after)
			}
		})
	}
	// Nothing half-created: still one pool and one volume, and no stray operations.
	if n := len(e.ok("GET", loc+"/volumes", nil)["volumes"].([]any)); n != 1 {
		t.Fatalf("%d volumes after refused creates, want 1", n)
	}
	if n := len(e.ok("GET", loc+"/storagePools", nil)["storagePools"].([]any)); n != 1 {
		t.Fatalf("%d pools after refused creates, want 1", n)
	}
	if n := len(e.ok("GET", loc+"/operations", nil)["operations"].([]any)); n != 2 {
		t.Fatalf("%d operations, want the 2 successful creates", n)
	}
}

func TestSnapshotLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = model.DefaultLimits(); o.Limits.MaxSnapshotsPerVol = 2 })
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s2", nil)
	e.fails("POST", loc+"/volumes/vol1/snapshots?snapshotId=s3", nil, 400, "FAILED_PRECONDITION")
	e.fails("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", nil, 409, "ALREADY_EXISTS")
}

func TestPoolCapacityRules(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 60, nil)
	e.volume("vol2", "pool1", 40, nil)
	// Full: a third volume, a resize past the pool and a pool shrink are refused.
	e.fails("POST", loc+"/volumes?volumeId=vol3", map[string]any{"shareName": "vol3", "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}}, 400, "FAILED_PRECONDITION")
	e.fails("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": "61"}, 400, "FAILED_PRECONDITION")
	e.fails("PATCH", loc+"/storagePools/pool1?updateMask=capacityGib", map[string]any{"capacityGib": "99"}, 400, "FAILED_PRECONDITION")
	// Growing the pool makes room.
	e.run("PATCH", loc+"/storagePools/pool1?updateMask=capacityGib", map[string]any{"capacityGib": "200"})
	e.run("PATCH", loc+"/volumes/vol1?updateMask=capacityGib", map[string]any{"capacityGib": "160"})
	// Shrinking a volume below what it uses is refused.
	e.st.Update(t.Context(), func(tx storeTx) error { return setUsed(tx, "vol2", 30<<30) })
	e.fails("PATCH", loc+"/volumes/vol2?updateMask=capacityGib", map[string]any{"capacityGib": "20"}, 400, "FAILED_PRECONDITION")
}

func TestManualQoS(t *testing.T) {
	e := newEnv(t)
	// 2 TiB Extreme pool: budget 256 MiB/s.
	p := e.pool("pool1", 2048, map[string]any{"serviceLevel": "EXTREME", "qosType": "MANUAL"})
	if p["availableThroughputMibps"] != 256.0 {
		t.Fatalf("available = %v, want 256", p["availableThroughputMibps"])
	}
	e.fails("POST", loc+"/volumes?volumeId=v0", map[string]any{"shareName": "v0", "storagePool": "pool1", "capacityGib": "100", "protocols": []string{"NFSV3"}}, 400, "INVALID_ARGUMENT")
	v := e.volume("v1", "pool1", 100, map[string]any{"throughputMibps": 200})
	if v["throughputMibps"] != 200.0 {
		t.Fatalf("manual throughput = %v", v["throughputMibps"])
	}
	e.fails("POST", loc+"/volumes?volumeId=v2", map[string]any{"shareName": "v2", "storagePool": "pool1", "capacityGib": "100", "protocols": []string{"NFSV3"}, "throughputMibps": 57}, 400, "FAILED_PRECONDITION")
	e.volume("v2", "pool1", 100, map[string]any{"throughputMibps": 56})
	if got := e.ok("GET", loc+"/storagePools/pool1", nil)["availableThroughputMibps"]; got != nil {
		t.Fatalf("fully assigned pool reports available %v, want omitted (0)", got)
	}
	// The budget shrinks with the pool: 1 TiB = 128 MiB/s < 256 assigned.
	e.fails("PATCH", loc+"/storagePools/pool1?updateMask=capacityGib", map[string]any{"capacityGib": "1024"}, 400, "FAILED_PRECONDITION")

	// Switching an AUTO pool to MANUAL keeps each volume's throughput, and back.
	e.pool("auto", 2048, nil)
	e.volume("a1", "auto", 512, nil)
	e.run("PATCH", loc+"/storagePools/auto?updateMask=qosType", map[string]any{"qosType": "MANUAL"})
	if v := e.ok("GET", loc+"/volumes/a1", nil); v["throughputMibps"] != 32.0 {
		t.Fatalf("after AUTO→MANUAL: %v", v["throughputMibps"])
	}
	if p := e.ok("GET", loc+"/storagePools/auto", nil); p["availableThroughputMibps"] != 96.0 {
		t.Fatalf("available after switch: %v", p["availableThroughputMibps"])
	}
	e.run("PATCH", loc+"/volumes/a1?updateMask=throughputMibps", map[string]any{"throughputMibps": 100})
	e.run("PATCH", loc+"/storagePools/auto?updateMask=qosType", map[string]any{"qosType": "AUTO"})
	if v := e.ok("GET", loc+"/volumes/a1", nil); v["throughputMibps"] != 32.0 {
		t.Fatalf("after MANUAL→AUTO: %v", v["throughputMibps"])
	}
}

func TestServiceLevelThroughput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		level string
		pool  int
		vol   int
		want  float64
	}{
		{"STANDARD", 4096, 2048, 32},
		{"PREMIUM", 4096, 1500, 93.75},
		{"EXTREME", 8192, 4096, 512},
		{"FLEX", 2048, 100, 32}, // the pool's 16 MiB/s per TiB, shared
	} {
		id := strings.ToLower(tc.level)
		e.pool(id, tc.pool, map[string]any{"serviceLevel": tc.level})
		v := e.volume("v-"+id, id, tc.vol, nil)
		if v["throughputMibps"] != tc.want || v["serviceLevel"] != tc.level {
			t.Errorf("%s: throughput %v level %v, want %v", tc.level, v["throughputMibps"], v["serviceLevel"], tc.want)
		}
	}
}

func TestUpdateMask(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, map[string]any{"description": "a"})
	// snake_case paths and bodies work.
	e.run("PATCH", loc+"/volumes/vol1?update_mask=capacity_gib", map[string]any{"capacity_gib": "11"})
	if v := e.ok("GET", loc+"/volumes/vol1", nil); v["capacityGib"] != "11" || v["description"] != "a" {
		t.Fatalf("masked update changed more than the mask: %v", v)
	}
	// A mask applies only its paths: description in the body is ignored.
	e.run("PATCH", loc+"/volumes/vol1?updateMask=labels", map[string]any{"labels": map[string]string{"k": "v"}, "description": "ignored"})
	if v := e.ok("GET", loc+"/volumes/vol1", nil); v["description"] != "a" || v["labels"].(map[string]any)["k"] != "v" {
		t.Fatalf("mask not honoured: %v", v)
	}
	// Without a mask, the mutable fields present apply.
	e.run("PATCH", loc+"/volumes/vol1", map[string]any{"description": "b"})
	if v := e.ok("GET", loc+"/volumes/vol1", nil); v["description"] != "b" || v["capacityGib"] != "11" {
		t.Fatalf("maskless update: %v", v)
	}
	for _, tc := range []struct{ mask, body, want string }{
		{"shareName", `{"shareName":"x"}`, "immutable"},
		{"protocols", `{"protocols":[2]}`, "immutable"},
		{"state", `{}`, "output only"},
		{"noSuchField", `{}`, "unknown field"},
		{"", `{"protocols":["NFSV4"]}`, "immutable"},
		{"", `{"usedGib":"5"}`, "no updatable field"},
	} {
		path := loc + "/volumes/vol1"
		if tc.mask != "" {
			path += "?updateMask=" + tc.mask
		}
		r := e.fails("PATCH", path, tc.body, 400, "INVALID_ARGUMENT")
		if !strings.Contains(r.raw, tc.want) {
			t.Errorf("mask %q: %s does not say %q", tc.mask, r.raw, tc.want)
		}
	}
	e.fails("PATCH", loc+"/volumes/vol1?updateMask=description", `{"name":"projects/p1/locations/us-east4/volumes/other","description":"x"}`, 400, "INVALID_ARGUMENT")
	// Sending an immutable field unchanged is fine.
	e.run("PATCH", loc+"/volumes/vol1", `{"shareName":"vol1","description":"c"}`)
}
