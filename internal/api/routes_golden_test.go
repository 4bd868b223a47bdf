package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
)

// routingPaths are request paths around every route's edges: unknown paths, stray
// verbs, wrong depths, bad projects and locations, unimplemented collections.
func routingPaths() []string {
	const p = "/v1/projects/p1"
	paths := []string{"/", "/v1", "/v1/", "/v1/foo", "/v1/projects", p, p + ":getIamPolicy", p + ":setIamPolicy",
		p + ":testIamPermissions", p + ":foo", "/v1/projects/a%20b:getIamPolicy", "/v1/projects/a%20b/locations/us-east4/volumes",
		"/v1/projects//locations", p + "/foo", p + "/auditLogs", p + "/auditLogs:x", p + "/auditLogs/x",
		p + "/locations", p + "/locations:x", p + "/locations/us-east4:x", p + "/locations/mars", p + "/locations/-",
		p + "/locations/-:x", p + "/locations/mars/volumes", p + "/locations/-/backupVaults", p + "/locations/-/widgets",
		p + "/locations/-/volumes/nope", p + "/locations/-/volumes/nope/snapshots", p + "/locations/-/operations",
		loc, loc + "/", loc + ":foo"}
	sa := p + "/serviceAccounts"
	for _, s := range []string{"", ":x", "/", "/nope@p1.iam.basin.internal", "/nope@p1.iam.basin.internal:disable",
		"/nope@p1.iam.basin.internal:enable", "/nope@p1.iam.basin.internal:foo", "/nope@p1.iam.basin.internal/keys",
		"/nope@p1.iam.basin.internal/keys:x", "/nope@p1.iam.basin.internal/keys/k1", "/nope@p1.iam.basin.internal/keys/k1:x",
		"/nope@p1.iam.basin.internal/keys/k1/x", "/nope@p1.iam.basin.internal/x"} {
		paths = append(paths, sa+s)
	}
	for _, c := range []string{"storagePools", "volumes", "activeDirectories", "operations", "backupVaults", "backupPolicies",
		"kmsConfigs", "hostGroups", "widgets"} {
		for _, s := range []string{"", ":x", "/", "/nope", "/nope:x", "/nope/x", "/nope/x/y", "/BAD!"} {
			paths = append(paths, loc+"/"+c+s)
		}
	}
	for _, v := range []string{"switch", "validateDirectoryService", "restoreVolume", "updateBackupConfig"} {
		paths = append(paths, loc+"/storagePools/nope:"+v)
	}
	for _, s := range []string{"/backupConfigs", "/backupConfigs/x:y", "/ontap/a/b", "/ontap:x"} {
		paths = append(paths, loc+"/storagePools/nope"+s)
	}
	for _, v := range []string{"revert", "restore", "startSplit", "getSplitStatus", "establishPeering"} {
		paths = append(paths, loc+"/volumes/nope:"+v)
	}
	for _, s := range []string{"/snapshots", "/snapshots:x", "/snapshots/s", "/snapshots/s:x", "/snapshots/s/x", "/snapshots/BAD!",
		"/replications", "/replications/r:x", "/quotaRules/q"} {
		paths = append(paths, loc+"/volumes/nope"+s, loc+"/volumes/BAD!"+s)
	}
	paths = append(paths, loc+"/settings", loc+"/settings:x", loc+"/settings/x", p+"/locations/-/settings", p+"/locations/mars/settings")
	paths = append(paths, loc+"/metrics", loc+"/metrics:x", p+"/locations/-/metrics", p+"/locations/mars/metrics",
		loc+"/storagePools/nope/metrics", loc+"/volumes/nope/metrics")
	return append(paths, loc+"/operations/nope:cancel", loc+"/operations/nope:x")
}

// TestRoutingGolden pins how every caller is answered on every path shape and
// method: status, error and what the audit log records. Run with -update after a
// deliberate change and review the diff.
func TestRoutingGolden(t *testing.T) {
	ie := newIAMEnv(t, func(o *Options) { o.FailedAuthLimit = -1 })
	viewer, viewerEmail := ie.account("viewer")
	admin, adminEmail := ie.account("netadmin")
	nobody, _ := ie.account("nobody")
	bindings := map[string][]string{iam.RoleNetappViewer: {iam.Member(viewerEmail)}, iam.RoleNetappAdmin: {iam.Member(adminEmail)}}
	ie.bind(bindings)
	var policy []map[string]any
	for role, members := range bindings {
		policy = append(policy, map[string]any{"role": role, "members": members})
	}
	callers := []struct {
		name string
		c    *client.Client
	}{{"anonymous", nil}, {"nobody", nobody}, {"viewer", viewer}, {"admin", admin}, {"owner", ie.owner}}
	var out strings.Builder
	for _, path := range routingPaths() {
		for _, method := range []string{"GET", "POST", "PATCH", "DELETE", "PUT"} {
			var body any
			full := path
			if method == "POST" || method == "PATCH" {
				body = map[string]any{}
				if strings.HasSuffix(path, ":setIamPolicy") {
					body = map[string]any{"policy": map[string]any{"bindings": policy}}
				}
			}
			if method == "POST" {
				full += "?storagePoolId=px&volumeId=vx&snapshotId=sx&activeDirectoryId=ax"
			}
			for _, c := range callers {
				ie.audit.Reset()
				var got string
				if c.c == nil {
					r := ie.do(method, full, body)
					errObj, _ := r.body["error"].(map[string]any)
					got = fmt.Sprintf("%d %v %v", r.status, errObj["status"], errObj["message"])
					if errObj == nil {
						got = fmt.Sprintf("%d %q", r.status, r.raw)
					}
				} else {
					err := c.c.Do(context.Background(), method, full, nil, body, nil)
					var ae *client.Error
					switch {
					case errors.As(err, &ae):
						got = fmt.Sprintf("%d %s %s", ae.HTTPStatus, ae.Status, ae.Message)
					case err != nil:
						got = "error " + err.Error()
					default:
						got = "200"
					}
				}
				audit := ""
				for _, line := range strings.Split(strings.TrimSpace(ie.audit.String()), "\n") {
					if line == "" {
						continue
					}
					var e struct{ Method, Resource, Project string }
					if err := json.Unmarshal([]byte(line), &e); err == nil && c.c != nil {
						audit += fmt.Sprintf(" [audit %s %s %s]", e.Project, e.Method, e.Resource)
					}
				}
				fmt.Fprintf(&out, "%s %s %s -> %s%s\n", c.name, method, path, got, audit)
			}
		}
	}
	golden := filepath.Join("testdata", "routing.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(want) != out.String() {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(out.String(), "\n")
		n := 0
		for i := 0; i < len(wl) && i < len(gl) && n < 40; i++ {
			if wl[i] != gl[i] {
				t.Errorf("line %d:\n got  %s\n want %s", i+1, gl[i], wl[i])
				n++
			}
		}
		if len(wl) != len(gl) {
			t.Errorf("%d lines, want %d", len(gl), len(wl))
		}
	}
}
