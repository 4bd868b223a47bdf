package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/basin-nas/basin/internal/client"
)

// metricsCommands are `basin volumes metrics` and `basin top`: reads of the
// volume metrics API (docs/api.md, "Volume metrics").
func metricsCommands() []*command {
	return []*command{
		{group: "volumes", verb: "metrics", args: "VOLUME", flags: []flagSpec{
			{name: "since", usage: "how far back, e.g. 15m, 6h or 7d (default 1h)"},
			{name: "step", usage: "one point per step, the mean over it: a multiple of 10s below 5m, of 5m from 5m up (default: from --since, at most 360 points)"},
			{name: "metric", multi: true, usage: "metric names, comma-separated or repeated (default: " + strings.Join(mainMetrics, ",") + ")"}},
			help: "a volume's metrics as sparklines with last, min, mean, max (-o json: the API's answer)", run: volumeMetrics},
		{group: "top", verb: "", live: true, flags: []flagSpec{
			{name: "once", bool: true, usage: "print one frame and exit (-o json or yaml: its rows as data, unknown values null)"},
			{name: "sort", usage: "iops, mibps, latency or throttled (default iops)"},
			{name: "interval", usage: "time between frames (default 10s, the sampling interval)"},
			{name: "n", usage: "show the N busiest volumes (default 20; 0 = all)"}},
			help: "the busiest volumes, refreshed (q or Ctrl-C quits)", run: top},
	}
}

// mainMetrics are what `volumes metrics` shows unless --metric says otherwise.
var mainMetrics = []string{"readIops", "writeIops", "metadataIops", "readMibps", "writeMibps", "readLatencyMs", "writeLatencyMs",
	"readBlockKib", "writeBlockKib", "concurrency", "atLimitShare", "clients"}

// metricsAnswer is the API's answer to GET …/volumes/{v}/metrics.
type metricsAnswer struct {
	Volume    string `json:"volume"`
	StartTime string `json:"startTime"`
	EndTime   string `json:"endTime"`
	Step      string `json:"step"`
	Series    []struct {
		Metric string `json:"metric"`
		Unit   string `json:"unit"`
		Points []struct {
			Time  string   `json:"time"`
			Value *float64 `json:"value"`
			Min   *float64 `json:"min"`
			Max   *float64 `json:"max"`
		} `json:"points"`
	} `json:"series"`
}

// parseSince reads a positive duration; a whole number of days may be written
// "7d".
func parseSince(flag, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, nerr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, nerr
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--%s must be a positive duration such as 10s, 5m, 1h or 7d, got %q", flag, s)
	}
	return d, nil
}

// metricsSteps are the steps `volumes metrics` picks from without --step, all
// of them steps the API takes: multiples of the 10-second sampling interval
// below 5 minutes (read from the server's in-memory ring, which keeps a day),
// of the 5-minute rollups from there.
var metricsSteps = []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour,
	6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// maxStepPoints is the most points a default step gives a window: enough to
// show a run of a few minutes in six hours (1-minute points), few enough to
// read (the sparkline squeezes them into 60 characters).
const maxStepPoints = 360

// defaultStep is the finest of metricsSteps that divides window into at most
// maxStepPoints points (whole days past the last). The server's own default
// (5 minutes past 3 hours) gives a run of a few minutes one point, its mean
// diluted over the step.
func defaultStep(window time.Duration) time.Duration {
	for _, s := range metricsSteps {
		if window <= s*maxStepPoints {
			return s
		}
	}
	day := 24 * time.Hour
	return (window + day*maxStepPoints - 1) / (day * maxStepPoints) * day
}

// metricsQuery builds the query of `volumes metrics` from its flags.
func metricsQuery(p *parsed, now time.Time) (url.Values, error) {
	since := time.Hour
	if p.has("since") {
		var err error
		if since, err = parseSince("since", p.str("since")); err != nil {
			return nil, err
		}
	}
	step := defaultStep(since)
	if p.has("step") {
		var err error
		if step, err = parseSince("step", p.str("step")); err != nil {
			return nil, err
		}
	}
	q := url.Values{"startTime": {now.Add(-since).UTC().Format(time.RFC3339)}, "endTime": {now.UTC().Format(time.RFC3339)},
		"step": {step.String()}}
	names := mainMetrics
	if p.has("metric") {
		names = nil
		for _, m := range p.all("metric") {
			for _, name := range strings.Split(m, ",") {
				if name = strings.TrimSpace(name); name == "" {
					return nil, fmt.Errorf("--metric: empty metric name in %q", m)
				}
				names = append(names, name)
			}
		}
	}
	q.Set("metric", strings.Join(names, ","))
	return q, nil
}

// flagOfParam names the flag behind a query parameter the server refused.
var flagOfParam = map[string]string{"metric": "--metric", "step": "--step", "startTime": "--since", "endTime": "--since"}

// getMetrics reads a volume's metrics into out. A parameter the server refuses
// (400 naming it) is reported under the flag that set it.
func (c *session) getMetrics(ctx context.Context, volume string, q url.Values, out any) error {
	err := c.cl.Do(ctx, http.MethodGet, c.parent()+"/volumes/"+volume+"/metrics", q, nil, out)
	var ae *client.Error
	if errors.As(err, &ae) && ae.HTTPStatus == http.StatusBadRequest {
		if param, msg, ok := strings.Cut(ae.Message, ": "); ok && flagOfParam[param] != "" {
			return &flagError{flag: flagOfParam[param], msg: msg, err: err}
		}
	}
	return err
}

// flagError is the server's refusal of a parameter, said once under the flag
// that set it; it unwraps to the API's error (exit status 1).
type flagError struct {
	flag, msg string
	err       error
}

