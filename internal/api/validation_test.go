package api

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func rule(extra map[string]any) map[string]any {
	r := map[string]any{"allowedClients": "10.0.0.0/8", "accessType": "READ_WRITE", "nfsv3": true}
	for k, v := range extra {
		r[k] = v
	}
	return map[string]any{"rules": []any{r}}
}

func TestExportRuleValidation(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	vol := func(policy map[string]any) map[string]any {
		return map[string]any{"shareName": "v1", "storagePool": "pool1", "capacityGib": 1, "protocols": []string{"NFSV3"}, "exportPolicy": policy}
	}
	for _, tc := range []struct {
		name  string
		rule  map[string]any
		field string
	}{
		{"mapped IPv6 prefix", map[string]any{"allowedClients": "::ffff:0.0.0.0/96"}, "exportPolicy.rules[0].allowedClients"},
		{"mapped IPv6 address", map[string]any{"allowedClients": "10.0.0.1,::ffff:10.0.0.1"}, "exportPolicy.rules[0].allowedClients"},
		{"mapped IPv6 narrow prefix", map[string]any{"allowedClients": "::ffff:10.0.0.0/120"}, "exportPolicy.rules[0].allowedClients"},
		{"IPv6 prefix", map[string]any{"allowedClients": "2001:db8::/32"}, "exportPolicy.rules[0].allowedClients"},
		{"root squash to root", map[string]any{"squashMode": "ROOT_SQUASH", "anonUid": 0}, "exportPolicy.rules[0].anonUid"},
		{"all squash to root", map[string]any{"squashMode": "ALL_SQUASH", "anonUid": "0"}, "exportPolicy.rules[0].anonUid"},
	} {
		r := e.fails("POST", loc+"/volumes?volumeId=v1", vol(rule(tc.rule)), 400, "INVALID_ARGUMENT")
		if !strings.Contains(r.raw, `"field":"`+tc.field+`"`) {
			t.Errorf("%s: error does not name %s: %s", tc.name, tc.field, r.raw)
		}
	}
	// What stays valid.
	e.volume("v1", "pool1", 1, map[string]any{"exportPolicy": rule(map[string]any{"allowedClients": "10.0.0.1, 192.168.0.0/16", "squashMode": "ROOT_SQUASH", "anonUid": 65534})})
	e.volume("v2", "pool1", 1, map[string]any{"exportPolicy": rule(map[string]any{"squashMode": "NO_ROOT_SQUASH", "anonUid": 0})})
}

