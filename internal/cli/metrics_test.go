package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// testNow is the clock of the commands under test.
var testNow = time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)

// nan is an unknown value in a fixture: the API's null.
var nan = math.NaN()

// volumeFixture is what the fake server knows of one volume: its pool and, per
// metric, the values of consecutive points (NaN: null). gone answers its
// metrics with 404, as for a volume deleted after it was listed.
type volumeFixture struct {
	pool   string
	limit  float64 // throughputMibps
	series map[string][]float64
	gone   bool
}

// metricsServer fakes the volume list, the volume reads and the volume metrics
// API of project default, location local: it answers the metrics asked for (in
// the order asked), one point per value, 10 s apart from startTime aligned to
// 10 s; like the real server, only the points whose interval ended by endTime
// (and by sampledTo, if set), and a metric it has no fixture for is 400 naming
// the parameter. It records each metrics query.
type metricsServer struct {
	vols map[string]volumeFixture
	// badStep, if set, is the 400 message for every metrics query.
	badStep string
	// sampledTo, if set, is how far Basin has sampled; each metrics query
	// moves it on by sampling (as time passes between a command's queries).
	sampledTo time.Time
	sampling  time.Duration

	mu      sync.Mutex
	queries []url.Values
}

func (s *metricsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const parent = "/v1/projects/default/locations/local/volumes"
	fail := func(code int, status, msg string) {
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "status": status, "message": msg}})
	}
	if r.URL.Path == parent {
		// Two pages, to see that top reads them all.
		var ids []string
		for id := range s.vols {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		page, next := ids[:len(ids)/2], "p2"
		if r.URL.Query().Get("pageToken") == "p2" {
			page, next = ids[len(ids)/2:], ""
		}
		var items []map[string]any
		for _, id := range page {
			items = append(items, map[string]any{"name": strings.TrimPrefix(parent, "/v1/") + "/" + id, "storagePool": s.vols[id].pool})
		}
		json.NewEncoder(w).Encode(map[string]any{"volumes": items, "nextPageToken": next})
		return
	}
	if v, ok := s.vols[strings.TrimPrefix(r.URL.Path, parent+"/")]; ok && !v.gone {
		json.NewEncoder(w).Encode(map[string]any{"name": strings.TrimPrefix(r.URL.Path, "/v1/"), "storagePool": v.pool, "throughputMibps": v.limit})
		return
	}
	id, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, parent+"/"), "/metrics")
	v, known := s.vols[id]
	if !ok || !known || v.gone {
		fail(404, "NOT_FOUND", "no such volume")
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	s.queries = append(s.queries, q)
	s.mu.Unlock()
	if s.badStep != "" {
		fail(400, "INVALID_ARGUMENT", "step: "+s.badStep)
		return
	}
	start, err := time.Parse(time.RFC3339, q.Get("startTime"))
	if err != nil {
		fail(400, "INVALID_ARGUMENT", "startTime: bad")
		return
	}
	start = start.Truncate(10 * time.Second)
	last, _ := time.Parse(time.RFC3339, q.Get("endTime")) // zero: none
	s.mu.Lock()
	if !s.sampledTo.IsZero() && (last.IsZero() || s.sampledTo.Before(last)) {
		last = s.sampledTo
	}
	s.sampledTo = s.sampledTo.Add(s.sampling)
	s.mu.Unlock()
	units := map[string]string{"usedBytes": "By", "readMibps": "MiB/s", "writeMibps": "MiB/s", "readLatencyMs": "ms", "writeLatencyMs": "ms",
		"atLimitShare": "1", "concurrency": "1", "clients": "1"}
	var series []map[string]any
	for _, m := range strings.Split(q.Get("metric"), ",") {
		vals, ok := v.series[m]
		if !ok {
			fail(400, "INVALID_ARGUMENT", "metric: unknown metric \""+m+"\"")
			return
		}
		unit := units[m]
		if unit == "" {
			unit = "1/s"
		}
		points := []map[string]any{}
		for i, val := range vals {
			t := start.Add(time.Duration(i) * 10 * time.Second)
			if !last.IsZero() && t.Add(10*time.Second).After(last) {
				break
			}
			pt := map[string]any{"time": t.Format(time.RFC3339), "value": nil}
			if !math.IsNaN(val) {
				pt["value"] = val
			}
			points = append(points, pt)
		}
		series = append(series, map[string]any{"metric": m, "unit": unit, "points": points})
	}
	step := q.Get("step")
	if step == "" {
		step = "10s" // the real server's default for up to 3 hours
	}
	json.NewEncoder(w).Encode(map[string]any{"volume": strings.TrimPrefix(parent, "/v1/") + "/" + id,
		"startTime": q.Get("startTime"), "endTime": q.Get("endTime"), "step": step, "series": series})
}

