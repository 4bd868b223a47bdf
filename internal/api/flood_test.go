package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// A flood of badly authenticated requests from one address is rate-limited before
// anything is written and audited in aggregate: the store's audit entries, audit.log
// and the server log stay bounded, and a good token from the same address still works.
func TestUnauthenticatedFlood(t *testing.T) {
	ie := newIAMEnv(t)
	const n = 5000
	var unauth, limited, other atomic.Int64
	var retryAfter atomic.Value
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	cl := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				req, _ := http.NewRequest("POST", ie.srv.URL+loc+"/storagePools?storagePoolId=px", strings.NewReader(`{}`))
				req.Header.Set("Authorization", "Bearer not.a.token")
				res, err := cl.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				switch res.StatusCode {
				case 401:
					unauth.Add(1)
				case 429:
					limited.Add(1)
					retryAfter.Store(res.Header.Get("Retry-After"))
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if other.Load() != 0 || unauth.Load()+limited.Load() != n {
		t.Fatalf("401: %d, 429: %d, other: %d", unauth.Load(), limited.Load(), other.Load())
	}
	if unauth.Load() > 100 || limited.Load() == 0 {
		t.Fatalf("bad tokens not rate-limited: %d answered 401, %d 429", unauth.Load(), limited.Load())
	}
	if ra, _ := retryAfter.Load().(string); ra == "" {
		t.Fatal("429 without Retry-After")
	} else if s, err := strconv.Atoi(ra); err != nil || s < 1 {
		t.Fatalf("Retry-After %q", ra)
	}
	// The same address with a good token is served.
	if _, err := ie.call(ie.owner, "GET", loc+"/volumes", nil); err != nil {
		t.Fatalf("good token refused after the flood: %v", err)
	}
	ie.api.Close() // writes what is still being aggregated

	var entries []*model.AuditEntry
	ie.st.View(context.Background(), func(tx store.Tx) (err error) {
		entries, err = store.List[model.AuditEntry](tx, store.KindAudit, "")
		return err
	})
	total := 0
	for _, e := range entries {
		if e.Client == "127.0.0.1" && e.Principal == "" {
			total += e.Count
		}
	}
	if len(entries) > 3 {
		t.Errorf("%d audit entries in the store for one flood, want at most 3", len(entries))
	}
	if total != n {
		t.Errorf("audit entries count %d refused calls, want %d", total, n)
	}
	listed, err := ie.call(ie.owner, "GET", "/v1/projects/p1/auditLogs?filter=count%3E1", nil)
	if err != nil || len(listed["entries"].([]any)) != 1 {
		t.Errorf("aggregated entry not listed with its count: %v %v", listed, err)
	}
	if lines := strings.Count(ie.audit.String(), "\n"); lines > 3 || ie.audit.Len() > 2048 {
		t.Errorf("audit.log grew to %d lines, %d bytes:\n%s", lines, ie.audit.Len(), ie.audit.String())
	}
	if lines := strings.Count(ie.log.String(), "\n"); lines > 20 {
		t.Errorf("server log grew to %d lines", lines)
	}
	logged := 0
	for _, m := range regexp.MustCompile(`msg="refused calls" client=127.0.0.1 principal="" .*count=(\d+)`).FindAllStringSubmatch(ie.log.String(), -1) {
		c, _ := strconv.Atoi(m[1])
		logged += c
	}
	if logged != n {
		t.Errorf("log lines count %d refused calls, want %d:\n%s", logged, n, ie.log.String())
	}
}

func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5555":                   "127.0.0.1",
		"[::ffff:10.0.0.1]:80":             "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:443":       "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:4:5:6%eth0]:1": "2001:db8:1:2::/64",
		"not-an-address":                   "not-an-address",
	} {
		if got := clientKey(in); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", in, got, want)
		}
	}
}

type failingBody struct{}

func (failingBody) Read([]byte) (int, error) {
	return 0, errors.New("read tcp 127.0.0.1:8780->127.0.0.1:40000: i/o timeout")
}
func (failingBody) Close() error { return nil }

// A body that cannot be read is a 400 that says so, without the network's details.
func TestBodyReadErrorsAreSafe(t *testing.T) {
	e := newEnv(t)
	req := httptest.NewRequest("POST", loc+"/storagePools?storagePoolId=p", nil)
	req.Body = failingBody{}
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, req)
	if rec.Code != 400 || strings.Contains(rec.Body.String(), "tcp") || !strings.Contains(rec.Body.String(), "body") {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	r := e.fails("POST", loc+"/storagePools?storagePoolId=p", strings.Repeat(" ", maxBody+1), 400, "INVALID_ARGUMENT")
	if !strings.Contains(errMessage(r), "1 MiB") {
		t.Fatalf("oversized body: %s", r.raw)
	}
}
