package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/client"
)

// topOptions are `basin top`'s flags.
type topOptions struct {
	sort     string
	n        int
	interval time.Duration
	once     bool
}

// topSorts are the orders `basin top --sort` knows: each a row's key, highest
// first.
var topSorts = map[string]func(r *topRow) float64{
	"iops":      func(r *topRow) float64 { return r.readIops + r.writeIops + r.metaIops },
	"mibps":     func(r *topRow) float64 { return r.readMibps + r.writeMibps },
	"latency":   func(r *topRow) float64 { return r.latencyMs },
	"throttled": func(r *topRow) float64 { return r.atLimit },
}

func parseTopOptions(p *parsed) (topOptions, error) {
	o := topOptions{sort: "iops", n: 20, interval: 10 * time.Second, once: p.str("once") == "true"}
	if p.has("sort") {
		o.sort = p.str("sort")
		if topSorts[o.sort] == nil {
			return o, fmt.Errorf("--sort must be iops, mibps, latency or throttled, got %q", o.sort)
		}
	}
	if p.has("interval") {
		d, err := parseSince("interval", p.str("interval"))
		if err != nil {
			return o, err
		}
		if d < time.Second {
			return o, fmt.Errorf("--interval must be at least 1s, got %q", p.str("interval"))
		}
		o.interval = d
	}
	if p.has("n") {
		n, err := flagInt(p, "n")
		if err != nil {
			return o, err
		}
		if n < 0 {
			return o, fmt.Errorf("--n must be 0 (all) or more, got %d", n)
		}
		o.n = n
	}
	return o, nil
}

// topRow is one volume's line: its latest 10-second interval, and the share of
// the last minute it spent at its throughput limit. NaN is unknown.
type topRow struct {
	volume, pool                  string
	readIops, writeIops, metaIops float64
	readMibps, writeMibps         float64
	latencyMs, blockKib, inFlight float64
	atLimit, clients              float64
}

// topMetrics are the series `basin top` reads for each volume.
var topMetrics = []string{"readIops", "writeIops", "metadataIops", "readMibps", "writeMibps", "readLatencyMs", "writeLatencyMs",
	"concurrency", "atLimitShare", "clients"}

// topWindow is how far back `basin top` reads: the latest point, and the
// at-limit share over the window.
const topWindow = time.Minute

// topParallel bounds the metrics requests `basin top` has in flight.
const topParallel = 8

