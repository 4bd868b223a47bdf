package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/store"
)

// Defaults of Options.
const (
	DefaultInterval  = 10 * time.Second
	DefaultRing      = 24 * time.Hour
	RollupPeriod     = 5 * time.Minute
	DefaultRetention = 30 * 24 * time.Hour
)

// RollupStore keeps 5-minute rollups (store.SQLite).
type RollupStore interface {
	PutRollups(ctx context.Context, rows []store.Rollup) error
	// Rollups returns series' rollups with from ≤ Start < to, by Start.
	Rollups(ctx context.Context, series string, from, to int64) ([]store.Rollup, error)
	// ExpireRollups deletes every rollup with Start < before.
	ExpireRollups(ctx context.Context, before int64) (int64, error)
}

// Options configures a Sampler. Only Targets is required: a source left nil is
// not read and its metrics stay unknown.
type Options struct {
	Targets  Targets
	NFS      NFSSource
	Capacity CapacitySource
	Clients  ClientSource
	QoS      QoSSource
	SMB      SMBSource
	// Store persists 5-minute rollups; nil = none (queries with a step of 5
	// minutes or more then answer only the rollup in progress).
	Store RollupStore
	// Interval between samples; 0 = DefaultInterval.
	Interval time.Duration
	// Ring is how much full-resolution history each volume keeps in memory; 0 =
	// DefaultRing.
	Ring time.Duration
	// Retention is how long rollups are kept; 0 = DefaultRetention.
	Retention time.Duration
	// StateDir keeps what the next start takes up (state.go): the counters'
	// last readings, the rollups in progress, the totals and the ring's last
	// SavedRing; "" = nothing (a start begins with a baseline and empty rings).
	StateDir string
	// Now is the clock; nil = time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// series is one volume's state.
type series struct {
	vol      Volume // the zero Volume until Targets list it
	prev     sample
	havePrev bool
	ring     *ring
	acc      *agg // the rollup in progress; nil until the first Point
	// accFull: acc holds all its bucket has seen, the part an earlier run
	// stored included, so storing it replaces that part. Otherwise that part
	// is still to be read and merged (resolveBases), as it is when acc's bucket
	// began before this Sampler started without a saved state.
	accFull bool
	// restored: the series was taken up from a saved state, which had its
	// rollup in progress: none of its buckets has a stored part to merge.
	restored bool
	// bridge: prev is a reading saved by the last run; the next interval
	// spans the restart, and is spread over its intervals (spreadGap).
	bridge bool
	totals totals
}

// totals are a volume's counters since this Sampler first saw it (or the run
// whose saved state it took up), summed from the intervals' differences, so
// they only grow whatever Ganesha's counters do (Prometheus counters).
type totals struct {
	io             ioDelta
	atLimitSeconds float64
	haveIO         bool // the counters started: I/O was read once
	wireRead       float64
	wireWrite      float64
	drops          float64
	haveWire       bool // traffic control's counters were read once
}

// Sampler samples every volume once per interval, keeps each volume's recent
// Points in a ring and persists 5-minute rollups. It is safe for concurrent use:
// Query may run while Sample does.
type Sampler struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	started int64

	mu         sync.Mutex
	series     map[string]*series // by volume key
	lastExpire int64

	// stateMu serialises the writes to StateDir and guards their buffers and
	// the journal's current segment.
	stateMu   sync.Mutex
	stateBuf  []byte
	ringBuf   []byte
	segment   string // file name; "" = start one at the next pass
	segmentAt int64  // its first pass
}

// New returns a Sampler; Run drives it, or tests call Sample.
func New(opts Options) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Ring <= 0 {
		opts.Ring = DefaultRing
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sampler{opts: opts, log: opts.Logger, now: opts.Now, started: opts.Now().Unix(), series: map[string]*series{}}
	if opts.StateDir != "" {
		s.restore()
	}
	return s
}

// ringLen is the number of Points a volume's ring holds.
func (s *Sampler) ringLen() int { return int(s.opts.Ring / s.opts.Interval) }

