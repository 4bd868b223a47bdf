package api

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/controller"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

func FuzzFilter(f *testing.F) {
	for _, s := range []string{`state = READY`, `labels.env:"dev" AND NOT (capacityGib > 10 OR -x=1)`, `a.b.c<="2025-01-01T00:00:00Z"`,
		`name = "projects/p/x*"`, `((((a=1))))`, `a = "unterminated`, `=`, `NOT`, `a:b:c`, `x != 'y'`} {
		f.Add(s)
	}
	obj := map[string]any{"state": "READY", "capacityGib": "100", "labels": map[string]any{"env": "dev"}, "done": true,
		"protocols": []any{"NFSV3"}, "n": 3.5}
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := ParseFilter(s)
		if err != nil {
			return
		}
		flt.Match(obj) // must not panic
	})
}

func FuzzUpdateMask(f *testing.F) {
	for _, s := range []string{"capacityGib,description", "capacity_gib", "labels.env", "shareName", "", ",,", "exportPolicy.rules.0", "état"} {
		f.Add(s, `{"capacityGib":"5"}`)
	}
	f.Fuzz(func(t *testing.T, mask, body string) {
		q := url.Values{"updateMask": {mask}}
		paths, err := updatePaths(q, volumeFields, map[string]bool{"capacityGib": true}, map[string]any{"capacityGib": body}, map[string]any{})
		if err != nil {
			if !strings.Contains(err.Error(), "updateMask") {
				t.Fatalf("error does not name updateMask: %v", err)
			}
			return
		}
		for _, p := range paths {
			found := false
			for _, m := range volumeFields.mutable {
				found = found || m == p
			}
			if !found {
				t.Fatalf("path %q accepted but not mutable", p)
			}
		}
	})
}

// FuzzServeHTTP sends arbitrary requests to a live API (real store, real controller,
// fake storage) and checks that none is answered with a 5xx.
func FuzzServeHTTP(f *testing.F) {
	for _, seed := range []struct{ method, path, query, body string }{
		{"POST", "storagePools", "storagePoolId=p1", `{"serviceLevel":1,"capacityGib":"100","network":"projects/p1/global/networks/default"}`},
		{"POST", "volumes", "volumeId=v1", `{"shareName":"v1","storagePool":"p1","capacityGib":"10","protocols":[1]}`},
		{"PATCH", "volumes/v1", "updateMask=capacityGib", `{"capacityGib":"20"}`},
		{"PATCH", "volumes/v1", "updateMask=storagePool,throughputMibps", `{"storagePool":"p2","throughputMibps":12.5}`},
		{"PATCH", "settings", "updateMask=throughputCapMibps", `{"throughputCapMibps":300}`},
		{"GET", "settings", "", ``},
		{"PATCH", "storagePools/p1", "", `{"capacityGib":"5"}`},
		{"POST", "volumes/v1:revert", "", `{"snapshotId":"s1"}`},
		{"POST", "volumes/v1/snapshots", "snapshotId=s1", `{}`},
		{"DELETE", "volumes/v1", "force=maybe", ``},
		{"GET", "volumes", "filter=state%3D&orderBy=x+desc&pageSize=2", ``},
		{"GET", "operations", "pageToken=eyJ2IjpbXSwibiI6IngiLCJoIjoiIn0", ``},
		{"POST", "activeDirectories", "activeDirectoryId=a", `{"domain":"d","dns":"1.2.3.4","netBiosPrefix":"n","username":"u","password":"p"}`},
		{"PATCH", "volumes/v1", "", `{"exportPolicy":{"rules":[{"allowedClients":"1.2.3.4/40","accessType":2,"nfsv3":true,"anonUid":"-1"}]}}`},
		{"POST", "volumes", "volumeId=c1", `{"shareName":"c1","storagePool":"p1","capacityGib":"1","protocols":[1],"restoreParameters":{"sourceSnapshot":"projects/p1/locations/l/volumes/v1/snapshots/s1"}}`},
	} {
		f.Add(seed.method, seed.path, seed.query, seed.body)
	}
	st, err := store.OpenSQLite(context.Background(), filepath.Join(f.TempDir(), "db"))
	if err != nil {
		f.Fatal(err)
	}
	ctrl := controller.New(controller.Options{Store: st, Backend: fake.New(), Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ctrl.Run(ctx)
	h := New(Options{Store: st, Operations: ctrl, Locations: []string{"l"}, SyncWait: 50 * time.Millisecond, RateLimit: -1})
	f.Fuzz(func(t *testing.T, method, path, query, body string) {
		switch method {
		case "GET", "POST", "PATCH", "DELETE", "PUT":
		default:
			method = "GET"
		}
		u := &url.URL{Path: "/v1/projects/p1/locations/l/" + path, RawQuery: query}
		req, err := http.NewRequest(method, "http://basin"+u.EscapedPath(), bytes.NewBufferString(body))
		if err != nil {
			return
		}
		req.URL.RawQuery = query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s %s?%s %q -> %d %s", method, path, query, body, rec.Code, rec.Body.String())
		}
	})
}