func (s *metricsServer) lastQuery() url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queries) == 0 {
		return nil
	}
	return s.queries[len(s.queries)-1]
}

// runAgainst runs the CLI against srv at testNow and returns its output,
// stderr and exit code.
func runAgainst(srv *httptest.Server, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	args = append(args, "--endpoint", srv.URL, "--insecure-no-auth")
	code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Now: func() time.Time { return testNow }})
	return out.String(), errb.String(), code
}

func TestSparkline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vals  []float64
		width int
		want  string
	}{
		{"every bar, from zero", []float64{0, 1, 2, 3, 4, 5, 6, 7}, 60, "▁▂▃▄▅▆▇█"},
		{"scaled from zero, not from the lowest", []float64{50, 100}, 60, "▅█"},
		{"unknown is a gap", []float64{1, nan, 1, 2}, 60, "▅ ▅█"},
		{"all zero", []float64{0, 0, 0}, 60, "▁▁▁"},
		{"nothing known", []float64{nan, nan}, 60, "  "},
		{"squeezed to the width by means", []float64{0, 0, 7, 7, nan, nan, 1, 3}, 4, "▁█ ▃"},
		{"empty", nil, 60, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sparkline(tc.vals, tc.width); got != tc.want {
				t.Errorf("sparkline(%v, %d) = %q, want %q", tc.vals, tc.width, got, tc.want)
			}
		})
	}
}

func TestVolumeMetrics(t *testing.T) {
	readIops := make([]float64, 90)
	for i := range readIops {
		readIops[i] = float64(i % 30 * 100)
	}
	readIops[40], readIops[41] = nan, nan
	fake := &metricsServer{vols: map[string]volumeFixture{"vol1": {pool: "pool1", series: map[string][]float64{
		"readIops":      readIops,
		"readLatencyMs": {0.5, 0.75, nan, 2.25},
		"usedBytes":     {5 << 30, 5<<30 + 512<<20, 6 << 30},
		"writeIops":     {nan, nan},
	}}}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)

	out, errs, code := runAgainst(srv, "volumes", "metrics", "vol1", "--since", "15m", "--metric", "readIops,readLatencyMs", "--metric=usedBytes", "--metric", "writeIops")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	golden(t, "volume_metrics.txt", out)
	q := fake.lastQuery()
	if q.Get("startTime") != "2026-11-23T12:45:00Z" || q.Get("endTime") != "2026-11-23T13:00:00Z" || q.Get("step") != "10s" ||
		q.Get("metric") != "readIops,readLatencyMs,usedBytes,writeIops" {
		t.Errorf("query %v", q)
	}

	// -o json is the API's answer, whatever the table would leave out.
	out, errs, code = runAgainst(srv, "volumes", "metrics", "vol1", "--metric", "readLatencyMs", "--since=2d", "--step", "5m", "-o", "json")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("json: exit %d: %s%s", code, out, errs)
	}
	series := got["series"].([]any)[0].(map[string]any)
	if got["volume"] != "projects/default/locations/local/volumes/vol1" || got["step"] != "5m0s" || series["metric"] != "readLatencyMs" ||
		len(series["points"].([]any)) != 4 || series["points"].([]any)[2].(map[string]any)["value"] != nil {
		t.Errorf("json: %s", out)
	}
	if q := fake.lastQuery(); q.Get("startTime") != "2026-11-21T13:00:00Z" || q.Get("step") != "5m0s" {
		t.Errorf("query %v", q)
	}

	// Without --metric: the main metrics.
	fake.vols["vol1"].series["metadataIops"] = []float64{1}
	runAgainst(srv, "volumes", "metrics", "vol1")
	if q := fake.lastQuery(); q.Get("metric") != strings.Join(mainMetrics, ",") || q.Get("startTime") != "2026-11-23T12:00:00Z" {
		t.Errorf("default query %v", q)
	}
}

