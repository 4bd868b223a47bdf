package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/perf"
)

// perfCommands are `basin fio …` and `basin advise`: they work offline, except
// `fio analyze --volume`, which looks the volume's limit, and its metrics over
// the run, up through the API.
func perfCommands() []*command {
	recipeFlags := []flagSpec{
		{name: "os", usage: "linux (libaio) or windows (windowsaio, threads)"},
		{name: "directory", usage: "where fio puts its files (the mounted volume)"},
		{name: "size", usage: "working set per job, e.g. 10G"},
		{name: "runtime", usage: "seconds to measure (after a ramp)"},
		{name: "jobfile", bool: true, usage: "print the SMB multi-file job file instead"},
		{name: "numjobs", usage: "jobs in the job file (default 4)"},
		{name: "rwmixread", usage: "read share in the job file (default 70)"},
		{name: "iodepth", usage: "outstanding I/Os per job (iops and throughput recipes: 32; job file: 16)"},
		{name: "target-iops", usage: "with --latency-ms: derive --iodepth by Little's law (IOPS × latency, ÷ jobs)"},
		{name: "latency-ms", usage: "with --target-iops: the expected latency for that derivation"},
	}
	return []*command{
		{group: "fio", verb: "recipe", args: "latency|iops|throughput", flags: recipeFlags, offline: true,
			help: "print the services' fio measurement recipe (or, with --jobfile, the SMB job file)", run: fioRecipe},
		{group: "fio", verb: "analyze", args: "FILE|-", offline: true, lookup: true, flags: []flagSpec{
			{name: "json", bool: true, usage: "print the analysis as JSON"},
			{name: "limit-mibps", usage: "the volume's throughput limit, for the qos-ceiling finding (wire bytes estimated)"},
			{name: "volume", usage: "or: the volume (ID or full name): its limit, and its time at the limit and wire bytes over the run, read through the API"}},
			help: "read fio output (JSON, or fio 2.x/3.x normal output however spaced) and explain it", run: fioAnalyze},
		{group: "advise", verb: "", offline: true, flags: []flagSpec{
			{name: "json", bool: true, usage: "print advice as JSON"},
			{name: "protocol", usage: "nfsv3, nfsv4.1 or smb"}, {name: "clients", usage: "clients sharing the volume and its target, evenly (default 1)"},
			{name: "kernel", usage: "client Linux kernel X.Y"}, {name: "target-iops", usage: "the volume's target IOPS, all clients together"},
			{name: "target-mibps", usage: "or its target MiB/s"}, {name: "latency-ms", usage: "expected latency (default 1)"},
			{name: "bs", usage: "block size, e.g. 4k or 1M"}, {name: "os", usage: "linux or windows"}},
			help: "client tuning: concurrency, connections, nconnect, slot tables, SMB multichannel", run: advise},
	}
}

func flagInt(p *parsed, name string) (int, error) {
	if !p.has(name) {
		return 0, nil
	}
	n, err := strconv.Atoi(p.str(name))
	if err != nil {
		return 0, fmt.Errorf("--%s: %q is not a number", name, p.str(name))
	}
	return n, nil
}

func flagFloat(p *parsed, name string) (float64, error) {
	if !p.has(name) {
		return 0, nil
	}
	f, err := strconv.ParseFloat(p.str(name), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("--%s: %q is not a non-negative number", name, p.str(name))
	}
	return f, nil
}

func fioRecipe(_ context.Context, c *session, p *parsed) error {
	o := perf.RecipeOptions{OS: p.str("os"), Directory: p.str("directory"), Size: p.str("size")}
	var err error
	if o.Runtime, err = flagInt(p, "runtime"); err != nil {
		return err
	}
	if o.IODepth, err = flagInt(p, "iodepth"); err != nil {
		return err
	}
	if o.LatencyMs, err = flagFloat(p, "latency-ms"); err != nil {
		return err
	}
	if o.TargetIOPS, err = flagFloat(p, "target-iops"); err != nil {
		return err
	}
	if p.has("jobfile") {
		if o.NumJobs, err = flagInt(p, "numjobs"); err != nil {
			return err
		}
		if o.RWMixRead, err = flagInt(p, "rwmixread"); err != nil {
			return err
		}
		j, err := perf.SMBJobFile(o)
		if err != nil {
			return usagef("%v", err)
		}
		_, err = io.WriteString(c.env.Stdout, j)
		return err
	}
	for _, f := range []string{"numjobs", "rwmixread"} {
		if p.has(f) {
			return usagef("--%s shapes the job file: add --jobfile (a recipe runs one job, reads or writes only)", f)
		}
	}
	if err := needArgs(p, "latency|iops|throughput"); err != nil {
		return err
	}
	r, err := perf.Recipe(p.args[0], o)
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.env.Stdout, r)
	return err
}

