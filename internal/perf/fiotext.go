package perf

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// fio's normal output is read as a stream of words, not of lines: the input is
// flattened first (every run of whitespace, newlines, tabs, CRs and non-breaking
// spaces included, becomes one space), and the patterns below allow a space, or
// none, wherever fio's own spacing varies between versions or a copy-paste changes
// it. So indentation (a web page's code block), tabs, CRLF line ends, runs of
// spaces (`write:  IOPS=…`), missing spaces (`write:IOPS=…,BW=…`) and lines
// wrapped at any space or after a separator all read the same. A number or a word
// split by a wrap cannot be put back together.
//
// In the patterns, ~ stands for "one space or none".
func loose(pat string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(pat, "~", " ?"))
}

var (
	// The job header fio prints before running: name, rw, the first block size
	// (fio 3: `bs=(R) 4096B-4096B, (W) …`; fio 2: `bs=4K-4K/4K-4K/4K-4K`), iodepth.
	textJobHeader = loose(`^([^\s:]+)~:~\(~g~=~\d+~\)~:~rw~=~(\w+)~,~bs~=~(?:\(~R~\)~)?([\d.]+~[KMGTPkmgtp]?i?B?)`)
	// The header's iodepth, later on the same line (no colon between).
	textIODepth = loose(`^[^:]*?iodepth~=~(\d+)`)
	// A job's results start: `name: (groupid=0, jobs=2): err= 0: …`.
	textJobStart = loose(`^([^\s:]+)~:~\(~groupid~=~\d+~,~jobs~=~(\d+)~\)`)
	// fio 3.x: `read: IOPS=22.9k, BW=89.3MiB/s (93.7MB/s)(89.4MiB/1001msec)`.
	textDir3 = loose(`^(read|write|trim)~:~IOPS~=~([\d.]+)~([kKMG]?)~,~BW~=~([\d.]+)~([KMGTPkmgtp]?i?B)~/~s(?:~\(~[\d.]+~[KMGTPkmgtp]?i?B~/~s~\))?~\(~([\d.]+)~([KMGTPkmgtp]?i?B)~/~(\d+)~msec~\)`)
	// fio 2.x: `read : io=1024.0MB, bw=408272B/s, iops=99, runt=2629965msec`.
	textDir2 = loose(`^(read|write|trim)~:~io~=~([\d.]+)~([KMGTPkmgtp]?i?B)~,~bw~=~([\d.]+)~([KMGTPkmgtp]?i?B)~/~s~,~iops~=~([\d.]+)~([kKMG]?)~,~runt~=~(\d+)~msec`)
	// Total (lat) or completion (clat) latency: `lat (usec): min=45, max=1138, avg=239.73, stdev=53.19`;
	// fio may scale a value (`max=1877.7K`).
	textLat  = loose(`^lat~\(~(nsec|usec|msec)~\)~:~min~=~([\d.]+)~([kKM]?)~,~max~=~([\d.]+)~([kKM]?)~,~avg~=~([\d.]+)~([kKM]?)~,~stdev~=~([\d.]+)~([kKM]?)`)
	textClat = loose(`^clat~\(~(nsec|usec|msec)~\)~:~min~=~([\d.]+)~([kKM]?)~,~max~=~([\d.]+)~([kKM]?)~,~avg~=~([\d.]+)~([kKM]?)~,~stdev~=~([\d.]+)~([kKM]?)`)
	// `clat percentiles (usec):` (or `lat percentiles` with lat_percentiles=1),
	// then entries `|  1.00th=[  139],  5.00th=[  174], …`.
	textPctHeader = loose(`^(c?lat)~percentiles~\(~(nsec|usec|msec)~\)~:`)
	textPctEntry  = loose(`([\d.]+)~th~=~\[~(\d+)~([kKM]?)~\]`)
	textVersion   = regexp.MustCompile(`^(fio-\d+\.\d+\S*)`)
)

