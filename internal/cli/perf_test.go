package cli

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
