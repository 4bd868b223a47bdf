package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// fakeMetrics records the queries it is asked and answers one point per metric.
type fakeMetrics struct {
	mu      sync.Mutex
	queries []model.MetricsQuery
	// keys are the storage keys of each aggregate query (nil for a volume's).
	keys [][]string
}

func (f *fakeMetrics) QueryAggregate(ctx context.Context, q model.MetricsQuery, keys []string) ([]model.MetricSeries, error) {
	out, err := f.Query(ctx, q)
	f.mu.Lock()
	f.keys[len(f.keys)-1] = slices.Sorted(slices.Values(keys))
	f.mu.Unlock()
	return out, err
}

func (f *fakeMetrics) Query(_ context.Context, q model.MetricsQuery) ([]model.MetricSeries, error) {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.keys = append(f.keys, nil)
	f.mu.Unlock()
	var out []model.MetricSeries
	for _, m := range q.Metrics {
		out = append(out, model.MetricSeries{Metric: m, Unit: "1/s", Points: []model.MetricPoint{
			{Time: q.Start, Value: 2.5, Min: 1, Max: 4},
			{Time: q.Start.Add(q.Step), Value: math.NaN(), Min: math.NaN(), Max: math.NaN()},
		}})
	}
	return out, nil
}

func (f *fakeMetrics) lastKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[len(f.keys)-1]
}

func (f *fakeMetrics) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queries)
}

func (f *fakeMetrics) last() model.MetricsQuery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries[len(f.queries)-1]
}

