package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// splitPath turns /v1/a/b/c:verb into segments and the verb.
func splitPath(path string) ([]string, string) {
	segs := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
	verb := ""
	if last := segs[len(segs)-1]; strings.Contains(last, ":") {
		i := strings.LastIndex(last, ":")
		segs[len(segs)-1], verb = last[:i], last[i+1:]
	}
	return segs, verb
}

// permissionFor names the permission a request needs and the resource it acts on.
// Requests no method matches need none: they end in 404 or 501 without work.
func permissionFor(segs []string, verb, method string, q map[string][]string) (perm, resource string) {
	if len(segs) < 2 || segs[0] != "projects" {
		return "", ""
	}
	resource = strings.Join(segs, "/")
	if len(segs) == 2 {
		switch verb {
		case "getIamPolicy":
			return iam.PermGetIamPolicy, resource
		case "setIamPolicy":
			return iam.PermSetIamPolicy, resource
		}
		return "", resource // testIamPermissions: any caller may ask
	}
	switch segs[2] {
	case "auditLogs":
		return iam.PermAuditList, resource
	case "serviceAccounts":
		return serviceAccountPermission(segs[3:], verb, method), resource
	case "locations":
	default:
		return "", resource
	}
	if len(segs) <= 4 {
		return iam.NetappPermission("locations", pick(len(segs) == 3, "list", "get")), resource
	}
	rest := segs[4:]
	collection := rest[0]
	if collection == "volumes" && len(rest) >= 3 && rest[2] == "snapshots" {
		collection, rest = "snapshots", rest[2:]
	}
	hasID := len(rest) == 2
	if len(rest) > 2 {
		return "", resource
	}
	var action string
	switch {
	case verb != "":
		action = verb
	case method == http.MethodGet:
		action = pick(hasID, "get", "list")
	case method == http.MethodPost && !hasID:
		action = "create"
		if id := firstValue(q, collectionIDParam[collection]); id != "" {
			resource += "/" + id
		}
	case method == http.MethodPatch && hasID:
		action = "update"
	case method == http.MethodDelete && hasID:
		action = "delete"
	}
	return iam.NetappPermission(collection, action), resource
}

var collectionIDParam = map[string]string{"storagePools": "storagePoolId", "volumes": "volumeId", "snapshots": "snapshotId", "activeDirectories": "activeDirectoryId"}

func serviceAccountPermission(rest []string, verb, method string) string {
	switch {
	case len(rest) == 0 && method == http.MethodGet:
		return iam.PermSAList
	case len(rest) == 0 && method == http.MethodPost:
		return iam.PermSACreate
	case len(rest) == 1 && verb == "disable":
		return iam.PermSADisable
	case len(rest) == 1 && verb == "enable":
		return iam.PermSAEnable
	case len(rest) == 1 && method == http.MethodGet:
		return iam.PermSAGet
	case len(rest) == 1 && method == http.MethodDelete:
		return iam.PermSADelete
	case len(rest) == 2 && rest[1] == "keys" && method == http.MethodGet:
		return iam.PermKeyList
	case len(rest) == 2 && rest[1] == "keys" && method == http.MethodPost:
		return iam.PermKeyCreate
	case len(rest) == 3 && rest[1] == "keys" && method == http.MethodGet:
		return iam.PermKeyGet
	case len(rest) == 3 && rest[1] == "keys" && method == http.MethodDelete:
		return iam.PermKeyDelete
	}
	return ""
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func firstValue(q map[string][]string, key string) string {
	if v := q[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// authorize checks the caller's permission on the request's project.
func (s *Server) authorize(rq *request) error {
	if s.opts.Auth == nil || rq.perm == "" {
		return nil
	}
	var pol *model.IAMPolicy
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		pol, err = store.Get[model.IAMPolicy](tx, store.KindIAMPolicy, "projects/"+rq.project)
		if errors.Is(err, model.ErrNotFound) {
			pol, err = nil, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if !iam.Allowed(rq.principal, pol, rq.perm) {
		return model.Errorf(model.ErrPermissionDenied, "Permission '%s' denied on resource '%s' (or it may not exist)", rq.perm, rq.resource)
	}
	return nil
}

// limiter is a per-principal token bucket: limit requests per minute, bursting to
// the whole minute's allowance.
type limiter struct {
	perMinute int
	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
}

// allow reports whether key may make a request now, and if not, when to retry.
func (l *limiter) allow(key string) (bool, time.Duration) {
	if l == nil || l.perMinute <= 0 {
		return true, 0
	}
	l.mu.Lock()
	b := l.buckets[key]
	if b == nil {
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

func (s *Server) rateLimited(rq *request) bool {
	key := "addr:" + hostOf(rq.r.RemoteAddr)
	if rq.principal != nil {
		key = rq.principal.Email
	}
	ok, wait := s.limits.allow(key)
	if ok {
		return false
	}
	rq.w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(wait.Seconds()))))
	s.writeError(rq, model.Errorf(model.ErrResourceExhausted, "Quota exceeded: %s may make %d requests per minute; retry after %s",
		strings.TrimPrefix(key, "addr:"), s.limits.perMinute, wait.Round(time.Second)))
	return true
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// audit records a mutating or refused call: in the store (queryable per project)
// and as a JSON line. Request bodies, tokens and keys are never part of an entry.
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
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		return tx.Put(store.KindAudit, "projects/"+e.Project+"/auditLogs/"+e.ID, "projects/"+e.Project, e)
	})
	if err != nil {
		s.log.Error("audit entry not stored", "err", err, "request_id", rq.id)
	}
}
