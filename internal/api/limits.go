package api

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
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
	if wait, err := s.overRate(rq.principal, rq.r.RemoteAddr); err != nil {
		retryAfter(rq, wait)
		s.writeError(rq, err)
		return true
	}
	return false
}

// overRate returns the RESOURCE_EXHAUSTED error of a caller (its principal, or
// unauthenticated, its address remote) over the rate limit, and how long it
// should wait; nil if it is not.
func (s *Server) overRate(p *iam.Principal, remote string) (time.Duration, error) {
	key := "addr:" + clientKey(remote)
	if p != nil {
		key = p.Email
	}
	ok, wait := s.limits.allow(key)
	if ok {
		return 0, nil
	}
	return wait, model.Errorf(model.ErrResourceExhausted, "Quota exceeded: %s may make %d requests per minute; retry after %s",
		strings.TrimPrefix(key, "addr:"), s.limits.perMinute, wait.Round(time.Second))
}

// authFailed answers a call whose credentials were missing or invalid: 401, or 429
// once its address is over the failed-authentication limit. Such calls are only
// audited in aggregate, so a flood of them costs no write per call.
func (s *Server) authFailed(rq *request, reason error) {
	noteAuthRefusal(rq, reason)
	wait, err := s.refuseAuth(reason, rq.r.RemoteAddr)
	if wait > 0 {
		retryAfter(rq, wait)
	} else {
		rq.w.Header().Set("WWW-Authenticate", `Bearer realm="basin"`)
	}
	s.writeError(rq, err)
}

// noteAuthRefusal marks a call whose credentials were refused for reason to be
// audited in aggregate.
func noteAuthRefusal(rq *request, reason error) {
	rq.aggregate = true
	rq.reason = reason.Error()
	// A token that verified with its key names its account (the 401 says
	// so): the refusal is audited under it.
	var named interface{ Principal() string }
	if errors.As(reason, &named) {
		rq.refusedAs = named.Principal()
	}
}

// refuseAuth returns the error a caller at address remote whose credentials were
// refused for reason is answered: UNAUTHENTICATED, or RESOURCE_EXHAUSTED (with
// how long to wait) once the address is over the failed-authentication limit.
func (s *Server) refuseAuth(reason error, remote string) (time.Duration, error) {
	if ok, wait := s.authFailures.allow(clientKey(remote)); !ok {
		return wait, model.Errorf(model.ErrResourceExhausted, "Too many requests with invalid credentials from %s; retry after %s",
			hostOf(remote), wait.Round(time.Second))
	}
	msg := "Request had invalid authentication credentials. Expected a valid Bearer token signed by a Basin service-account key."
	// A token signed by the key it names may be told what is wrong with it (a
	// disabled account, an expired key): its sender holds the key.
	var pub interface{ Public() string }
	if errors.As(reason, &pub) && pub.Public() != "" {
		msg = "Request had invalid authentication credentials: " + pub.Public() + "."
	}
	return 0, model.Errorf(model.ErrUnauthenticated, "%s", msg)
}

func (s *Server) tooMany(rq *request, wait time.Duration, msg string) {
	retryAfter(rq, wait)
	s.writeError(rq, model.Errorf(model.ErrResourceExhausted, "%s", msg))
}

// retryAfter marks a call refused for a rate limit (audited in aggregate) and
// tells the client when to try again, in whole seconds.
func retryAfter(rq *request, wait time.Duration) {
	rq.aggregate = true
	rq.w.Header().Set("Retry-After", fmt.Sprint(max(1, int(math.Ceil(wait.Seconds())))))
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
