package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// topFixture: five volumes that each lead one order, one volume with no points
// yet and one deleted after it was listed. Only the last point counts, except
// atLimitShare, whose mean over the minute is shown.
func topFixture() *metricsServer {
	series := func(readIops, writeIops, metaIops, readMibps, writeMibps, readLat, writeLat, conc, clients float64, atLimit ...float64) map[string][]float64 {
		last := func(v float64) []float64 { return []float64{1, 2, 3, 4, 5, v} }
		return map[string][]float64{"readIops": last(readIops), "writeIops": last(writeIops), "metadataIops": last(metaIops),
			"readMibps": last(readMibps), "writeMibps": last(writeMibps), "readLatencyMs": last(readLat), "writeLatencyMs": last(writeLat),
			"concurrency": last(conc), "clients": last(clients), "atLimitShare": atLimit}
	}
	nans := []float64{nan, nan, nan, nan, nan, nan}
	empty := map[string][]float64{}
	for _, m := range topMetrics {
		empty[m] = nil
	}
	return &metricsServer{vols: map[string]volumeFixture{
		"db":   {pool: "fast", series: series(5000, 1200, 30, 19.53, 4.69, 0.8, 1.5, 5.8, 3, 0, 0, 0, 0, 0, 0)},
		"logs": {pool: "std", series: series(10, 800, 5, 0.04, 100, 0.5, 12, 9.6, 1, 1, 1, 1, 0, 1, 1)},
		"home": {pool: "std", series: series(200, 50, 3000, 1.5, 0.2, 2.5, 3, 0.65, 40, nans...)},
		"idle": {pool: "fast", series: series(0, 0, 0, 0, 0, nan, nan, 0, 0, nans...)},
		"new":  {pool: "fast", series: empty},
		"gone": {pool: "fast", gone: true},
	}}
}

func TestTopOnce(t *testing.T) {
	fake := topFixture()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ name, file string }{
		{"", "top_once.txt"},
		{"--sort=latency -n 3", "top_once_latency_3.txt"},
	} {
		out, errs, code := runAgainst(srv, append([]string{"top", "--once"}, strings.Fields(tc.name)...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, errs)
		}
		golden(t, tc.file, out)
		// Latency and in flight are the server's: labelled so, with what they
		// leave out (docs/metrics.md).
		for _, want := range []string{"SRV LAT ms", "SRV IN FLIGHT", "the network, the clients' own queues, and the QoS shaper"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in\n%s", tc.name, want, out)
			}
		}
	}
	q := fake.lastQuery()
	if q.Get("step") != "10s" || q.Get("startTime") != "2026-11-23T12:59:00Z" || q.Get("endTime") != "2026-11-23T13:00:00Z" {
		t.Errorf("query %v", q)
	}
}

