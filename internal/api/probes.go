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

// Readyz answers readiness probes: 200 "ready" once Options.Ready says so, 503
// before.
func (s *Server) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, slog.LevelDebug, func(rq *request) {
			rq.route = "/readyz"
			if s.opts.Ready != nil && !s.opts.Ready() {
				rq.status = http.StatusServiceUnavailable
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			rq.status = http.StatusOK
			io.WriteString(w, "ready\n")
		})
	})
}
