package api

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/model"
)

// TestShareNamesPerNetwork: every project's NFS exports on a network share one
// Ganesha, whose export paths are /<shareName>: a name another project holds on
// the network is refused at once, with an answer that names neither the project
// nor its volume and reads the same whoever holds the name, and nothing is
// created. SMB shares are per project (a Samba instance per Active Directory
// policy) and only need to be unique in their location.
func TestShareNamesPerNetwork(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.Networks = []model.Network{{Name: "default", Prefix: netip.MustParsePrefix("10.99.0.0/24")},
			{Name: "other", Prefix: netip.MustParsePrefix("10.99.1.0/24")}}
	})
	locOf := func(p string) string { return "/v1/projects/" + p + "/locations/us-east4" }
	pool := func(p, id, network string, extra map[string]any) {
		t.Helper()
		body := map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100, "network": "projects/" + p + "/global/networks/" + network}
		for k, v := range extra {
			body[k] = v
		}
		e.run("POST", locOf(p)+"/storagePools?storagePoolId="+id, body)
	}
	vol := func(p, id, share, pool string, protocols ...string) map[string]any {
		return map[string]any{"shareName": share, "storagePool": pool, "capacityGib": 1, "protocols": protocols}
	}
	for _, p := range []string{"p1", "p2", "p3"} {
		pool(p, "pool1", "default", nil)
		e.run("POST", locOf(p)+"/activeDirectories?activeDirectoryId=ad1", adBody)
		pool(p, "smb", "default", map[string]any{"activeDirectory": "projects/" + p + "/locations/us-east4/activeDirectories/ad1"})
	}
	e.run("POST", locOf("p1")+"/volumes?volumeId=secretvol", vol("p1", "secretvol", "data", "pool1", "NFSV3"))
	e.run("POST", locOf("p3")+"/volumes?volumeId=p3vol", vol("p3", "p3vol", "home", "pool1", "NFSV4"))
	ops := len(e.ok("GET", locOf("p2")+"/operations", nil)["operations"].([]any))

	// p2 cannot take p1's or p3's names on the network, whatever their case or
	// protocol; the answers tell it nothing of who holds them.
	var first string
	for _, tc := range []struct{ share, proto string }{{"data", "NFSV3"}, {"DATA", "NFSV4"}, {"home", "NFSV3"}, {"Home", "NFSV4"}} {
		r := e.fails("POST", locOf("p2")+"/volumes?volumeId=mine", vol("p2", "mine", tc.share, "pool1", tc.proto), 409, "ALREADY_EXISTS")
		msg := errMessage(r)
		for _, leak := range []string{"p1", "p3", "secretvol", "p3vol", "project", "volumes/"} {
			if strings.Contains(msg, leak) {
				t.Errorf("shareName %s: the answer names %q: %s", tc.share, leak, msg)
			}
		}
		if !strings.Contains(msg, "shareName") {
			t.Errorf("shareName %s: the answer does not name the field: %s", tc.share, msg)
		}
		neutral := strings.ReplaceAll(msg, tc.share, "NAME")
		if first == "" {
			first = neutral
		} else if neutral != first {
			t.Errorf("answers differ by holder: %q vs %q", neutral, first)
		}
	}
	// Nothing was created: no volume, no operation, the name still p1's.
	if vs, _ := e.ok("GET", locOf("p2")+"/volumes", nil)["volumes"].([]any); len(vs) != 0 {
		t.Errorf("p2 has volumes after refused creates: %v", vs)
	}
	if n := len(e.ok("GET", locOf("p2")+"/operations", nil)["operations"].([]any)); n != ops {
		t.Errorf("p2 has %d operations after refused creates, had %d", n, ops)
	}
	if v := e.ok("GET", locOf("p1")+"/volumes/secretvol", nil); v["state"] != "READY" {
		t.Errorf("p1's volume: %v", v["state"])
	}

	// Another network has a Ganesha of its own: the name is free there.
	pool("p2", "elsewhere", "other", nil)
	e.run("POST", locOf("p2")+"/volumes?volumeId=mine", vol("p2", "mine", "data", "elsewhere", "NFSV3"))

	// SMB-only shares are per project: the same name in two projects, even
	// beside an NFS export of that name.
	e.run("POST", locOf("p1")+"/volumes?volumeId=win1", vol("p1", "win1", "docs", "smb", "SMB"))
	e.run("POST", locOf("p2")+"/volumes?volumeId=win2", vol("p2", "win2", "docs", "smb", "SMB"))
	e.run("POST", locOf("p3")+"/volumes?volumeId=nfsdocs", vol("p3", "nfsdocs", "docs", "pool1", "NFSV3"))
	// A dual-protocol volume is exported by Ganesha: the network's rule holds.
	e.fails("POST", locOf("p2")+"/volumes?volumeId=dual", vol("p2", "dual", "home", "smb", "SMB", "NFSV3"), 409, "ALREADY_EXISTS")

	// Within its own project a caller is told which volume holds the name, also in
	// another location on the same network.
	e.run("POST", "/v1/projects/p1/locations/us-west1/storagePools?storagePoolId=west", map[string]any{"serviceLevel": "PREMIUM",
		"capacityGib": 100, "network": "projects/p1/global/networks/default"})
	r := e.fails("POST", "/v1/projects/p1/locations/us-west1/volumes?volumeId=w", vol("p1", "w", "data", "west", "NFSV3"), 409, "ALREADY_EXISTS")
	if !strings.Contains(errMessage(r), "secretvol") {
		t.Errorf("the caller's own volume is not named: %s", errMessage(r))
	}

	// Once p1 deletes its volume, the name is free on the network.
	e.fails("POST", locOf("p3")+"/volumes?volumeId=now", vol("p3", "now", "data", "pool1", "NFSV3"), 409, "ALREADY_EXISTS")
	e.run("DELETE", locOf("p1")+"/volumes/secretvol", nil)
	e.run("POST", locOf("p3")+"/volumes?volumeId=now", vol("p3", "now", "data", "pool1", "NFSV3"))
}