// Viewers read a volume's metrics; callers without a role get 403, without
// credentials 401; bad parameters are 400 naming the parameter.
func TestVolumeMetrics(t *testing.T) {
	fm := &fakeMetrics{}
	ie := newIAMEnv(t, func(o *Options) { o.FailedAuthLimit = -1; o.Metrics = fm })
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{loc + "/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": 1, "capacityGib": "100", "network": "projects/p1/global/networks/default"}},
		{loc + "/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}}},
	} {
		if _, err := ie.call(ie.owner, "POST", c.path, c.body); err != nil {
			t.Fatalf("POST %s: %v", c.path, err)
		}
	}
	settle(t, ie.st)
	key := ie.volumeRecord("vol1").Key
	viewer, viewerEmail := ie.account("viewer")
	nobody, _ := ie.account("nobody")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(viewerEmail)}})

	path := loc + "/volumes/vol1/metrics"
	q := url.Values{"metric": {"readIops,writeIops", "clients"}, "startTime": {"2026-11-23T12:00:00Z"},
		"endTime": {"2026-11-23T13:00:00Z"}, "step": {"5m"}}
	var got struct {
		Volume, StartTime, EndTime, Step string
		Series                           []struct {
			Metric, Unit string
			Points       []map[string]any
		}
	}
	if err := viewer.Do(context.Background(), http.MethodGet, path, q, nil, &got); err != nil {
		t.Fatalf("viewer: %v", err)
	}
	want := model.MetricsQuery{Series: key, Metrics: []string{"readIops", "writeIops", "clients"},
		Start: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), End: time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC), Step: 5 * time.Minute}
	if lq := fm.last(); lq.Series != want.Series || !slices.Equal(lq.Metrics, want.Metrics) || !lq.Start.Equal(want.Start) || !lq.End.Equal(want.End) || lq.Step != want.Step {
		t.Fatalf("query %+v, want %+v", lq, want)
	}
	if got.Volume != "projects/p1/locations/us-east4/volumes/vol1" || got.Step != "5m0s" || len(got.Series) != 3 || got.Series[2].Metric != "clients" {
		t.Fatalf("answer %+v", got)
	}
	pts := got.Series[0].Points
	if len(pts) != 2 || pts[0]["time"] != "2026-11-23T12:00:00Z" || pts[0]["value"] != 2.5 || pts[0]["min"] != 1.0 || pts[0]["max"] != 4.0 {
		t.Fatalf("first point %v", pts)
	}
	if v, ok := pts[1]["value"]; !ok || v != nil || pts[1]["min"] != nil {
		t.Fatalf("an unknown value must be null (and min/max absent): %v", pts[1])
	}

	// Defaults: the last hour at 10 s; a day at 5 minutes.
	if err := viewer.Do(context.Background(), http.MethodGet, path, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if lq := fm.last(); lq.End.Sub(lq.Start) != time.Hour || lq.Step != 10*time.Second || time.Since(lq.End) > time.Minute {
		t.Fatalf("default query %+v", lq)
	}
	if err := viewer.Do(context.Background(), http.MethodGet, path, url.Values{"startTime": {"2026-11-01T00:00:00Z"}, "endTime": {"2026-11-02T00:00:00Z"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if lq := fm.last(); lq.Step != 5*time.Minute {
		t.Fatalf("default step over a day %v, want 5m", lq.Step)
	}

	n := len(fm.queries)
	checkRefused(t, []refusedCase{
		{"no role", nobody, path, nil, http.StatusForbidden, ""},
		{"unknown volume", viewer, loc + "/volumes/nope/metrics", nil, http.StatusNotFound, ""},
		{"empty metric", viewer, path, url.Values{"metric": {"readIops,"}}, http.StatusBadRequest, "metric"},
		{"bad startTime", viewer, path, url.Values{"startTime": {"yesterday"}}, http.StatusBadRequest, "startTime"},
		{"bad endTime", viewer, path, url.Values{"endTime": {"2026-13-01T00:00:00Z"}}, http.StatusBadRequest, "endTime"},
		{"end before start", viewer, path, url.Values{"startTime": {"2026-11-23T12:00:00Z"}, "endTime": {"2026-11-23T11:00:00Z"}}, http.StatusBadRequest, "endTime"},
		{"bad step", viewer, path, url.Values{"step": {"ten seconds"}}, http.StatusBadRequest, "step"},
		{"negative step", viewer, path, url.Values{"step": {"-10s"}}, http.StatusBadRequest, "step"},
	})
	if len(fm.queries) != n {
		t.Fatalf("refused calls reached the sampler: %d queries, want %d", len(fm.queries), n)
	}
	if r := ie.do(http.MethodGet, path, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("without credentials: %d, want 401", r.status)
	}
}

// A pool's and a location's metrics combine their volumes' (those with storage;
// location "-": every location), with the volume route's parameters, errors and
// permission: viewers read them, callers without a role get 403, without
// credentials 401; bad parameters are 400 naming the parameter.
func TestAggregateMetrics(t *testing.T) {
	fm := &fakeMetrics{}
	ie := newIAMEnv(t, func(o *Options) { o.FailedAuthLimit = -1; o.Metrics = fm })
	west := "/v1/projects/p1/locations/us-west1"
	pool := map[string]any{"serviceLevel": 1, "capacityGib": "100", "network": "projects/p1/global/networks/default"}
	vol := func(id, pool string) map[string]any {
		return map[string]any{"shareName": id, "storagePool": pool, "capacityGib": "1", "protocols": []string{"NFSV3"}}
	}
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{loc + "/storagePools?storagePoolId=pool1", pool},
		{loc + "/storagePools?storagePoolId=pool2", pool},
		{loc + "/storagePools?storagePoolId=empty", pool},
		{west + "/storagePools?storagePoolId=pool1", pool},
		{loc + "/volumes?volumeId=a", vol("a", "pool1")},
		{loc + "/volumes?volumeId=b", vol("b", "pool1")},
		{loc + "/volumes?volumeId=c", vol("c", "pool2")},
		{west + "/volumes?volumeId=w", vol("w", "pool1")},
	} {
		if _, err := ie.call(ie.owner, "POST", c.path, c.body); err != nil {
			t.Fatalf("POST %s: %v", c.path, err)
		}
	}
	settle(t, ie.st)
	key := func(id string) string { return ie.volumeRecord(id).Key }
	a, b, c := key("a"), key("b"), key("c")
	var w string
	ie.st.View(context.Background(), func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, "projects/p1/locations/us-west1/volumes/w")
		if err == nil {
			w = v.Key
		}
		return err
	})
	viewer, viewerEmail := ie.account("viewer")
	nobody, _ := ie.account("nobody")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(viewerEmail)}})

	q := url.Values{"metric": {"readIops,readLatencyMs"}, "startTime": {"2026-11-23T12:00:00Z"},
		"endTime": {"2026-11-23T13:00:00Z"}, "step": {"5m"}}
	for _, tc := range []struct {
		path, name string
		keys       []string
	}{
		{loc + "/storagePools/pool1/metrics", "projects/p1/locations/us-east4/storagePools/pool1", []string{a, b}},
		{loc + "/storagePools/pool2/metrics", "projects/p1/locations/us-east4/storagePools/pool2", []string{c}},
		{loc + "/storagePools/empty/metrics", "projects/p1/locations/us-east4/storagePools/empty", nil},
		{west + "/storagePools/pool1/metrics", "projects/p1/locations/us-west1/storagePools/pool1", []string{w}},
		{loc + "/metrics", "projects/p1/locations/us-east4", []string{a, b, c}},
		{"/v1/projects/p1/locations/-/metrics", "projects/p1/locations/-", []string{a, b, c, w}},
	} {
		var got struct {
			Name                     string
			VolumeCount              int
			StartTime, EndTime, Step string
			Series                   []struct{ Metric string }
		}
		if err := viewer.Do(context.Background(), http.MethodGet, tc.path, q, nil, &got); err != nil {
			t.Fatalf("viewer %s: %v", tc.path, err)
		}
		want := slices.Sorted(slices.Values(tc.keys))
		if lk := fm.lastKeys(); !slices.Equal(lk, want) {
			t.Errorf("%s: combined %v, want %v", tc.path, lk, want)
		}
		lq := fm.last()
		if !slices.Equal(lq.Metrics, []string{"readIops", "readLatencyMs"}) || lq.Step != 5*time.Minute ||
			!lq.Start.Equal(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)) || !lq.End.Equal(time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)) {
			t.Errorf("%s: query %+v", tc.path, lq)
		}
		if got.Name != tc.name || got.VolumeCount != len(tc.keys) || got.Step != "5m0s" || got.StartTime != "2026-11-23T12:00:00Z" ||
			len(got.Series) != 2 || got.Series[1].Metric != "readLatencyMs" {
			t.Errorf("%s: answer %+v", tc.path, got)
		}
	}

	pool1 := loc + "/storagePools/pool1/metrics"
	n := fm.count()
	checkRefused(t, []refusedCase{
		{"no role: pool", nobody, pool1, nil, http.StatusForbidden, ""},
		{"no role: location", nobody, loc + "/metrics", nil, http.StatusForbidden, ""},
		{"unknown pool", viewer, loc + "/storagePools/nope/metrics", nil, http.StatusNotFound, ""},
		{"unknown location", viewer, "/v1/projects/p1/locations/mars/metrics", nil, http.StatusNotFound, ""},
		{"empty metric", viewer, pool1, url.Values{"metric": {"readIops,"}}, http.StatusBadRequest, "metric"},
		{"bad startTime", viewer, loc + "/metrics", url.Values{"startTime": {"yesterday"}}, http.StatusBadRequest, "startTime"},
		{"bad endTime", viewer, pool1, url.Values{"endTime": {"2026-13-01T00:00:00Z"}}, http.StatusBadRequest, "endTime"},
		{"end before start", viewer, loc + "/metrics", url.Values{"startTime": {"2026-11-23T12:00:00Z"}, "endTime": {"2026-11-23T11:00:00Z"}}, http.StatusBadRequest, "endTime"},
		{"bad step", viewer, pool1, url.Values{"step": {"ten seconds"}}, http.StatusBadRequest, "step"},
		{"negative step", viewer, loc + "/metrics", url.Values{"step": {"-10s"}}, http.StatusBadRequest, "step"},
	})
	if fm.count() != n {
		t.Fatalf("refused calls reached the sampler: %d queries, want %d", fm.count(), n)
	}
	for _, p := range []string{pool1, loc + "/metrics"} {
		if r := ie.do(http.MethodGet, p, nil); r.status != http.StatusUnauthorized {
			t.Fatalf("%s without credentials: %d, want 401", p, r.status)
		}
	}
}

