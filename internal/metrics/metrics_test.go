package metrics

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/smb"
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

// fakeQoS models traffic-control classes' counters, by class key; reads counts
// its reads by network.
type fakeQoS struct {
	mu      sync.Mutex
	classes map[string]qos.Counters
	reads   map[string]int
	down    bool
}

// add records an interval of a class: bytes its addresses sent and received,
// packets dropped, times over the ceiling; ceil is its ceiling.
func (f *fakeQoS) add(key string, sent, received, drops, overlimits, ceil uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.classes == nil {
		f.classes = map[string]qos.Counters{}
	}
	c := f.classes[key]
	c.Sent += sent
	c.Bytes += sent + received
	c.Drops += drops
	c.Overlimits += overlimits
	c.Ceil = ceil
	f.classes[key] = c
}

func (f *fakeQoS) QoSCounters(_ context.Context, network string) (map[string]qos.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	f.reads[network]++
	if f.down {
		return nil, errors.New("no link")
	}
	return maps.Clone(f.classes), nil
}

// fakeSMB models SMB shares' counters: the data plane's Accountant's sums,
// which it started at since (the zero time: a source that says none).
type fakeSMB struct {
	mu     sync.Mutex
	shares map[SMBShare]smb.ShareIO
	since  time.Time
	down   bool
}

func (f *fakeSMB) load(sh SMBShare, reads, writes, other, block uint64, readLat, writeLat time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shares == nil {
		f.shares = map[SMBShare]smb.ShareIO{}
	}
	s := f.shares[sh]
	s.Reads += reads
	s.Writes += writes
	s.Other += other
	s.ReadBytes += reads * block
	s.WriteBytes += writes * block
	s.ReadNs += reads * uint64(readLat)
	s.WriteNs += writes * uint64(writeLat)
	f.shares[sh] = s
}

func (f *fakeSMB) SMBIO(context.Context, string) (map[SMBShare]smb.ShareIO, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("no samba")
	}
	out := maps.Clone(f.shares)
	for k, io := range out {
		io.Since = f.since
		out[k] = io
	}
	return out, nil
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
	tc    *fakeQoS
	smb   *fakeSMB
	vols  *fakeVolumes
	s     *Sampler
	store RollupStore
	dir   string       // Options.StateDir
	log   *slog.Logger // nil: none
}

// newHarness samples v1 (an NFS volume). Its traffic-control and SMB sources
// hold nothing until a test adds to them.
func newHarness(t *testing.T, st RollupStore) *harness {
	t.Helper()
	h := &harness{clk: &clock{t: t0.Add(-DefaultInterval)}, g: newFakeGanesha(t0.Add(-time.Hour)), tc: &fakeQoS{}, smb: &fakeSMB{},
		vols: &fakeVolumes{vols: []Volume{v1}}, store: st}
	h.s = New(h.options())
	return h
}

