package cli

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shortenSampleWait makes fio analyze --volume wait at most wait for Basin's
// sample of a run's end, asking every poll, until the test ends.
func shortenSampleWait(t *testing.T, wait, poll time.Duration) {
	saved := sampleWait
	t.Cleanup(func() { sampleWait = saved })
	sampleWait.max, sampleWait.poll = wait, poll
}

// fio analyze --volume reads the volume's metrics over the run (fio's JSON
// says when it ended and how long it ran; the text form's file, when it was
// written) and lets the time held at the limit decide the qos-ceiling finding.
func TestFioAnalyzeVolumeMetrics(t *testing.T) {
	run := "../perf/testdata/fio/rate_4k_randwrite.json"
	vol := volumeFixture{limit: 4, series: map[string][]float64{"readMibps": {0}, "writeMibps": {3.5}, "wireReadMibps": {0.3}, "wireWriteMibps": {3.8}, "atLimitShare": {1}}}
	fake := &metricsServer{vols: map[string]volumeFixture{"vol1": vol}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	out, errs, code := runAgainst(srv, "fio", "analyze", run, "--volume", "vol1")
	if code != 0 || !strings.Contains(out, "INFO qos-ceiling: the volume was held at its limit 100% of the run (atLimitShare 1.00)") ||
		!strings.Contains(out, "1.17× payload on the wire (measured by Basin)") {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	if q := fake.lastQuery(); q.Get("startTime") != "2026-11-30T00:59:58Z" || q.Get("endTime") != "2026-11-30T01:00:00Z" ||
		q.Get("metric") != "readMibps,writeMibps,wireReadMibps,wireWriteMibps,atLimitShare" {
		t.Errorf("query %v", q)
	}

	// Text has no time of its own: the file's modification time is the run's end.
	txt := filepath.Join(t.TempDir(), "run.txt")
	data, _ := os.ReadFile("../perf/testdata/fio/randread_qd16.txt")
	os.WriteFile(txt, data, 0o644)
	os.Chtimes(txt, testNow, time.Date(2026, 11, 23, 12, 0, 30, 0, time.UTC))
	if _, errs, code := runAgainst(srv, "fio", "analyze", txt, "--volume", "vol1"); code != 0 {
		t.Fatalf("text: exit %d: %s", code, errs)
	}
	if q := fake.lastQuery(); q.Get("startTime") != "2026-11-23T12:00:28Z" || q.Get("endTime") != "2026-11-23T12:00:30Z" {
		t.Errorf("text's query %v", q)
	}

	// Without --qos there is no atLimitShare nor wire (null): the estimate decides.
	vol.series = map[string][]float64{"readMibps": {0}, "writeMibps": {3.5}, "wireReadMibps": {nan}, "wireWriteMibps": {nan}, "atLimitShare": {nan}}
	fake.vols["vol1"] = vol
	out, errs, code = runAgainst(srv, "fio", "analyze", run, "--volume", "vol1")
	if code != 0 || !strings.Contains(out, "INFO qos-ceiling: 3.5 MiB/s is 97% of the 3.6 MiB/s of payload") || !strings.Contains(out, "estimated") {
		t.Fatalf("no qos: exit %d: %s%s", code, out, errs)
	}

	// Metrics refused: the analysis still comes, estimated, and says why.
	fake.badStep = "no"
	out, errs, code = runAgainst(srv, "fio", "analyze", run, "--volume", "vol1")
	if code != 0 || !strings.Contains(out, "INFO qos-ceiling: 3.5 MiB/s is 97%") || !strings.Contains(errs, "the volume's metrics over the run") {
		t.Fatalf("refused: exit %d: %s%s", code, out, errs)
	}
}

// A run that starts 8 s into one of Basin's 10-second intervals and ends 8 s
// into another: each interval counts for the seconds of the run it covers, so
// the mostly idle first one does not dilute the time at the limit, and the
// last one, which the run ends in, counts too.
func TestFioAnalyzeVolumeOverlap(t *testing.T) {
	end := time.Date(2026, 11, 23, 12, 0, 38, 0, time.UTC) // started 12:00:08
	data, err := os.ReadFile("../perf/testdata/fio/rate_4k_randwrite.json")
	if err != nil {
		t.Fatal(err)
	}
	js := strings.Replace(string(data), `"timestamp_ms" : 1796000399251`, fmt.Sprintf(`"timestamp_ms" : %d`, end.UnixMilli()), 1)
	js = strings.Replace(js, `"runtime" : 1001`, `"runtime" : 30000`, 1)
	run := filepath.Join(t.TempDir(), "run.json")
	os.WriteFile(run, []byte(js), 0o644)
	// Held at the limit whenever the run was on: 2 s of [12:00:00, 12:00:10), 8 s of [12:00:30, 12:00:40).
	vol := volumeFixture{limit: 4, series: map[string][]float64{"readMibps": {0, 0, 0, 0, 0}, "writeMibps": {0.7, 3.5, 3.5, 2.8, 0},
		"wireReadMibps": {0.06, 0.3, 0.3, 0.24, 0}, "wireWriteMibps": {0.76, 3.8, 3.8, 3.04, 0}, "atLimitShare": {0.2, 1, 1, 0.8, 0}}}
	fake := &metricsServer{vols: map[string]volumeFixture{"vol1": vol}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	at := func(now time.Time) (string, string, int) {
		var out, errb bytes.Buffer
		code := Main([]string{"fio", "analyze", run, "--volume", "vol1", "--endpoint", srv.URL, "--insecure-no-auth"},
			Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Now: func() time.Time { return now }})
		return out.String(), errb.String(), code
	}
	// (0.2×2 + 1×10 + 1×10 + 0.8×8) / 30 s. A plain mean of the intervals that end in the run
	// gives 0.73, and their payload (2.6 MiB/s) is set aside as another time's.
	const held = "INFO qos-ceiling: the volume was held at its limit 89% of the run (atLimitShare 0.89)"
	out, errs, code := at(end.Add(time.Hour))
	if code != 0 || !strings.Contains(out, held) || !strings.Contains(out, "the volume's QoS ceiling was the bottleneck") ||
		!strings.Contains(out, "measured by Basin") || errs != "" {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	if q := fake.lastQuery(); q.Get("startTime") != "2026-11-23T12:00:08Z" || q.Get("endTime") != "2026-11-23T12:00:40Z" {
		t.Errorf("query %v", q)
	}

	// Right after the run Basin has sampled up to 12:00:30: fio analyze waits for the interval of the run's end.
	shortenSampleWait(t, 2*time.Second, time.Millisecond)
	fake.sampledTo, fake.sampling = end.Add(-8*time.Second), 5*time.Second
	n := len(fake.queries)
	out, errs, code = at(end.Add(3 * time.Second))
	if code != 0 || !strings.Contains(out, held) || !strings.Contains(errs, "waiting up to 2s for Basin to sample the end of the run") ||
		strings.Count(errs, "\n") != 1 || len(fake.queries)-n != 3 {
		t.Fatalf("waited: exit %d, %d queries: %s%s", code, len(fake.queries)-n, out, errs)
	}

	// It waits no longer than sampleWait.max, then says what its figures cover and when to ask again.
	sampleWait.max = 50 * time.Millisecond
	fake.sampledTo, fake.sampling = end.Add(-8*time.Second), 0
	out, errs, code = at(end.Add(3 * time.Second))
	if code != 0 || !strings.Contains(out, "held at its limit 93% of the run") ||
		!strings.Contains(errs, "Basin's figures are over 22 s of the 30 s run; Basin has not sampled the end of the run yet: run `basin fio analyze` again in 22 s") {
		t.Fatalf("gave up: exit %d: %s%s", code, out, errs)
	}
	// Less than half the run sampled: the estimate decides, and stderr says why.
	fake.sampledTo = end.Add(-28 * time.Second)
	out, errs, code = at(end.Add(3 * time.Second))
	if code != 0 || !strings.Contains(out, "estimated from the block size") || strings.Contains(out, "atLimitShare") ||
		!strings.Contains(errs, "Basin's samples cover 2 s of the 30 s run; Basin has not sampled the end of the run yet") {
		t.Fatalf("too little: exit %d: %s%s", code, out, errs)
	}
	// Long after the run, no waiting: an old run's figures are there or never will be.
	fake.sampledTo = end.Add(-8 * time.Second)
	n = len(fake.queries)
	if _, errs, _ = at(end.Add(time.Minute)); strings.Contains(errs, "waiting") || len(fake.queries)-n != 1 || !strings.Contains(errs, "again now") {
		t.Fatalf("old run: %d queries: %s", len(fake.queries)-n, errs)
	}
}
