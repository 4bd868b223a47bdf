// Package perf is Basin's performance toolkit logic: the fio measurement recipes the
// cloud volume services recommend, parsing of fio's JSON and normal (text) output,
// the analysis of a run (Little's law, IOPS × block size, latency tails, the QoS
// ceiling), and client tuning advice (nconnect, slot tables, SMB multichannel).
//
// Pure functions on data: the cli package calls it; it imports nothing of Basin's.
package perf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Report is one fio run.
type Report struct {
	FioVersion string `json:"fioVersion,omitempty"`
	Jobs       []Job  `json:"jobs"`
}

// Job is one job (or one group, with group_reporting).
type Job struct {
	Name    string     `json:"name"`
	RW      string     `json:"rw,omitempty"`
	BS      int64      `json:"bs,omitempty"` // bytes
	IODepth int        `json:"iodepth,omitempty"`
	NumJobs int        `json:"numjobs,omitempty"`
	Read    *Direction `json:"read,omitempty"`
	Write   *Direction `json:"write,omitempty"`
}

// NamedDirection is a job's result in one direction.
type NamedDirection struct {
	Name string // read or write
	*Direction
}

// Directions returns the directions a job did I/O in, reads first.
func (j Job) Directions() []NamedDirection {
	var out []NamedDirection
	if j.Read != nil {
		out = append(out, NamedDirection{"read", j.Read})
	}
	if j.Write != nil {
		out = append(out, NamedDirection{"write", j.Write})
	}
	return out
}

// Direction is what a job did in one direction.
type Direction struct {
	IOPS      float64 `json:"iops"`
	BwBytes   float64 `json:"bw_bytes"`
	IOBytes   int64   `json:"io_bytes"`
	RuntimeMs int64   `json:"runtime_ms"`
	Lat       Latency `json:"lat_ns"`
}

// Latency is total latency in nanoseconds; Percentiles are keyed like fio ("99.900000").
type Latency struct {
	Min         float64            `json:"min"`
	Max         float64            `json:"max"`
	Mean        float64            `json:"mean"`
	Stddev      float64            `json:"stddev"`
	Percentiles map[string]float64 `json:"percentiles,omitempty"`
}

// Parse reads fio output in JSON (--output-format=json) or normal text form.
func Parse(data []byte) (*Report, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty input: expected fio JSON or text output")
	}
	if i := bytes.IndexByte(trimmed, '{'); i >= 0 && bytes.Contains(trimmed[:min(len(trimmed), i+200)], []byte(`"fio version"`)) {
		return ParseJSON(trimmed[i:])
	}
	return ParseText(trimmed)
}

type fioDir struct {
	IOBytes int64   `json:"io_bytes"`
	BwBytes float64 `json:"bw_bytes"`
	IOPS    float64 `json:"iops"`
	Runtime int64   `json:"runtime"`
	TotalIO int64   `json:"total_ios"`
	LatNs   fioLat  `json:"lat_ns"`
	ClatNs  fioLat  `json:"clat_ns"`
}

type fioLat struct {
	Min        float64            `json:"min"`
	Max        float64            `json:"max"`
	Mean       float64            `json:"mean"`
	Stddev     float64            `json:"stddev"`
	Percentile map[string]float64 `json:"percentile"`
}