func fioAnalyze(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, "FILE|-"); err != nil {
		return err
	}
	var o perf.AnalyzeOptions
	var err error
	if o.LimitMiBps, err = flagFloat(p, "limit-mibps"); err != nil {
		return err
	}
	var volume string
	if p.has("volume") {
		if volume, err = c.path(kindVolume, p.str("volume")); err != nil {
			return fmt.Errorf("--volume: %w", err)
		}
	}
	var data []byte
	if p.args[0] == "-" {
		in := c.env.Stdin
		if in == nil {
			in = os.Stdin
		}
		data, err = io.ReadAll(io.LimitReader(in, 64<<20))
	} else {
		data, err = os.ReadFile(p.args[0])
	}
	if err != nil {
		return err
	}
	rep, err := perf.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", p.args[0], err)
	}
	if volume != "" {
		if err := c.connect(); err != nil {
			return err
		}
		var v client.Object
		if err := c.cl.Do(ctx, http.MethodGet, volume, nil, nil, &v); err != nil {
			return fmt.Errorf("--volume: %w", err)
		}
		o.LimitMiBps, _ = v["throughputMibps"].(float64)
		if o.LimitMiBps > 0 {
			end := rep.End
			if end.IsZero() {
				end = c.env.Now() // read from stdin as fio ends
				if p.args[0] != "-" {
					if st, err := os.Stat(p.args[0]); err == nil {
						end = st.ModTime() // written as fio ended
					}
				}
			}
			if o.Volume, err = volumeRun(ctx, c, volume, end.Add(-rep.Runtime()), end); err != nil {
				fmt.Fprintf(c.env.Stderr, "basin: --volume: the volume's metrics over the run: %v; the wire bytes are estimated\n", err)
			}
		}
	}
	a := perf.Analyze(rep, o)
	if p.has("json") {
		b, err := json.MarshalIndent(a, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.env.Stdout, string(b))
		return err
	}
	perf.WriteText(c.env.Stdout, a)
	return nil
}

// runMetrics are the volume metrics fio analyze reads over a run.
var runMetrics = []string{"readMibps", "writeMibps", "wireReadMibps", "wireWriteMibps", "atLimitShare"}

// sampleWait is how fio analyze --volume waits for Basin to sample the end of a
// run: only for a run that ended less than recent ago (Basin samples every
// 10 s and a sample is served 10-20 s after the interval it covers begins), for
// at most max, asking every poll. Tests shorten max and poll.
var sampleWait = struct{ recent, max, poll time.Duration }{25 * time.Second, 30 * time.Second, 2 * time.Second}

// volumeRun reads what Basin measured of the volume (its API path) from start
// to end: each metric's mean over the run, each point (an interval, 10 s for a
// run of up to 3 hours) weighted by how much of it the run covers, so that an
// interval the run starts late in or ends early in counts only for its part.
// nil when no payload was measured then, or the samples cover less than half
// the run (stderr says why, and when to ask again); atLimitShare and the wire
// bytes are absent without traffic control (basin serve --qos). A run that
// just ended waits (bounded by sampleWait) for the sample of its end.
func volumeRun(ctx context.Context, c *session, volume string, start, end time.Time) (*perf.VolumeRun, error) {
	if !end.After(start) {
		return nil, nil
	}
	// The last interval asked for is the one holding the run's end (the API
	// serves the samples that end by endTime, on Basin's 10-second grid).
	q := url.Values{"startTime": {start.UTC().Truncate(time.Second).Format(time.RFC3339)},
		"endTime": {end.UTC().Add(10*time.Second - 1).Truncate(10 * time.Second).Format(time.RFC3339)}, "metric": {strings.Join(runMetrics, ",")}}
	ask := func() (runMeans, error) {
		var ans metricsAnswer
		if err := c.cl.Do(ctx, http.MethodGet, volume+"/metrics", q, nil, &ans); err != nil {
			return runMeans{}, err
		}
		return meansOver(&ans, start, end), nil
	}
	m, err := ask()
	if err != nil {
		return nil, err
	}
	if ago := c.env.Now().Sub(end); !m.sampledEnd && ago > -2*time.Second && ago < sampleWait.recent {
		fmt.Fprintf(c.env.Stderr, "basin: waiting up to %v for Basin to sample the end of the run (it samples every 10 s, 10-20 s behind)\n", sampleWait.max)
		deadline := time.Now().Add(sampleWait.max)
		for !m.sampledEnd && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(min(sampleWait.poll, time.Until(deadline))):
			}
			if m, err = ask(); err != nil {
				return nil, err
			}
		}
	}
	run := end.Sub(start).Seconds()
	again := ""
	if !m.sampledEnd {
		again = fmt.Sprintf("; Basin has not sampled the end of the run yet: run `basin fio analyze` again %s for its figures over the whole run", whenAgain(c.env.Now(), end))
	}
	mean := m.mean
	switch {
	case m.points == 0:
		fmt.Fprintf(c.env.Stderr, "basin: --volume: Basin has no samples of the volume over the run (10-second samples are kept 24 hours)%s; the wire bytes are estimated\n", again)
		return nil, nil
	case m.covered < run/2:
		fmt.Fprintf(c.env.Stderr, "basin: --volume: Basin's samples cover %.0f s of the %.0f s run%s; the wire bytes are estimated\n", m.covered, run, again)
		return nil, nil
	case mean["readMibps"] == nil && mean["writeMibps"] == nil:
		return nil, nil
	case again != "":
		fmt.Fprintf(c.env.Stderr, "basin: --volume: Basin's figures are over %.0f s of the %.0f s run%s\n", m.covered, run, again)
	}
	val := func(m string) float64 {
		if v := mean[m]; v != nil {
			return *v
		}
		return 0
	}
	return &perf.VolumeRun{ReadMiBps: val("readMibps"), WriteMiBps: val("writeMibps"), WireReadMiBps: val("wireReadMibps"),
		WireWriteMiBps: val("wireWriteMibps"), AtLimitShare: mean["atLimitShare"]}, nil
}

