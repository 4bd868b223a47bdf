package grpcapi

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/basin-nas/basin/internal/api"
)

// storageHealth is the controller's storage health as a switch.
type storageHealth struct{ why atomic.Pointer[string] }

func (h *storageHealth) VolumeFault(string) string { return "" }
func (h *storageHealth) NotReady() string {
	if p := h.why.Load(); p != nil {
		return *p
	}
	return ""
}

// The health service answers, to a caller without a token, what /readyz
// does: SERVING while the API is ready and its storage healthy, NOT_SERVING
// before it is ready or while its storage fails; NOT_FOUND for a service not
// served. List answers every served service.
func TestHealthCheck(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	sh := &storageHealth{}
	e := newEnv(t, func(o *api.Options) { o.Ready, o.Health = ready.Load, sh })
	ctx := context.Background()
	check := func(service string) (healthgrpc.HealthCheckResponse_ServingStatus, codes.Code) {
		t.Helper()
		r, err := e.hc.Check(ctx, &healthgrpc.HealthCheckRequest{Service: service})
		return r.GetStatus(), status.Code(err)
	}
	// REST's /readyz answers the same at every step.
	readyz := func() int {
		t.Helper()
		rec := httptest.NewRecorder()
		e.api.Readyz().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code
	}
	for _, svc := range healthServices {
		if st, c := check(svc); st != healthgrpc.HealthCheckResponse_SERVING || c != codes.OK {
			t.Errorf("Check(%q) ready: %v %v, want SERVING", svc, st, c)
		}
	}
	if code := readyz(); code != 200 {
		t.Errorf("/readyz ready: %d", code)
	}
	if _, c := check("grpc.health.v1.Health.nope"); c != codes.NotFound {
		t.Errorf("Check of a service not served: %v, want NOT_FOUND", c)
	}
	l, err := e.hc.List(ctx, &healthgrpc.HealthListRequest{})
	if err != nil || len(l.GetStatuses()) != len(healthServices) {
		t.Fatalf("List: %v %v", l, err)
	}
	for _, svc := range healthServices {
		if l.GetStatuses()[svc].GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Errorf("List: %q is %v", svc, l.GetStatuses()[svc])
		}
	}

	ready.Store(false)
	if st, c := check(""); st != healthgrpc.HealthCheckResponse_NOT_SERVING || c != codes.OK {
		t.Errorf("Check not ready: %v %v, want NOT_SERVING", st, c)
	}
	if code := readyz(); code != 503 {
		t.Errorf("/readyz not ready: %d", code)
	}
	ready.Store(true)
	why := "the volume store is read-only"
	sh.why.Store(&why)
	if st, _ := check(healthServices[1]); st != healthgrpc.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check with the store failing: %v, want NOT_SERVING", st)
	}
	if code := readyz(); code != 503 {
		t.Errorf("/readyz with the store failing: %d", code)
	}
	sh.why.Store(nil)
	if st, _ := check(""); st != healthgrpc.HealthCheckResponse_SERVING {
		t.Errorf("Check healthy again: %v, want SERVING", st)
	}
}

// Watch is not served: UNIMPLEMENTED, which tells a client not to retry
// (the call would hold a stream worker for as long as it lasts). Shutdown
// makes Check answer NOT_SERVING from then on.
func TestHealthWatchAndShutdown(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := e.hc.Watch(ctx, &healthgrpc.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch: %v %v, want UNIMPLEMENTED", r, err)
	}
	if r, err := e.hc.Check(ctx, &healthgrpc.HealthCheckRequest{}); r.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v %v, want SERVING", r, err)
	}
	e.hs.Shutdown()
	if r, err := e.hc.Check(ctx, &healthgrpc.HealthCheckRequest{}); r.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check after Shutdown: %v %v, want NOT_SERVING", r, err)
	}
}
