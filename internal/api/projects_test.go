package api

import (
	"reflect"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
)

// TestGetProject: GET /v1/projects/{id} answers in the shape of Resource Manager
// v1's projects.get, which gcloud calls on `gcloud config set project` once an
// account is active (with api_endpoint_overrides/cloudresourcemanager pointing at
// Basin; docs/clients.md). Any role on the project lets a caller see it; a caller
// without one is refused as Resource Manager refuses it, and gcloud then warns
// that the project may not exist.
func TestGetProject(t *testing.T) {
	ie := newIAMEnv(t)
	viewer, viewerEmail := ie.account("viewer")
	admin, adminEmail := ie.account("netadmin")
	nobody, _ := ie.account("nobody")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(viewerEmail)}, iam.RoleNetappAdmin: {iam.Member(adminEmail)}})
	want := map[string]any{"projectId": "p1", "name": "p1", "lifecycleState": "ACTIVE"}
	for name, c := range map[string]*client.Client{"owner": ie.owner, "viewer": viewer, "admin": admin} {
		got, err := ie.call(c, "GET", "/v1/projects/p1", nil)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: GET /v1/projects/p1 = %v, %v; want %v", name, got, err, want)
		}
	}
	// The owner sees every project: in Basin a project is a name.
	if got, err := ie.call(ie.owner, "GET", "/v1/projects/other-project", nil); err != nil || got["projectId"] != "other-project" {
		t.Fatalf("owner, another project: %v, %v", got, err)
	}
	_, err := ie.call(nobody, "GET", "/v1/projects/p1", nil)
	if status(err) != 403 || !strings.Contains(err.Error(), "resourcemanager.projects.get") {
		t.Fatalf("no role: %v", err)
	}
	if _, err := ie.call(viewer, "GET", "/v1/projects/p2", nil); status(err) != 403 {
		t.Fatalf("viewer on another project: %v", err)
	}
	if r := ie.do("GET", "/v1/projects/p1", nil); r.status != 401 {
		t.Fatalf("anonymous: %d %s", r.status, r.raw)
	}
	// Only GET: Basin makes, changes and deletes no projects.
	for _, m := range []string{"POST", "PATCH", "DELETE"} {
		if _, err := ie.call(ie.owner, m, "/v1/projects/p1", map[string]any{}); status(err) != 404 {
			t.Fatalf("%s /v1/projects/p1: %v", m, err)
		}
	}
}
