package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/api"
)

// The mux serves the API under /v1/ and the probes beside it; any other path gets
// the API's 404 body. Probes are logged at debug level only.
func TestMux(t *testing.T) {
	var logs bytes.Buffer
	ready := false
	a := api.New(api.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Ready: func() bool { return ready }})
	srv := httptest.NewServer(newMux(a))
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	message := func(body string) string {
		var e struct {
			Error struct{ Message, Status string }
		}
		json.Unmarshal([]byte(body), &e)
		return e.Error.Status + " " + e.Error.Message
	}
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/healthz", 200, "ok\n"},
		{"/readyz", 503, "not ready\n"},
		{"/v1/foo", 404, "NOT_FOUND Method GET /v1/foo is not defined by this API"},
		{"/metrics", 404, "NOT_FOUND The requested URL /metrics was not found on this server"},
		{"/", 404, "NOT_FOUND The requested URL / was not found on this server"},
	} {
		status, body := get(tc.path)
		if status >= 400 && strings.HasPrefix(body, "{") {
			body = message(body)
		}
		if status != tc.status || body != tc.body {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, status, body, tc.status, tc.body)
		}
	}
	ready = true
	if status, body := get("/readyz"); status != 200 || body != "ready\n" {
		t.Errorf("GET /readyz when ready: %d %q", status, body)
	}
	levels := map[string]string{}
	for _, line := range strings.Split(logs.String(), "\n") {
		for _, p := range []string{"/healthz", "/readyz", "/v1/foo"} {
			if strings.Contains(line, "msg=request") && strings.Contains(line, "path="+p+" ") {
				levels[p] = strings.Fields(line)[1]
			}
		}
	}
	want := map[string]string{"/healthz": "level=DEBUG", "/readyz": "level=DEBUG", "/v1/foo": "level=INFO"}
	for p, l := range want {
		if levels[p] != l {
			t.Errorf("%s logged at %q, want %q:\n%s", p, levels[p], l, logs.String())
		}
	}
}

// The console's files and its sign-in exchange sit beside the API.
func TestMuxConsole(t *testing.T) {
	a := api.New(api.Options{})
	srv := httptest.NewServer(newMux(a))
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Security-Policy") == "" || !strings.Contains(string(b), "app.js") {
		t.Fatalf("GET /console (redirected to /console/): %d %v", res.StatusCode, res.Header)
	}
	res, err = http.Post(srv.URL+"/console/signin", "application/json", strings.NewReader(`{"code":"nope"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Fatalf("POST /console/signin with a made-up code: %d, want 401", res.StatusCode)
	}
}
