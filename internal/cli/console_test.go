package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestConsoleLink: basin console asks the API for a sign-in link and prints it on
// the endpoint (or --url), with the project and location in the fragment.
func TestConsoleLink(t *testing.T) {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/consoleSignInLinks" {
			http.Error(w, `{"error":{"code":404,"message":"no"}}`, 404)
			return
		}
		calls++
		w.Write([]byte(`{"path":"/console/#signin=CODE","expireTime":"2026-11-26T12:05:00Z","principal":"basin-owner@basin.iam.basin.internal"}`))
	}))
	defer srv.Close()
	out, errs, code := runAgainst(srv, "console", "--project", "p 1", "--location", "us-east4")
	if code != 0 || calls != 1 {
		t.Fatalf("exit %d, %d calls: %s%s", code, calls, out, errs)
	}
	if want := srv.URL + "/console/#signin=CODE&project=p+1&location=us-east4"; !strings.Contains(out, want) || !strings.Contains(out, "basin-owner@") {
		t.Fatalf("output %q lacks %s", out, want)
	}
	out, _, code = runAgainst(srv, "console", "--url", "https://nas.example:8443/console/")
	if code != 0 || !strings.Contains(out, "https://nas.example:8443/console/#signin=CODE&project=default&location=local") {
		t.Fatalf("--url: exit %d: %s", code, out)
	}
	for _, bad := range [][]string{{"console", "--url", "ftp://x"}, {"console", "extra"}} {
		if _, errs, code := runAgainst(srv, bad...); code == 0 || errs == "" {
			t.Errorf("%v: exit %d", bad, code)
		}
	}
}
