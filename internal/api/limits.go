package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// limiter is a token bucket per key (a principal, or a client address): perMinute
// requests per minute, bursting to the whole minute's allowance.
type limiter struct {
	perMinute int
	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
}

// maxBuckets bounds a limiter's memory: past it, buckets that are full again (their
// key has been quiet for a while) are dropped.
const maxBuckets = 10000

func newLimiter(perMinute int) *limiter {
	return &limiter{perMinute: perMinute, buckets: map[string]*rate.Limiter{}}
}

// allow reports whether key may make a request now, and if not, when to retry.
func (l *limiter) allow(key string) (bool, time.Duration) {
	if l == nil || l.perMinute <= 0 {
		return true, 0
	}
	l.mu.Lock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			for k, o := range l.buckets {
				if o.Tokens() >= float64(l.perMinute) {
					delete(l.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(rate.Every(time.Minute/time.Duration(l.perMinute)), l.perMinute)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	r := b.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return false, d
	}
	return true, 0
}

// rateLimited answers 429 if the caller (its principal, or unauthenticated, its
// address) is over the rate limit.
func (s *Server) rateLimited(rq *request) bool {
	key := "addr:" + clientKey(rq.r.RemoteAddr)
	if rq.principal != nil {
		key = rq.principal.Email
	}
	ok, wait := s.limits.allow(key)
	if ok {
		return false
	}
	s.tooMany(rq, wait, fmt.Sprintf("Quota exceeded: %s may make %d requests per minute; retry after %s",
		strings.TrimPrefix(key, "addr:"), s.limits.perMinute, wait.Round(time.Second)))
	return true
}

// authFailed answers a call whose credentials were missing or invalid: 401, or 429
// once its address is over the failed-authentication limit. Such calls are only
// audited in aggregate, so a flood of them costs no write per call.
func (s *Server) authFailed(rq *request, reason error) {
	rq.aggregate = true
	rq.reason = reason.Error()
	if ok, wait := s.authFailures.allow(clientKey(rq.r.RemoteAddr)); !ok {
		s.tooMany(rq, wait, fmt.Sprintf("Too many requests with invalid credentials from %s; retry after %s",
			hostOf(rq.r.RemoteAddr), wait.Round(time.Second)))
		return
	}
	rq.w.Header().Set("WWW-Authenticate", `Bearer realm="basin"`)
	s.writeError(rq, model.Errorf(model.ErrUnauthenticated, "Request had invalid authentication credentials. Expected a valid Bearer token signed by a Basin service-account key."))
}

func (s *Server) tooMany(rq *request, wait time.Duration, msg string) {
	rq.aggregate = true
	rq.w.Header().Set("Retry-After", fmt.Sprint(max(1, int(math.Ceil(wait.Seconds())))))
	s.writeError(rq, model.Errorf(model.ErrResourceExhausted, "%s", msg))
}

// clientKey is what per-address limits count by: the address, or for IPv6 its /64,
// which one client typically holds whole.
func clientKey(remote string) string {
	a, err := netip.ParseAddr(hostOf(remote))
	if err != nil {
		return hostOf(remote)
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// audit records a mutating or refused call: in the store (queryable per project)
// and as a JSON line. Request bodies, tokens and keys are never part of an entry.
// Unauthenticated and rate-limited calls are recorded in aggregate (refusals).
func (s *Server) audit(rq *request) {
	m := rq.r.Method
	if (m == http.MethodGet || m == http.MethodHead) && rq.status != 401 && rq.status != 403 && rq.status != 429 {
		return
	}
	if !strings.HasPrefix(rq.r.URL.Path, "/v1/") {
		return
	}
	now := s.now().UTC()
	e := &model.AuditEntry{ID: fmt.Sprintf("%019d-%s", now.UnixNano(), rq.id), Project: rq.project, Time: now,
		Method: rq.perm, Resource: rq.resource, Status: rq.status, RequestID: rq.id, Client: hostOf(rq.r.RemoteAddr)}
	if e.Method == "" {
		e.Method = m + " " + rq.r.URL.Path
	}
	if e.Resource == "" {
		e.Resource = strings.TrimPrefix(rq.r.URL.Path, "/v1/")
	}
	if rq.principal != nil {
		e.Principal = rq.principal.Email
	}
	e.Outcome = "OK"
	if rq.status >= 300 {
		_, e.Outcome, _ = statusOf(rq.err)
	}
	if rq.aggregate {
		key := "addr:" + clientKey(rq.r.RemoteAddr)
		if e.Principal != "" {
			key = e.Principal
		}
		s.refusals.add(key, e, rq.reason)
		return
	}
	s.writeAudit(rq.ctx, e)
}

// writeAudit writes one entry to the audit log and, if it names a valid project, to
// the store.
func (s *Server) writeAudit(ctx context.Context, e *model.AuditEntry) {
	if s.opts.AuditLog != nil {
		if b, err := json.Marshal(e); err == nil {
			s.auditMu.Lock()
			s.opts.AuditLog.Write(append(b, '\n'))
			s.auditMu.Unlock()
		}
	}
	if e.Project == "" || !projectRE.MatchString(e.Project) {
		return
	}
	err := s.st.Update(ctx, func(tx store.Tx) error {
		return tx.Put(store.KindAudit, "projects/"+e.Project+"/auditLogs/"+e.ID, "projects/"+e.Project, e)
	})
	if err != nil {
		s.log.Error("audit entry not stored", "err", err, "request_id", e.RequestID)
	}
}

// refusals aggregates the audit records of refused calls (unauthenticated or
// rate-limited) per key (a client address or a principal): at most one audit entry
// and one log line per key per interval. The first refusal after a quiet interval
// is written at once; later ones are counted into one entry written when the
// interval is up, with the details of the first of them.
type refusals struct {
	s        *Server
	interval time.Duration
	mu       sync.Mutex
	keys     map[string]*refusalState
	closed   bool
}

type refusalState struct {
	lastWrite time.Time
	pending   *model.AuditEntry
	reason    string // of the last pending refusal
	timer     *time.Timer
}

// maxRefusalKeys bounds the aggregator's memory; past it, keys that are quiet are
// dropped, and if all are busy the rest share one key.
const maxRefusalKeys = 10000

func (r *refusals) add(key string, e *model.AuditEntry, reason string) {
	now := time.Now()
	e.Count = 1
	if e.Status == http.StatusTooManyRequests {
		e.Throttled = 1
	}
	r.mu.Lock()
	st := r.keys[key]
	if st == nil {
		if len(r.keys) >= maxRefusalKeys {
			for k, o := range r.keys {
				if o.pending == nil && now.Sub(o.lastWrite) >= r.interval {
					delete(r.keys, k)
				}
			}
			if len(r.keys) >= maxRefusalKeys {
				key = "*"
			}
		}
		if st = r.keys[key]; st == nil {
			st = &refusalState{}
			r.keys[key] = st
		}
	}
	switch {
	case st.pending != nil:
		st.pending.Count++
		st.pending.Throttled += e.Throttled
		st.reason = reason
		r.mu.Unlock()
		return
	case r.closed || now.Sub(st.lastWrite) >= r.interval:
		st.lastWrite = now
		r.mu.Unlock()
		r.write(e, reason)
		return
	}
	st.pending, st.reason = e, reason
	st.timer = time.AfterFunc(st.lastWrite.Add(r.interval).Sub(now), func() { r.flush(key) })
	r.mu.Unlock()
}

// flush writes key's pending entry, if any.
func (r *refusals) flush(key string) {
	r.mu.Lock()
	st := r.keys[key]
	if st == nil || st.pending == nil {
		r.mu.Unlock()
		return
	}
	e, reason := st.pending, st.reason
	st.pending, st.timer, st.lastWrite = nil, nil, time.Now()
	r.mu.Unlock()
	r.write(e, reason)
}

// close writes every pending entry; later refusals are written at once.
func (r *refusals) close() {
	r.mu.Lock()
	r.closed = true
	var keys []string
	for k, st := range r.keys {
		if st.timer != nil {
			st.timer.Stop()
		}
		if st.pending != nil {
			keys = append(keys, k)
		}
	}
	r.mu.Unlock()
	for _, k := range keys {
		r.flush(k)
	}
}

func (r *refusals) write(e *model.AuditEntry, reason string) {
	r.s.log.Warn("refused calls", "client", e.Client, "principal", e.Principal, "outcome", e.Outcome, "count", e.Count,
		"throttled", e.Throttled, "first_method", e.Method, "first_resource", e.Resource, "reason", reason)
	r.s.writeAudit(context.Background(), e)
}