// Run samples on every multiple of Interval (wall clock, untilTick) until ctx
// ends, then persists the rollups in progress and the state (Flush).
func (s *Sampler) Run(ctx context.Context) error {
	for {
		timer := time.NewTimer(untilTick(time.Now(), s.opts.Interval))
		select {
		case <-ctx.Done():
			timer.Stop()
			fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return s.Flush(fctx)
		case <-timer.C:
			// A source that hangs (a stuck Ganesha) costs one interval, not the sampler.
			sctx, cancel := context.WithTimeout(ctx, s.opts.Interval)
			err := s.Sample(sctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("metrics sample", "err", err)
			}
		}
	}
}

// untilTick is the wait from now to the next multiple of interval since the Unix
// epoch. Samples on that grid make a 10-second point of the API cover exactly
// its [time, time+10 s), and a 5-minute rollup whole intervals.
func untilTick(now time.Time, interval time.Duration) time.Duration {
	d := interval - time.Duration(now.UnixNano()%int64(interval))
	if d <= 0 {
		d += interval
	}
	return d
}

// bucket is the start of the rollup bucket holding t.
func bucket(t int64) int64 {
	p := int64(RollupPeriod / time.Second)
	return t - ((t%p)+p)%p
}

// Sample reads every source once for every volume, at the clock's now. A source
// that fails leaves its metrics unknown for the interval; only a failing Targets
// or store fails the call.
func (s *Sampler) Sample(ctx context.Context) error {
	vols, err := s.opts.Targets.Volumes(ctx)
	if err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	now := s.now()
	var nets networkReads
	if s.opts.Clients != nil {
		nets.conns = perNetwork(ctx, s, vols, "clients", s.opts.Clients.Clients)
	}
	if s.opts.QoS != nil {
		nets.qos = perNetwork(ctx, s, vols, "traffic control", s.opts.QoS.QoSCounters)
	}
	if s.opts.SMB != nil {
		nets.smb = perNetwork(ctx, s, vols, "smb", s.opts.SMB.SMBIO)
	}
	nets.nfs = s.readNFSBatches(ctx, vols)
	samples := make([]sample, len(vols))
	for i, v := range vols {
		samples[i] = s.read(ctx, v, now, &nets)
	}

	var flush []pending
	var journal []keyedPoint
	var bases []string
	s.mu.Lock()
	seen := make(map[string]bool, len(vols))
	for i, v := range vols {
		seen[v.Key] = true
		sr := s.series[v.Key]
		if sr == nil {
			sr = &series{ring: newRing(s.ringLen())}
			s.series[v.Key] = sr
		}
		sr.vol = v
		cur := samples[i]
		if !sr.havePrev {
			sr.prev, sr.havePrev = cur, true
			// Its counters start here, at zero: a series that appeared only
			// with its first interval's count would lose that count to
			// Prometheus' rate(), which measures from a series' first sample.
			// (Those taken up from a saved state go on from their totals.)
			sr.totals.haveIO = sr.totals.haveIO || cur.nfsOK || cur.smbOK
			sr.totals.haveWire = sr.totals.haveWire || cur.qosOK
			sr.bridge = false
			continue
		}
		d := between(sr.prev, cur, v)
		p := derive(d, cur.at, v)
		cur.gauges(&p)
		sr.totals.add(d, &p)
		sr.prev = cur
		one := [1]Point{p}
		pts := one[:]
		if sr.bridge {
			sr.bridge = false
			pts = spreadGap(p, d, s.opts.Interval)
		}
		for j := range pts {
			if s.place(sr, v.Key, &pts[j], &flush) && s.opts.StateDir != "" {
				journal = append(journal, keyedPoint{v.Key, pts[j]})
			}
		}
		if sr.acc != nil && !sr.accFull {
			bases = append(bases, v.Key)
		}
	}
	for key, sr := range s.series {
		if !seen[key] {
			if sr.acc != nil {
				flush = append(flush, pending{key, sr.acc, sr.accFull})
			}
			delete(s.series, key)
		}
	}
	expire := now.Unix()-s.lastExpire >= int64(RollupPeriod/time.Second)
	if expire {
		s.lastExpire = now.Unix()
	}
	s.mu.Unlock()

	err = s.persist(ctx, flush)
	err = errors.Join(err, s.resolveBases(ctx, bases))
	if expire && s.opts.Store != nil {
		if _, xerr := s.opts.Store.ExpireRollups(ctx, now.Add(-s.opts.Retention).Unix()); xerr != nil {
			err = errors.Join(err, fmt.Errorf("expire rollups: %w", xerr))
		}
	}
	// The state after the rollups it no longer holds are stored: a crash in
	// between stores them again, the same. The journal after the state: a
	// crash in between loses a Point of the ring, never counts one twice.
	return errors.Join(err, s.saveState(now), s.appendRing(now, journal))
}

