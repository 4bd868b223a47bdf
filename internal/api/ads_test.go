package api

import (
	"context"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// A joined policy takes changes its running servers can apply (DNS, site, AES,
// administrators …); a new domain, NetBIOS prefix or OU would need leaving and
// joining again, and is refused naming the field, with nothing changed.
func TestUpdateJoinedAD(t *testing.T) {
	e := newEnv(t)
	e.run("POST", loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "corp.example.com", "dns": "10.99.0.2",
		"netBiosPrefix": "nas", "organizationalUnit": "OU=Basin", "username": "admin", "password": "pw"})
	name := "projects/p1/locations/us-east4/activeDirectories/ad1"
	// Not joined yet: anything may change.
	e.run("PATCH", loc+"/activeDirectories/ad1?updateMask=netBiosPrefix", map[string]any{"netBiosPrefix": "files"})
	// Joined on a network, as the controller records a join.
	if err := e.st.Update(context.Background(), func(tx store.Tx) error {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, name)
		if err != nil {
			return err
		}
		a.Members = map[string]string{"default": "FILES-1A2B"}
		return store.PutAD(tx, a)
	}); err != nil {
		t.Fatal(err)
	}
	for field, val := range map[string]any{"domain": "other.example.com", "netBiosPrefix": "nas2", "organizationalUnit": "OU=Other"} {
		r := e.fails("PATCH", loc+"/activeDirectories/ad1?updateMask="+field, map[string]any{field: val}, 400, "FAILED_PRECONDITION")
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.HasPrefix(msg, field+" cannot change") || !strings.Contains(msg, "default") {
			t.Errorf("%s: message %q, want it to name the field and the network", field, msg)
		}
	}
	// The domain's case is no change.
	e.run("PATCH", loc+"/activeDirectories/ad1?updateMask=domain,site,dns,aesEncryption,administrators", map[string]any{
		"domain": "CORP.example.com", "site": "Branch", "dns": "10.99.0.3", "aesEncryption": true, "administrators": []string{"Administrator"}})
	got := e.ok("GET", loc+"/activeDirectories/ad1", nil)
	if got["netBiosPrefix"] != "files" || got["organizationalUnit"] != "OU=Basin" || got["site"] != "Branch" || got["dns"] != "10.99.0.3" {
		t.Fatalf("policy after the updates: %v", got)
	}
}

// storagePools:validateDirectoryService is an operation on a pool with an Active
// Directory policy; other pools and other directory types are refused up front.
func TestValidateDirectoryServiceAPI(t *testing.T) {
	e := newEnv(t)
	e.run("POST", loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "corp.example.com", "dns": "10.99.0.2",
		"netBiosPrefix": "nas", "username": "admin", "password": "pw"})
	e.pool("smb", 100, map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/ad1"})
	e.pool("plain", 100, nil)
	r := e.fails("POST", loc+"/storagePools/plain:validateDirectoryService", map[string]any{"directoryServiceType": "ACTIVE_DIRECTORY"}, 400, "FAILED_PRECONDITION")
	if !strings.Contains(r.raw, "no Active Directory policy") {
		t.Errorf("pool without a policy: %s", r.raw)
	}
	r = e.fails("POST", loc+"/storagePools/smb:validateDirectoryService", map[string]any{"directoryServiceType": 7}, 400, "INVALID_ARGUMENT")
	if !strings.Contains(r.raw, "directoryServiceType") {
		t.Errorf("unknown type: %s", r.raw)
	}
	e.fails("POST", loc+"/storagePools/nope:validateDirectoryService", map[string]any{}, 404, "NOT_FOUND")
	// This server has no SMB data plane: the operation says so (the real check
	// runs in test/e2e TestSMBActiveDirectory), and the pool stays READY.
	for _, body := range []any{map[string]any{"directoryServiceType": 1}, map[string]any{}} {
		op := e.wait(e.ok("POST", loc+"/storagePools/smb:validateDirectoryService", body))
		meta := op["metadata"].(map[string]any)
		if meta["verb"] != "validateDirectoryService" || meta["target"] != "projects/p1/locations/us-east4/storagePools/smb" {
			t.Errorf("metadata %v", meta)
		}
		errObj, _ := op["error"].(map[string]any)
		if errObj == nil || errObj["code"].(float64) != 9 || !strings.Contains(errObj["message"].(string), "no SMB data plane") {
			t.Errorf("operation %v: want FAILED_PRECONDITION naming the missing SMB data plane", op)
		}
	}
	if st := e.ok("GET", loc+"/storagePools/smb", nil)["state"]; st != "READY" {
		t.Errorf("pool state %v after failed validations, want READY", st)
	}
}
