package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
)

// metricSeries is one series of the metrics API's answer.
type metricSeries struct {
	Metric string `json:"metric"`
	Points []struct {
		Time  time.Time `json:"time"`
		Value *float64  `json:"value"`
		Max   *float64  `json:"max"`
	} `json:"points"`
}

// volumeMetrics reads metrics of volume id over [from, to) at 10 s.
func volumeMetrics(t *testing.T, c *client.Client, id string, from, to time.Time, metrics ...string) map[string]metricSeries {
	t.Helper()
	return volumeMetricsStep(t, c, id, from, to, "10s", metrics...)
}

func volumeMetricsStep(t *testing.T, c *client.Client, id string, from, to time.Time, step string, metrics ...string) map[string]metricSeries {
	t.Helper()
	q := url.Values{"metric": {strings.Join(metrics, ",")}, "startTime": {from.UTC().Format(time.RFC3339)},
		"endTime": {to.UTC().Format(time.RFC3339)}, "step": {step}}
	var res struct {
		Series []metricSeries `json:"series"`
	}
	if err := c.Do(context.Background(), "GET", loc+"/volumes/"+id+"/metrics?"+q.Encode(), nil, nil, &res); err != nil {
		t.Fatalf("metrics of %s: %v", id, err)
	}
	out := map[string]metricSeries{}
	for _, s := range res.Series {
		out[s.Metric] = s
	}
	return out
}

// phase is what the metrics API says of [start, end), a load's run: the count
// (rate × 10 s summed over the intervals touching it, so a phase starts once a
// sampling pass has closed what came before: sampledPast) and the mean over
// the intervals wholly inside it.
type phase struct {
	total  map[string]float64
	inside map[string]float64
	max    map[string]float64 // the largest interval touching the run
	n      int                // intervals wholly inside
}

func measurePhase(t *testing.T, c *client.Client, id string, start, end time.Time, metrics ...string) phase {
	t.Helper()
	// The interval holding end must be complete; a point, once served, never
	// changes.
	sampledPast(t, c, id, end, metrics[0], true)
	ph := phase{total: map[string]float64{}, inside: map[string]float64{}, max: map[string]float64{}}
	for name, s := range volumeMetrics(t, c, id, start.Add(-20*time.Second), end.Add(30*time.Second), metrics...) {
		var sum float64
		n := 0
		for _, p := range s.Points {
			// A point summarises [Time, Time+10s).
			if p.Value == nil || !p.Time.After(start.Add(-10*time.Second)) || !p.Time.Before(end) {
				continue
			}
			ph.total[name] += *p.Value * 10
			ph.max[name] = max(ph.max[name], *p.Value)
			if !p.Time.Before(start) && !p.Time.Add(10*time.Second).After(end) {
				sum += *p.Value
				n++
			}
		}
		if n > 0 {
			ph.inside[name] = sum / float64(n)
		}
		ph.n = n
	}
	return ph
}

// sampledPast waits until the sampler has closed the 10-second interval
// holding at: a point of metric covering at (or a later one) is served, with a
// value when known is set. A phase starts after sampledPast(now + a margin for
// counters that come late) so that its intervals hold nothing of what came
// before; it ends with measurePhase, which waits for its last interval.
func sampledPast(t *testing.T, c *client.Client, id string, at time.Time, metric string, known bool) {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		s := volumeMetrics(t, c, id, at.Add(-20*time.Second), at.Add(30*time.Second), metric)[metric]
		for _, p := range s.Points {
			// A point summarises (Time, Time+10s].
			if !p.Time.Add(10*time.Second).Before(at) && (p.Value != nil || !known) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample of the interval holding %s: %+v", at, s)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// near reports whether got is within frac of want.
func near(got, want, frac float64) bool { return math.Abs(got-want) <= frac*math.Abs(want) }

// benchJob is the first job's direction of basin bench's fio-shaped JSON.
func benchJob(res map[string]any, dir string) (ios, bytes, iops, latMs, runtimeS float64) {
	j := res["jobs"].([]any)[0].(map[string]any)[dir].(map[string]any)
	lat, _ := j["lat_ns"].(map[string]any)
	return j["total_ios"].(float64), j["io_bytes"].(float64), j["iops"].(float64), lat["mean"].(float64) / 1e6, j["runtime"].(float64) / 1000
}

// checkCounted asserts that a phase counted the requests and bytes of one
// direction ("read" or "write") that the load made, within 5 %, and so their
// ratio, the block size.
func checkCounted(t *testing.T, ph phase, dir string, ios, bytes float64) {
	t.Helper()
	n, b := ph.total[dir+"Iops"], ph.total[dir+"Mibps"]*(1<<20)
	if !near(n, ios, 0.05) {
		t.Errorf("%s requests counted %.0f, the load made %.0f", dir, n, ios)
	}
	if !near(b, bytes, 0.05) {
		t.Errorf("%s bytes counted %.0f, the load moved %.0f", dir, b, bytes)
	}
	if !near(b/n, bytes/ios, 0.05) {
		t.Errorf("%s block size %.0f bytes, the load's %.0f per request", dir, b/n, bytes/ios)
	}
}

// prometheus runs Debian's Prometheus on loopback, scraping target every second.
type prometheus struct {
	t    *testing.T
	addr string
}

func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus here: run scripts/setup.sh --test")
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: basin\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &prometheus{t: t, addr: freeAddr(t)}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr, "--log.level=warn")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get("http://" + p.addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready:\n%s", log.String())
		}
	}
}