// topRows lists the volumes and reads each one's latest metrics. A volume
// deleted in between is left out.
func (c *session) topRows(ctx context.Context, now time.Time) ([]topRow, error) {
	vols, err := c.listAll(ctx, c.parent()+"/volumes", "volumes", url.Values{})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	q := url.Values{"metric": {strings.Join(topMetrics, ",")}, "step": {"10s"},
		"startTime": {now.Add(-topWindow).UTC().Format(time.RFC3339)}, "endTime": {now.UTC().Format(time.RFC3339)}}
	rows := make([]topRow, len(vols))
	keep := make([]bool, len(vols))
	errs := make([]error, len(vols))
	sem := make(chan struct{}, topParallel)
	var wg sync.WaitGroup
	for i, v := range vols {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id := cell(v, "id")
			var ans metricsAnswer
			err := c.getMetrics(ctx, id, q, &ans)
			var ae *client.Error
			if errors.As(err, &ae) && ae.HTTPStatus == http.StatusNotFound {
				return
			}
			if err != nil {
				errs[i] = fmt.Errorf("volume %s: %w", id, err)
				return
			}
			rows[i], keep[i] = rowOf(id, cell(v, "storagePool"), &ans), true
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := rows[:0]
	for i := range rows {
		if keep[i] {
			out = append(out, rows[i])
		}
	}
	return out, nil
}

// rowOf turns a volume's metrics answer into its row: each series' last point,
// except the at-limit share, which is the mean over the window.
func rowOf(volume, pool string, ans *metricsAnswer) topRow {
	last := map[string]float64{}
	atLimit, n := 0.0, 0
	for _, s := range ans.Series {
		last[s.Metric] = math.NaN()
		if len(s.Points) > 0 && s.Points[len(s.Points)-1].Value != nil {
			last[s.Metric] = *s.Points[len(s.Points)-1].Value
		}
		if s.Metric == "atLimitShare" {
			for _, pt := range s.Points {
				if pt.Value != nil {
					atLimit, n = atLimit+*pt.Value, n+1
				}
			}
		}
	}
	get := func(name string) float64 {
		if v, ok := last[name]; ok {
			return v
		}
		return math.NaN()
	}
	r := topRow{volume: volume, pool: pool, readIops: get("readIops"), writeIops: get("writeIops"), metaIops: get("metadataIops"),
		readMibps: get("readMibps"), writeMibps: get("writeMibps"), inFlight: get("concurrency"), clients: get("clients"),
		atLimit: math.NaN(), latencyMs: math.NaN(), blockKib: math.NaN()}
	if n > 0 {
		r.atLimit = atLimit / float64(n)
	}
	// Latency over both directions, weighted by requests; block size as bytes
	// over requests.
	ops, latSum := 0.0, 0.0
	for _, d := range [][2]float64{{r.readIops, get("readLatencyMs")}, {r.writeIops, get("writeLatencyMs")}} {
		if !math.IsNaN(d[0]) && d[0] > 0 {
			ops += d[0]
			latSum += d[0] * d[1]
		}
	}
	if ops > 0 {
		r.latencyMs = latSum / ops
		r.blockKib = (r.readMibps + r.writeMibps) * 1024 / ops
	}
	return r
}

// sortRows orders rows by key, highest first; unknown keys go last, ties by
// volume ID.
func sortRows(rows []topRow, key func(*topRow) float64) {
	slices.SortStableFunc(rows, func(a, b topRow) int {
		ka, kb := key(&a), key(&b)
		switch na, nb := math.IsNaN(ka), math.IsNaN(kb); {
		case na && !nb:
			return 1
		case nb && !na:
			return -1
		case !na && ka != kb:
			return cmp.Compare(kb, ka)
		}
		return strings.Compare(a.volume, b.volume)
	})
}

// busiest sorts rows by o.sort and returns the first o.n (0: all).
func busiest(rows []topRow, o topOptions) []topRow {
	sortRows(rows, topSorts[o.sort])
	if o.n > 0 && len(rows) > o.n {
		return rows[:o.n]
	}
	return rows
}

// renderTop writes one frame: a header line and the n busiest volumes (0: all).
func (c *session) renderTop(w io.Writer, rows []topRow, o topOptions, now time.Time) {
	shown := busiest(rows, o)
	fmt.Fprintf(w, "basin top  %s/%s  %s  %d of %d volumes by %s\n\n", c.project, c.location,
		now.UTC().Format("2006-01-02 15:04:05 UTC"), len(shown), len(rows), o.sort)
	table := [][]string{{"VOLUME", "POOL", "READ/s", "WRITE/s", "META/s", "READ MiB/s", "WRITE MiB/s", "SRV LAT ms", "BLOCK KiB", "SRV IN FLIGHT", "AT LIMIT 1m", "CLIENTS"}}
	for _, r := range shown {
		pct := "-"
		if !math.IsNaN(r.atLimit) {
			pct = fmt.Sprintf("%.0f%%", r.atLimit*100)
		}
		table = append(table, []string{r.volume, r.pool, fmtCount(r.readIops), fmtCount(r.writeIops), fmtCount(r.metaIops),
			fmtValue(r.readMibps, ""), fmtValue(r.writeMibps, ""), fmtValue(r.latencyMs, ""), fmtValue(r.blockKib, ""),
			fmtValue(r.inFlight, ""), pct, fmtCount(r.clients)})
	}
	writeAligned(w, table, 2)
	fmt.Fprint(w, "\n"+topFootnote)
}

// topFootnote says what the server-side columns leave out: Ganesha and smbd time
// a request from when a worker takes it to its reply, so clients see more, most
// of all at the QoS ceiling, where the shaper holds replies after the server sent
// them (docs/metrics.md, "What Ganesha's latency is").
const topFootnote = `SRV: as the NFS and SMB servers time requests, from a worker taking one to its reply. Left out:
the network, the clients' own queues, and the QoS shaper, which holds replies at the limit: a volume
AT LIMIT shows a low SRV LAT while its clients wait far longer.
`

// fmtCount formats requests per second or clients: whole numbers, one decimal
// below 10, "-" if unknown.
func fmtCount(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 10 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// topData is a frame of `basin top --once -o json|yaml`: the busiest volumes'
// rows, the table's columns by the API's metric names, unknown values null.
type topData struct {
	Project     string      `json:"project"`
	Location    string      `json:"location"`
	Time        string      `json:"time"`
	Sort        string      `json:"sort"`
	VolumeCount int         `json:"volumeCount"`
	Volumes     []topVolume `json:"volumes"`
}

type topVolume struct {
	Volume       string   `json:"volume"`
	StoragePool  string   `json:"storagePool"`
	ReadIops     *float64 `json:"readIops"`
	WriteIops    *float64 `json:"writeIops"`
	MetadataIops *float64 `json:"metadataIops"`
	ReadMibps    *float64 `json:"readMibps"`
	WriteMibps   *float64 `json:"writeMibps"`
	// LatencyMs and BlockKib are over reads and writes together. LatencyMs
	// and Concurrency are the server's (SRV in the table): what clients see
	// adds the network, their queues and the QoS shaper's hold.
	LatencyMs   *float64 `json:"latencyMs"`
	BlockKib    *float64 `json:"blockKib"`
	Concurrency *float64 `json:"concurrency"`
	// AtLimitShare is the mean over the last minute, a fraction.
	AtLimitShare *float64 `json:"atLimitShare"`
	Clients      *float64 `json:"clients"`
}

// known is v, or nil (JSON null) if unknown.
func known(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// topDataOf is a frame's data: the n busiest rows, as renderTop shows them.
func (c *session) topDataOf(rows []topRow, o topOptions, now time.Time) topData {
	d := topData{Project: c.project, Location: c.location, Time: now.UTC().Format(time.RFC3339), Sort: o.sort,
		VolumeCount: len(rows), Volumes: []topVolume{}}
	for _, r := range busiest(rows, o) {
		d.Volumes = append(d.Volumes, topVolume{Volume: r.volume, StoragePool: r.pool, ReadIops: known(r.readIops),
			WriteIops: known(r.writeIops), MetadataIops: known(r.metaIops), ReadMibps: known(r.readMibps),
			WriteMibps: known(r.writeMibps), LatencyMs: known(r.latencyMs), BlockKib: known(r.blockKib),
			Concurrency: known(r.inFlight), AtLimitShare: known(r.atLimit), Clients: known(r.clients)})
	}
	return d
}

// topFrame reads the volumes' metrics now and renders them.
func (c *session) topFrame(ctx context.Context, o topOptions) (string, error) {
	now := c.env.Now()
	rows, err := c.topRows(ctx, now)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	c.renderTop(&b, rows, o, now)
	return b.String(), nil
}

func top(ctx context.Context, c *session, p *parsed) error {
	if err := needArgs(p); err != nil {
		return err
	}
	o, err := parseTopOptions(p)
	if err != nil {
		return err
	}
	if c.output != "table" && !o.once {
		return usagef("-o %s needs --once: the live view is a screen", c.output)
	}
	if u, ok := c.cl.(unreachable); ok {
		return u.err // no client (no key file): no frame would ever show more
	}
	if o.once && c.output != "table" {
		now := c.env.Now()
		rows, err := c.topRows(ctx, now)
		if err != nil {
			return err
		}
		return c.print(c.topDataOf(rows, o, now), nil)
	}
	if o.once {
		s, err := c.topFrame(ctx, o)
		if err != nil {
			return err
		}
		_, err = io.WriteString(c.env.Stdout, s)
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var keys chan byte
	if c.env.Stdin != nil {
		if f, ok := c.env.Stdin.(*os.File); ok {
			if restore, ok := cbreak(f); ok {
				defer restore()
			}
		}
		keys = make(chan byte)
		go readKeys(c.env.Stdin, keys)
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	fmt.Fprint(c.env.Stdout, hideCursor)
	defer fmt.Fprint(c.env.Stdout, showCursor)
	return topLoop(ctx, c.env.Stdout, func(ctx context.Context) (string, error) { return c.topFrame(ctx, o) }, t.C, keys)
}

// Terminal control: clear the screen and move home; hide and show the cursor.
const (
	clearHome  = "\x1b[H\x1b[2J"
	hideCursor = "\x1b[?25l"
	showCursor = "\x1b[?25h"
)

// topLoop draws a frame, then again at every tick or key, until ctx ends or q
// (or Ctrl-C read as a key) is pressed. A frame that fails shows its error and
// the loop goes on: the server may come back.
func topLoop(ctx context.Context, w io.Writer, frame func(context.Context) (string, error), tick <-chan time.Time, keys <-chan byte) error {
	for {
		s, err := frame(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s = "basin top: " + err.Error() + "\n"
		}
		if _, err := io.WriteString(w, clearHome+s); err != nil {
			return err
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick:
				break wait
			case k, ok := <-keys:
				switch {
				case !ok:
					keys = nil // stdin ended: the ticker and Ctrl-C remain
				case k == 'q' || k == 'Q' || k == 3: // 3: Ctrl-C read as a key
					return nil
				default:
					break wait // any other key redraws now
				}
			}
		}
	}
}

// readKeys sends r's bytes to keys until r ends, then closes keys.
func readKeys(r io.Reader, keys chan<- byte) {
	defer close(keys)
	buf := make([]byte, 16)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			keys <- b
		}
		if err != nil {
			return
		}
	}
}
