package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// settingsServer fakes the settings resource of every project and location: GET
// answers what was last PATCHed (or a default of 250), PATCH applies the fields
// updateMask names. It records each request as "METHOD path?query body".
type settingsServer struct {
	mu    sync.Mutex
	caps  map[string]float64
	calls []string
}

func (s *settingsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	s.calls = append(s.calls, strings.TrimSpace(r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(body)))
	name := strings.TrimPrefix(r.URL.Path, "/v1/")
	if !strings.HasSuffix(name, "/settings") {
		http.Error(w, `{"error":{"code":404,"message":"no","status":"NOT_FOUND"}}`, 404)
		return
	}
	if r.Method == http.MethodPatch {
		var in map[string]any
		json.Unmarshal(body, &in)
		if f, ok := in["throughputCapMibps"].(float64); ok && strings.Contains(r.URL.Query().Get("updateMask"), "throughputCapMibps") {
			s.caps[name] = f
		}
	}
	c, ok := s.caps[name]
	if !ok {
		c = 250
	}
	json.NewEncoder(w).Encode(map[string]any{"name": name, "throughputCapMibps": c})
}

func TestSettingsCommands(t *testing.T) {
	fake := &settingsServer{caps: map[string]float64{}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		args = append(args, "--endpoint", srv.URL, "--insecure-no-auth")
		code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		return out.String() + errb.String(), code
	}
	last := func() string {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		if len(fake.calls) == 0 {
			return ""
		}
		return fake.calls[len(fake.calls)-1]
	}

	out, code := run("settings", "get")
	if code != 0 || !strings.Contains(out, "throughputCapMibps:") || !strings.Contains(out, "250") ||
		last() != "GET /v1/projects/default/locations/local/settings?" {
		t.Fatalf("get: exit %d, call %q:\n%s", code, last(), out)
	}
	out, code = run("settings", "update", "--throughput-cap-mibps", "300", "--project", "p1", "--location", "east")
	if code != 0 || !strings.Contains(out, "300") ||
		last() != `PATCH /v1/projects/p1/locations/east/settings?updateMask=throughputCapMibps {"throughputCapMibps":300}` {
		t.Fatalf("update: exit %d, call %q:\n%s", code, last(), out)
	}
	out, code = run("settings", "get", "--project=p1", "--location=east", "-o", "json")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["throughputCapMibps"] != 300.0 || got["name"] != "projects/p1/locations/east/settings" {
		t.Fatalf("get json: exit %d:\n%s", code, out)
	}
	calls := len(fake.calls)
	for _, bad := range [][]string{
		{"settings", "update"},
		{"settings", "update", "--throughput-cap-mibps", "lots"},
		{"settings", "get", "extra"},
	} {
		if out, code := run(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2:\n%s", bad, code, out)
		}
	}
	if len(fake.calls) != calls {
		t.Errorf("refused command lines reached the server: %v", fake.calls[calls:])
	}
}