// options are the Sampler's options over h's sources, store and state.
func (h *harness) options() Options {
	return Options{Targets: h.vols, NFS: h.g, Capacity: fakeCapacity{"k1": {5 << 30, 1 << 30}},
		Clients: fakeClients{v1.Endpoint: 3}, QoS: h.tc, SMB: h.smb, Store: h.store, StateDir: h.dir, Now: h.clk.now, Logger: h.log}
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

// A volume exported again under another ID: its readings before and after are
// of different exports, so the interval between is unknown, not a difference.
func TestExportChanged(t *testing.T) {
	h := newHarness(t, nil)
	h.g.load(7, 1_000_000, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	h.g.load(8, 500, 0, 0, 4096, time.Millisecond, 0)
	h.vols.vols[0].ExportID = 8
	h.tick(t)
	h.g.load(8, 100, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	r := h.query(t, 20*time.Second, DefaultInterval, "readIops")["readIops"]
	if len(r) != 2 || !math.IsNaN(r[0].Value) || !near(r[1].Value, 10) {
		t.Fatalf("read IOPS %+v, want unknown across the change of export, then 10", r)
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
	if s := unsafe.Sizeof(Point{}); s != 64 {
		t.Errorf("a Point is %d bytes, the package doc says 64", s)
	}
	if n := int(DefaultRing / DefaultInterval); n*int(unsafe.Sizeof(Point{})) != 552960 {
		t.Errorf("a full ring is %d bytes, the package doc says 552,960", n*int(unsafe.Sizeof(Point{})))
	}
	if n := len(newAgg(0).encode()); n != 422 {
		t.Errorf("an encoded rollup is %d bytes, the package doc says 422", n)
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

// Traffic control's counters give each volume its wire bytes per direction, its
// drops and the share of the interval its class spent at its ceiling, from one
// read per network and pass. Counters that went back (the class made again) or
// a failed read leave the wire metrics unknown, and the share at the limit
// comes from the payload again.
func TestWireMetrics(t *testing.T) {
	h := newHarness(t, nil)
	v2 := Volume{Key: "k2", Name: "projects/p/locations/l/volumes/v2", Network: "n", ExportID: 8}
	v3 := Volume{Key: "k3", Name: "projects/p/locations/l/volumes/v3", Network: "m", ExportID: 9}
	h.vols.vols = []Volume{v1, v2, v3}
	const ceil = 105 * mib // v1's limit of 100 MiB/s and the wire's headers
	h.tc.add(v1.Name, 0, 0, 0, 0, ceil)
	h.tick(t)
	// 10 s: v1 sent 300 MiB, received 20 MiB, dropped 30 packets, and went over
	// its ceiling 10 times (at most 10 frames' worth held at it).
	h.g.load(7, 300, 0, 0, mib, time.Millisecond, 0)
	h.tc.add(v1.Name, 300*mib, 20*mib, 30, 10, ceil)
	h.tick(t)
	got := h.query(t, 10*time.Second, 10*time.Second, "wireReadMibps", "wireWriteMibps", "droppedPacketsPerSec", "atLimitShare", "readMibps")
	for name, w := range map[string]float64{"wireReadMibps": 30, "wireWriteMibps": 2, "droppedPacketsPerSec": 3,
		"atLimitShare": 10 * qos.MaxFrame / (10.0 * ceil), "readMibps": 30} {
		if pts := got[name]; len(pts) != 1 || !near(pts[0].Value, w) {
			t.Errorf("%s = %+v, want %v", name, pts, w)
		}
	}
	// Held at the ceiling throughout.
	h.g.load(7, 1000, 0, 0, mib, time.Millisecond, 0)
	h.tc.add(v1.Name, 1040*mib, 10*mib, 0, 20000, ceil)
	h.tick(t)
	if v := h.query(t, 10*time.Second, 10*time.Second, "atLimitShare")["atLimitShare"][0].Value; v != 1 {
		t.Errorf("at the ceiling throughout: atLimitShare %v, want 1", v)
	}
	// The class made again: its counters went back. Nothing is known of the
	// wire; the payload (99 MiB/s of 100) says the interval was at the limit.
	h.tc.mu.Lock()
	h.tc.classes[v1.Name] = qos.Counters{Sent: 5, Bytes: 5, Ceil: ceil}
	h.tc.mu.Unlock()
	h.g.load(7, 990, 0, 0, mib, time.Millisecond, 0)
	h.tick(t)
	got = h.query(t, 10*time.Second, 10*time.Second, "wireReadMibps", "atLimitShare")
	if v := got["wireReadMibps"][0].Value; !math.IsNaN(v) {
		t.Errorf("wire after a reset = %v, want unknown", v)
	}
	if v := got["atLimitShare"][0].Value; v != 1 {
		t.Errorf("at-limit share from the payload = %v, want 1", v)
	}
	h.tc.down = true
	h.tick(t)
	if v := h.query(t, 10*time.Second, 10*time.Second, "wireReadMibps")["wireReadMibps"][0].Value; !math.IsNaN(v) {
		t.Errorf("wire with traffic control unreadable = %v, want unknown", v)
	}
	// v2 has no class: no wire metrics, and no limit.
	series, err := h.s.Query(context.Background(), model.MetricsQuery{Series: "k2", Metrics: []string{"wireReadMibps", "atLimitShare"},
		Start: h.clk.t.Add(-time.Minute), End: h.clk.t, Step: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range series {
		for _, p := range sr.Points {
			if !math.IsNaN(p.Value) {
				t.Errorf("v2 %s = %v, want unknown", sr.Metric, p.Value)
			}
		}
	}
	// One read per network and pass, whatever the number of volumes.
	if h.tc.reads["n"] != 5 || h.tc.reads["m"] != 5 {
		t.Errorf("traffic control read %v times by network over 5 passes, want 5 each", h.tc.reads)
	}
}

// An SMB volume's I/O comes from its share's counters; a volume shared over NFS
// and SMB counts both. If either cannot be read, its I/O is unknown rather than
// half of it.
func TestSMBVolume(t *testing.T) {
	h := newHarness(t, nil)
	docs := SMBShare{AD: "projects/p/locations/l/activeDirectories/ad1", Name: "docs"}
	vs := Volume{Key: "k2", Name: "projects/p/locations/l/volumes/v2", Network: "n", SMB: SMBShare{AD: docs.AD, Name: "Docs"}}
	dual := v1
	dual.SMB = SMBShare{AD: docs.AD, Name: "both"}
	both := SMBShare{AD: docs.AD, Name: "both"}
	h.vols.vols = []Volume{dual, vs}
	h.smb.load(docs, 5000, 0, 0, 4096, 0, 0) // before Basin looked: not counted
	h.smb.load(both, 0, 0, 0, 0, 0, 0)
	h.tick(t)
	h.smb.load(docs, 1000, 200, 50, 65536, 2*time.Millisecond, 8*time.Millisecond)
	h.smb.load(both, 100, 0, 10, 4096, time.Millisecond, 0)
	h.g.load(7, 300, 0, 20, 4096, 3*time.Millisecond, 0)
	h.tick(t)
	q := func(key string, names ...string) map[string]float64 {
		series, err := h.s.Query(context.Background(), model.MetricsQuery{Series: key, Metrics: names,
			Start: h.clk.t.Add(-10 * time.Second), End: h.clk.t, Step: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, sr := range series {
			switch len(sr.Points) {
			case 0: // nothing known of the interval
				out[sr.Metric] = math.NaN()
			case 1:
				out[sr.Metric] = sr.Points[0].Value
			default:
				t.Fatalf("%s %s: %d points", key, sr.Metric, len(sr.Points))
			}
		}
		return out
	}
	names := []string{"readIops", "writeIops", "metadataIops", "readBlockKib", "writeBlockKib", "readLatencyMs", "writeLatencyMs"}
	for key, want := range map[string]map[string]float64{
		"k2": {"readIops": 100, "writeIops": 20, "metadataIops": 5, "readBlockKib": 64, "writeBlockKib": 64, "readLatencyMs": 2, "writeLatencyMs": 8},
		"k1": {"readIops": 40, "writeIops": 0, "metadataIops": 3, "readBlockKib": 4, "readLatencyMs": (100*1 + 300*3) / 400.0},
	} {
		got := q(key, names...)
		for name, w := range want {
			if !near(got[name], w) {
				t.Errorf("%s %s = %v, want %v", key, name, got[name], w)
			}
		}
	}
	// Samba unreadable: the SMB volume's and the dual volume's I/O are unknown.
	h.smb.down = true
	h.g.load(7, 300, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	if got := q("k1", "readIops")["readIops"]; !math.IsNaN(got) {
		t.Errorf("dual volume without its SMB counters: readIops %v, want unknown", got)
	}
	if got := q("k2", "readIops")["readIops"]; !math.IsNaN(got) {
		t.Errorf("SMB volume without its counters: readIops %v, want unknown", got)
	}
	// Back, with counters that went back (the source started again): the
	// interval counts what they hold, never a negative rate.
	h.smb.down = false
	h.tick(t)
	h.smb.mu.Lock()
	h.smb.shares[docs] = smb.ShareIO{Reads: 30}
	h.smb.mu.Unlock()
	h.tick(t)
	if got := q("k2", "readIops")["readIops"]; got != 3 {
		t.Errorf("after the SMB counters went back: readIops %v, want 3", got)
	}
}