// pending is a rollup to store: its series, and whether it holds the stored
// part of its bucket already (series.accFull).
type pending struct {
	key  string
	a    *agg
	full bool
}

// place puts a Point in sr's ring and rollup in progress, queueing the rollup
// on flush when p begins the next bucket. It is false for a Point not after
// the ring's last (the clock went back: the ring stays in time order).
func (s *Sampler) place(sr *series, key string, p *Point, flush *[]pending) bool {
	if last, ok := sr.ring.last(); ok && p.T <= last.T {
		return false
	}
	sr.ring.add(*p)
	b := bucket(int64(p.T) - 1) // a Point covers the interval before T
	if sr.acc != nil && sr.acc.start != b {
		*flush = append(*flush, pending{key, sr.acc, sr.accFull})
		sr.acc = nil
	}
	if sr.acc == nil {
		sr.acc = newAgg(b)
		// A bucket that began before this Sampler may hold what an earlier
		// run stored of it, unless that run's state was taken up.
		sr.accFull = s.opts.Store == nil || sr.restored || b >= s.started
	}
	sr.acc.add(p)
	return true
}

// spreadGap turns the first interval after a restart, p (what the daemons
// counted from the last run's reading to now, d), into one Point per interval
// it spans, each with p's rates: the counts come out whole, each bucket the
// restart spanned gets its intervals, and rates stay right as the means over
// the downtime. Space and clients, unknown while Basin was down, are p's
// alone. An interval whose I/O and wire are both unknown stays one Point.
func spreadGap(p Point, d delta, interval time.Duration) []Point {
	k := int(math.Round(d.dt / interval.Seconds()))
	step := uint32(interval / time.Second)
	if k <= 1 || !(d.ioOK || d.wireOK) || step == 0 || uint32(k-1)*step >= p.T {
		return []Point{p}
	}
	q := p
	q.V[usedBytes], q.V[snapshotBytes], q.V[clients] = nan32, nan32, nan32
	pts := make([]Point, k)
	for j := range k - 1 {
		pts[j] = q
		pts[j].T = p.T - uint32(k-1-j)*step
	}
	pts[k-1] = p
	return pts
}

// add counts one interval.
func (t *totals) add(d delta, p *Point) {
	if d.ioOK {
		t.io.readOps += d.io.readOps
		t.io.writeOps += d.io.writeOps
		t.io.metaOps += d.io.metaOps
		t.io.readBytes += d.io.readBytes
		t.io.writeBytes += d.io.writeBytes
		t.io.readNs += d.io.readNs
		t.io.writeNs += d.io.writeNs
		t.haveIO = true
	}
	if d.wireOK {
		t.wireRead += d.wire.Sent
		t.wireWrite += d.wire.Received
		t.drops += d.wire.Drops
		t.haveWire = true
	}
	if share := float64(p.V[atLimit]); !math.IsNaN(share) {
		t.atLimitSeconds += share * d.dt
	}
}

// networkReads are the sources' answers read once per network and pass, by
// network; a network whose read failed is absent.
type networkReads struct {
	conns map[string]map[netip.Addr]int
	qos   map[string]map[string]qos.Counters
	smb   map[string]map[SMBShare]smb.ShareIO
	nfs   map[string]map[uint64]nfs.ExportIO
}