// ParseText reads fio's normal (human) output of fio 2.x or 3.x, as fio printed
// it or as a copy-paste left it (see loose).
func ParseText(data []byte) (*Report, error) {
	text := strings.Join(strings.Fields(string(data)), " ")
	rep := &Report{}
	if m := findAt(text, textVersion, 40, "fio-"); m != nil {
		rep.FioVersion = text[m[0][2]:m[0][3]]
	}
	headers := map[string][]Job{} // by name, in fio's order: jobs may share a name
	for _, m := range findNamed(text, textJobHeader, 200) {
		g := func(i int) string { return text[m[2*i]:m[2*i+1]] }
		j := Job{Name: g(1), RW: g(2), IODepth: 1}
		if bs, err := ParseSize(strings.ReplaceAll(g(3), " ", "")); err == nil {
			j.BS = bs
		}
		if d := textIODepth.FindStringSubmatch(text[m[1]:min(len(text), m[1]+400)]); d != nil {
			j.IODepth = atoiOr(d[1], 1)
		}
		headers[j.Name] = append(headers[j.Name], j)
	}
	starts := findNamed(text, textJobStart, 200)
	for i, m := range starts {
		end := len(text)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		name := text[m[2]:m[3]]
		var job Job
		if h := headers[name]; len(h) > 0 {
			job, headers[name] = h[0], h[1:]
		}
		job.Name, job.NumJobs = name, atoiOr(text[m[4]:m[5]], 1)
		if job.BS == 0 {
			job.BS = 4096 // fio's default
		}
		if job.IODepth == 0 {
			job.IODepth = 1
		}
		parseDirections(&job, text[m[1]:end])
		if job.Read != nil || job.Write != nil {
			rep.Jobs = append(rep.Jobs, job)
		}
	}
	if len(rep.Jobs) == 0 {
		return nil, errors.New("no fio job results found: expected fio JSON or fio's normal output")
	}
	rep.nameJobs()
	return rep, nil
}

// dirMatch is one direction's result line found in a job's section.
type dirMatch struct {
	name       string
	start, end int // of the line
	d          *Direction
}

// parseDirections reads the read and write results of one job's section.
func parseDirections(job *Job, sec string) {
	var dirs []dirMatch
	for _, m := range findAt(sec, textDir3, 200, "read", "write", "trim") {
		g := func(i int) string { return sec[m[2*i]:m[2*i+1]] }
		d := &Direction{IOPS: scaled(g(2), g(3)), BwBytes: bytesOf(g(4), g(5), false), IOBytes: int64(bytesOf(g(6), g(7), false))}
		d.RuntimeMs, _ = strconv.ParseInt(g(8), 10, 64)
		dirs = append(dirs, dirMatch{g(1), m[0], m[1], d})
	}
	for _, m := range findAt(sec, textDir2, 200, "read", "write", "trim") {
		g := func(i int) string { return sec[m[2*i]:m[2*i+1]] }
		d := &Direction{IOBytes: int64(bytesOf(g(2), g(3), true)), BwBytes: bytesOf(g(4), g(5), true), IOPS: scaled(g(6), g(7))}
		d.RuntimeMs, _ = strconv.ParseInt(g(8), 10, 64)
		dirs = append(dirs, dirMatch{g(1), m[0], m[1], d})
	}
	// Each direction's details run from its result line to the next one.
	for _, dm := range dirs {
		end := len(sec)
		for _, other := range dirs {
			if other.start > dm.start && other.start < end {
				end = other.start
			}
		}
		if dm.d.IOPS == 0 && dm.d.IOBytes == 0 {
			continue // fio printed a direction that did no I/O
		}
		details := sec[dm.end:end]
		dm.d.Lat = parseLatency(details)
		switch dm.name {
		case "read":
			job.Read = dm.d
		case "write":
			job.Write = dm.d
		}
	}
}

