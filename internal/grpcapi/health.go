package grpcapi

import (
	"context"
	"sync/atomic"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/basin-nas/basin/internal/netapppb"
)

// Health serves grpc.health.v1.Health, the health checks load balancers,
// proxies and grpc_health_probe make: a service is SERVING while the API
// takes calls and its storage is healthy (what REST's /readyz answers 200
// to), NOT_SERVING otherwise and from the moment the server begins to stop.
// Its calls need no authentication, as /readyz needs none, and are neither
// rate-limited nor audited; they tell nothing but that status, computed when
// asked.
//
// Check and List are served; Watch answers UNIMPLEMENTED, which the protocol
// tells clients to take as "not supported" (client-side health checking then
// treats the server as healthy). A Watch lasts as long as its client likes,
// and for all that time it would hold one of the few stream workers
// (daemon's grpc.NumStreamWorkers) that keep calls cheap: with two Watch
// calls open, every gRPC GET took ~35 µs (7 %) longer, and anyone may open
// them.
type Health struct {
	healthgrpc.UnimplementedHealthServer
	notReady func() string
	stopped  atomic.Bool
}

// healthServices are the services whose health is reported: the server as a
// whole ("", as the protocol names it) and each API service it serves.
var healthServices = []string{"", netapppb.NetApp_ServiceDesc.ServiceName,
	longrunningpb.Operations_ServiceDesc.ServiceName, "google.cloud.location.Locations"}

func newHealth(notReady func() string) *Health { return &Health{notReady: notReady} }

// Shutdown reports every service NOT_SERVING from now on: a client checking
// while the server drains its calls is told to go elsewhere.
func (h *Health) Shutdown() { h.stopped.Store(true) }

// status is service's status now; ok is false for a service not served.
func (h *Health) status(service string) (st healthgrpc.HealthCheckResponse_ServingStatus, ok bool) {
	known := false
	for _, s := range healthServices {
		known = known || s == service
	}
	switch {
	case !known:
		return healthgrpc.HealthCheckResponse_SERVICE_UNKNOWN, false
	case h.stopped.Load() || h.notReady() != "":
		return healthgrpc.HealthCheckResponse_NOT_SERVING, true
	}
	return healthgrpc.HealthCheckResponse_SERVING, true
}

// Check answers a service's status; NOT_FOUND for a service not served, as
// the protocol asks.
func (h *Health) Check(_ context.Context, in *healthgrpc.HealthCheckRequest) (*healthgrpc.HealthCheckResponse, error) {
	st, ok := h.status(in.GetService())
	if !ok {
		return nil, status.Error(codes.NotFound, "unknown service")
	}
	return &healthgrpc.HealthCheckResponse{Status: st}, nil
}

// List answers every service's status.
func (h *Health) List(context.Context, *healthgrpc.HealthListRequest) (*healthgrpc.HealthListResponse, error) {
	out := &healthgrpc.HealthListResponse{Statuses: map[string]*healthgrpc.HealthCheckResponse{}}
	for _, s := range healthServices {
		st, _ := h.status(s)
		out.Statuses[s] = &healthgrpc.HealthCheckResponse{Status: st}
	}
	return out, nil
}

// Watch is not served (see Health).
func (h *Health) Watch(*healthgrpc.HealthCheckRequest, healthgrpc.Health_WatchServer) error {
	return status.Error(codes.Unimplemented, "grpc.health.v1.Health/Watch is not served: use Check")
}