// query evaluates an instant PromQL query at at and returns its one value.
func (p *prometheus) query(q string, at time.Time) float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.addr + "/api/v1/query?" + url.Values{"query": {q}, "time": {fmt.Sprint(at.Unix())}}.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" || len(r.Data.Result) != 1 {
		p.t.Fatalf("query %s: %v %s", q, err, body)
	}
	var v float64
	fmt.Sscan(r.Data.Result[0].Value[1].(string), &v)
	return v
}

// TestVolumeMetrics: known loads from `basin bench --engine nfs` on a client host
// against a real Basin volume, then what the metrics API and a real Prometheus
// scraping Basin's /metrics say of them, Ganesha's counts and traffic control's
// wire bytes. Each phase starts after a sampling pass, so the sampler's
// 10-second intervals of one phase hold nothing of another.
func TestVolumeMetrics(t *testing.T) {
	s := newServer(t)
	promTarget := freeAddr(t)
	s.start("--metrics-listen", promTarget)
	prom := startPrometheus(t, promTarget)
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "m1")
	ep := endpoint(t, c, "m1")
	h := s.host(205)
	bench := func(args ...string) map[string]any {
		res, _ := benchNFS(t, h, ep, "m1", args...)
		return res
	}
	// Before a phase, a sampling pass after what came before.
	settle := func() { sampledPast(t, c, "m1", time.Now().Add(time.Second), "readIops", false) }

	// 1. 4 KiB random reads at iodepth 16 for 30 s (the file is laid out first:
	// writes, which this phase does not look at).
	settle()
	t0 := time.Now()
	readStart := t0
	res := bench("--name", "r", "--rw", "randread", "--bs", "4k", "--iodepth", "16", "--size", "16m", "--runtime", "30s", "--time_based")
	t1 := time.Now()
	ios, bytes, iops, latMs, runtime := benchJob(res, "read")
	rd := measurePhase(t, c, "m1", t0, t1, "readIops", "readMibps", "readBlockKib", "readLatencyMs", "concurrency", "wireReadMibps", "atLimitShare")
	t.Logf("randread: bench %.0f reads, %.0f IOPS, %.3f ms; metrics %.0f reads, %.0f IOPS over %d intervals, %.2f KiB, %.3f ms, concurrency %.2f",
		ios, iops, latMs, rd.total["readIops"], rd.inside["readIops"], rd.n, rd.inside["readBlockKib"], rd.inside["readLatencyMs"], rd.inside["concurrency"])
	checkCounted(t, rd, "read", ios, bytes)
	// IOPS over the run: the API's requests over bench's run time. Each whole
	// 10-second interval inside the run is nearer the mean than the machine's
	// noise (2 cores shared by the load, Ganesha and Basin) allows to pin.
	if got := rd.total["readIops"] / runtime; !near(got, iops, 0.05) {
		t.Errorf("read IOPS over the run %.0f; bench: %.0f", got, iops)
	}
	if rd.n < 2 || !near(rd.inside["readIops"], iops, 0.15) {
		t.Errorf("read IOPS %.0f over %d whole intervals; bench: %.0f", rd.inside["readIops"], rd.n, iops)
	}
	if !near(rd.inside["readBlockKib"], 4, 0.05) {
		t.Errorf("read block size %.2f KiB, want 4", rd.inside["readBlockKib"])
	}
	// Ganesha times a read from its arrival to its reply: part of what the client
	// waits, never more; and never more requests in flight than the client sent.
	if l := rd.inside["readLatencyMs"]; !(l > 0 && l <= latMs*1.05) {
		t.Errorf("read latency %.3f ms, the client saw %.3f ms", l, latMs)
	}
	if q := rd.inside["concurrency"]; !(q > 0 && q <= 16*1.05) {
		t.Errorf("concurrency %.2f at iodepth 16", q)
	}
	// On the wire (traffic control's count of what the endpoint sent): the
	// payload and, per 4 KiB reply, its RPC header and three segments' headers
	// (~8 %), never less than the payload.
	wireRead := rd.total["wireReadMibps"] * (1 << 20)
	t.Logf("randread: wire %.0f bytes sent for %.0f of payload (%.4f); at the limit %.3f of the time at most", wireRead, bytes, wireRead/bytes, rd.max["atLimitShare"])
	if wireRead < bytes || wireRead > 1.15*bytes {
		t.Errorf("wire bytes sent %.0f for %.0f bytes read: want 1–1.15 × the payload", wireRead, bytes)
	}
	// The limit (the e2e floor, 1,000 MiB/s) is far above this load: never at it.
	if m := rd.max["atLimitShare"]; m > 0.01 {
		t.Errorf("atLimitShare up to %.3f far below the limit", m)
	}
	// Prometheus: the read bytes' rate over a window around the run, times the
	// window, is what the run read. It scrapes each second: a few scrapes after
	// the sampling pass that closed the run.
	time.Sleep(3 * time.Second)
	at := time.Now()
	w := at.Sub(t0.Add(-5 * time.Second)).Round(time.Second)
	promBytes := prom.query(fmt.Sprintf(`rate(basin_volume_read_bytes_total{volume="m1"}[%ds]) * %d`, int(w.Seconds()), int(w.Seconds())), at)
	t.Logf("prometheus: rate(read bytes)[%s] × %s = %.0f; bench read %.0f", w, w, promBytes, bytes)
	if !near(promBytes, bytes, 0.05) {
		t.Errorf("prometheus: rate(basin_volume_read_bytes_total[%s]) × %s = %.0f, bench read %.0f", w, w, promBytes, bytes)
		q := url.Values{"query": {fmt.Sprintf(`basin_volume_read_bytes_total{volume="m1"}[%ds]`, int(w.Seconds()))}, "time": {fmt.Sprint(at.Unix())}}
		resp, err := http.Get("http://" + prom.addr + "/api/v1/query?" + q.Encode())
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("the samples (load %s – %s):\n%s", t0.Format(time.RFC3339Nano), t1.Format(time.RFC3339Nano), b)
		}
	}

	// 2. 1 MiB sequential writes.
	settle()
	t0 = time.Now()
	res = bench("--name", "w", "--rw", "write", "--bs", "1m", "--iodepth", "4", "--size", "256m")
	t1 = time.Now()
	wios, wbytes, _, _, _ := benchJob(res, "write")
	wr := measurePhase(t, c, "m1", t0, t1, "writeIops", "writeMibps", "writeBlockKib", "wireWriteMibps")
	t.Logf("write: bench %.0f writes, %.0f bytes; metrics %.0f writes, %.0f bytes, %.1f KiB", wios, wbytes,
		wr.total["writeIops"], wr.total["writeMibps"]*(1<<20), wbytes/wr.total["writeIops"]/1024)
	checkCounted(t, wr, "write", wios, wbytes)
	// Received on the wire: the payload and its Ethernet, IP and TCP headers
	// (~4.6 % at MTU 1500), a little RPC.
	wireWrite := wr.total["wireWriteMibps"] * (1 << 20)
	t.Logf("write: wire %.0f bytes received for %.0f of payload (%.4f)", wireWrite, wbytes, wireWrite/wbytes)
	if wireWrite < wbytes || wireWrite > 1.08*wbytes {
		t.Errorf("wire bytes received %.0f for %.0f bytes written: want 1–1.08 × the payload", wireWrite, wbytes)
	}

	// 3. Directory listings: 400 READDIRPLUS of a small directory.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var nc *nfs3.Client
	if err := h.Within(func() (err error) {
		nc, err = nfs3.Mount(ctx, ep.String(), "/m1", nfs3.Options{Auth: nfs3.Auth{Machine: "lister"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dir, err := nc.Mkdir(ctx, nc.Root, "listing", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := nc.Create(ctx, dir, fmt.Sprintf("f%d", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	const listings = 400
	t0 = time.Now()
	for range listings {
		if _, err := nc.ReadDirPlus(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	t1 = time.Now()
	md := measurePhase(t, c, "m1", t0, t1, "metadataIops", "readIops", "writeIops")
	t.Logf("listing: %d READDIRPLUS; metrics %.0f metadata requests, %.0f reads, %.0f writes", listings,
		md.total["metadataIops"], md.total["readIops"], md.total["writeIops"])
	if m := md.total["metadataIops"]; m < listings*0.95 || m > listings*1.05 {
		t.Errorf("metadata requests counted %.0f for %d listings", m, listings)
	}
	if md.total["readIops"] != 0 || md.total["writeIops"] != 0 {
		t.Errorf("a listing counted as reads %.0f or writes %.0f", md.total["readIops"], md.total["writeIops"])
	}

	// 4. A clean restart: the 10-second points were in memory, the 5-minute
	// rollups are in the store. Their busiest interval is the read phase's.
	nc.Close()
	s.stop(syscall.SIGTERM)
	s.start("--metrics-listen", promTarget)
	from := readStart.Truncate(5 * time.Minute)
	var peak float64
	for _, p := range volumeMetricsStep(t, c, "m1", from, time.Now().Add(5*time.Minute), "5m", "readIops")["readIops"].Points {
		if p.Max != nil {
			peak = max(peak, *p.Max)
		}
	}
	t.Logf("after a restart: busiest 10 s of reads in the 5-minute rollups %.0f IOPS; before: %.0f", peak, rd.max["readIops"])
	if !near(peak, rd.max["readIops"], 0.01) {
		t.Errorf("after a restart, the rollups' busiest interval is %.0f read IOPS; it was %.0f", peak, rd.max["readIops"])
	}
}
