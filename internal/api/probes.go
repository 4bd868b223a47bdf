package api

import (
	"io"
	"log/slog"
	"net/http"
)

// Healthz answers liveness probes: 200 "ok" while the process serves HTTP. Probes
// are logged at debug level: they would drown everything else.
func (s *Server) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, slog.LevelDebug, func(rq *request) {
			rq.route = "/healthz"
			rq.status = http.StatusOK
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "ok\n")
		})
	})
}

// Readyz answers readiness probes: 200 "ready" once Options.Ready says so and
// the storage is healthy; 503 "not ready" before, and 503 with the reason in a
// few words while the store or a volume's storage is failing
// (docs/architecture.md, "Readiness").
func (s *Server) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, slog.LevelDebug, func(rq *request) {
			rq.route = "/readyz"
			if why := s.NotReady(); why != "" {
				rq.status = http.StatusServiceUnavailable
				http.Error(w, why, http.StatusServiceUnavailable)
				return
			}
			rq.status = http.StatusOK
			io.WriteString(w, "ready\n")
		})
	})
}

// NotReady returns "" when the service can take requests (Options.Ready) and
// its storage is healthy (Options.Health), and otherwise why not in a few words
// naming no volume: what /readyz answers, and gRPC's health service
// (internal/grpcapi).
func (s *Server) NotReady() string {
	if s.opts.Ready != nil && !s.opts.Ready() {
		return "not ready"
	}
	if s.opts.Health != nil {
		if why := s.opts.Health.NotReady(); why != "" {
			return "not ready: " + why
		}
	}
	return ""
}
