package api

import (
	"strings"
	"testing"
)

// Kerberos volumes: NFSv4.1 volumes of a pool with an Active Directory
// policy, whose export rules admit krb5, krb5i and krb5p by their flags;
// everything else is refused naming the field.
func TestKerberosVolumeAPI(t *testing.T) {
	e := newEnv(t)
	for _, ad := range []string{"ad1", "ad2"} {
		e.run("POST", loc+"/activeDirectories?activeDirectoryId="+ad, map[string]any{"domain": "corp.example.com", "dns": "10.99.0.2",
			"netBiosPrefix": "nas", "username": "admin", "password": "pw"})
	}
	e.pool("krb", 100, map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/ad1"})
	e.pool("krb2", 100, map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/ad2"})
	e.pool("plain", 100, nil)
	rule := func(flags ...string) map[string]any {
		r := map[string]any{"allowedClients": "10.99.0.0/24", "accessType": "READ_WRITE", "nfsv4": true}
		for _, f := range flags {
			r[f] = true
		}
		return r
	}
	krb := func(rules ...map[string]any) map[string]any {
		return map[string]any{"protocols": []string{"NFSV4"}, "kerberosEnabled": true, "exportPolicy": map[string]any{"rules": rules}}
	}
	got := e.volume("kv1", "krb", 1, krb(rule("kerberos5pReadWrite"), rule("kerberos5ReadOnly", "kerberos5iReadOnly")))
	if got["kerberosEnabled"] != true {
		t.Fatalf("kerberosEnabled not returned: %v", got)
	}
	rules := got["exportPolicy"].(map[string]any)["rules"].([]any)
	if r := rules[0].(map[string]any); r["kerberos5pReadWrite"] != true || r["kerberos5ReadWrite"] != nil {
		t.Fatalf("first rule: %v", r)
	}
	// Read-write wins over read-only for one flavor: no conflict.
	e.volume("kv2", "krb", 1, krb(rule("kerberos5ReadOnly", "kerberos5ReadWrite", "kerberos5iReadWrite")))
	// Dual protocol with SMB is a Kerberos volume too.
	e.volume("kv3", "krb", 1, map[string]any{"protocols": []string{"NFSV4", "SMB"}, "kerberosEnabled": true,
		"exportPolicy": map[string]any{"rules": []any{rule("kerberos5pReadOnly")}}})

	for _, tc := range []struct {
		name, pool string
		body       map[string]any
		status     int
		code, want string
	}{
		{"without an AD policy", "plain", krb(rule("kerberos5pReadWrite")), 400, "FAILED_PRECONDITION", "kerberosEnabled: Kerberos volumes need a storage pool with an Active Directory policy"},
		{"NFSv3", "krb", map[string]any{"protocols": []string{"NFSV3", "NFSV4"}, "kerberosEnabled": true}, 400, "INVALID_ARGUMENT", "kerberosEnabled"},
		{"SMB only", "krb", map[string]any{"protocols": []string{"SMB"}, "kerberosEnabled": true}, 400, "INVALID_ARGUMENT", "kerberosEnabled"},
		{"flags without kerberosEnabled", "krb", map[string]any{"protocols": []string{"NFSV4"},
			"exportPolicy": map[string]any{"rules": []any{rule("kerberos5iReadWrite")}}}, 400, "INVALID_ARGUMENT", "exportPolicy.rules[0].kerberos5iReadWrite"},
		{"read-write and read-only flavors", "krb", krb(rule("kerberos5pReadWrite"), rule("kerberos5ReadWrite", "kerberos5iReadOnly")),
			400, "INVALID_ARGUMENT", "exportPolicy.rules[1].kerberos5iReadOnly"},
		{"another policy on the network", "krb2", krb(rule("kerberos5pReadWrite")), 400, "FAILED_PRECONDITION", "share one policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"shareName": "x" + strings.ReplaceAll(tc.name, " ", ""), "storagePool": tc.pool, "capacityGib": 1}
			for k, v := range tc.body {
				body[k] = v
			}
			r := e.fails("POST", loc+"/volumes?volumeId=bad", body, tc.status, tc.code)
			if !strings.Contains(r.raw, tc.want) {
				t.Fatalf("error %s, want it to say %q", r.raw, tc.want)
			}
		})
	}
	// The pool's policy is its Kerberos volumes' identity: it cannot change
	// under them.
	r0 := e.fails("PATCH", loc+"/storagePools/krb?updateMask=activeDirectory",
		map[string]any{"activeDirectory": "projects/p1/locations/us-east4/activeDirectories/ad2"}, 400, "FAILED_PRECONDITION")
	if !strings.Contains(r0.raw, "activeDirectory cannot change") {
		t.Fatalf("policy change under Kerberos volumes: %s", r0.raw)
	}
	// kerberosEnabled is set at creation only.
	r := e.fails("PATCH", loc+"/volumes/kv1?updateMask=kerberosEnabled", map[string]any{"kerberosEnabled": false}, 400, "INVALID_ARGUMENT")
	if !strings.Contains(r.raw, "kerberosEnabled") {
		t.Fatalf("update of kerberosEnabled: %s", r.raw)
	}
}