// refusedCase is a metrics call that must be refused with status, naming field
// in the message when it is a 400.
type refusedCase struct {
	name   string
	c      *client.Client
	path   string
	q      url.Values
	status int
	field  string
}

func checkRefused(t *testing.T, cases []refusedCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Do(context.Background(), http.MethodGet, tc.path, tc.q, nil, nil)
			var ae *client.Error
			if !errors.As(err, &ae) || ae.HTTPStatus != tc.status {
				t.Fatalf("%v, want %d", err, tc.status)
			}
			if tc.field != "" && !strings.HasPrefix(ae.Message, tc.field+": ") {
				t.Fatalf("message %q does not name %s", ae.Message, tc.field)
			}
		})
	}
}

// The wire form of a volume's and a pool's metrics: unknown values null, min and
// max only where known.
func TestMetricsGoldenJSON(t *testing.T) {
	start := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	q := model.MetricsQuery{Start: start, End: start.Add(10 * time.Minute), Step: 5 * time.Minute}
	series, _ := (&fakeMetrics{}).Query(context.Background(), model.MetricsQuery{Metrics: []string{"readIops"}, Start: start, Step: q.Step})
	golden(t, "metrics_volume", metricsToWire("projects/p1/locations/us-east4/volumes/vol1", q, series))
	agg := []model.MetricSeries{{Metric: "readLatencyMs", Unit: "ms", Points: []model.MetricPoint{
		{Time: start, Value: 2.5, Min: math.NaN(), Max: math.NaN()},
		{Time: start.Add(q.Step), Value: math.NaN(), Min: math.NaN(), Max: math.NaN()}}}}
	golden(t, "metrics_pool", aggregateToWire("projects/p1/locations/us-east4/storagePools/pool1", 2, q, agg))
}
