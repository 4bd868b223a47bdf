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

// volumeRun reads what Basin measured of the volume (its API path) from start
// to end: the mean of each metric's points, which are 10 s intervals for a run
// of up to 3 hours. nil when no payload was measured then; atLimitShare and the
// wire bytes are absent without traffic control (basin serve --qos).
func volumeRun(ctx context.Context, c *session, volume string, start, end time.Time) (*perf.VolumeRun, error) {
	if !end.After(start) {
		return nil, nil
	}
	q := url.Values{"startTime": {start.UTC().Truncate(time.Second).Format(time.RFC3339)},
		"endTime": {end.UTC().Add(time.Second - 1).Truncate(time.Second).Format(time.RFC3339)}, "metric": {strings.Join(runMetrics, ",")}}
	var ans metricsAnswer
	if err := c.cl.Do(ctx, http.MethodGet, volume+"/metrics", q, nil, &ans); err != nil {
		return nil, err
	}
	mean := map[string]*float64{}
	for _, s := range ans.Series {
		var sum float64
		n := 0
		for _, pt := range s.Points {
			if pt.Value != nil {
				sum, n = sum+*pt.Value, n+1
			}
		}
		if n > 0 {
			m := sum / float64(n)
			mean[s.Metric] = &m
		}
	}
	if mean["readMibps"] == nil && mean["writeMibps"] == nil {
		return nil, nil
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
