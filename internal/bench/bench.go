// Package bench is Basin's load generator: fio's job vocabulary (rw, bs, iodepth,
// numjobs, size, nrfiles, runtime, ramp_time, rwmixread, direct) and fio-compatible
// JSON output, so fio tooling — and `basin fio analyze` — read its results.
//
// This file holds the job model, the runner and the output; engines do the I/O. The
// local engine (files, O_DIRECT where asked) calibrates the tool against fio.
// Imported by the cli package; it imports nothing of Basin's server packages.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Job is one fio-style job.
type Job struct {
	Name      string
	RW        string // read, write, randread, randwrite, rw, randrw
	BS        int64
	IODepth   int
	NumJobs   int
	Size      int64 // per file
	NrFiles   int
	Runtime   time.Duration
	TimeBased bool
	Ramp      time.Duration
	RWMixRead int // percent of reads for rw/randrw
	Direct    bool
}

// Limits keep a run bounded.
const (
	MaxRuntime = time.Hour
	MaxDepth   = 1024
	MaxJobs    = 256
	MaxBS      = 64 << 20
)

// Validate checks a job and fills fio's defaults.
func (j *Job) Validate() error {
	if j.Name == "" {
		j.Name = "basin-bench"
	}
	// Every engine names its files after the job: a name must not reach outside
	// the target the run was given.
	if strings.ContainsAny(j.Name, `/\`) || j.Name == ".." || j.Name == "." {
		return fmt.Errorf("--name %q must not contain a path", j.Name)
	}
	switch j.RW {
	case "read", "write", "randread", "randwrite", "rw", "randrw":
	case "":
		j.RW = "read"
	default:
		return fmt.Errorf("--rw: %q is not read, write, randread, randwrite, rw or randrw", j.RW)
	}
	if j.BS == 0 {
		j.BS = 4096
	}
	if j.BS < 512 || j.BS > MaxBS || (j.Direct && j.BS%512 != 0) {
		return fmt.Errorf("--bs: %d must be between 512 B and 64 MiB (a multiple of 512 with --direct)", j.BS)
	}
	if j.IODepth == 0 {
		j.IODepth = 1
	}
	if j.NumJobs == 0 {
		j.NumJobs = 1
	}
	if j.NrFiles == 0 {
		j.NrFiles = 1
	}
	if j.IODepth < 1 || j.IODepth > MaxDepth || j.NumJobs < 1 || j.NumJobs > MaxJobs || j.NrFiles < 1 || j.NrFiles > 1024 {
		return errors.New("--iodepth (1-1024), --numjobs (1-256) and --nrfiles (1-1024) are out of range")
	}
	if j.Size == 0 {
		j.Size = 1 << 30
	}
	if j.Size < j.BS {
		return fmt.Errorf("--size %d is smaller than --bs %d", j.Size, j.BS)
	}
	if j.Runtime <= 0 && j.TimeBased {
		return errors.New("--time_based needs --runtime")
	}
	if j.Runtime > MaxRuntime || j.Ramp > MaxRuntime || j.Ramp < 0 {
		return fmt.Errorf("--runtime and --ramp_time must be at most %s", MaxRuntime)
	}
	if j.RWMixRead == 0 && (j.RW == "rw" || j.RW == "randrw") {
		j.RWMixRead = 50
	}
	if j.RWMixRead < 0 || j.RWMixRead > 100 {
		return errors.New("--rwmixread must be 0-100")
	}
	return nil
}

// extend writes patterned (not sparse) data from have up to size in 1 MiB pieces,
// as fio lays files out before reading them.
func extend(ctx context.Context, have, size int64, write func(p []byte, off int64) error) error {
	if have >= size {
		return nil
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	for off := have; off < size; off += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := write(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// File is one target an engine opened for a job.
type File interface {
	ReadAt(p []byte, off int64) error
	WriteAt(p []byte, off int64) error
	Close() error
}

// Engine opens the files of job number n (0-based) of a job.
type Engine interface {
	Open(ctx context.Context, j *Job, n int) ([]File, error)
	Name() string
}

// dirStats collects one direction of one job.
type dirStats struct {
	mu    sync.Mutex
	hist  *hdrhistogram.Histogram // latency in ns
	ios   int64
	bytes int64
	sum   float64
	sumSq float64
	min   int64
	max   int64
}

func newDirStats() *dirStats {
	return &dirStats{hist: hdrhistogram.New(1, int64(time.Minute), 3), min: math.MaxInt64}
}

func (d *dirStats) add(lat time.Duration, n int64) {
	ns := lat.Nanoseconds()
	d.mu.Lock()
	d.hist.RecordValue(max(ns, 1)) //nolint:errcheck // values above a minute are clamped below
	d.ios++
	d.bytes += n
	f := float64(ns)
	d.sum += f
	d.sumSq += f * f
	d.min = min(d.min, ns)
	d.max = max(d.max, ns)
	d.mu.Unlock()
}

// Result is a run's outcome, per job.
type Result struct {
	Engine string
	Jobs   []JobResult
}

// JobResult is one job's outcome (all its numjobs clones reported together, as
// fio's group_reporting does).
type JobResult struct {
	Job     Job
	Elapsed time.Duration
	Read    *dirStats
	Write   *dirStats
}

// Run runs job on engine and returns what it measured. progress, if not nil,
// receives a line every few seconds.
func Run(ctx context.Context, e Engine, j Job, progress io.Writer) (*Result, error) {
	if err := j.Validate(); err != nil {
		return nil, err
	}
	var files [][]File
	defer func() {
		for _, fs := range files {
			for _, f := range fs {
				f.Close()
			}
		}
	}()
	for n := range j.NumJobs {
		fs, err := e.Open(ctx, &j, n)
		if err != nil {
			return nil, err
		}
		files = append(files, fs)
	}
	// Files that start I/O and call back (asyncFile) are driven from their
	// completions, as an event loop drives them: no goroutine per worker.
	async := true
	for _, fs := range files {
		for _, f := range fs {
			if _, ok := f.(asyncFile); !ok {
				async = false
			}
		}
	}
	// Otherwise every outstanding I/O is a goroutine blocked in a system call; each
	// needs a P to resume the moment its I/O completes, or completions queue behind
	// the scheduler (measured: 40k IOPS and a 60 ms p99.9 at iodepth 16 on 2 CPUs,
	// instead of fio's 80k). So give the run one P per worker for its duration.
	if want := j.NumJobs*j.IODepth + 2; !async && want > runtime.GOMAXPROCS(0) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(want))
	}
	reads, writes := newDirStats(), newDirStats()
	var measuring sync.WaitGroup
	start := time.Now()
	measureFrom := start.Add(j.Ramp)
	deadline := measureFrom.Add(j.Runtime)
	if j.Runtime == 0 {
		deadline = measureFrom.Add(MaxRuntime) // size-bounded: the size ends the run
	}
	totalBytes := j.Size * int64(j.NrFiles) // per job, when not time based
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	errc := make(chan error, j.NumJobs*j.IODepth)
	for n := range j.NumJobs {
		jr := &jobRun{j: &j, n: n, files: files[n], ctx: runCtx, cancel: cancel, errc: errc, measureFrom: measureFrom,
			deadline: deadline, total: totalBytes, reads: reads, writes: writes, wg: &measuring}
		for w := range j.IODepth {
			s := &slot{jr: jr, rng: rand.New(rand.NewPCG(uint64(n), uint64(w))), buf: alignedBuffer(int(j.BS))}
			for i := range s.buf {
				s.buf[i] = byte(i*7 + w)
			}
			measuring.Add(1)
			if async {
				s.done = s.complete
				s.issue()
			} else {
				go s.loop()
			}
		}
	}
	if progress != nil && j.Runtime+j.Ramp > 5*time.Second {
		go func() {
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					fmt.Fprintf(progress, "%s: %.0fs elapsed, %d reads, %d writes\n", j.Name, time.Since(start).Seconds(), reads.count(), writes.count())
				}
			}
		}()
	}
	measuring.Wait()
	elapsed := max(time.Since(measureFrom), time.Millisecond)
	if elapsed > j.Runtime && j.Runtime > 0 {
		elapsed = j.Runtime
	}
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	jr := JobResult{Job: j, Elapsed: elapsed}
	if reads.ios > 0 {
		jr.Read = reads
	}
	if writes.ios > 0 {
		jr.Write = writes
	}
	return &Result{Engine: e.Name(), Jobs: []JobResult{jr}}, nil
}

// jobRun is what the workers of one of a job's numjobs clones share.
type jobRun struct {
	j                     *Job
	n                     int
	files                 []File
	ctx                   context.Context
	cancel                context.CancelFunc
	errc                  chan error
	measureFrom, deadline time.Time
	total                 int64 // bytes to move, when not time based
	reads, writes         *dirStats
	wg                    *sync.WaitGroup

	mu          sync.Mutex
	issued, seq int64
}

// slot is one of a job's iodepth workers: it keeps one I/O in flight at a
// time, in a goroutine of its own (loop) or, on engines that can start an I/O
// and call back (asyncFile), from the completion of the one before (issue).
type slot struct {
	jr  *jobRun
	rng *rand.Rand
	buf []byte
	// The I/O in flight.
	file  File
	off   int64
	write bool
	t0    time.Time
	done  func(error) // complete, made once
}

// asyncFile is a File that can start an I/O and return at once: done runs
// when the I/O completes, maybe on another goroutine, and must not block. On
// an error the I/O did not start and done does not run.
type asyncFile interface {
	File
	StartRead(p []byte, off int64, done func(error)) error
	StartWrite(p []byte, off int64, done func(error)) error
}

// next picks the slot's next I/O; false when the job is done.
func (s *slot) next() bool {
	jr, j := s.jr, s.jr.j
	if jr.ctx.Err() != nil {
		return false
	}
	jr.mu.Lock()
	if !j.TimeBased && jr.issued >= jr.total {
		jr.mu.Unlock()
		return false
	}
	jr.issued += j.BS
	off := jr.seq
	jr.seq += j.BS
	jr.mu.Unlock()
	blocks := j.Size / j.BS
	fileIdx := int((off / j.BS) % int64(j.NrFiles))
	if j.RW == "randread" || j.RW == "randwrite" || j.RW == "randrw" {
		off = s.rng.Int64N(blocks) * j.BS
		fileIdx = s.rng.IntN(j.NrFiles)
	} else {
		off = (off / int64(j.NrFiles)) % (blocks * j.BS)
		off -= off % j.BS
	}
	s.file, s.off = jr.files[fileIdx], off
	s.write = j.RW == "write" || j.RW == "randwrite" || ((j.RW == "rw" || j.RW == "randrw") && s.rng.IntN(100) >= j.RWMixRead)
	s.t0 = time.Now()
	return true
}

// finished records the I/O in flight, which ended with err; false if the
// slot must stop.
func (s *slot) finished(err error) bool {
	jr := s.jr
	lat := time.Since(s.t0)
	if err != nil {
		if jr.ctx.Err() == nil {
			jr.errc <- fmt.Errorf("job %s.%d: %w", jr.j.Name, jr.n, err)
			jr.cancel()
		}
		return false
	}
	// What completed inside the measured window counts, as fio counts it,
	// wherever it started: an I/O in flight at the deadline ends after it,
	// and counting its bytes over runtime seconds would over-report by the
	// whole queue (iodepth × bs per job); leaving out the I/Os in flight when
	// the window opened would under-report by as much.
	if end := s.t0.Add(lat); end.Before(jr.measureFrom) || jr.j.Runtime > 0 && end.After(jr.deadline) {
		return true
	}
	if s.write {
		jr.writes.add(lat, jr.j.BS)
	} else {
		jr.reads.add(lat, jr.j.BS)
	}
	return true
}

// loop does the slot's I/O one after the other until the job is done.
func (s *slot) loop() {
	defer s.jr.wg.Done()
	for s.next() {
		var err error
		if s.write {
			err = s.file.WriteAt(s.buf, s.off)
		} else {
			err = s.file.ReadAt(s.buf, s.off)
		}
		if !s.finished(err) {
			return
		}
	}
}

// issue starts the slot's next I/O, whose completion starts the one after.
func (s *slot) issue() {
	if s.next() {
		f := s.file.(asyncFile)
		var err error
		if s.write {
			err = f.StartWrite(s.buf, s.off, s.done)
		} else {
			err = f.StartRead(s.buf, s.off, s.done)
		}
		if err == nil {
			return
		}
		s.finished(err)
	}
	s.jr.wg.Done()
}

func (s *slot) complete(err error) {
	if s.finished(err) {
		s.issue()
	} else {
		s.jr.wg.Done()
	}
}

func (d *dirStats) count() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ios
}

// fioPercentiles are the percentiles fio reports by default.
var fioPercentiles = []float64{1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99}

type fioDirection struct {
	IOBytes  int64   `json:"io_bytes"`
	IOKBytes int64   `json:"io_kbytes"`
	BwBytes  float64 `json:"bw_bytes"`
	Bw       float64 `json:"bw"`
	IOPS     float64 `json:"iops"`
	Runtime  int64   `json:"runtime"`
	TotalIOs int64   `json:"total_ios"`
	LatNs    fioLat  `json:"lat_ns"`
	ClatNs   fioLat  `json:"clat_ns"`
}

type fioLat struct {
	Min        int64              `json:"min"`
	Max        int64              `json:"max"`
	Mean       float64            `json:"mean"`
	Stddev     float64            `json:"stddev"`
	N          int64              `json:"N"`
	Percentile map[string]float64 `json:"percentile,omitempty"`
}

func (d *dirStats) fio(elapsed time.Duration) fioDirection {
	if d == nil {
		return fioDirection{}
	}
	secs := elapsed.Seconds()
	mean := d.sum / float64(d.ios)
	std := math.Sqrt(math.Max(0, d.sumSq/float64(d.ios)-mean*mean))
	pct := map[string]float64{}
	for _, p := range fioPercentiles {
		pct[fmt.Sprintf("%.6f", p)] = float64(d.hist.ValueAtQuantile(p))
	}
	lat := fioLat{Min: d.min, Max: d.max, Mean: mean, Stddev: std, N: d.ios}
	clat := lat
	clat.Percentile = pct
	return fioDirection{IOBytes: d.bytes, IOKBytes: d.bytes >> 10, BwBytes: float64(d.bytes) / secs, Bw: float64(d.bytes) / secs / 1024,
		IOPS: float64(d.ios) / secs, Runtime: elapsed.Milliseconds(), TotalIOs: d.ios, LatNs: lat, ClatNs: clat}
}

// WriteJSON writes the result in fio's JSON layout (fields fio tooling reads).
func (r *Result) WriteJSON(w io.Writer) error {
	type job struct {
		Name    string            `json:"jobname"`
		GroupID int               `json:"groupid"`
		Error   int               `json:"error"`
		Options map[string]string `json:"job options"`
		Read    fioDirection      `json:"read"`
		Write   fioDirection      `json:"write"`
	}
	out := struct {
		Version string `json:"fio version"`
		Engine  string `json:"basin engine"`
		Jobs    []job  `json:"jobs"`
	}{Version: "basin-bench", Engine: r.Engine}
	for _, jr := range r.Jobs {
		j := jr.Job
		opts := map[string]string{"rw": j.RW, "bs": fmt.Sprint(j.BS), "iodepth": fmt.Sprint(j.IODepth), "numjobs": fmt.Sprint(j.NumJobs),
			"size": fmt.Sprint(j.Size), "nrfiles": fmt.Sprint(j.NrFiles), "runtime": fmt.Sprint(int(j.Runtime.Seconds())),
			"ramp_time": fmt.Sprint(int(j.Ramp.Seconds())), "direct": map[bool]string{true: "1", false: "0"}[j.Direct]}
		if j.RW == "rw" || j.RW == "randrw" {
			opts["rwmixread"] = fmt.Sprint(j.RWMixRead)
		}
		out.Jobs = append(out.Jobs, job{Name: j.Name, Options: opts, Read: jr.Read.fio(jr.Elapsed), Write: jr.Write.fio(jr.Elapsed)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteText writes a summary that reads like fio's.
func (r *Result) WriteText(w io.Writer) {
	for _, jr := range r.Jobs {
		j := jr.Job
		fmt.Fprintf(w, "%s: (g=0): rw=%s, bs=(R) %dB-%dB, (W) %dB-%dB, ioengine=%s, iodepth=%d\n", j.Name, j.RW, j.BS, j.BS, j.BS, j.BS, r.Engine, j.IODepth)
		fmt.Fprintf(w, "%s: (groupid=0, jobs=%d): err= 0\n", j.Name, j.NumJobs)
		for _, d := range []struct {
			name string
			s    *dirStats
		}{{"read", jr.Read}, {"write", jr.Write}} {
			if d.s == nil {
				continue
			}
			f := d.s.fio(jr.Elapsed)
			fmt.Fprintf(w, "  %s: IOPS=%s, BW=%.1fMiB/s (%.1fMB/s)(%.1fMiB/%dmsec)\n", d.name, humanIOPS(f.IOPS), f.BwBytes/(1<<20), f.BwBytes/1e6,
				float64(f.IOBytes)/(1<<20), f.Runtime)
			fmt.Fprintf(w, "     lat (usec): min=%d, max=%d, avg=%.2f, stdev=%.2f\n", f.LatNs.Min/1000, f.LatNs.Max/1000, f.LatNs.Mean/1000, f.LatNs.Stddev/1000)
			fmt.Fprintf(w, "    clat percentiles (usec):\n")
			for i, p := range fioPercentiles {
				if i%4 == 0 {
					fmt.Fprint(w, "     |")
				}
				fmt.Fprintf(w, " %6.2fth=[%5d],", p, int64(f.ClatNs.Percentile[fmt.Sprintf("%.6f", p)]/1000))
				if i%4 == 3 || i == len(fioPercentiles)-1 {
					fmt.Fprintln(w)
				}
			}
		}
	}
}

func humanIOPS(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