// perNetwork calls read once for each network of vols. A read that fails is
// logged; what it returned anyway (some of a network's answers) is kept.
func perNetwork[M any](ctx context.Context, s *Sampler, vols []Volume, what string, read func(context.Context, string) (M, error)) map[string]M {
	out := map[string]M{}
	for _, v := range vols {
		if _, done := out[v.Network]; done || v.Network == "" {
			continue
		}
		m, err := read(ctx, v.Network)
		if err != nil {
			s.log.Debug("metrics "+what, "network", v.Network, "err", err)
		}
		out[v.Network] = m // nil: unknown
	}
	return out
}

// readNFSBatches reads the exports of vols network by network when the NFS
// source reads in batches: by network, the counters of the exports it has. A
// network whose read failed is absent (its volumes are read one by one).
func (s *Sampler) readNFSBatches(ctx context.Context, vols []Volume) map[string]map[uint64]nfs.ExportIO {
	b, ok := s.opts.NFS.(NFSBatchSource)
	if !ok {
		return nil
	}
	ids := map[string][]uint64{}
	var networks []string
	for _, v := range vols {
		if v.ExportID == 0 || v.Network == "" {
			continue
		}
		if _, seen := ids[v.Network]; !seen {
			networks = append(networks, v.Network)
		}
		ids[v.Network] = append(ids[v.Network], v.ExportID)
	}
	out := make(map[string]map[uint64]nfs.ExportIO, len(networks))
	for _, n := range networks {
		m, err := b.ExportsIO(ctx, n, ids[n])
		if err != nil {
			s.log.Debug("metrics nfs batch", "network", n, "err", err)
			continue
		}
		out[n] = m
	}
	return out
}

// read asks every source about one volume; nets holds what was read by network.
func (s *Sampler) read(ctx context.Context, v Volume, now time.Time, nets *networkReads) sample {
	smp := sample{at: now}
	if s.opts.NFS != nil && v.ExportID != 0 && v.Network != "" {
		if m, ok := nets.nfs[v.Network]; ok {
			smp.nfs, smp.nfsOK = m[v.ExportID]
		} else if io, err := s.opts.NFS.ExportIO(ctx, v.Network, v.ExportID); err != nil {
			s.log.Debug("metrics nfs", "volume", v.Name, "err", err)
		} else {
			smp.nfs, smp.nfsOK = io, true
		}
		smp.nfsExport = v.ExportID
	}
	if s.opts.Capacity != nil {
		used, snap, err := s.opts.Capacity.VolumeUsage(ctx, v.Key)
		if err != nil {
			s.log.Debug("metrics capacity", "volume", v.Name, "err", err)
		} else {
			smp.used, smp.snap, smp.capOK = used, snap, true
		}
	}
	if m := nets.conns[v.Network]; m != nil && v.Endpoint.IsValid() {
		smp.conns, smp.connOK = m[v.Endpoint], true
	}
	if m := nets.qos[v.Network]; m != nil {
		smp.qos, smp.qosOK = m[v.Name]
	}
	if m := nets.smb[v.Network]; m != nil && v.SMB.Name != "" {
		smp.smb, smp.smbOK = m[SMBShare{AD: v.SMB.AD, Name: strings.ToLower(v.SMB.Name)}]
	}
	return smp
}

// persist stores rollups, each merged first with what is stored of its bucket
// unless it holds that already (pending.full).
func (s *Sampler) persist(ctx context.Context, aggs []pending) error {
	if s.opts.Store == nil || len(aggs) == 0 {
		return nil
	}
	rows := make([]store.Rollup, 0, len(aggs))
	for _, pa := range aggs {
		a := pa.a
		if a.empty() {
			continue
		}
		if !pa.full {
			merged, err := s.withStored(ctx, pa.key, a)
			if err != nil {
				return err
			}
			a = merged
		}
		rows = append(rows, store.Rollup{Series: pa.key, Start: a.start, Data: a.encode()})
	}
	if err := s.opts.Store.PutRollups(ctx, rows); err != nil {
		return fmt.Errorf("persist rollups: %w", err)
	}
	return nil
}