// parseLatency reads a direction's total latency (completion latency if fio
// printed no total) and its percentiles (total latency's if fio printed them,
// else completion latency's, as the JSON parser does), in nanoseconds.
func parseLatency(s string) Latency {
	var l Latency
	m, of := findAt(s, textLat, 160, "lat"), "lat"
	if m == nil {
		m, of = findAt(s, textClat, 160, "clat"), "clat"
	}
	if m != nil {
		l.Of = of
		g := func(i int) string { return s[m[0][2*i]:m[0][2*i+1]] }
		u := unitNs(g(1))
		l.Min, l.Max = scaled(g(2), g(3))*u, scaled(g(4), g(5))*u
		l.Mean, l.Stddev = scaled(g(6), g(7))*u, scaled(g(8), g(9))*u
	}
	var pct map[string]float64
	pctOf := ""
	for _, h := range findAt(s, textPctHeader, 40, "lat", "clat") {
		kind, u := s[h[2]:h[3]], unitNs(s[h[4]:h[5]])
		if pct != nil && kind == "clat" {
			continue // lat percentiles came first; they win
		}
		pct, pctOf = map[string]float64{}, kind
		// The entries run as long as only their characters follow.
		rest := s[h[1]:]
		n := 0
		for n < len(rest) && strings.IndexByte(" 0123456789.th=[]|,-kKM", rest[n]) >= 0 {
			n++
		}
		for _, e := range textPctEntry.FindAllStringSubmatch(rest[:n], -1) {
			p, _ := strconv.ParseFloat(e[1], 64)
			pct[fmt.Sprintf("%.6f", p)] = scaled(e[2], e[3]) * u
		}
		if kind == "lat" {
			break
		}
	}
	if len(pct) > 0 {
		l.PercentilesOf, l.Percentiles = pctOf, pct
	}
	return l
}

// findAt returns the matches in text (as submatch indices) of re, a pattern
// anchored at its start, that start at a word beginning with one of keys,
// looking at most after bytes ahead; matches do not overlap.
func findAt(text string, re *regexp.Regexp, after int, keys ...string) [][]int {
	var at []int
	for _, key := range keys {
		for off := 0; ; {
			i := strings.Index(text[off:], key)
			if i < 0 {
				break
			}
			i += off
			off = i + len(key)
			if i == 0 || !isWordByte(text[i-1]) {
				at = append(at, i)
			}
		}
	}
	return matchesAt(text, re, after, at)
}

// findNamed is findAt for patterns that start with a job's name and a colon
// followed by a parenthesis: they are tried at the word before each such colon.
func findNamed(text string, re *regexp.Regexp, after int) [][]int {
	var at []int
	for off := 0; ; {
		i := strings.IndexByte(text[off:], ':')
		if i < 0 {
			break
		}
		i += off
		off = i + 1
		if next := strings.TrimPrefix(text[off:], " "); !strings.HasPrefix(next, "(") {
			continue
		}
		j := i
		if j > 0 && text[j-1] == ' ' {
			j--
		}
		k := j
		for k > 0 && text[k-1] != ' ' && text[k-1] != ':' {
			k--
		}
		if k < j {
			at = append(at, k)
		}
	}
	return matchesAt(text, re, after, at)
}

// matchesAt tries re, anchored, at each position of at (looking at most after
// bytes ahead) and returns the matches that do not overlap an earlier one.
func matchesAt(text string, re *regexp.Regexp, after int, at []int) [][]int {
	slices.Sort(at)
	var out [][]int
	last := 0
	for _, i := range at {
		if i < last {
			continue
		}
		m := re.FindStringSubmatchIndex(text[i:min(len(text), i+after)])
		if m == nil {
			continue
		}
		for k := range m {
			if m[k] >= 0 {
				m[k] += i
			}
		}
		out = append(out, m)
		last = m[1]
	}
	return out
}

func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// scaled reads a number fio may have scaled with a k, K (thousands), M or G suffix.
func scaled(num, suffix string) float64 {
	f, _ := strconv.ParseFloat(num, 64)
	switch suffix {
	case "k", "K":
		f *= 1e3
	case "M":
		f *= 1e6
	case "G":
		f *= 1e9
	}
	return f
}

// bytesOf reads a size with its unit. fio 3 prints binary units as KiB, MiB … and
// decimal ones as kB, MB …; fio 2 (legacy) printed KB, MB … for binary units.
func bytesOf(num, unit string, legacy bool) float64 {
	f, _ := strconv.ParseFloat(num, 64)
	u := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "i"))
	binary := legacy || strings.HasSuffix(unit, "iB")
	exp := strings.Index("KMGTP", u) + 1
	if u == "" || exp == 0 {
		return f
	}
	base := 1000.0
	if binary {
		base = 1024
	}
	for range exp {
		f *= base
	}
	return f
}
