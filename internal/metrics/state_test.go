package metrics

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/smb"
)

// newStateHarness is newHarness with a store and a state directory of its own,
// logging into the returned buffer.
func newStateHarness(t *testing.T) (*harness, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, filepath.Join(dir, "basin.db"))
	h := newHarness(t, st)
	var logs bytes.Buffer
	h.dir, h.log = filepath.Join(dir, "metrics"), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.s = New(h.options())
	return h, &logs
}

// down lets d pass without sampling while the daemons go on counting v1's
// reads (readsPerSec of 4 KiB at 1 ms).
func (h *harness) down(d time.Duration, readsPerSec uint64) {
	for end := h.clk.t.Add(d); h.clk.t.Before(end); {
		h.g.load(7, readsPerSec*10, 0, readsPerSec, 4096, time.Millisecond, 0)
		h.clk.advance(DefaultInterval)
	}
}

// restart starts a new Sampler on h's store and state, as Basin does; the old
// one is dropped as it stands (a SIGKILL, unless the test flushed it).
func (h *harness) restart() { h.s = New(h.options()) }

// stored returns k1's stored rollups, decoded, by start.
func (h *harness) stored(t *testing.T) map[int64]*agg {
	t.Helper()
	rows, err := h.store.Rollups(context.Background(), "k1", 0, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]*agg{}
	for _, r := range rows {
		a, err := decodeAgg(r.Start, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		out[r.Start] = a
	}
	return out
}

// checkBucket checks a stored 5-minute rollup of k1: its intervals, and its
// mean read IOPS, whose 300 s are then its reads.
func checkBucket(t *testing.T, rollups map[int64]*agg, start time.Time, intervals uint32, readIops float64) {
	t.Helper()
	a := rollups[start.Unix()]
	if a == nil {
		t.Fatalf("no rollup at %v", start)
	}
	if a.n[readOps] != intervals || !near(a.means()[readOps], readIops) {
		t.Errorf("rollup at %v: %d intervals, %v read IOPS; want %d and %v", start.Format("15:04"), a.n[readOps], a.means()[readOps], intervals, readIops)
	}
}

// checkRing checks that k1's ring holds a Point every interval over the last
// d, with reads per interval matching want, oldest first.
func checkRing(t *testing.T, h *harness, d time.Duration, want func(i int) float64) {
	t.Helper()
	pts := h.query(t, d, DefaultInterval, "readIops")["readIops"]
	if n := int(d / DefaultInterval); len(pts) != n {
		t.Fatalf("%d points at 10 s over %v, want %d", len(pts), d, n)
	}
	for i, p := range pts {
		if w := h.clk.t.Add(-d + time.Duration(i)*DefaultInterval); !p.Time.Equal(w) {
			t.Fatalf("point %d at %v, want %v (a gap)", i, p.Time, w)
		}
		if !near(p.Value, want(i)) {
			t.Errorf("point %d at %v: %v read IOPS, want %v", i, p.Time.Format("15:04:05"), p.Value, want(i))
		}
	}
}

// A Basin killed (no Flush) and started again while the data plane went on
// serving: the I/O done while it was down and in its first interval is
// counted, in the rollup it cut (merged, not replaced), in the ring and in
// the Prometheus totals. Without saved state the rollup in progress was lost
// and the first sample after the start was only a baseline.
func TestKilledSamplerResumes(t *testing.T) {
	h, _ := newStateHarness(t)
	h.tick(t)                       // t0: the baseline
	h.runFor(t, 7*time.Minute, 100) // one full bucket, 12 intervals of the next
	h.down(30*time.Second, 400)     // killed: the daemons count on, Basin does not
	h.restart()
	// The first pass counts the 30 s down and its own interval: 4 intervals at
	// 400/s, then 14 more finish the bucket and 6 begin the next.
	h.runFor(t, 2*time.Minute+30*time.Second, 400)
	h.runFor(t, time.Minute, 400)

	rollups := h.stored(t)
	checkBucket(t, rollups, t0, 30, 100)
	checkBucket(t, rollups, t0.Add(5*time.Minute), 30, (12*100+18*400)/30.0)
	if len(rollups) != 2 {
		t.Errorf("%d rollups stored, want 2 (the third is in progress)", len(rollups))
	}
	// The ring: every interval since t0 at 10 s, the one before the kill too.
	checkRing(t, h, 11*time.Minute, func(i int) float64 {
		if i < 42 {
			return 100
		}
		return 400
	})
	// The totals go on where they were: every read since the first sample.
	if got, want := h.s.series["k1"].totals.io.readOps, uint64(42*1000+24*4000); got != want {
		t.Errorf("read_ops_total %d after the restart, want %d", got, want)
	}
}

// A clean stop (Flush) and a start: the bucket the restart cut is stored
// once, with every interval, none twice; so are the buckets a longer stop
// spans.
func TestStoppedSamplerResumes(t *testing.T) {
	h, _ := newStateHarness(t)
	h.tick(t)
	h.runFor(t, 7*time.Minute, 100)
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkBucket(t, h.stored(t), t0.Add(5*time.Minute), 12, 100) // the part before the stop
	// Down for 8 minutes: the rest of the cut bucket and 5 minutes of the next.
	h.down(8*time.Minute, 200)
	h.restart()
	h.runFor(t, 10*time.Second, 200) // the first pass spans 8 min 10 s, 49 intervals
	h.runFor(t, 5*time.Minute, 300)  // into the fifth bucket: the fourth is stored
	rollups := h.stored(t)
	checkBucket(t, rollups, t0.Add(5*time.Minute), 30, (12*100+18*200)/30.0)
	checkBucket(t, rollups, t0.Add(10*time.Minute), 30, 200)
	checkBucket(t, rollups, t0.Add(15*time.Minute), 30, (1*200+29*300)/30.0)

	// A second flush and start in the same bucket: nothing counted twice.
	if err := h.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.restart()
	if err := h.s.Flush(context.Background()); err != nil { // a stop before any pass
		t.Fatal(err)
	}
	h.restart()
	h.runFor(t, 5*time.Minute, 300)
	checkBucket(t, h.stored(t), t0.Add(20*time.Minute), 30, 300)
}

// A crash after a finished rollup was stored but before the state that no
// longer holds it was saved: the start stores it again, replacing it, not
// adding to it. Also when the bucket's stored part came from a run whose state
// was lost (or a Basin that saved none): it is read as soon as the bucket goes
// on, not when it ends.
func TestResumeStoresRollupOnce(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "state kept", true: "state lost"}[lost], func(t *testing.T) {
			h, _ := newStateHarness(t)
			h.tick(t)
			h.runFor(t, 2*time.Minute, 100)
			if err := h.s.Flush(context.Background()); err != nil { // the bucket has a stored part
				t.Fatal(err)
			}
			after := uint32(18) // intervals of the first bucket after the restart
			if lost {
				if err := os.Remove(filepath.Join(h.dir, stateFile)); err != nil {
					t.Fatal(err)
				}
				after-- // the first sample is a baseline
			}
			h.restart()
			h.runFor(t, 3*time.Minute, 400) // to the last interval of the bucket
			want := (12*100 + float64(after)*400) / float64(12+after)
			// Queried, the bucket in progress counts its stored part once.
			if r := h.query(t, 5*time.Minute, 5*time.Minute, "readIops")["readIops"]; len(r) != 1 || !near(r[0].Value, want) {
				t.Errorf("the bucket in progress: %+v, want %v read IOPS", r, want)
			}
			saved, err := os.ReadFile(filepath.Join(h.dir, stateFile))
			if err != nil {
				t.Fatal(err)
			}
			h.runFor(t, 10*time.Second, 100) // the next bucket: the first is stored, then the state saved
			if err := os.WriteFile(filepath.Join(h.dir, stateFile), saved, 0o600); err != nil {
				t.Fatal(err) // as if the crash came between the two
			}
			h.restart()
			h.runFor(t, 5*time.Minute, 100) // through the next bucket, which the restart cut
			rollups := h.stored(t)
			checkBucket(t, rollups, t0, 12+after, want)
			checkBucket(t, rollups, t0.Add(5*time.Minute), 30, 100)
		})
	}
}

