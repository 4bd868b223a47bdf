package metrics

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
)

// clock is a hand-driven clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// fakeVolumes lists fixed volumes.
type fakeVolumes struct {
	mu   sync.Mutex
	vols []Volume
}

func (f *fakeVolumes) Volumes(context.Context) ([]Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Volume(nil), f.vols...), nil
}

// fakeGanesha models Ganesha's per-export counters: load adds requests to an
// export, restart zeroes every counter and moves the statistics epoch, readd
// zeroes one export's.
type fakeGanesha struct {
	exports map[uint64]*nfs.ExportIO
	since   time.Time
	down    bool
}

func newFakeGanesha(since time.Time) *fakeGanesha {
	return &fakeGanesha{exports: map[uint64]*nfs.ExportIO{}, since: since}
}

func (g *fakeGanesha) export(id uint64) *nfs.ExportIO {
	if g.exports[id] == nil {
		g.exports[id] = &nfs.ExportIO{Since: g.since}
	}
	return g.exports[id]
}

// load records reads and writes of block bytes each, with the latency of each
// request, and meta other requests.
func (g *fakeGanesha) load(id uint64, reads, writes, meta, block uint64, readLat, writeLat time.Duration) {
	e := g.export(id)
	e.Read.Ops += reads
	e.Read.RequestedBytes += reads * block
	e.Read.TransferredBytes += reads * block
	e.Read.LatencyNs += reads * uint64(readLat)
	e.Write.Ops += writes
	e.Write.RequestedBytes += writes * block
	e.Write.TransferredBytes += writes * block
	e.Write.LatencyNs += writes * uint64(writeLat)
	e.Ops += reads + writes + meta
}

func (g *fakeGanesha) restart(at time.Time) {
	g.since = at
	g.exports = map[uint64]*nfs.ExportIO{}
}

func (g *fakeGanesha) readd(id uint64) { g.exports[id] = &nfs.ExportIO{Since: g.since} }

func (g *fakeGanesha) ExportIO(_ context.Context, _ string, id uint64) (nfs.ExportIO, error) {
	if g.down {
		return nfs.ExportIO{}, errors.New("ganesha is down")
	}
	return *g.export(id), nil
}

type fakeCapacity map[string][2]int64

func (f fakeCapacity) VolumeUsage(_ context.Context, key string) (int64, int64, error) {
	u, ok := f[key]
	if !ok {
		return 0, 0, errors.New("no such volume")
	}
	return u[0], u[1], nil
}

type fakeClients map[netip.Addr]int

func (f fakeClients) Clients(context.Context, string) (map[netip.Addr]int, error) { return f, nil }

var (
	t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	v1 = Volume{Key: "k1", Name: "projects/p/locations/l/volumes/v1", Network: "n", Endpoint: netip.MustParseAddr("10.99.0.10"),
		ExportID: 7, LimitBytesPerSec: 100 * mib}
)

type harness struct {
	clk   *clock
	g     *fakeGanesha
	vols  *fakeVolumes
	s     *Sampler
	store RollupStore
}

func newHarness(t *testing.T, st RollupStore) *harness {
	t.Helper()
	h := &harness{clk: &clock{t: t0.Add(-DefaultInterval)}, g: newFakeGanesha(t0.Add(-time.Hour)), vols: &fakeVolumes{vols: []Volume{v1}}, store: st}
	h.s = New(Options{Targets: h.vols, NFS: h.g, Capacity: fakeCapacity{"k1": {5 << 30, 1 << 30}},
		Clients: fakeClients{v1.Endpoint: 3}, Store: st, Now: h.clk.now})
	return h
}

