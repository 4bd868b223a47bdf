package api

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// fieldViolation returns the field of an error answer's BadRequest detail.
func fieldViolation(r resp) string {
	e, _ := r.body["error"].(map[string]any)
	details, _ := e["details"].([]any)
	for _, d := range details {
		dm, _ := d.(map[string]any)
		vs, _ := dm["fieldViolations"].([]any)
		for _, v := range vs {
			if f, ok := v.(map[string]any)["field"].(string); ok {
				return f
			}
		}
	}
	return ""
}

// settingsEnv is an API with a server default cap of 250 MiB/s that records the
// OnSettingsChanged calls.
func settingsEnv(t *testing.T) (*env, func() []string) {
	var mu sync.Mutex
	var changed []string
	e := newEnv(t, func(o *Options) {
		o.DefaultThroughputCapMibps = 250
		o.OnSettingsChanged = func(p, l string) { mu.Lock(); changed = append(changed, p+"/"+l); mu.Unlock() }
	})
	return e, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), changed...) }
}

func TestSettingsAPI(t *testing.T) {
	e, changed := settingsEnv(t)
	const path = loc + "/settings"

	// Never set: the server default, no updateTime.
	got := e.ok("GET", path, nil)
	if got["name"] != "projects/p1/locations/us-east4/settings" || got["throughputCapMibps"] != 250.0 || got["updateTime"] != nil {
		t.Fatalf("defaults: %v", got)
	}

	// PATCH answers the settings at once (not an operation) and GET agrees.
	set := e.ok("PATCH", path+"?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": 300})
	if set["throughputCapMibps"] != 300.0 || set["done"] != nil || set["name"] != "projects/p1/locations/us-east4/settings" {
		t.Fatalf("PATCH: %v", set)
	}
	if _, err := time.Parse(time.RFC3339Nano, set["updateTime"].(string)); err != nil || !strings.HasSuffix(set["updateTime"].(string), "Z") {
		t.Fatalf("updateTime %v: %v", set["updateTime"], err)
	}
	if read := e.ok("GET", path, nil); read["throughputCapMibps"] != 300.0 || read["updateTime"] != set["updateTime"] {
		t.Fatalf("GET after PATCH: %v", read)
	}
	if c := changed(); len(c) != 1 || c[0] != "p1/us-east4" {
		t.Fatalf("OnSettingsChanged calls: %v", c)
	}

	// The same PATCH again: the same answer, nothing changed, no wake.
	before := storeState(t, e.st)
	again := e.ok("PATCH", path+"?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": 300})
	if again["throughputCapMibps"] != set["throughputCapMibps"] || again["updateTime"] != set["updateTime"] {
		t.Fatalf("repeated PATCH: %v, first %v", again, set)
	}
	if storeState(t, e.st) != before || len(changed()) != 1 {
		t.Fatal("a repeated PATCH changed the store or woke the controller")
	}

	// Other locations and projects keep the default.
	if other := e.ok("GET", "/v1/projects/p1/locations/us-west1/settings", nil); other["throughputCapMibps"] != 250.0 {
		t.Fatalf("other location: %v", other)
	}
	if other := e.ok("GET", "/v1/projects/p2/locations/us-east4/settings", nil); other["throughputCapMibps"] != 250.0 {
		t.Fatalf("other project: %v", other)
	}

	// snake_case mask, a numeric string.
	if r := e.ok("PATCH", path+"?update_mask=throughput_cap_mibps", map[string]any{"throughput_cap_mibps": "120.5"}); r["throughputCapMibps"] != 120.5 {
		t.Fatalf("snake_case: %v", r)
	}
	// Without updateMask every mutable field applies: a value, then an empty body
	// (back to the server default).
	if r := e.ok("PATCH", path, map[string]any{"throughputCapMibps": 80}); r["throughputCapMibps"] != 80.0 {
		t.Fatalf("no mask: %v", r)
	}
	if r := e.ok("PATCH", path, map[string]any{}); r["throughputCapMibps"] != 250.0 || r["updateTime"] == nil {
		t.Fatalf("no mask, empty body: %v", r)
	}
	if c := changed(); len(c) != 4 {
		t.Fatalf("OnSettingsChanged calls: %v, want one per change (4)", c)
	}
}

func TestSettingsAPIRefusals(t *testing.T) {
	e, changed := settingsEnv(t)
	const path = loc + "/settings"
	e.ok("PATCH", path+"?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": 300})
	before := storeState(t, e.st)
	for _, tc := range []struct {
		name, query string
		body        any
		field, want string
	}{
		{"negative", "?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": -1}, "throughputCapMibps", "from 0"},
		{"too large", "?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": 10_000_001}, "throughputCapMibps", "10000000"},
		{"too large without mask", "", map[string]any{"throughputCapMibps": 1e12}, "throughputCapMibps", "10000000"},
		{"not a number", "?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": "fast"}, "throughputCapMibps", "fast"},
		{"NaN string", "?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": "NaN"}, "throughputCapMibps", "NaN"},
		{"unknown mask field", "?updateMask=throughputCapMibps,iopsCap", map[string]any{"throughputCapMibps": 5}, "updateMask", "iopsCap"},
		{"output-only mask field", "?updateMask=updateTime", map[string]any{}, "updateMask", "updateTime"},
		{"empty mask", "?updateMask=", map[string]any{"throughputCapMibps": 5}, "updateMask", "at least one"},
		{"other name", "?updateMask=throughputCapMibps", map[string]any{"name": "projects/p2/locations/us-east4/settings", "throughputCapMibps": 5}, "name", "does not match"},
		{"not JSON", "?updateMask=throughputCapMibps", "{", "body", "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.fails("PATCH", path+tc.query, tc.body, 400, "INVALID_ARGUMENT")
			if msg := errMessage(r); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.want) {
				t.Errorf("message %q does not name %s (%q)", msg, tc.field, tc.want)
			}
			if f := fieldViolation(r); f != tc.field {
				t.Errorf("field violation %q, want %q", f, tc.field)
			}
		})
	}
	if storeState(t, e.st) != before || len(changed()) != 1 {
		t.Fatal("a refused PATCH changed the store or woke the controller")
	}
	if got := e.ok("GET", path, nil); got["throughputCapMibps"] != 300.0 {
		t.Fatalf("after refusals: %v", got)
	}
	// Settings belong to one location.
	e.fails("GET", "/v1/projects/p1/locations/-/settings", nil, 400, "INVALID_ARGUMENT")
	e.fails("GET", "/v1/projects/p1/locations/mars/settings", nil, 404, "NOT_FOUND")
	e.fails("POST", path, map[string]any{}, 404, "NOT_FOUND")
}