// rowIDs are the volume column of a frame's rows.
func rowIDs(frame string) []string {
	lines := strings.Split(strings.TrimSpace(frame), "\n")
	var ids []string
	for _, l := range lines[3:] { // header, blank line, column names
		if l == "" { // the blank line before the footnote
			break
		}
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

func TestTopSortAndLimit(t *testing.T) {
	srv := httptest.NewServer(topFixture())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want string
		head string
	}{
		{nil, "db home logs idle new", "5 of 5 volumes by iops"},
		{[]string{"--sort", "iops"}, "db home logs idle new", "5 of 5 volumes by iops"},
		{[]string{"--sort", "mibps"}, "logs db home idle new", "5 of 5 volumes by mibps"},
		// Unknown latencies (no requests, no points) go last, by name.
		{[]string{"--sort", "latency"}, "logs home db idle new", "5 of 5 volumes by latency"},
		// A volume without a limit has no at-limit share.
		{[]string{"--sort", "throttled"}, "logs db home idle new", "5 of 5 volumes by throttled"},
		{[]string{"--sort", "mibps", "-n", "2"}, "logs db", "2 of 5 volumes by mibps"},
		{[]string{"--n=1"}, "db", "1 of 5 volumes by iops"},
		{[]string{"-n", "0"}, "db home logs idle new", "5 of 5 volumes by iops"},
		{[]string{"-n", "9"}, "db home logs idle new", "5 of 5 volumes by iops"},
	} {
		out, errs, code := runAgainst(srv, append([]string{"top", "--once"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errs)
		}
		if got := strings.Join(rowIDs(out), " "); got != tc.want || !strings.Contains(out, tc.head) {
			t.Errorf("%v: rows %q, want %q; header %q:\n%s", tc.args, got, tc.want, tc.head, out)
		}
	}
}

func TestTopBadFlags(t *testing.T) {
	fake := topFixture()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sort", "name"}, `--sort must be iops, mibps, latency or throttled, got "name"`},
		{[]string{"-n", "-1"}, "--n must be 0 (all) or more"},
		{[]string{"-n", "ten"}, `--n: "ten" is not a number`},
		{[]string{"--interval", "soon"}, "--interval must be a positive duration"},
		{[]string{"--interval", "100ms"}, "--interval must be at least 1s"},
		{[]string{"vol1"}, "top: expected no arguments"},
	} {
		_, errs, code := runAgainst(srv, append([]string{"top", "--once"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q: %s", tc.args, code, tc.want, errs)
		}
	}
	if q := fake.lastQuery(); q != nil {
		t.Errorf("refused command lines reached the server: %v", q)
	}
}

// The live view draws a frame at start, at every tick and at any key but q,
// shows a failed frame's error and goes on, and ends at q or when its context
// does. Channels stand in for the ticker and the keyboard.
func TestTopLoop(t *testing.T) {
	start := func(ctx context.Context, frames []error) (*bytes.Buffer, chan time.Time, chan byte, chan error, *int) {
		var out bytes.Buffer
		tick, keys, done := make(chan time.Time), make(chan byte), make(chan error)
		n := new(int)
		frame := func(context.Context) (string, error) {
			*n++
			if *n <= len(frames) && frames[*n-1] != nil {
				return "", frames[*n-1]
			}
			return "frame\n", nil
		}
		go func() { done <- topLoop(ctx, &out, frame, tick, keys) }()
		return &out, tick, keys, done, n
	}

	t.Run("q quits", func(t *testing.T) {
		out, tick, keys, done, n := start(context.Background(), []error{nil, errors.New("server down")})
		tick <- time.Time{}
		keys <- ' '
		keys <- 'q'
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := clearHome + "frame\n" + clearHome + "basin top: server down\n" + clearHome + "frame\n"
		if out.String() != want || *n != 3 {
			t.Errorf("%d frames, output %q, want %q", *n, out.String(), want)
		}
	})
	t.Run("stdin ends, the ticker goes on, cancel quits", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		_, tick, keys, done, n := start(ctx, nil)
		close(keys)
		tick <- time.Time{}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if *n != 2 {
			t.Errorf("%d frames, want 2 (the start and the tick; the end of stdin draws none)", *n)
		}
	})
}

// -o json and -o yaml print the frame's rows as data: every volume, in the
// order asked, unknown values null, the at-limit share as a fraction.
func TestTopOnceJSON(t *testing.T) {
	srv := httptest.NewServer(topFixture())
	t.Cleanup(srv.Close)
	out, errs, code := runAgainst(srv, "top", "--once", "--sort", "mibps", "-n", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Project, Location, Time, Sort string
		VolumeCount                   int
		Volumes                       []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	if got.Project != "default" || got.Location != "local" || got.Time != "2026-11-23T13:00:00Z" || got.Sort != "mibps" ||
		got.VolumeCount != 5 || len(got.Volumes) != 2 {
		t.Fatalf("-o json: %+v", got)
	}
	logs, db := got.Volumes[0], got.Volumes[1]
	if logs["volume"] != "logs" || logs["storagePool"] != "std" || logs["writeMibps"] != 100.0 || logs["clients"] != 1.0 ||
		math.Abs(logs["atLimitShare"].(float64)-5.0/6) > 1e-9 || db["volume"] != "db" || db["readIops"] != 5000.0 {
		t.Errorf("-o json rows: %v", got.Volumes)
	}
	out, errs, code = runAgainst(srv, "top", "--once", "-o", "json", "-n", "0")
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Volumes) != 5 {
		t.Fatalf("-n 0: exit %d: %s%s", code, out, errs)
	}
	if nv := got.Volumes[4]; nv["volume"] != "new" || nv["readIops"] != nil || nv["latencyMs"] != nil {
		t.Errorf("a volume without points: %v", nv)
	}
	if out, errs, code = runAgainst(srv, "top", "--once", "-o", "yaml"); code != 0 || !strings.Contains(out, "volumes:\n- ") || !strings.Contains(out, "volume: db") {
		t.Errorf("-o yaml: exit %d: %s%s", code, out, errs)
	}
	// The live view is a screen: data needs --once.
	if _, errs, code = runAgainst(srv, "top", "-o", "json"); code != 2 || !strings.Contains(errs, "-o json needs --once") {
		t.Errorf("live -o json: exit %d: %s", code, errs)
	}
}
