package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// sampleVars are the values the route matrix puts into each pattern variable:
// resources TestRouteMatrix creates first. A route with a variable missing here
// fails the test: add a value (and create what it names).
var sampleVars = map[string]string{
	"project": "p1", "location": "us-east4", "storagePool": "pool1", "volume": "vol1", "snapshot": "s1",
	"activeDirectory": "ad1", "operation": "(created)", "serviceAccount": "(created)", "key": "(created)", "node": "n1",
}

// routeCall is one concrete request for a route of the table.
type routeCall struct {
	route          *compiledRoute
	method, path   string // path without the query
	query          string
	resource, perm string // what a denial must name
}

// routeCalls turns every route of the table into concrete requests: each method
// of a "*" route, "**" filled with one segment, variables from sampleVars, and a
// create's ID parameter. It fails if a request would not be served by the route
// it was made from.
func routeCalls(t *testing.T, rt *router, sampleVars map[string]string) []routeCall {
	t.Helper()
	var calls []routeCall
	for i := range rt.routes {
		r := &rt.routes[i]
		p := r.pat
		var segs []string
		for j, lit := range p.segs {
			if name := p.vars[j]; name != "" {
				v, ok := sampleVars[name]
				if !ok {
					t.Fatalf("route %s %s: no sample value for {%s}: add one to sampleVars", r.Method, r.Pattern, name)
				}
				lit = v
			}
			segs = append(segs, lit)
		}
		if p.rest {
			segs = append(segs, "x")
		}
		urlPath := "/" + strings.Join(segs, "/")
		resource := strings.Join(segs[1:], "/")
		if p.verb != "" {
			urlPath += ":" + p.verb
		}
		query := ""
		if r.CreateID != "" {
			query = r.CreateID + "=made-by-matrix"
			resource += "/made-by-matrix"
		}
		methods := []string{r.Method}
		if r.Method == anyMethod {
			methods = []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete}
		}
		for _, m := range methods {
			s, verb := splitPath(urlPath)
			if got, _ := rt.lookup(m, s, verb); got != r {
				t.Fatalf("%s %s, made from route %s %s, is served by %v", m, urlPath, r.Method, r.Pattern, got)
			}
			calls = append(calls, routeCall{route: r, method: m, path: urlPath, query: query, resource: resource, perm: r.Perm})
		}
	}
	return calls
}