// whenAgain is when a run that ended at end has its last sample: "in N s", or
// "now" once that should be so.
func whenAgain(now, end time.Time) string {
	if d := end.Add(sampleWait.recent).Sub(now); d > time.Second {
		return fmt.Sprintf("in %.0f s", d.Seconds())
	}
	return "now"
}

// runMeans are a metrics answer's figures over a run: each metric's mean, its
// points weighted by the seconds of the run they cover (nil: no value); the
// seconds of the run its payload points cover; how many points overlap it; whether a sample holding the
// run's end is among them.
type runMeans struct {
	mean       map[string]*float64
	covered    float64
	points     int // overlapping the run, of all series
	sampledEnd bool
}

// meansOver weighs a metrics answer's points over the run [start, end]: a point
// at time t covers [t, t+step).
func meansOver(ans *metricsAnswer, start, end time.Time) runMeans {
	step, err := time.ParseDuration(ans.Step)
	if err != nil || step <= 0 {
		step = 10 * time.Second
	}
	m := runMeans{mean: map[string]*float64{}}
	for _, s := range ans.Series {
		var sum, weight float64
		for _, pt := range s.Points {
			t, err := time.Parse(time.RFC3339, pt.Time)
			if err != nil {
				continue
			}
			if !t.Add(step).Before(end) {
				m.sampledEnd = true
			}
			from, to := t, t.Add(step)
			if from.Before(start) {
				from = start
			}
			if to.After(end) {
				to = end
			}
			x := to.Sub(from).Seconds()
			if x > 0 {
				m.points++
			}
			if pt.Value == nil || x <= 0 {
				continue
			}
			sum, weight = sum+*pt.Value*x, weight+x
		}
		if weight > 0 {
			v := sum / weight
			m.mean[s.Metric] = &v
		}
		if s.Metric == "readMibps" || s.Metric == "writeMibps" {
			m.covered = max(m.covered, weight)
		}
	}
	return m
}

func advise(_ context.Context, c *session, p *parsed) error {
	o := perf.AdviseOptions{Protocol: p.str("protocol"), Kernel: p.str("kernel"), OS: p.str("os")}
	var err error
	if o.Clients, err = flagInt(p, "clients"); err != nil {
		return err
	}
	if o.TargetIOPS, err = flagFloat(p, "target-iops"); err != nil {
		return err
	}
	if o.TargetMiB, err = flagFloat(p, "target-mibps"); err != nil {
		return err
	}
	if o.LatencyMs, err = flagFloat(p, "latency-ms"); err != nil {
		return err
	}
	if bs := p.str("bs"); bs != "" {
		if o.BS, err = perf.ParseSize(bs); err != nil {
			return fmt.Errorf("--bs: %w", err)
		}
	}
	as, err := perf.Advise(o)
	if err != nil {
		return err
	}
	if p.has("json") {
		b, _ := json.MarshalIndent(as, "", "  ")
		_, err = fmt.Fprintln(c.env.Stdout, string(b))
		return err
	}
	for _, a := range as {
		fmt.Fprintf(c.env.Stdout, "%s: %s\n  why: %s\n", a.ID, a.Setting, a.Why)
		if a.Command != "" {
			fmt.Fprintf(c.env.Stdout, "  how: %s\n", a.Command)
		}
	}
	return nil
}
