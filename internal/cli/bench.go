package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/bench"
	"github.com/basin-nas/basin/internal/perf"
)

func benchCommands() []*command {
	return []*command{{group: "bench", verb: "", offline: true, flags: []flagSpec{
		{name: "engine", usage: "local (files); nfs and smb engines are not built yet"},
		{name: "name", usage: "job name (default basin-bench)"},
		{name: "rw", usage: "read, write, randread, randwrite, rw or randrw"},
		{name: "bs", usage: "block size, e.g. 4k, 64k, 1m"},
		{name: "iodepth", usage: "outstanding I/Os per job"},
		{name: "numjobs", usage: "parallel jobs"},
		{name: "size", usage: "file size per job and file, e.g. 1G"},
		{name: "nrfiles", usage: "files per job"},
		{name: "runtime", usage: "seconds (or 30s, 2m)"},
		{name: "time_based", bool: true, usage: "run for --runtime even after --size is done"},
		{name: "ramp_time", usage: "seconds of warm-up not counted"},
		{name: "rwmixread", usage: "read share for rw/randrw, percent"},
		{name: "direct", usage: "1 = O_DIRECT"},
		{name: "directory", usage: "local engine: where the files go"},
		{name: "filename", usage: "local engine: one file to use"},
		{name: "output-format", usage: "normal (default) or json (fio's layout)"},
	}, help: "load generator with fio's job vocabulary and fio-compatible output", run: runBench}}
}

// fioDuration reads fio-style times: "60" (seconds), "30s", "2m", "1h".
func fioDuration(flag, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--%s: %q is not a duration (60, 30s, 2m)", flag, s)
	}
	return d, nil
}

func runBench(ctx context.Context, c *session, p *parsed) error {
	if len(p.args) > 0 {
		return fmt.Errorf("unexpected argument %q (bench takes only flags)", p.args[0])
	}
	j := bench.Job{Name: p.str("name"), RW: p.str("rw"), TimeBased: p.has("time_based")}
	var err error
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"bs", &j.BS}, {"size", &j.Size}} {
		if v := p.str(f.name); v != "" {
			if *f.dst, err = perf.ParseSize(v); err != nil {
				return fmt.Errorf("--%s: %w", f.name, err)
			}
		}
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"iodepth", &j.IODepth}, {"numjobs", &j.NumJobs}, {"nrfiles", &j.NrFiles}, {"rwmixread", &j.RWMixRead}} {
		if *f.dst, err = flagInt(p, f.name); err != nil {
			return err
		}
	}
	if j.Runtime, err = fioDuration("runtime", p.str("runtime")); err != nil {
		return err
	}
	if j.Ramp, err = fioDuration("ramp_time", p.str("ramp_time")); err != nil {
		return err
	}
	switch p.str("direct") {
	case "", "0":
	case "1":
		j.Direct = true
	default:
		return fmt.Errorf("--direct must be 0 or 1")
	}
	var engine bench.Engine
	switch e := p.str("engine"); e {
	case "", "local":
		engine = bench.Local{Directory: p.str("directory"), Filename: p.str("filename")}
	case "nfs", "smb":
		return fmt.Errorf("--engine %s is not built yet; use --engine local, or fio on a mounted volume", e)
	default:
		return fmt.Errorf("--engine must be local, nfs or smb, got %q", e)
	}
	format := p.str("output-format")
	if format != "" && format != "normal" && format != "json" {
		return fmt.Errorf("--output-format must be normal or json")
	}
	res, err := bench.Run(ctx, engine, j, c.env.Stderr)
	if err != nil {
		return err
	}
	if strings.EqualFold(format, "json") {
		return res.WriteJSON(c.env.Stdout)
	}
	res.WriteText(c.env.Stdout)
	return nil
}