// storeState is every stored document but the audit log, to tell whether a call
// changed anything.
func storeState(t *testing.T, st store.Store) string {
	t.Helper()
	var b strings.Builder
	err := st.View(context.Background(), func(tx store.Tx) error {
		for _, kind := range []string{store.KindPool, store.KindVolume, store.KindSnapshot, store.KindActiveDirectory, store.KindOperation,
			store.KindServiceAccount, store.KindKey, store.KindIAMPolicy, store.KindExportID, store.KindExportIDCursor, store.KindSettings} {
			docs, err := store.List[json.RawMessage](tx, kind, "")
			if err != nil {
				return err
			}
			for _, d := range docs {
				fmt.Fprintf(&b, "%s %s\n", kind, *d)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// settle waits until the controller has no operation left to run and the store
// has stopped changing, so that a change seen across a call is the call's.
func settle(t *testing.T, st store.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	prev := ""
	for {
		cur := storeState(t, st)
		busy := false
		st.View(context.Background(), func(tx store.Tx) error {
			ops, _ := store.List[model.Operation](tx, store.KindOperation, "")
			for _, op := range ops {
				busy = busy || !op.Done
			}
			return nil
		})
		if !busy && cur == prev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the store did not settle")
		}
		prev = cur
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRouteMatrix calls every route of the table as every kind of caller and checks
// the answer against iam's grants: unauthenticated → 401; a caller whose roles do
// not grant the route's permission → 403 naming the permission and resource, with
// nothing changed; a caller whose roles grant it, or any authenticated caller of a
// Public route → anything but 401 and 403.
func TestRouteMatrix(t *testing.T) {
	ie := newIAMEnv(t, func(o *Options) { o.FailedAuthLimit = -1 })
	// The resources the routes name exist, so that a denied call that did work
	// would show.
	vars := maps.Clone(sampleVars)
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{loc + "/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": 1, "capacityGib": "100", "network": "projects/p1/global/networks/default"}},
		{loc + "/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}}},
		{loc + "/volumes/vol1/snapshots?snapshotId=s1", map[string]any{}},
		{loc + "/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "d", "dns": "10.0.0.2", "netBiosPrefix": "n", "username": "u", "password": "Hunter2-secret"}},
	} {
		op, err := ie.call(ie.owner, "POST", c.path, c.body)
		if err != nil {
			t.Fatalf("POST %s: %v", c.path, err)
		}
		vars["operation"] = path.Base(op["name"].(string))
	}
	_, vars["serviceAccount"] = ie.account("target")
	keyList, err := ie.call(ie.owner, "GET", "/v1/projects/p1/serviceAccounts/"+vars["serviceAccount"]+"/keys", nil)
	if err != nil {
		t.Fatal(err)
	}
	vars["key"] = path.Base(keyList["keys"].([]any)[0].(map[string]any)["name"].(string))
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
		name, role string // role "" = no binding
		c          *client.Client
	}{{"anonymous", "", nil}, {"nobody", "", nobody}, {"viewer", iam.RoleNetappViewer, viewer},
		{"admin", iam.RoleNetappAdmin, admin}, {"owner", iam.RoleOwner, ie.owner}}

	calls := routeCalls(t, ie.api.routes, vars)
	covered := map[*compiledRoute]bool{}
	dirty := true // an allowed call may have started work: settle before the next
	for _, call := range calls {
		covered[call.route] = true
		var body any
		if call.method == http.MethodPost || call.method == http.MethodPatch {
			body = map[string]any{}
			if strings.HasSuffix(call.path, ":setIamPolicy") {
				body = map[string]any{"policy": map[string]any{"bindings": policy}} // the same bindings again
			}
		}
		full := call.path
		if call.query != "" {
			full += "?" + call.query
		}
		for _, c := range callers {
			name := fmt.Sprintf("%s %s %s", c.name, call.method, full)
			if dirty {
				settle(t, ie.st)
			}
			before, beforeBe := storeState(t, ie.st), fmt.Sprint(ie.be.State())
			var status int
			var msg string
			if c.c == nil {
				r := ie.do(call.method, full, body)
				status = r.status
			} else {
				err := c.c.Do(context.Background(), call.method, full, nil, body, nil)
				var ae *client.Error
				switch {
				case err == nil:
					status = http.StatusOK
				case errors.As(err, &ae):
					status, msg = ae.HTTPStatus, ae.Message
				default:
					t.Fatalf("%s: %v", name, err)
				}
			}
			dirty = call.method != http.MethodGet && status != http.StatusUnauthorized && status != http.StatusForbidden
			switch {
			case c.c == nil:
				if status != http.StatusUnauthorized {
					t.Errorf("%s: %d, want 401", name, status)
				}
			case call.route.Admin != "" && c.name != "owner":
				// The service's administrator alone: Basin's owner account.
				want := fmt.Sprintf("Only the administrator of this Basin service may call %s %s", call.method, call.path)
				if status != http.StatusForbidden || msg != want {
					t.Errorf("%s: %d %q, want 403 %q", name, status, msg, want)
				}
			case call.route.Public != "" || call.route.Admin != "" || (c.role != "" && iam.RoleGrants(c.role, call.perm)):
				if status == http.StatusUnauthorized || status == http.StatusForbidden {
					t.Errorf("%s: %d %s, want allowed", name, status, msg)
				}
			default:
				want := fmt.Sprintf("Permission '%s' denied on resource '%s' (or it may not exist)", call.perm, call.resource)
				if status != http.StatusForbidden || msg != want {
					t.Errorf("%s: %d %q, want 403 %q", name, status, msg, want)
				}
			}
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				if after := storeState(t, ie.st); after != before {
					t.Errorf("%s: a refused call changed the store:\n%s\n->\n%s", name, before, after)
				}
				if after := fmt.Sprint(ie.be.State()); after != beforeBe {
					t.Errorf("%s: a refused call changed storage", name)
				}
			}
		}
	}
	// Generated from the table, the matrix reaches every route; this says so, so
	// that a change to routeCalls cannot quietly skip one.
	for i := range ie.api.routes.routes {
		if r := &ie.api.routes.routes[i]; !covered[r] {
			t.Errorf("route %s %s is not exercised by the matrix", r.Method, r.Pattern)
		}
	}
	if len(covered) != len(apiRoutes) {
		t.Errorf("matrix covered %d routes, the table has %d", len(covered), len(apiRoutes))
	}
}

// The table must say, for every route, what a caller needs: a route with neither a
// permission nor a Public reason is refused, and so the server does not start.
func TestRouteTableFailsClosed(t *testing.T) {
	h := func(*Server, *request, pathVars) {}
	for _, tc := range []struct {
		name  string
		route Route
		want  string
	}{
		{"no permission", Route{Method: "GET", Pattern: "/v1/projects/{project}/metrics", Handle: h}, "neither a permission nor Public"},
		{"both", Route{Method: "GET", Pattern: "/v1/projects/{project}/metrics", Perm: iam.PermAuditList, Public: "why", Handle: h}, "both"},
		{"unknown permission", Route{Method: "GET", Pattern: "/v1/projects/{project}/metrics", Perm: "basin.nothing.get", Handle: h}, "unknown permission"},
		{"permission without project", Route{Method: "GET", Pattern: "/v1/metrics", Perm: iam.PermAuditList, Handle: h}, "no {project}"},
		{"no handler", Route{Method: "GET", Pattern: "/v1/projects/{project}/metrics", Perm: iam.PermAuditList}, "no handler"},
		{"bad pattern", Route{Method: "GET", Pattern: "/v1/projects/{project}/me{trics", Perm: iam.PermAuditList, Handle: h}, "bad segment"},
		{"overlap", Route{Method: "GET", Pattern: "/v1/projects/{project}/locations/{location}/volumes/{other}", Perm: iam.PermAuditList, Handle: h}, "overlaps"},
		{"overlap with any method", Route{Method: "*", Pattern: "/v1/projects/{project}/locations/{location}/**", Public: "x", Handle: h}, "overlaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := append(slices.Clone(apiRoutes), tc.route)
			_, err := compileRoutes(table)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("compileRoutes: %v, want an error containing %q", err, tc.want)
			}
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), tc.want) {
					t.Fatalf("newServer did not refuse the table: %v", p)
				}
			}()
			newServer(Options{}, table)
		})
	}
	if _, err := compileRoutes(apiRoutes); err != nil {
		t.Fatalf("the route table: %v", err)
	}
}