// Bad flags are refused before the server is asked, naming the flag; what only
// the server can judge comes back under the flag that set it.
func TestVolumeMetricsBadFlags(t *testing.T) {
	fake := &metricsServer{vols: map[string]volumeFixture{"vol1": {series: map[string][]float64{"readIops": {1}}}}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "0s"}, "--since must be a positive duration"},
		{[]string{"--since=yesterday"}, "--since must be a positive duration"},
		{[]string{"--since=1.5d"}, "--since must be a positive duration"},
		{[]string{"--step", "-10s"}, "--step must be a positive duration"},
		{[]string{"--metric", "readIops,,writeIops"}, "--metric: empty metric name"},
		{[]string{"--steps=10s"}, "unknown flag --steps"},
	} {
		_, errs, code := runAgainst(srv, append([]string{"volumes", "metrics", "vol1"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q: %s", tc.args, code, tc.want, errs)
		}
	}
	if _, errs, code := runAgainst(srv, "volumes", "metrics"); code != 2 || !strings.Contains(errs, "expected VOLUME") {
		t.Errorf("no volume: exit %d: %s", code, errs)
	}
	if q := fake.lastQuery(); q != nil {
		t.Errorf("refused command lines reached the server: %v", q)
	}

	if _, errs, code := runAgainst(srv, "volumes", "metrics", "vol1", "--metric", "readIops,iopz"); code != 1 || !strings.Contains(errs, `--metric: unknown metric "iopz"`) {
		t.Errorf("unknown metric: exit %d: %s", code, errs)
	}
	fake.badStep = "below 5m0s it must be a multiple of 10s"
	if _, errs, code := runAgainst(srv, "volumes", "metrics", "vol1", "--step", "15s"); code != 1 ||
		errs != "basin volumes metrics: --step: below 5m0s it must be a multiple of 10s\n" {
		t.Errorf("bad step: exit %d: %q, want it said once", code, errs)
	}
}

// Without --step the step follows --since: the finest of the API's steps that
// keeps to about 360 points, so that a short run stands out in a long window.
func TestVolumeMetricsDefaultStep(t *testing.T) {
	fake := &metricsServer{vols: map[string]volumeFixture{"vol1": {series: map[string][]float64{"readIops": {1}}}}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	for since, want := range map[string]string{"2m": "10s", "15m": "10s", "1h": "10s", "90m": "20s", "3h": "30s", "6h": "1m0s",
		"12h": "2m0s", "13h": "5m0s", "24h": "5m0s", "2d": "10m0s", "7d": "30m0s", "30d": "2h0m0s", "400d": "48h0m0s"} {
		if _, errs, code := runAgainst(srv, "volumes", "metrics", "vol1", "--metric", "readIops", "--since", since); code != 0 {
			t.Fatalf("--since %s: exit %d: %s", since, code, errs)
		}
		if got := fake.lastQuery().Get("step"); got != want {
			t.Errorf("--since %s: step %q, want %s", since, got, want)
		}
	}
	runAgainst(srv, "volumes", "metrics", "vol1", "--metric", "readIops", "--since", "6h", "--step", "10s")
	if got := fake.lastQuery().Get("step"); got != "10s" {
		t.Errorf("--step 10s: step %q", got)
	}
}

// Small values are written with fixed decimals, shares as percentages, counts
// (clients) as counts; the header says what a point is.
func TestVolumeMetricsUnits(t *testing.T) {
	fake := &metricsServer{vols: map[string]volumeFixture{"vol1": {series: map[string][]float64{
		"atLimitShare": {0, 0.5, 2.1e-06},
		"clients":      {1, 0.5, 2},
		"concurrency":  {2.1e-06, 0.004, 1.5},
		"readMibps":    {0.0005, 0.02, 0},
	}}}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	out, errs, code := runAgainst(srv, "volumes", "metrics", "vol1", "--metric", "atLimitShare,clients,concurrency,readMibps", "--since", "6h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	golden(t, "volume_metrics_units.txt", out)
	if regexp.MustCompile(`\de-?\d`).MatchString(out) {
		t.Errorf("a number with an exponent:\n%s", out)
	}
	for _, row := range strings.Split(out, "\n")[3:] {
		if f := strings.Fields(row); len(f) > 1 && f[1] == "1" {
			t.Errorf("unit 1: %s", row)
		}
	}
	if !strings.Contains(out, "mean over its step") {
		t.Errorf("the header does not say what a point is:\n%s", out)
	}
}
