// Package perf is Basin's performance toolkit logic: the fio measurement recipes the
// cloud volume services recommend, parsing of fio's JSON and normal (text) output
// (fio 2.x and 3.x, however a copy-paste spaced it),
// the analysis of a run (Little's law, IOPS × block size, latency tails, the QoS
// ceiling), and client tuning advice (nconnect, slot tables, SMB multichannel).
//
// Pure functions on data: the cli package calls it; it imports nothing of Basin's.
package perf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is one fio run. End is when it ended, if the output says (fio's JSON).
type Report struct {
	FioVersion string    `json:"fioVersion,omitempty"`
	End        time.Time `json:"end,omitzero"`
	Jobs       []Job     `json:"jobs"`
}

// Runtime is how long the run measured: its longest direction's runtime.
func (rep *Report) Runtime() time.Duration {
	var ms int64
	for _, j := range rep.Jobs {
		for _, d := range j.Directions() {
			ms = max(ms, d.RuntimeMs)
		}
	}
	return time.Duration(ms) * time.Millisecond
}

// Job is one job (or one group, with group_reporting). Jobs that share a name are
// named name#1, name#2, … in fio's order.
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

// Latency is in nanoseconds; Percentiles are keyed like fio ("99.900000"). Of and
// PercentilesOf say which latency each is: "lat" (total: submission and
// completion) or "clat" (completion only). fio gives lat percentiles only with
// lat_percentiles=1, so the percentiles are often clat's while the mean is lat's.
type Latency struct {
	Of            string             `json:"of,omitempty"`
	Min           float64            `json:"min"`
	Max           float64            `json:"max"`
	Mean          float64            `json:"mean"`
	Stddev        float64            `json:"stddev"`
	PercentilesOf string             `json:"percentilesOf,omitempty"`
	Percentiles   map[string]float64 `json:"percentiles,omitempty"`
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
		Version     string            `json:"fio version"`
		Timestamp   int64             `json:"timestamp"`    // when fio reported: the run's end, seconds
		TimestampMs int64             `json:"timestamp_ms"` // the same in milliseconds (fio 3.x)
		Global      map[string]string `json:"global options"`
		Jobs        []struct {
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
	switch {
	case raw.TimestampMs > 0:
		rep.End = time.UnixMilli(raw.TimestampMs).UTC()
	case raw.Timestamp > 0:
		rep.End = time.Unix(raw.Timestamp, 0).UTC()
	}
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
	rep.nameJobs()
	return rep, nil
}

// nameJobs tells apart jobs that share a name (fio allows it): they become
// name#1, name#2, … in fio's order, skipping a label another job already has.
func (rep *Report) nameJobs() {
	count := map[string]int{}
	for _, j := range rep.Jobs {
		count[j.Name]++
	}
	taken := map[string]bool{}
	for _, j := range rep.Jobs {
		if count[j.Name] == 1 {
			taken[j.Name] = true
		}
	}
	next := map[string]int{}
	for i, j := range rep.Jobs {
		if count[j.Name] == 1 {
			continue
		}
		for {
			next[j.Name]++
			label := fmt.Sprintf("%s#%d", j.Name, next[j.Name])
			if !taken[label] {
				taken[label], rep.Jobs[i].Name = true, label
				break
			}
		}
	}
}

func dirOf(d *fioDir) *Direction {
	if d == nil || (d.IOBytes == 0 && d.TotalIO == 0) {
		return nil
	}
	lat := d.LatNs
	l := Latency{Of: "lat", Min: lat.Min, Max: lat.Max, Mean: lat.Mean, Stddev: lat.Stddev}
	switch {
	case len(lat.Percentile) > 0:
		l.PercentilesOf, l.Percentiles = "lat", lat.Percentile
	case len(d.ClatNs.Percentile) > 0: // fio reports clat percentiles unless lat_percentiles=1
		l.PercentilesOf, l.Percentiles = "clat", d.ClatNs.Percentile
	}
	return &Direction{IOPS: d.IOPS, BwBytes: d.BwBytes, IOBytes: d.IOBytes, RuntimeMs: d.Runtime, Lat: l}
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