// A daemon that restarted while Basin was down (its counters went back) is a
// reset: the interval counts what its new counters hold, spread over the
// downtime, never a negative or huge rate. Traffic control's class made again
// leaves the wire unknown; an export that is another export now is unknown too.
func TestResumeAfterDaemonRestart(t *testing.T) {
	h, _ := newStateHarness(t)
	v2 := Volume{Key: "k2", Name: "projects/p/locations/l/volumes/v2", Network: "n", ExportID: 8}
	h.vols.vols = []Volume{v1, v2}
	h.g.load(7, 1_000_000, 1_000_000, 1_000_000, 4096, time.Millisecond, time.Millisecond)
	h.g.load(8, 1_000_000, 0, 0, 4096, time.Millisecond, 0)
	h.tc.add(v1.Name, 1<<40, 1<<40, 1<<20, 1<<20, 105*mib)
	h.tick(t)
	h.runFor(t, time.Minute, 100)
	// Down 20 s: Ganesha restarts 5 s after the last pass and serves 600
	// reads; the class is made again; v2 is exported again under ID 9.
	h.clk.advance(DefaultInterval)
	h.g.restart(h.clk.t.Add(-5 * time.Second))
	h.g.load(7, 600, 0, 0, 4096, time.Millisecond, 0)
	h.g.load(9, 50_000, 0, 0, 4096, time.Millisecond, 0)
	h.tc.mu.Lock()
	h.tc.classes[v1.Name] = qos.Counters{Bytes: 100, Sent: 50, Ceil: 105 * mib}
	h.tc.mu.Unlock()
	h.vols.vols[1].ExportID = 9
	h.clk.advance(DefaultInterval)
	h.restart()
	h.tick(t) // 30 s since the last reading: 600 reads over 3 intervals
	got := h.query(t, 30*time.Second, DefaultInterval, "readIops", "wireReadMibps", "metadataIops")
	if r := got["readIops"]; len(r) != 3 || !near(r[0].Value, 20) || !near(r[2].Value, 20) {
		t.Errorf("read IOPS over the restart %+v, want 3 intervals of 20", r)
	}
	for name, pts := range got {
		for _, p := range pts {
			if name == "wireReadMibps" && !math.IsNaN(p.Value) || p.Value < 0 || p.Value > 1e6 {
				t.Errorf("%s at %v = %v", name, p.Time, p.Value)
			}
		}
	}
	series, err := h.s.Query(context.Background(), model.MetricsQuery{Series: "k2", Metrics: []string{"readIops"},
		Start: h.clk.t.Add(-30 * time.Second), End: h.clk.t, Step: DefaultInterval})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range series[0].Points {
		if !math.IsNaN(p.Value) {
			t.Errorf("v2 exported again: read IOPS %v at %v, want unknown", p.Value, p.Time)
		}
	}
}

