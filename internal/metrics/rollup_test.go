package metrics

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/store"
)

func openStore(t *testing.T, path string) *store.SQLite {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// runFor samples every interval for d, with reads per second of 4 KiB each.
func (h *harness) runFor(t *testing.T, d time.Duration, readsPerSec uint64) {
	t.Helper()
	for end := h.clk.t.Add(d); h.clk.t.Before(end); {
		h.g.load(7, readsPerSec*10, 0, readsPerSec, 4096, time.Millisecond, 0)
		h.tick(t)
	}
}

// Each 5-minute bucket is stored once it ends, covering exactly its 30
// intervals; the bucket in progress is answered from memory.
func TestRollupBoundaries(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "basin.db"))
	h := newHarness(t, st)
	h.tick(t) // t0: the baseline
	h.runFor(t, 5*time.Minute, 100)
	// The interval ending at t0+5m belongs to the first bucket: not stored until
	// a Point of the next bucket arrives.
	rows, err := st.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if err != nil || len(rows) != 0 {
		t.Fatalf("stored before the bucket ended: %v, %v", rows, err)
	}
	h.runFor(t, 5*time.Minute, 300)
	h.runFor(t, 2*time.Minute, 50)
	rows, err = st.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if err != nil || len(rows) != 2 || rows[0].Start != t0.Unix() || rows[1].Start != t0.Add(5*time.Minute).Unix() {
		t.Fatalf("stored rollups %v, %v; want the buckets at t0 and t0+5m", rows, err)
	}
	for _, r := range rows {
		a, err := decodeAgg(r.Start, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		if a.n[readOps] != 30 {
			t.Errorf("bucket %d holds %d intervals, want 30", r.Start, a.n[readOps])
		}
	}

	got := h.query(t, 15*time.Minute, 5*time.Minute, "readIops", "readLatencyMs", "usedBytes")
	reads := got["readIops"]
	want := []float64{100, 300, 50}
	if len(reads) != 3 {
		t.Fatalf("read IOPS at 5 min: %v, want 3 points", reads)
	}
	for i, w := range want {
		if !near(reads[i].Value, w) || !near(reads[i].Min, w) || !near(reads[i].Max, w) {
			t.Errorf("bucket %d: %+v, want mean, min and max %v", i, reads[i], w)
		}
	}
	if !reads[2].Time.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("the bucket in progress is at %v, want %v", reads[2].Time, t0.Add(10*time.Minute))
	}
	if l := got["readLatencyMs"]; len(l) != 3 || !near(l[1].Value, 1) {
		t.Errorf("read latency %v, want 1 ms", l)
	}

	// 10 minutes at step 10m: one bucket, the mean of 100 and 300, min 100, max 300.
	got = h.query(t, 10*time.Minute, 10*time.Minute, "readIops")
	if r := got["readIops"]; len(r) < 1 || !near(r[0].Value, 200) || !near(r[0].Min, 100) || !near(r[0].Max, 300) {
		t.Errorf("10-minute step: %+v, want mean 200, min 100, max 300", got["readIops"])
	}
}

// Latency means are over requests: a busy interval weighs more than a quiet one.
func TestRollupLatencyWeighted(t *testing.T) {
	h := newHarness(t, nil)
	h.tick(t)
	h.g.load(7, 9000, 0, 0, 4096, time.Millisecond, 0) // 900/s at 1 ms
	h.tick(t)
	h.g.load(7, 1000, 0, 0, 4096, 11*time.Millisecond, 0) // 100/s at 11 ms
	h.tick(t)
	got := h.query(t, time.Minute, time.Minute, "readLatencyMs")["readLatencyMs"]
	if len(got) != 1 || !near(got[0].Value, 2) || !near(got[0].Min, 1) || !near(got[0].Max, 11) {
		t.Fatalf("latency over the minute %+v, want 2 ms (10,000 requests), min 1, max 11", got)
	}
}

// Rollups older than the retention are deleted; newer ones stay.
func TestRollupExpiry(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "basin.db"))
	h := newHarness(t, st)
	h.tick(t)
	h.runFor(t, 20*time.Minute, 10)
	before, _ := st.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if len(before) != 3 {
		t.Fatalf("%d rollups stored after 20 minutes, want 3", len(before))
	}
	// 30 days on (Basin was down): the clock lands 5 minutes past the retention
	// of the second bucket's start.
	h.clk.t = t0.Add(DefaultRetention + 10*time.Minute - DefaultInterval)
	h.runFor(t, 10*time.Second, 10)
	rows, err := st.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	for _, r := range rows {
		starts = append(starts, r.Start)
	}
	// The buckets at t0 and t0+5m are older than 30 days; t0+10m is not, and the
	// bucket that was in progress (t0+20m) was stored when the jump ended it.
	want := []int64{t0.Add(10 * time.Minute).Unix(), t0.Add(15 * time.Minute).Unix()}
	if len(starts) < 2 || starts[0] != want[0] || starts[1] != want[1] {
		t.Fatalf("after expiry: %v, want to start with %v", starts, want)
	}
}