// withStored returns a merged with what the store holds of its bucket.
func (s *Sampler) withStored(ctx context.Context, key string, a *agg) (*agg, error) {
	old, err := s.opts.Store.Rollups(ctx, key, a.start, a.start+1)
	if err != nil {
		return nil, fmt.Errorf("read rollup: %w", err)
	}
	if len(old) != 1 {
		return a, nil
	}
	prev, err := decodeAgg(a.start, old[0].Data)
	if err != nil {
		s.log.Warn("metrics: stored rollup replaced", "series", key, "start", a.start, "err", err)
		return a, nil
	}
	prev.merge(a)
	return prev, nil
}

// resolveBases merges into the rollups in progress of keys what the store
// holds of their buckets (an earlier run's part), once, as soon as they begin:
// from then on storing one replaces its row, which a crash between storing it
// and saving the state therefore cannot count twice. One whose read fails is
// tried again at the next pass.
func (s *Sampler) resolveBases(ctx context.Context, keys []string) error {
	var errs []error
	for _, key := range keys {
		s.mu.Lock()
		sr := s.series[key]
		open := sr != nil && sr.acc != nil && !sr.accFull
		var start int64
		if open {
			start = sr.acc.start
		}
		s.mu.Unlock()
		if !open {
			continue
		}
		rows, err := s.opts.Store.Rollups(ctx, key, start, start+1)
		if err != nil {
			errs = append(errs, fmt.Errorf("read rollup: %w", err))
			continue
		}
		var base *agg
		if len(rows) == 1 {
			if base, err = decodeAgg(start, rows[0].Data); err != nil {
				s.log.Warn("metrics: stored rollup replaced", "series", key, "start", start, "err", err)
				base = nil
			}
		}
		s.mu.Lock()
		if sr := s.series[key]; sr != nil && sr.acc != nil && !sr.accFull && sr.acc.start == start {
			if base != nil {
				base.merge(sr.acc)
				sr.acc = base
			}
			sr.accFull = true
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Flush stores every rollup in progress as it stands, and the state. Sampling
// may go on after it: the rollups in progress stay, and storing them again
// replaces what Flush stored.
func (s *Sampler) Flush(ctx context.Context) error {
	s.mu.Lock()
	var bases []string
	for key, sr := range s.series {
		if sr.acc != nil && !sr.accFull {
			bases = append(bases, key)
		}
	}
	s.mu.Unlock()
	err := s.resolveBases(ctx, bases)
	s.mu.Lock()
	var aggs []pending
	for key, sr := range s.series {
		if sr.acc != nil && sr.accFull {
			cp := *sr.acc
			aggs = append(aggs, pending{key, &cp, true})
		}
	}
	s.mu.Unlock()
	return errors.Join(err, s.persist(ctx, aggs), s.saveState(s.now()))
}

// MaxPoints bounds the points of one series in a query.
const MaxPoints = 11000

// Query answers a metrics query about one volume (q.Series is its storage key).
// A step shorter than RollupPeriod reads the in-memory ring and must be a
// multiple of the sampling interval; a longer one must be a multiple of
// RollupPeriod and reads the stored rollups and the one in progress. Invalid
// queries are model.ErrInvalid naming the parameter.
func (s *Sampler) Query(ctx context.Context, q model.MetricsQuery) ([]model.MetricSeries, error) {
	pq, err := s.plan(q)
	if err != nil {
		return nil, err
	}
	buckets, err := s.buckets(ctx, q.Series, pq)
	if err != nil {
		return nil, err
	}
	return render(pq.metrics, buckets), nil
}

// planned is a checked query: its metrics, and its range and step in Unix
// seconds, from aligned to the step.
type planned struct {
	metrics        []Metric
	from, to, step int64
}

// plan checks a query (the rules of Query) and aligns its range to the step.
func (s *Sampler) plan(q model.MetricsQuery) (planned, error) {
	ms := Metrics
	if len(q.Metrics) > 0 {
		ms = nil
		for _, name := range q.Metrics {
			m, ok := metricByName(name)
			if !ok {
				return planned{}, model.Invalid("metric", "unknown metric %q", name)
			}
			ms = append(ms, m)
		}
	}
	from, to := q.Start.Unix(), q.End.Unix()
	if to <= from {
		return planned{}, model.Invalid("endTime", "must be after startTime")
	}
	step := int64(q.Step / time.Second)
	interval := int64(s.opts.Interval / time.Second)
	period := int64(RollupPeriod / time.Second)
	switch {
	case q.Step%time.Second != 0 || step <= 0:
		return planned{}, model.Invalid("step", "must be a positive whole number of seconds")
	case step < period && step%interval != 0:
		return planned{}, model.Invalid("step", "below %v it must be a multiple of %v", RollupPeriod, s.opts.Interval)
	case step >= period && step%period != 0:
		return planned{}, model.Invalid("step", "from %v up it must be a multiple of %v", RollupPeriod, RollupPeriod)
	case (to-from)/step > MaxPoints:
		return planned{}, model.Invalid("step", "%v over %v is more than %d points", q.Step, q.End.Sub(q.Start), MaxPoints)
	}
	from -= ((from % step) + step) % step // align buckets to the step
	return planned{metrics: ms, from: from, to: to, step: step}, nil
}

// buckets summarises one volume's series (its storage key) over a planned
// query, one agg per step, by the step's start.
func (s *Sampler) buckets(ctx context.Context, key string, pq planned) (map[int64]*agg, error) {
	from, to, step := pq.from, pq.to, pq.step
	period := int64(RollupPeriod / time.Second)
	buckets := map[int64]*agg{}
	add := func(start int64, a *agg) {
		b := start - ((start%step)+step)%step
		if buckets[b] == nil {
			buckets[b] = newAgg(b)
		}
		buckets[b].merge(a)
	}
	if step < period {
		s.mu.Lock()
		if sr := s.series[key]; sr != nil {
			// A Point at T covers (T−interval, T]: it belongs to the bucket of T−1.
			sr.ring.between(from+1, to+1, func(p *Point) {
				one := newAgg(0)
				one.add(p)
				add(int64(p.T)-1, one)
			})
		}
		s.mu.Unlock()
	} else {
		var rows []store.Rollup
		if s.opts.Store != nil {
			var err error
			if rows, err = s.opts.Store.Rollups(ctx, key, from, to); err != nil {
				return nil, fmt.Errorf("read rollups: %w", err)
			}
		}
		s.mu.Lock()
		skip := int64(math.MinInt64) // the stored row the rollup in progress holds already
		if sr := s.series[key]; sr != nil && sr.acc != nil && sr.acc.start >= from && sr.acc.start < to {
			cp := *sr.acc
			add(cp.start, &cp)
			if sr.accFull {
				skip = cp.start
			}
		}
		s.mu.Unlock()
		for _, r := range rows {
			if r.Start == skip {
				continue
			}
			a, err := decodeAgg(r.Start, r.Data)
			if err != nil {
				s.log.Warn("metrics: unreadable rollup", "series", key, "start", r.Start, "err", err)
				continue
			}
			add(r.Start, a)
		}
	}
	return buckets, nil
}

// render turns buckets into series, in time order, skipping empty buckets.
func render(ms []Metric, buckets map[int64]*agg) []model.MetricSeries {
	starts := make([]int64, 0, len(buckets))
	for b, a := range buckets {
		if !a.empty() {
			starts = append(starts, b)
		}
	}
	slices.Sort(starts)
	out := make([]model.MetricSeries, len(ms))
	for i, m := range ms {
		out[i] = model.MetricSeries{Metric: m.Name, Unit: m.Unit, Points: make([]model.MetricPoint, 0, len(starts))}
		for _, b := range starts {
			a := buckets[b]
			means := a.means()
			pt := model.MetricPoint{Time: time.Unix(b, 0).UTC(), Value: m.value(&means), Min: math.NaN(), Max: math.NaN()}
			if m.stored >= 0 && a.n[m.stored] > 1 {
				lo, hi := [numStored]float64{}, [numStored]float64{}
				lo[m.stored], hi[m.stored] = float64(a.min[m.stored]), float64(a.max[m.stored])
				pt.Min, pt.Max = m.value(&lo), m.value(&hi)
			}
			out[i].Points = append(out[i].Points, pt)
		}
	}
	return out
}