// An SMB volume's counters are the data plane's Accountant's sums, which
// outlive Basin (the data plane saves and takes them up, keeping their Since):
// a Basin killed while clients went on, and started again, counts what the
// shares did while it was down, spread over the intervals it spans, as for
// NFS; so does a volume shared over both. Its Prometheus totals go on.
func TestResumeSMB(t *testing.T) {
	h, _ := newStateHarness(t)
	docs := SMBShare{AD: "projects/p/locations/l/activeDirectories/ad1", Name: "docs"}
	both := SMBShare{AD: docs.AD, Name: "both"}
	vs := Volume{Key: "k1", Name: "projects/p/locations/l/volumes/v1", Network: "n", SMB: docs}
	dual := Volume{Key: "k2", Name: "projects/p/locations/l/volumes/v2", Network: "n", ExportID: 7, SMB: both}
	h.vols.vols = []Volume{vs, dual}
	h.smb.since = t0.Add(-time.Hour)
	// Each interval: perSec reads a second on each share, and on the export.
	load := func(perSec uint64) {
		h.smb.load(docs, perSec*10, 0, 0, 4096, time.Millisecond, 0)
		h.smb.load(both, perSec*10, 0, 0, 4096, time.Millisecond, 0)
		h.g.load(7, perSec*10, 0, perSec*10, 4096, time.Millisecond, 0)
	}
	load(0)
	h.tick(t) // the baseline
	for range 6 {
		load(100)
		h.tick(t)
	}
	for range 3 { // killed: the clients go on, the sums with them
		load(400)
		h.clk.advance(DefaultInterval)
	}
	h.restart()
	load(400)
	h.tick(t) // 40 s since the last reading: 4 intervals at 400/s
	load(50)
	h.tick(t)
	checkRing(t, h, 110*time.Second, func(i int) float64 {
		switch {
		case i < 6:
			return 100
		case i < 10:
			return 400
		}
		return 50
	})
	series, err := h.s.Query(context.Background(), model.MetricsQuery{Series: "k2", Metrics: []string{"readIops"},
		Start: h.clk.t.Add(-60 * time.Second), End: h.clk.t, Step: DefaultInterval})
	if err != nil {
		t.Fatal(err)
	}
	if r := series[0].Points; len(r) != 6 || !near(r[0].Value, 200) || !near(r[1].Value, 800) || !near(r[4].Value, 800) || !near(r[5].Value, 100) {
		t.Errorf("dual volume's read IOPS over the restart %+v, want 200, 4 × 800, 100", r)
	}
	h.s.mu.Lock()
	reads := h.s.series["k1"].totals.io.readOps
	h.s.mu.Unlock()
	if want := uint64(6*1000 + 4*4000 + 500); reads != want {
		t.Errorf("Prometheus total of reads %d, want %d", reads, want)
	}
}