// Rollups survive a restart, and the bucket a restart cut in two is stored as
// one: the part flushed at stop merged with the part after the restart.
func TestRollupsSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "basin.db")
	st := openStore(t, path)
	h := newHarness(t, st)
	h.tick(t)
	h.runFor(t, 7*time.Minute, 100) // one full bucket, 2 minutes of the next
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st2 := openStore(t, path)
	h2 := &harness{clk: h.clk, g: h.g, vols: h.vols, store: st2}
	h2.clk.advance(30 * time.Second) // down for half a minute
	h2.s = New(Options{Targets: h.vols, NFS: h.g, Store: st2, Now: h.clk.now})
	h2.tick(t) // the baseline after the restart
	h2.runFor(t, 2*time.Minute+20*time.Second, 400)
	h2.runFor(t, time.Minute, 400) // into the third bucket: the second is stored

	rows, err := st2.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if err != nil || len(rows) != 2 {
		t.Fatalf("stored after the restart: %v, %v; want 2 buckets", rows, err)
	}
	a, err := decodeAgg(rows[1].Start, rows[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	// 12 intervals before (2 minutes), 14 after (2 min 20 s); 4 lost to the
	// outage and the new baseline.
	if a.n[readOps] != 12+14 {
		t.Fatalf("the cut bucket holds %d intervals, want 26", a.n[readOps])
	}
	got := h2.query(t, 10*time.Minute, 5*time.Minute, "readIops")["readIops"]
	if len(got) != 3 || !near(got[0].Value, 100) || !near(got[1].Value, (12*100+14*400)/26.0) || got[1].Min != 100 || got[1].Max != 400 {
		t.Fatalf("read IOPS after the restart %+v, want 100, then the merged mean of the cut bucket (min 100, max 400)", got)
	}
}

// Sampling may go on after a Flush: the bucket it stored in part is answered
// and stored once, whole.
func TestFlushThenSampleOn(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "basin.db"))
	h := newHarness(t, st)
	h.tick(t)
	h.runFor(t, 2*time.Minute, 100)
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.runFor(t, 3*time.Minute, 400)
	want := (12*100 + 18*400) / 30.0
	if got := h.query(t, 5*time.Minute, 5*time.Minute, "readIops")["readIops"]; len(got) != 1 || !near(got[0].Value, want) {
		t.Fatalf("the bucket in progress after a flush: %+v, want %v read IOPS", got, want)
	}
	h.runFor(t, 10*time.Second, 400) // the next bucket: the first is stored
	rows, err := st.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if err != nil || len(rows) != 1 {
		t.Fatalf("stored %v, %v; want one bucket", rows, err)
	}
	if a, err := decodeAgg(rows[0].Start, rows[0].Data); err != nil || a.n[readOps] != 30 || !near(a.means()[readOps], want) {
		t.Fatalf("stored bucket %+v, %v; want 30 intervals at %v read IOPS", a, err, want)
	}
}

// A stored rollup that is not one decodes to an error.
func TestDecodeAggRefusesGarbage(t *testing.T) {
	good := newAgg(0)
	good.add(&Point{V: [numStored]float32{1, 2, 3}})
	enc := good.encode()
	for name, b := range map[string][]byte{
		"empty": nil, "version": append([]byte{9}, enc[1:]...), "short": enc[:len(enc)-1], "long": append(enc, 0),
		"count": append([]byte{rollupVersion, 200}, enc[2:]...),
	} {
		if _, err := decodeAgg(0, b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if a, err := decodeAgg(0, enc); err != nil || a.n[readOps] != 1 || a.sum[writeOps] != 2 {
		t.Errorf("round trip: %+v, %v", a, err)
	}
	// A rollup stored by a Basin that kept 12 values (before wire bytes and
	// drops) decodes with those unknown.
	old := append([]byte{rollupVersion, 12}, enc[2:2+12*28]...)
	a, err := decodeAgg(0, old)
	if err != nil || a.n[readOps] != 1 || a.n[wireReadBytes] != 0 || !math.IsNaN(a.means()[droppedPackets]) {
		t.Errorf("a 12-value rollup: %+v, %v", a, err)
	}
}

func FuzzDecodeAgg(f *testing.F) {
	f.Add(newAgg(0).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := decodeAgg(0, b); err == nil {
			a.means()
		}
	})
}
