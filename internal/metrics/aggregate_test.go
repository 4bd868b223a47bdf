package metrics

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

// A group's metrics: rates (wire bytes and drops too), space, clients and limits summed over its volumes,
// latency weighted by each volume's requests, atLimitShare the most throttled
// volume's, derived metrics from the sums; no min or max. A key without samples
// adds nothing; no keys, no points.
func TestQueryAggregate(t *testing.T) {
	clk := &clock{t: t0.Add(-DefaultInterval)}
	g := newFakeGanesha(t0.Add(-time.Hour))
	v2 := Volume{Key: "k2", Name: "projects/p/locations/l/volumes/v2", Network: "n", Endpoint: netip.MustParseAddr("10.99.0.11"),
		ExportID: 8, LimitBytesPerSec: 50 * mib}
	tc := &fakeQoS{}
	s := New(Options{Targets: &fakeVolumes{vols: []Volume{v1, v2}}, NFS: g,
		Capacity: fakeCapacity{"k1": {5 << 30, 1 << 30}, "k2": {1 << 30, 0}},
		Clients:  fakeClients{v1.Endpoint: 3, v2.Endpoint: 2}, QoS: tc, Now: clk.now})
	tick := func() {
		t.Helper()
		clk.advance(DefaultInterval)
		if err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tc.add(v1.Name, 0, 0, 0, 0, 100*mib)
	tc.add(v2.Name, 0, 0, 0, 0, 50*mib)
	tick()
	// Over 10 s: v1 100 reads/s of 4 KiB at 1 ms and 1 metadata request/s, far
	// below its limit; v2 300 reads/s at 3 ms and 10 writes/s at 2 ms, of 1 MiB,
	// held at its limit the whole interval. On the wire v1 sent 10 MiB and
	// received 1, v2 sent 500 MiB and received 30, and dropped 5 packets.
	g.load(7, 1000, 0, 10, 4096, time.Millisecond, 0)
	g.load(8, 3000, 100, 0, mib, 3*time.Millisecond, 2*time.Millisecond)
	tc.add(v1.Name, 10*mib, mib, 0, 0, 100*mib)
	tc.add(v2.Name, 500*mib, 30*mib, 5, 8000, 53*mib)
	tick()

	q := model.MetricsQuery{Start: clk.t.Add(-DefaultInterval), End: clk.t, Step: DefaultInterval}
	series, err := s.QueryAggregate(context.Background(), q, []string{"k1", "k2", "k-unsampled"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"readIops": 400, "writeIops": 10, "metadataIops": 1,
		"readMibps": 300 + 100*4096.0/mib, "writeMibps": 10,
		"readLatencyMs":        (100*1 + 300*3) / 400.0, // 2.5, where a mean of the volumes' would be 2
		"writeLatencyMs":       2,
		"readBlockKib":         (100*4 + 300*1024) / 400.0,
		"writeBlockKib":        1024,
		"concurrency":          100*0.001 + 300*0.003 + 10*0.002,
		"readShare":            400 / 410.0,
		"throughputLimitMibps": 150,
		"atLimitShare":         1,
		"usedBytes":            6 << 30, "snapshotBytes": 1 << 30,
		"clients":       5,
		"wireReadMibps": 51, "wireWriteMibps": 3.1, "droppedPacketsPerSec": 0.5,
	}
	if len(series) != len(Metrics) {
		t.Fatalf("%d series, want every metric (%d)", len(series), len(Metrics))
	}
	for _, sr := range series {
		if len(sr.Points) != 1 {
			t.Fatalf("%s: %d points, want 1", sr.Metric, len(sr.Points))
		}
		p := sr.Points[0]
		w, ok := want[sr.Metric]
		if !ok {
			t.Fatalf("unexpected metric %s", sr.Metric)
		}
		if math.Abs(p.Value-w) > 1e-4*math.Max(1, math.Abs(w)) {
			t.Errorf("%s = %v, want %v", sr.Metric, p.Value, w)
		}
		if !math.IsNaN(p.Min) || !math.IsNaN(p.Max) {
			t.Errorf("%s: min %v max %v, want none", sr.Metric, p.Min, p.Max)
		}
		if !p.Time.Equal(q.Start) {
			t.Errorf("%s: point at %v, want %v", sr.Metric, p.Time, q.Start)
		}
	}

	// Over 5 minutes (the rollup in progress), the same sums.
	series, err = s.QueryAggregate(context.Background(), model.MetricsQuery{Metrics: []string{"readIops", "atLimitShare"},
		Start: t0, End: t0.Add(RollupPeriod), Step: RollupPeriod}, []string{"k1", "k2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 2 || len(series[0].Points) != 1 || math.Abs(series[0].Points[0].Value-400) > 1e-3 || series[1].Points[0].Value != 1 {
		t.Fatalf("5-minute aggregate %+v", series)
	}

	if series, err := s.QueryAggregate(context.Background(), q, nil); err != nil || len(series[0].Points) != 0 {
		t.Fatalf("no volumes: %+v, %v", series, err)
	}
	var fe *model.FieldError
	if _, err := s.QueryAggregate(context.Background(), model.MetricsQuery{Metrics: []string{"nope"}, Start: q.Start, End: q.End, Step: q.Step}, nil); !errors.As(err, &fe) || fe.Field != "metric" {
		t.Fatalf("unknown metric: %v", err)
	}
}