// Sums the data plane started again (its saved Accountant lost or refused: a
// new Since) are not comparable with the saved reading, even when above it
// (a new Accountant's first read counts processes that served before it):
// the first interval after the start is unknown, then counting goes on.
// Within a run too; and counters that went back under the same Since (an
// older saved Accountant) are unknown for the interval, not counted whole.
func TestResumeSMBOtherSince(t *testing.T) {
	h, _ := newStateHarness(t)
	docs := SMBShare{AD: "projects/p/locations/l/activeDirectories/ad1", Name: "docs"}
	vs := Volume{Key: "k1", Name: "projects/p/locations/l/volumes/v2", Network: "n", SMB: docs}
	h.vols.vols = []Volume{vs}
	h.smb.since = t0.Add(-time.Hour)
	h.smb.load(docs, 100, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	h.smb.load(docs, 100, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	h.clk.advance(DefaultInterval)
	h.restart()
	h.smb.mu.Lock()
	h.smb.shares[docs] = smb.ShareIO{Reads: 1_000_000, ReadBytes: 1 << 40, ReadNs: 1 << 40} // a new accountant, every counter above
	h.smb.since = h.clk.t
	h.smb.mu.Unlock()
	h.tick(t)
	h.smb.load(docs, 50, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	r := h.query(t, time.Minute, DefaultInterval, "readIops")["readIops"]
	if len(r) != 3 || !near(r[0].Value, 10) || !math.IsNaN(r[1].Value) || !near(r[2].Value, 5) {
		t.Errorf("read IOPS %+v, want 10, unknown over the restart, then 5", r)
	}
	// Within a run: another Since, then counters gone back.
	h.smb.mu.Lock()
	h.smb.since = h.clk.t
	h.smb.mu.Unlock()
	h.smb.load(docs, 70, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	h.smb.mu.Lock()
	h.smb.shares[docs] = smb.ShareIO{Reads: 30}
	h.smb.mu.Unlock()
	h.tick(t)
	h.smb.load(docs, 20, 0, 0, 4096, time.Millisecond, 0)
	h.tick(t)
	r = h.query(t, 30*time.Second, DefaultInterval, "readIops")["readIops"]
	if len(r) != 3 || !math.IsNaN(r[0].Value) || !math.IsNaN(r[1].Value) || !near(r[2].Value, 2) {
		t.Errorf("read IOPS %+v, want unknown (another Since), unknown (gone back), then 2", r)
	}
}

// An absent, corrupt or foreign state file is ignored with a log line: the
// first sample is a baseline, as without one. So is one of another format
// version or sampling interval, and one older than MaxResumeGap (whose rollup
// in progress is still stored).
func TestStateIgnored(t *testing.T) {
	h, logs := newStateHarness(t)
	if !strings.Contains(logs.String(), "no saved state") {
		t.Errorf("an absent state: logged %q", logs.String())
	}
	h.tick(t)
	h.runFor(t, time.Minute, 100)
	good, err := os.ReadFile(filepath.Join(h.dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	version := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(version[len(stateMagic):], stateVersion+1)
	if st, err := decodeState(good, DefaultInterval); err != nil || len(st.series) != 1 {
		t.Fatalf("the saved state: %+v, %v", st, err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		log  string
	}{
		{"corrupt", append(append([]byte(nil), good[:40]...), append([]byte{good[40] ^ 1}, good[41:]...)...), "checksum"},
		{"cut short", good[:len(good)/2], "checksum"},
		{"empty", nil, "not a state file"},
		{"version", withCRC(version), fmt.Sprintf("format version %d", stateVersion+1)},
		{"interval", withCRC(func() []byte {
			b := append([]byte(nil), version...)
			binary.LittleEndian.PutUint32(b[len(stateMagic):], stateVersion)
			binary.LittleEndian.PutUint32(b[len(stateMagic)+12:], 60)
			return b
		}()), "sampled every 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(h.dir, stateFile), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			logs.Reset()
			h.down(20*time.Second, 100)
			h.restart()
			if l := logs.String(); !strings.Contains(l, "saved state ignored") || !strings.Contains(l, tc.log) {
				t.Errorf("logged %q, want the state ignored for %q", l, tc.log)
			}
			h.tick(t) // a baseline
			if r := h.query(t, 10*time.Second, DefaultInterval, "readIops")["readIops"]; len(r) != 0 {
				t.Errorf("the first sample made a point: %+v", r)
			}
			h.runFor(t, 10*time.Second, 100)
		})
	}
	// Too old: the baseline again, the rollup in progress stored.
	h.runFor(t, 30*time.Second, 100)
	logs.Reset()
	h.down(MaxResumeGap+time.Minute, 100)
	h.restart()
	h.tick(t)
	if !strings.Contains(logs.String(), "too old") {
		t.Errorf("an old state: logged %q", logs.String())
	}
	if r := h.query(t, 10*time.Second, DefaultInterval, "readIops")["readIops"]; len(r) != 0 {
		t.Errorf("the first sample after a long stop made a point: %+v", r)
	}
	h.tick(t) // a point of a later bucket: the one in progress before the stop is stored
	if a := h.stored(t)[t0.Unix()]; a == nil || a.n[readOps] == 0 {
		t.Errorf("the rollup in progress before the long stop was not stored: %+v", a)
	}
}

// withCRC puts a state file's checksum right after its body was changed.
func withCRC(b []byte) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crcTable))
	return b
}

// The journal is read back up to a pass a crash cut short; what a segment of
// another version holds is ignored; segments older than SavedRing are deleted.
func TestRingJournal(t *testing.T) {
	h, logs := newStateHarness(t)
	h.tick(t)
	h.runFor(t, 90*time.Minute, 100)
	segs, err := h.s.segments()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(segs); n < 12 || n > 14 {
		t.Errorf("%d segments after 90 minutes, want those of the last hour", n)
	}
	seg := filepath.Join(h.dir, ringSegment(segs[len(segs)-1]))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seg, b[:len(b)-10], 0o600); err != nil { // the last pass cut short
		t.Fatal(err)
	}
	h.restart()
	if !strings.Contains(logs.String(), "partial pass") {
		t.Errorf("a cut segment: logged %q", logs.String())
	}
	// The last hour but its last pass, which the state holds: the ring lacks
	// that Point, the counters and rollups do not.
	r := h.s.series["k1"].ring
	first, _ := r.ordered()
	last, _ := r.last()
	if n := len(r.pts); n != int(SavedRing/DefaultInterval)-1 || first != nil || r.pts[0].T != uint32(t0.Add(30*time.Minute+DefaultInterval).Unix()) ||
		last.T != uint32(h.clk.t.Add(-DefaultInterval).Unix()) {
		t.Errorf("%d Points taken up (%d to %d), want the last hour's but the cut one", n, r.pts[0].T, last.T)
	}
	h.runFor(t, 10*time.Second, 100)
	checkRing(t, h, 10*time.Second, func(int) float64 { return 100 })
	// Before the first sample a taken-up series has no labels: not exposed.
	h.restart()
	if n := testutil.CollectAndCount(h.s.Collector()); n != 0 {
		t.Errorf("%d series exposed before the first sample", n)
	}
}

// A state file round-trips every series' readings, totals and rollup in
// progress.
func TestStateRoundTrip(t *testing.T) {
	h, _ := newStateHarness(t)
	docs := SMBShare{AD: "projects/p/locations/l/activeDirectories/ad1", Name: "docs"}
	smbOnly := Volume{Key: "k2", Name: "projects/p/locations/l/volumes/v2", Network: "n", SMB: docs}
	h.vols.vols = append(h.vols.vols, smbOnly)
	h.smb.since = time.Date(2026, 11, 20, 8, 0, 0, 123456789, time.FixedZone("x", 3600))
	h.smb.load(docs, 1, 2, 3, 4, 5, 6)
	h.tc.add(v1.Name, 1, 2, 3, 4, 5)
	h.tick(t)
	h.tc.add(v1.Name, 100, 200, 3, 4, 5)
	h.smb.load(docs, 10, 20, 30, 40, 50, 60)
	h.runFor(t, 30*time.Second, 100)
	s := h.s
	b := s.encodeState(nil, h.clk.t)
	st, err := decodeState(b, DefaultInterval)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.series) != 2 {
		t.Fatalf("%d series", len(st.series))
	}
	slices.SortFunc(st.series, func(a, b savedSeries) int { return strings.Compare(a.key, b.key) })
	sr := s.series["k1"]
	got := st.series[0]
	gotSMB, wantSMB := st.series[1].prev.smb, s.series["k2"].prev.smb
	if !st.series[1].prev.smbOK || !gotSMB.Since.Equal(h.smb.since) || gotSMB.Reads != 11 || gotSMB.WriteNs != 1212 {
		t.Errorf("SMB reading %+v, want %+v", gotSMB, wantSMB)
	}
	gotSMB.Since, wantSMB.Since = time.Time{}, time.Time{}
	if gotSMB != wantSMB {
		t.Errorf("SMB reading %+v, want %+v", gotSMB, wantSMB)
	}
	gotNFS, wantNFS := got.prev.nfs, sr.prev.nfs
	if !gotNFS.Since.Equal(wantNFS.Since) {
		t.Errorf("Ganesha's epoch %v, want %v", gotNFS.Since, wantNFS.Since)
	}
	gotNFS.Since, wantNFS.Since = time.Time{}, time.Time{}
	if got.key != "k1" || !got.havePrev || !got.prev.at.Equal(sr.prev.at) || gotNFS != wantNFS || got.prev.nfsExport != 7 ||
		got.prev.qos != sr.prev.qos || !got.prev.qosOK || got.prev.smbOK || got.totals != sr.totals || *got.acc != *sr.acc || got.accFull != sr.accFull {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, sr)
	}
	if !st.written.Equal(h.clk.t) {
		t.Errorf("written %v, want %v", st.written, h.clk.t)
	}
}