// ParseJSON reads fio's JSON output (fio 3.x).
func ParseJSON(data []byte) (*Report, error) {
	var raw struct {
		Version string            `json:"fio version"`
		Global  map[string]string `json:"global options"`
		Jobs    []struct {
			Name    string            `json:"jobname"`
			Options map[string]string `json:"job options"`
			Read    *fioDir           `json:"read"`
			Write   *fioDir           `json:"write"`
		} `json:"jobs"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not fio JSON output: %w", err)
	}
	if raw.Version == "" || len(raw.Jobs) == 0 {
		return nil, errors.New(`not fio JSON output: no "fio version" or no jobs`)
	}
	rep := &Report{FioVersion: raw.Version}
	for _, j := range raw.Jobs {
		opt := func(k string) string {
			if v, ok := j.Options[k]; ok {
				return v
			}
			return raw.Global[k]
		}
		job := Job{Name: j.Name, RW: opt("rw"), IODepth: atoiOr(opt("iodepth"), 1), NumJobs: atoiOr(opt("numjobs"), 1)}
		if bs, err := ParseSize(firstField(opt("bs"))); err == nil {
			job.BS = bs
		}
		job.Read, job.Write = dirOf(j.Read), dirOf(j.Write)
		if job.Read == nil && job.Write == nil {
			continue
		}
		if job.BS == 0 {
			job.BS = 4096 // fio's default
		}
		rep.Jobs = append(rep.Jobs, job)
	}
	if len(rep.Jobs) == 0 {
		return nil, errors.New("fio output has no job that did any I/O")
	}
	return rep, nil
}

func dirOf(d *fioDir) *Direction {
	if d == nil || (d.IOBytes == 0 && d.TotalIO == 0) {
		return nil
	}
	lat := d.LatNs
	pct := lat.Percentile
	if len(pct) == 0 {
		pct = d.ClatNs.Percentile // fio reports clat percentiles unless lat_percentiles=1
	}
	return &Direction{IOPS: d.IOPS, BwBytes: d.BwBytes, IOBytes: d.IOBytes, RuntimeMs: d.Runtime,
		Lat: Latency{Min: lat.Min, Max: lat.Max, Mean: lat.Mean, Stddev: lat.Stddev, Percentiles: pct}}
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
		return n
	}
	return def
}

func firstField(s string) string {
	s, _, _ = strings.Cut(s, ",")
	s, _, _ = strings.Cut(s, "-")
	return strings.TrimSpace(s)
}

// ParseSize reads fio-style sizes: 4k, 64K, 1m, 1MiB, 4096 (bytes; k = 1024).
func ParseSize(s string) (int64, error) {
	u := strings.ToLower(strings.TrimSpace(s))
	u = strings.TrimSuffix(strings.TrimSuffix(u, "ib"), "b")
	mult := int64(1)
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'k':
			mult, u = 1<<10, u[:n-1]
		case 'm':
			mult, u = 1<<20, u[:n-1]
		case 'g':
			mult, u = 1<<30, u[:n-1]
		case 't':
			mult, u = 1<<40, u[:n-1]
		}
	}
	n, err := strconv.ParseFloat(u, 64)
	if err != nil || n <= 0 || math.IsInf(n, 0) || n*float64(mult) > 1<<50 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return int64(n * float64(mult)), nil
}

var (
	textJobHeader = regexp.MustCompile(`^(\S+): \(g=\d+\): rw=(\w+), bs=\(R\) ([\d.]+)([KMGT]?i?B)-.*?iodepth=(\d+)`)
	textJobStart  = regexp.MustCompile(`^(\S+): \(groupid=\d+, jobs=(\d+)\)`)
	textDir       = regexp.MustCompile(`^\s+(read|write)\s*: IOPS=([\d.]+)([kMG]?), BW=([\d.]+)([KMGT]?i?B)/s .*\(([\d.]+)([KMGT]?i?B)/(\d+)msec\)`)
	textLat       = regexp.MustCompile(`^\s+lat \((nsec|usec|msec)\): min=\s*([\d.]+)([kM]?), max=\s*([\d.]+)([kM]?), avg=\s*([\d.]+), stdev=\s*([\d.]+)`)
	textPctHeader = regexp.MustCompile(`^\s+c?lat percentiles \((nsec|usec|msec)\):`)
	textPct       = regexp.MustCompile(`([\d.]+)th=\[\s*(\d+)\]`)
)

// ParseText reads fio's normal (human) output of fio 3.x.
func ParseText(data []byte) (*Report, error) {
	rep := &Report{}
	headers := map[string]Job{}
	var cur *Job
	var curDir *Direction
	pctUnit := 0.0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "fio-") && rep.FioVersion == "" {
			rep.FioVersion = strings.TrimSpace(line)
		}
		if m := textJobHeader.FindStringSubmatch(line); m != nil {
			headers[m[1]] = Job{Name: m[1], RW: m[2], BS: int64(bytesOf(m[3], m[4])), IODepth: atoiOr(m[5], 1)}
			continue
		}
		if m := textJobStart.FindStringSubmatch(line); m != nil {
			job := headers[m[1]]
			job.Name, job.NumJobs = m[1], atoiOr(m[2], 1)
			if job.BS == 0 {
				job.BS = 4096
			}
			if job.IODepth == 0 {
				job.IODepth = 1
			}
			rep.Jobs = append(rep.Jobs, job)
			cur, curDir = &rep.Jobs[len(rep.Jobs)-1], nil
			continue
		}
		if cur == nil {
			continue
		}
		if m := textDir.FindStringSubmatch(line); m != nil {
			d := &Direction{IOPS: scaled(m[2], m[3]), BwBytes: bytesOf(m[4], m[5]), IOBytes: int64(bytesOf(m[6], m[7]))}
			d.RuntimeMs, _ = strconv.ParseInt(m[8], 10, 64)
			if m[1] == "read" {
				cur.Read = d
			} else {
				cur.Write = d
			}
			curDir, pctUnit = d, 0
			continue
		}
		if curDir == nil {
			continue
		}
		if m := textLat.FindStringSubmatch(line); m != nil {
			u := unitNs(m[1])
			curDir.Lat.Min, curDir.Lat.Max = scaled(m[2], m[3])*u, scaled(m[4], m[5])*u
			curDir.Lat.Mean, _ = strconv.ParseFloat(m[6], 64)
			curDir.Lat.Stddev, _ = strconv.ParseFloat(m[7], 64)
			curDir.Lat.Mean *= u
			curDir.Lat.Stddev *= u
			continue
		}
		if m := textPctHeader.FindStringSubmatch(line); m != nil {
			pctUnit = unitNs(m[1])
			continue
		}
		if pctUnit > 0 && strings.Contains(line, "th=[") {
			if curDir.Lat.Percentiles == nil {
				curDir.Lat.Percentiles = map[string]float64{}
			}
			for _, m := range textPct.FindAllStringSubmatch(line, -1) {
				p, _ := strconv.ParseFloat(m[1], 64)
				v, _ := strconv.ParseFloat(m[2], 64)
				curDir.Lat.Percentiles[fmt.Sprintf("%.6f", p)] = v * pctUnit
			}
		} else if pctUnit > 0 && !strings.HasPrefix(strings.TrimSpace(line), "|") {
			pctUnit = 0
		}
	}
	var jobs []Job
	for _, j := range rep.Jobs {
		if j.Read != nil || j.Write != nil {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return nil, errors.New("no fio job results found: expected fio JSON or fio's normal output")
	}
	rep.Jobs = jobs
	return rep, nil
}

func scaled(num, suffix string) float64 {
	f, _ := strconv.ParseFloat(num, 64)
	switch suffix {
	case "k":
		f *= 1e3
	case "M":
		f *= 1e6
	case "G":
		f *= 1e9
	}
	return f
}

func bytesOf(num, unit string) float64 {
	f, _ := strconv.ParseFloat(num, 64)
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	if mult == 0 {
		mult = 1
	}
	return f * mult
}

func unitNs(u string) float64 {
	switch u {
	case "usec":
		return 1e3
	case "msec":
		return 1e6
	}
	return 1
}

// sortedKeys returns a map's keys in numeric order (percentile labels).
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _ := strconv.ParseFloat(keys[i], 64)
		b, _ := strconv.ParseFloat(keys[j], 64)
		return a < b
	})
	return keys
}
