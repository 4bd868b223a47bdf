package grpcapi

import (
	"context"
	"time"

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
// rate-limited nor audited; they tell nothing but that status. Every answer
// is computed when asked (a Watch looks again every healthPoll), so no state
// goes stale.
type Health struct {
	healthgrpc.UnimplementedHealthServer
	notReady func() string
	stopping context.Context
	stop     context.CancelFunc
}

// healthServices are the services whose health is reported: the server as a
// whole ("", as the protocol names it) and each API service it serves.
var healthServices = []string{"", netapppb.NetApp_ServiceDesc.ServiceName,
	longrunningpb.Operations_ServiceDesc.ServiceName, "google.cloud.location.Locations"}

// healthPoll is how often a Watch looks at the status again.
var healthPoll = time.Second

func newHealth(notReady func() string) *Health {
	ctx, cancel := context.WithCancel(context.Background())
	return &Health{notReady: notReady, stopping: ctx, stop: cancel}
}

// Shutdown reports every service NOT_SERVING from now on and ends the Watch
// calls, each with NOT_SERVING and then UNAVAILABLE, so that a graceful stop
// is not held up by calls that never end on their own.
func (h *Health) Shutdown() { h.stop() }

// status is service's status now; ok is false for a service not served.
func (h *Health) status(service string) (st healthgrpc.HealthCheckResponse_ServingStatus, ok bool) {
	known := false
	for _, s := range healthServices {
		known = known || s == service
	}
	switch {
	case !known:
		return healthgrpc.HealthCheckResponse_SERVICE_UNKNOWN, false
	case h.stopping.Err() != nil || h.notReady() != "":
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

// Watch sends a service's status, then each change of it, until the client
// ends the call or the server stops. A service not served is SERVICE_UNKNOWN,
// and the call stays open, as the protocol asks.
func (h *Health) Watch(in *healthgrpc.HealthCheckRequest, stream healthgrpc.Health_WatchServer) error {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	last := healthgrpc.HealthCheckResponse_ServingStatus(-1)
	for {
		st, _ := h.status(in.GetService())
		if st != last {
			if err := stream.Send(&healthgrpc.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-h.stopping.Done():
			if st, _ := h.status(in.GetService()); st != last {
				if err := stream.Send(&healthgrpc.HealthCheckResponse{Status: st}); err != nil {
					return err
				}
			}
			return status.Error(codes.Unavailable, "the server is shutting down")
		case <-t.C:
		}
	}
}