// tick advances the clock by one interval and samples.
func (h *harness) tick(t *testing.T) {
	t.Helper()
	h.clk.advance(DefaultInterval)
	if err := h.s.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// query asks for metrics of k1 over the last d at step.
func (h *harness) query(t *testing.T, d, step time.Duration, names ...string) map[string][]model.MetricPoint {
	t.Helper()
	series, err := h.s.Query(context.Background(), model.MetricsQuery{Series: "k1", Metrics: names, Start: h.clk.t.Add(-d), End: h.clk.t, Step: step})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]model.MetricPoint{}
	for _, s := range series {
		out[s.Metric] = s.Points
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-4*math.Max(1, math.Abs(b)) }

// A known load over one interval comes out as the rates, latencies, block sizes,
// concurrency and read share it implies.
func TestDerivedMetrics(t *testing.T) {
	h := newHarness(t, nil)
	h.tick(t) // the first sample only sets the baseline
	if got := h.query(t, time.Minute, 10*time.Second); len(got["readIops"]) != 0 {
		t.Fatalf("a point from a single sample: %v", got["readIops"])
	}
	// 10 s: 3,000 reads and 1,000 writes of 4 KiB, 500 metadata requests;
	// reads take 2 ms, writes 5 ms.
	h.g.load(7, 3000, 1000, 500, 4096, 2*time.Millisecond, 5*time.Millisecond)
	h.tick(t)
	got := h.query(t, time.Minute, 10*time.Second)
	want := map[string]float64{
		"readIops": 300, "writeIops": 100, "metadataIops": 50,
		"readMibps": 300 * 4096.0 / mib, "writeMibps": 100 * 4096.0 / mib,
		"readLatencyMs": 2, "writeLatencyMs": 5, "readBlockKib": 4, "writeBlockKib": 4,
		"concurrency": 300*0.002 + 100*0.005, "readShare": 0.75,
		"throughputLimitMibps": 100, "atLimitShare": 0,
		"usedBytes": 5 << 30, "snapshotBytes": 1 << 30, "clients": 3,
	}
	if len(got) != len(Metrics) {
		t.Fatalf("got %d metrics, want all %d", len(got), len(Metrics))
	}
	for name, w := range want {
		pts := got[name]
		if len(pts) != 1 || !near(pts[0].Value, w) {
			t.Errorf("%s = %v, want one point of %v", name, pts, w)
		}
	}
	if pts := got["readIops"]; len(pts) == 1 && !pts[0].Time.Equal(t0) {
		t.Errorf("the point of the interval (0 s, 10 s] is at %v, want its start %v", pts[0].Time, t0)
	}

	// No reads: the read latency and block size are unknown, not zero.
	h.g.load(7, 0, 10, 0, 4096, 0, time.Millisecond)
	h.tick(t)
	got = h.query(t, 10*time.Second, 10*time.Second, "readLatencyMs", "readBlockKib", "readIops")
	if v := got["readLatencyMs"][0].Value; !math.IsNaN(v) {
		t.Errorf("read latency without reads = %v, want NaN", v)
	}
	if v := got["readBlockKib"][0].Value; !math.IsNaN(v) {
		t.Errorf("read block size without reads = %v, want NaN", v)
	}
	if v := got["readIops"][0].Value; v != 0 {
		t.Errorf("read IOPS without reads = %v, want 0", v)
	}
}

// Throughput at 95 % of the limit or more counts as an interval at the limit;
// the share over a minute is the fraction of its intervals there.
func TestAtLimit(t *testing.T) {
	h := newHarness(t, nil)
	h.tick(t)
	for i := range 6 {
		var bytes uint64 = 10 * mib // 1 MiB/s
		if i < 2 {
			bytes = 990 * mib // 99 MiB/s of 100
		}
		h.g.load(7, bytes/mib, 0, 0, mib, time.Millisecond, 0)
		h.tick(t)
	}
	got := h.query(t, time.Minute, time.Minute, "atLimitShare")["atLimitShare"]
	if len(got) != 1 || !near(got[0].Value, 2.0/6) || got[0].Max != 1 || got[0].Min != 0 {
		t.Fatalf("at-limit share over the minute = %+v, want 1/3 (min 0, max 1)", got)
	}
}

// A Ganesha restart (new epoch, counters from zero) and an export added again
// (same epoch, its counters from zero) give neither negative nor huge rates.
func TestCounterResets(t *testing.T) {
	h := newHarness(t, nil)
	h.g.load(7, 1_000_000, 1_000_000, 1_000_000, 4096, time.Millisecond, time.Millisecond) // history before Basin looked
	h.tick(t)
	h.g.load(7, 100, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)

	h.g.restart(h.clk.t.Add(5 * time.Second))
	h.g.load(7, 50, 0, 0, 4096, time.Millisecond, 0) // after the restart
	h.tick(t)

	h.g.load(7, 20, 0, 0, 4096, time.Millisecond, 0)
	h.g.readd(7)
	h.g.load(7, 30, 5, 0, 4096, time.Millisecond, time.Millisecond) // since the re-add
	h.tick(t)

	h.g.down = true // unknown, not zero
	h.tick(t)
	h.g.down = false
	h.g.load(7, 10, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t) // the baseline is the failed sample: unknown again
	h.g.load(7, 10, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)

	got := h.query(t, time.Hour, 10*time.Second)
	want := []float64{10, 5, 3, math.NaN(), math.NaN(), 1}
	reads := got["readIops"]
	if len(reads) != len(want) {
		t.Fatalf("read IOPS %v, want %v", reads, want)
	}
	for i, w := range want {
		if v := reads[i].Value; !(near(v, w) || math.IsNaN(v) && math.IsNaN(w)) {
			t.Errorf("interval %d: read IOPS %v, want %v", i, v, w)
		}
	}
	for name, pts := range got {
		for _, p := range pts {
			if p.Value < 0 || p.Value > 1e12 {
				t.Errorf("%s at %v = %v", name, p.Time, p.Value)
			}
		}
	}
	if m := got["metadataIops"][2].Value; m != 0 {
		t.Errorf("metadata IOPS after the restart = %v, want 0", m)
	}
}

// The ring holds a day at 10 s and drops the oldest Point after that.
func TestRingBounded(t *testing.T) {
	h := newHarness(t, nil)
	h.tick(t)
	n := int(DefaultRing / DefaultInterval)
	for range n + 100 {
		h.g.load(7, 10, 0, 0, 4096, time.Millisecond, 0)
		h.tick(t)
	}
	sr := h.s.series["k1"]
	if len(sr.ring.pts) != n || cap(sr.ring.pts) > 2*n {
		t.Fatalf("ring holds %d points (capacity %d), want %d", len(sr.ring.pts), cap(sr.ring.pts), n)
	}
	got := h.query(t, DefaultRing+time.Hour, time.Minute, "readIops")["readIops"]
	if len(got) < n/6 || len(got) > n/6+1 { // the oldest minute may be partly gone
		t.Fatalf("a 25 h query at 1 min returned %d points, want the ring's %d", len(got), n/6)
	}
	got = h.query(t, DefaultRing, 10*time.Second, "readIops")["readIops"]
	if len(got) != n {
		t.Fatalf("a 24 h query at 10 s returned %d points, want the ring's %d", len(got), n)
	}
	if first := got[0].Time; !first.Equal(h.clk.t.Add(-DefaultRing)) {
		t.Fatalf("oldest point at %v, want %v", first, h.clk.t.Add(-DefaultRing))
	}
	for i := 1; i < len(got); i++ {
		if !got[i].Time.After(got[i-1].Time) {
			t.Fatalf("points out of order at %d: %v after %v", i, got[i].Time, got[i-1].Time)
		}
	}
}

// A volume that is no longer listed is forgotten.
func TestDeletedVolumeForgotten(t *testing.T) {
	h := newHarness(t, nil)
	h.tick(t)
	h.tick(t)
	h.vols.vols = nil
	h.tick(t)
	if got := h.query(t, time.Hour, 10*time.Second, "readIops")["readIops"]; len(got) != 0 {
		t.Fatalf("a deleted volume still answers %v", got)
	}
}

func TestQueryValidation(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		name  string
		q     model.MetricsQuery
		field string
	}{
		{"unknown metric", model.MetricsQuery{Metrics: []string{"bogus"}, Start: t0, End: t0.Add(time.Hour), Step: 10 * time.Second}, "metric"},
		{"end before start", model.MetricsQuery{Start: t0, End: t0, Step: 10 * time.Second}, "endTime"},
		{"step not a multiple of the interval", model.MetricsQuery{Start: t0, End: t0.Add(time.Hour), Step: 15 * time.Second}, "step"},
		{"step not a multiple of the rollup", model.MetricsQuery{Start: t0, End: t0.Add(time.Hour), Step: 7 * time.Minute}, "step"},
		{"fractional step", model.MetricsQuery{Start: t0, End: t0.Add(time.Hour), Step: 1500 * time.Millisecond}, "step"},
		{"too many points", model.MetricsQuery{Start: t0, End: t0.Add(30 * 24 * time.Hour), Step: 10 * time.Second}, "step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.s.Query(context.Background(), tc.q)
			var fe *model.FieldError
			if !errors.Is(err, model.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

// The sizes the package documentation states.
func TestStateBytes(t *testing.T) {
	if s := unsafe.Sizeof(Point{}); s != 52 {
		t.Errorf("a Point is %d bytes, the package doc says 52", s)
	}
	if n := int(DefaultRing / DefaultInterval); n*int(unsafe.Sizeof(Point{})) != 449280 {
		t.Errorf("a full ring is %d bytes, the package doc says 449,280", n*int(unsafe.Sizeof(Point{})))
	}
	if n := len(newAgg(0).encode()); n != 338 {
		t.Errorf("an encoded rollup is %d bytes, the package doc says 338", n)
	}
}

// Samples fall on the wall clock's multiples of the interval, so a 10-second point
// of the API covers [time, time+10 s) of its grid.
func TestUntilTick(t *testing.T) {
	base := time.Unix(1795439900, 0) // a multiple of 10 s
	for _, tc := range []struct {
		now  time.Time
		want time.Duration
	}{
		{base, 10 * time.Second},
		{base.Add(time.Nanosecond), 10*time.Second - time.Nanosecond},
		{base.Add(3500 * time.Millisecond), 6500 * time.Millisecond},
		{base.Add(10*time.Second - time.Millisecond), time.Millisecond},
	} {
		if got := untilTick(tc.now, 10*time.Second); got != tc.want {
			t.Errorf("untilTick(%s) = %v, want %v", tc.now.Format("15:04:05.000000000"), got, tc.want)
		}
	}
}
