package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Every request is observed once, labelled with the route table's pattern (never
// the request's path), the method and the status answered; requests no route
// matches share one route, and the probes have theirs.
func TestObserveRequest(t *testing.T) {
	type obs struct {
		method, route string
		code          int
	}
	seen := make(chan obs, 16)
	e := newEnv(t, func(o *Options) {
		o.ObserveRequest = func(method, route string, code int, d time.Duration) {
			if d <= 0 {
				t.Errorf("%s %s: duration %v", method, route, d)
			}
			seen <- obs{method, route, code}
		}
	})
	for _, tc := range []struct {
		method, path string
		want         obs
	}{
		{"GET", loc + "/storagePools", obs{"GET", patPools, 200}},
		{"GET", loc + "/storagePools/p-" + newID(4), obs{"GET", patPool, 404}},
		{"DELETE", loc + "/volumes/vol9", obs{"DELETE", patVolume, 404}},
		{"GET", loc + "/volumes/vol9/metrics?step=x", obs{"GET", patVolume + "/metrics", 400}},
		{"GET", loc + "/nothing/" + newID(4), obs{"GET", RouteUnmatched, 404}},
		{"GET", "/elsewhere", obs{"GET", RouteUnmatched, 404}},
	} {
		e.do(tc.method, tc.path, nil)
		select {
		case got := <-seen:
			if got != tc.want {
				t.Errorf("%s %s: observed %+v, want %+v", tc.method, tc.path, got, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s: not observed", tc.method, tc.path)
		}
	}
	for path, h := range map[string]http.Handler{"/healthz": e.api.Healthz(), "/readyz": e.api.Readyz()} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
		if got := <-seen; got != (obs{"GET", path, 200}) {
			t.Errorf("probe %s: observed %+v", path, got)
		}
	}
	select {
	case extra := <-seen:
		t.Fatalf("a request observed twice: %+v", extra)
	default:
	}
}