// A state file of version 1 (before SMB readings were saved) is taken up; one
// that says version 1 and holds SMB readings is not.
func TestStateVersion1(t *testing.T) {
	h, _ := newStateHarness(t)
	h.tick(t)
	h.runFor(t, 20*time.Second, 100)
	b := h.s.encodeState(nil, h.clk.t)
	binary.LittleEndian.PutUint32(b[len(stateMagic):], 1)
	if st, err := decodeState(withCRC(b), DefaultInterval); err != nil || len(st.series) != 1 || !st.series[0].prev.nfsOK {
		t.Errorf("version 1: %+v, %v", st, err)
	}
	docs := SMBShare{AD: "projects/p/locations/l/activeDirectories/ad1", Name: "docs"}
	h.vols.vols[0].SMB = docs
	h.smb.load(docs, 1, 0, 0, 1, 1, 0)
	h.tick(t)
	b = h.s.encodeState(nil, h.clk.t)
	binary.LittleEndian.PutUint32(b[len(stateMagic):], 1)
	if _, err := decodeState(withCRC(b), DefaultInterval); err == nil || !strings.Contains(err.Error(), "SMB counters in a version 1 file") {
		t.Errorf("version 1 with SMB readings: %v", err)
	}
}

func FuzzDecodeState(f *testing.F) {
	clk, g, tc, sm := &clock{t: t0}, newFakeGanesha(t0), &fakeQoS{}, &fakeSMB{since: t0}
	dual := v1
	dual.SMB = SMBShare{AD: "ad", Name: "docs"}
	s := New(Options{Targets: &fakeVolumes{vols: []Volume{dual}}, NFS: g, QoS: tc, SMB: sm, Now: clk.now})
	for range 3 {
		g.load(7, 1, 1, 1, 1, 1, 1)
		tc.add(v1.Name, 1, 1, 1, 1, 1)
		sm.load(dual.SMB, 1, 1, 1, 1, 1, 1)
		clk.advance(DefaultInterval)
		if err := s.Sample(context.Background()); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(s.encodeState(nil, clk.t))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeState(b, DefaultInterval)
		if len(b) >= 4 { // and past the checksum
			decodeState(withCRC(b), DefaultInterval)
		}
	})
}