func (e *flagError) Error() string { return e.flag + ": " + e.msg }
func (e *flagError) Unwrap() error { return e.err }

func volumeMetrics(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p, "VOLUME"); err != nil {
		return err
	}
	vol, err := c.lastID(kindVolume, p.args[0])
	if err != nil {
		return err
	}
	q, err := metricsQuery(p, c.env.Now())
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.getMetrics(ctx, vol, q, &raw); err != nil {
		return err
	}
	switch c.output {
	case "json":
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return err
		}
		b.WriteByte('\n')
		_, err := b.WriteTo(c.env.Stdout)
		return err
	case "yaml":
		var obj client.Object
		if err := json.Unmarshal(raw, &obj); err != nil {
			return err
		}
		return c.print(obj, nil)
	}
	var ans metricsAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("metrics answer: %w", err)
	}
	writeMetricsTable(c.env.Stdout, &ans)
	return nil
}

// sparkWidth is the most characters a sparkline takes.
const sparkWidth = 60

// writeMetricsTable prints one row per series: its sparkline and its last,
// minimum, mean and maximum. Each point is the mean over its step, as the
// header says; the mean is over the points (not weighted by requests); minimum
// and maximum are over the points' own extremes where the API gives them.
func writeMetricsTable(w io.Writer, ans *metricsAnswer) {
	n := 0
	if len(ans.Series) > 0 {
		n = len(ans.Series[0].Points)
	}
	fmt.Fprintf(w, "%s  %s – %s  step %s  %d points, each the mean over its step\n\n", ans.Volume, ans.StartTime, ans.EndTime, fmtStep(ans.Step), n)
	table := [][]string{{"METRIC", "UNIT", "HISTORY", "LAST", "MIN", "MEAN", "MAX"}}
	for _, s := range ans.Series {
		vals := make([]float64, len(s.Points))
		last, lo, hi, sum, cnt := math.NaN(), math.Inf(1), math.Inf(-1), 0.0, 0
		for i, pt := range s.Points {
			vals[i] = math.NaN()
			if pt.Value == nil {
				continue
			}
			v := *pt.Value
			vals[i], last = v, v
			sum, cnt = sum+v, cnt+1
			lo, hi = math.Min(lo, v), math.Max(hi, v)
			if pt.Min != nil {
				lo = math.Min(lo, *pt.Min)
			}
			if pt.Max != nil {
				hi = math.Max(hi, *pt.Max)
			}
		}
		mean := math.NaN()
		if cnt > 0 {
			mean = sum / float64(cnt)
		} else {
			lo, hi = math.NaN(), math.NaN()
		}
		unit, format := seriesFormat(s.Metric, s.Unit)
		table = append(table, []string{s.Metric, unit, sparkline(vals, sparkWidth), format(last), format(lo), format(mean), format(hi)})
	}
	writeAligned(w, table, 3)
}

// writeAligned prints rows as columns two spaces apart: the first left columns
// aligned left, the others (numbers) right. Widths count runes.
func writeAligned(w io.Writer, rows [][]string, left int) {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < left {
				b.WriteString(c)
				if i < len(r)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}

var sparkBars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws vals in at most width characters, each the mean of the
// values it covers, scaled from zero (or the lowest value, if negative) to the
// highest. NaN is unknown: a column with no known value is a space.
func sparkline(vals []float64, width int) string {
	cols := len(vals)
	if cols > width {
		cols = width
	}
	means := make([]float64, cols)
	lo, hi := 0.0, math.Inf(-1)
	for i := range means {
		sum, n := 0.0, 0
		for _, v := range vals[i*len(vals)/cols : (i+1)*len(vals)/cols] {
			if !math.IsNaN(v) {
				sum, n = sum+v, n+1
			}
		}
		means[i] = math.NaN()
		if n > 0 {
			means[i] = sum / float64(n)
			lo, hi = math.Min(lo, means[i]), math.Max(hi, means[i])
		}
	}
	var b strings.Builder
	for _, m := range means {
		switch {
		case math.IsNaN(m):
			b.WriteByte(' ')
		case hi <= lo:
			b.WriteRune(sparkBars[0])
		default:
			b.WriteRune(sparkBars[int(math.Round((m-lo)/(hi-lo)*float64(len(sparkBars)-1)))])
		}
	}
	return b.String()
}

// seriesFormat is how a metrics table shows a series of unit unit: the unit
// it writes and how it writes a value. Shares (unit 1, "…Share") are
// percentages; clients are a count (a mean over a step may be fractional);
// other unit-1 values (concurrency) are plain numbers without a unit.
func seriesFormat(metric, unit string) (string, func(float64) string) {
	switch {
	case unit == "1" && strings.HasSuffix(metric, "Share"):
		return "%", func(v float64) string { return fmtValue(v*100, "") }
	case metric == "clients":
		return "", fmtCount
	case unit == "1":
		return "", func(v float64) string { return fmtValue(v, "") }
	}
	return unit, func(v float64) string { return fmtValue(v, unit) }
}

// fmtStep writes a step the API answered ("1m0s") as a person would ("1m").
func fmtStep(step string) string {
	d, err := time.ParseDuration(step)
	if err != nil {
		return step
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtValue formats v for a table: "-" if unknown, bytes in binary units, other
// values by fmtNum.
func fmtValue(v float64, unit string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if unit == "By" {
		return fmtBytes(v)
	}
	return fmtNum(v)
}

// fmtNum writes v with fixed decimals, never an exponent: whole numbers from
// 100 up, one decimal from 10, two from 0.01, three from 0.001; what is
// smaller but not zero is "<0.001".
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || a == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 0.001:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 0:
		return ">-0.001"
	default:
		return "<0.001"
	}
}

func fmtBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmtNum(v) + " " + units[i]
}
