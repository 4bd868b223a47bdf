package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// audit records a mutating or refused call: in the store (queryable per project)
// and as a JSON line. Request bodies, tokens and keys are never part of an entry.
// Unauthenticated and rate-limited calls are recorded in aggregate (refusals).
func (s *Server) audit(rq *request) {
	read := rq.rpc != nil && rq.rpc.read
	if rq.r != nil {
		read = rq.r.Method == http.MethodGet || rq.r.Method == http.MethodHead
	}
	if read && rq.status != 401 && rq.status != 403 && rq.status != 429 {
		return
	}
	if rq.r != nil && !strings.HasPrefix(rq.r.URL.Path, "/v1/") && rq.route != iam.TokenPath {
		return
	}
	now := s.now().UTC()
	e := &model.AuditEntry{ID: fmt.Sprintf("%019d-%s", now.UnixNano(), rq.id), Project: rq.project, Time: now,
		Method: rq.perm, Resource: rq.resource, Status: rq.status, RequestID: rq.id, Client: hostOf(rq.remote())}
	switch {
	case e.Method != "":
	case rq.r != nil:
		e.Method = rq.r.Method + " " + rq.r.URL.Path
	default:
		e.Method = rq.rpc.method
	}
	if e.Resource == "" && rq.r != nil {
		e.Resource = strings.TrimPrefix(rq.r.URL.Path, "/v1/")
	}
	e.Principal = rq.refusedAs
	if rq.principal != nil {
		e.Principal = rq.principal.Email
	}
	e.Outcome = "OK"
	if rq.status >= 300 {
		_, e.Outcome, _ = statusOf(rq.err)
	}
	if rq.aggregate {
		// Per address; an authenticated caller's 429s per principal; a 401 that
		// names its account per address and account, so that no entry counts
		// another's refusals under its principal.
		key := "addr:" + clientKey(rq.remote())
		switch {
		case rq.principal != nil:
			key = e.Principal
		case rq.refusedAs != "":
			key += " " + rq.refusedAs
		}
		s.refusals.add(key, e, rq.reason)
		return
	}
	s.writeAudit(rq.ctx, e)
}

// writeAudit writes one entry to the audit log and, if it names a valid project, to
// the store.
func (s *Server) writeAudit(ctx context.Context, e *model.AuditEntry) {
	if err := s.storeAudit(ctx, e); err != nil {
		s.log.Error("audit entry not stored", "err", err, "request_id", e.RequestID)
	}
}

// storeAudit writes e to the audit log file and the store, and reports whether
// the store took it.
func (s *Server) storeAudit(ctx context.Context, e *model.AuditEntry) error {
	if s.opts.AuditLog != nil {
		if b, err := json.Marshal(e); err == nil {
			s.auditMu.Lock()
			s.opts.AuditLog.Write(append(b, '\n'))
			s.auditMu.Unlock()
		}
	}
	if e.Project == "" || !projectRE.MatchString(e.Project) {
		return nil
	}
	return s.st.Update(ctx, func(tx store.Tx) error {
		return tx.Put(store.KindAudit, "projects/"+e.Project+"/auditLogs/"+e.ID, "projects/"+e.Project, e)
	})
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