func TestADFieldLimits(t *testing.T) {
	e := newEnv(t)
	const secretPw = "Do-Not-Echo-Me-Please"
	base := func(field string, v any) map[string]any {
		b := map[string]any{"domain": "corp.example.com", "dns": "10.0.0.2", "netBiosPrefix": "nas", "username": "admin", "password": "pw"}
		b[field] = v
		return b
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	many := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("CORP\\user%d", i))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		field string
		value any
	}{
		{"64 KiB password", "password", secretPw + long(64<<10)},
		{"password of 257 characters", "password", secretPw + long(257-len(secretPw))},
		{"password with a newline", "password", secretPw + "\n"},
		{"long domain", "domain", strings.Repeat(long(60)+".", 4) + long(10)}, // 254
		{"domain label over 63", "domain", long(64) + ".com"},
		{"domain with a space", "domain", "corp example.com"},
		{"long username", "username", long(257)},
		{"username with a newline", "username", "admin\nx"},
		{"long site", "site", long(64)},
		{"site with a newline", "site", "Default\n"},
		{"long OU", "organizationalUnit", "OU=" + long(1100)},
		{"too many DNS servers", "dns", strings.Repeat("10.0.0.2,", 8) + "10.0.0.2"},
		{"long kdc hostname", "kdcHostname", long(64) + ".corp.example.com"},
		{"too many administrators", "administrators", many(65)},
		{"long administrator", "administrators", []string{long(257)}},
		{"empty backup operator", "backupOperators", []string{""}},
		{"security operator with a comma", "securityOperators", []string{"a,b"}},
		{"administrator listed twice", "administrators", []string{"CORP\\alice", "corp\\ALICE"}},
		{"administrator like an option", "administrators", []string{"-Uroot"}},
		{"backup operator with two domains", "backupOperators", []string{`A\B\c`}},
		{"administrator with a percent", "administrators", []string{"%u"}},
		{"encrypted DC connections", "encryptDcConnections", true},
	} {
		r := e.fails("POST", loc+"/activeDirectories?activeDirectoryId=ad1", base(tc.field, tc.value), 400, "INVALID_ARGUMENT")
		if !strings.Contains(r.raw, `"field":"`+tc.field+`"`) {
			t.Errorf("%s: error does not name %s: %s", tc.name, tc.field, r.raw)
		}
		if strings.Contains(r.raw, secretPw) {
			t.Errorf("%s: the error echoes the password: %s", tc.name, r.raw)
		}
	}
	// Limits at their edge are accepted.
	ok := base("password", long(256))
	ok["username"], ok["site"], ok["kdcHostname"] = long(256), long(63), "kdc1.corp.example.com"
	ok["administrators"], ok["dns"] = many(64), strings.Repeat("10.0.0.2,", 7)+"10.0.0.3"
	e.run("POST", loc+"/activeDirectories?activeDirectoryId=ad1", ok)
	// Updates are held to the same limits, and echo nothing.
	r := e.fails("PATCH", loc+"/activeDirectories/ad1?updateMask=password", map[string]any{"password": secretPw + long(300)}, 400, "INVALID_ARGUMENT")
	if strings.Contains(r.raw, secretPw) || !strings.Contains(r.raw, `"field":"password"`) {
		t.Errorf("update: %s", r.raw)
	}
}

// orderBy names a field of the listed resource (nested paths and label keys as in
// filters); anything else is a 400 naming orderBy.
func TestOrderByKnownFields(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 1, nil)
	for _, tc := range []struct {
		path, order string
		ok          bool
	}{
		{loc + "/volumes", "name desc", true},
		{loc + "/volumes", "create_time desc, capacityGib", true},
		{loc + "/volumes", "labels.env", true},
		{loc + "/volumes", "exportPolicy.rules.allowedClients", true},
		{loc + "/volumes", "mountOptions.ipAddress", true},
		{loc + "/volumes", "nosuchfield", false},
		{loc + "/volumes", "name, nosuchfield desc", false},
		{loc + "/volumes", "exportPolicy.nope", false},
		{loc + "/volumes", "capacityGib.x", false},
		{loc + "/storagePools", "capacity_gib desc", true},
		{loc + "/storagePools", "shareName", false},
		{loc + "/volumes/vol1/snapshots", "createTime", true},
		{loc + "/volumes/vol1/snapshots", "capacityGib", false},
		{loc + "/activeDirectories", "domain", true},
		{loc + "/activeDirectories", "password", false},
		{loc + "/operations", "metadata.createTime desc", true},
		{loc + "/operations", "metadata.nope", false},
		{"/v1/projects/p1/locations", "locationId", true},
		{"/v1/projects/p1/locations", "nope", false},
		{"/v1/projects/p1/serviceAccounts", "email desc", true},
		{"/v1/projects/p1/serviceAccounts", "nope", false},
		{"/v1/projects/p1/auditLogs", "time desc", true},
		{"/v1/projects/p1/auditLogs", "nope", false},
	} {
		path := tc.path + "?orderBy=" + url.QueryEscape(tc.order)
		if tc.ok {
			e.ok("GET", path, nil)
			continue
		}
		r := e.fails("GET", path, nil, 400, "INVALID_ARGUMENT")
		if !strings.Contains(r.raw, `"field":"orderBy"`) {
			t.Errorf("%s: error does not name orderBy: %s", path, r.raw)
		}
	}
}
