package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/perf"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		j    Job
		want string
	}{
		{Job{RW: "sideways"}, "--rw"},
		{Job{BS: 100}, "--bs"},
		{Job{BS: 1000, Direct: true}, "multiple of 512"},
		{Job{IODepth: 5000}, "--iodepth"},
		{Job{Size: 100, BS: 4096}, "--size"},
		{Job{TimeBased: true}, "--runtime"},
		{Job{Runtime: 2 * time.Hour}, "at most"},
		{Job{RW: "randrw", RWMixRead: 101}, "rwmixread"},
	} {
		j := tc.j
		if err := j.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.j, err, tc.want)
		}
	}
	j := Job{RW: "randrw"}
	if err := j.Validate(); err != nil || j.BS != 4096 || j.IODepth != 1 || j.RWMixRead != 50 || j.Size != 1<<30 {
		t.Fatalf("defaults: %+v %v", j, err)
	}
}

func TestRefusesToLeaveTheTarget(t *testing.T) {
	dir := t.TempDir()
	_, err := Run(context.Background(), Local{Directory: dir}, Job{Name: "../escape", Size: 1 << 20, Runtime: 10 * time.Millisecond}, nil)
	if err == nil || !strings.Contains(err.Error(), "path") {
		t.Fatalf("a name with a path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.0.0")); err == nil {
		t.Fatal("a file was written outside the directory")
	}
	if _, err := Run(context.Background(), Local{}, Job{Size: 1 << 20}, nil); err == nil {
		t.Fatal("no target accepted")
	}
}

// A size-bounded run moves exactly size × nrfiles × numjobs bytes, into the files.
func TestSizeBoundedWrite(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(context.Background(), Local{Directory: dir}, Job{Name: "w", RW: "write", BS: 64 << 10, Size: 4 << 20, NrFiles: 2, NumJobs: 2, IODepth: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := res.Jobs[0].Write
	if w == nil || w.bytes != 2*2*4<<20 || res.Jobs[0].Read != nil {
		t.Fatalf("wrote %+v", w)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "w.*.*"))
	if len(files) != 4 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		if fi, _ := os.Stat(f); fi.Size() != 4<<20 {
			t.Fatalf("%s has %d bytes", f, fi.Size())
		}
	}
}

// Output in both forms is what fio's parsers read, and iodepth I/Os really were in
// flight: Little's law holds on the measured latency.
func TestOutputAndDepth(t *testing.T) {
	dir := t.TempDir()
	j := Job{Name: "rr", RW: "randread", BS: 4096, Size: 8 << 20, IODepth: 8, Runtime: 500 * time.Millisecond, TimeBased: true, Direct: true}
	res, err := Run(context.Background(), Local{Directory: dir}, j, nil)
	if err != nil && strings.Contains(err.Error(), "invalid argument") {
		t.Skip("the test directory's filesystem has no O_DIRECT")
	}
	if err != nil {
		t.Fatal(err)
	}
	var js, txt bytes.Buffer
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	res.WriteText(&txt)
	a, err := perf.Parse(js.Bytes())
	if err != nil {
		t.Fatalf("perf cannot read basin bench JSON: %v\n%s", err, js.String())
	}
	b, err := perf.Parse(txt.Bytes())
	if err != nil {
		t.Fatalf("perf cannot read basin bench text: %v\n%s", err, txt.String())
	}
	ra, rb := a.Jobs[0].Read, b.Jobs[0].Read
	if a.Jobs[0].IODepth != 8 || b.Jobs[0].IODepth != 8 || ra == nil || rb == nil || math.Abs(ra.IOPS-rb.IOPS) > 0.01*ra.IOPS+1 {
		t.Fatalf("JSON %+v vs text %+v", a.Jobs[0], b.Jobs[0])
	}
	if len(ra.Lat.Percentiles) != len(fioPercentiles) || ra.Lat.Percentiles["99.000000"] < ra.Lat.Percentiles["50.000000"] {
		t.Fatalf("percentiles %v", ra.Lat.Percentiles)
	}
	inFlight := ra.IOPS * ra.Lat.Mean / 1e9
	if inFlight < 0.75*8 || inFlight > 8.5 {
		t.Fatalf("IOPS × mean latency = %.2f I/Os in flight, want about 8", inFlight)
	}
}

func TestMixedReadWrite(t *testing.T) {
	res, err := Run(context.Background(), Local{Directory: t.TempDir()}, Job{RW: "randrw", RWMixRead: 70, BS: 4096, Size: 4 << 20, Runtime: 300 * time.Millisecond, TimeBased: true, IODepth: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, w := res.Jobs[0].Read, res.Jobs[0].Write
	if r == nil || w == nil {
		t.Fatal("a mixed run did only one direction")
	}
	share := float64(r.ios) / float64(r.ios+w.ios)
	if share < 0.6 || share > 0.8 {
		t.Fatalf("read share %.2f, want about 0.70", share)
	}
}

func TestSweep(t *testing.T) {
	pts, err := Sweep(context.Background(), Local{Directory: t.TempDir()}, Job{Size: 2 << 20, Runtime: 40 * time.Millisecond, TimeBased: true, IODepth: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 22 || pts[0].ReadShare != 100 || pts[10].ReadShare != 0 || pts[11].Pattern != "64 KiB sequential" {
		t.Fatalf("points = %+v", pts)
	}
	for _, p := range pts {
		if p.IOPS <= 0 || p.MiBps <= 0 {
			t.Fatalf("empty point %+v", p)
		}
	}
	var svg bytes.Buffer
	if err := WriteSweepSVG(&svg, pts, "a <test> & chart"); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Polylines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	if err := xml.Unmarshal(svg.Bytes(), &doc); err != nil {
		t.Fatalf("SVG is not well-formed: %v", err)
	}
	if len(doc.Polylines) != 2 || len(strings.Fields(doc.Polylines[0].Points)) != 11 {
		t.Fatalf("chart has %d lines", len(doc.Polylines))
	}
	var table bytes.Buffer
	WriteSweepTable(&table, pts)
	if lines := strings.Split(strings.TrimSpace(table.String()), "\n"); len(lines) != 23 {
		t.Fatalf("table has %d lines", len(lines))
	}
}

func TestParseNFSURL(t *testing.T) {
	host, dir, err := ParseNFSURL("nfs://10.99.0.2/vol1/sub")
	if err != nil || host != "10.99.0.2" || dir != "/vol1/sub" {
		t.Fatalf("%q %q %v", host, dir, err)
	}
	for _, bad := range []string{"", "http://h/x", "nfs:///x", "nfs://h", "nfs://h/", "nfs://h:2049/x", "nfs://h/x?version=4"} {
		if _, _, err := ParseNFSURL(bad); err == nil || !strings.Contains(err.Error(), "--url") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParseSMBURL(t *testing.T) {
	addr, share, dir, err := ParseSMBURL("smb://10.99.0.2/vol1/a/b")
	if err != nil || addr != "10.99.0.2:445" || share != "vol1" || dir != `a\b` {
		t.Fatalf("%q %q %q %v", addr, share, dir, err)
	}
	if addr, _, _, _ := ParseSMBURL("smb://127.0.0.1:4455/s"); addr != "127.0.0.1:4455" {
		t.Fatal(addr)
	}
	for _, bad := range []string{"", "nfs://h/x", "smb://h", "smb://h/", "smb://user:pw@h/x", "smb://h/x?seal=1"} {
		if _, _, _, err := ParseSMBURL(bad); err == nil || !strings.Contains(err.Error(), "--url") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The frame counter finds frames however the stream is cut, and tells encrypted
// (0xFD 'S' 'M' 'B') frames from plain ones.
func TestFramer(t *testing.T) {
	frame := func(first byte, n int) []byte {
		b := []byte{0, byte(n >> 16), byte(n >> 8), byte(n)}
		body := make([]byte, n)
		body[0] = first
		return append(b, body...)
	}
	stream := append(append(frame(0xFE, 70), frame(0xFD, 5000)...), frame(0xFD, 1)...)
	for _, cut := range []int{1, 3, 4, 7, 100, len(stream)} {
		var f framer
		frames, enc, plain := 0, 0, 0
		for p := stream; len(p) > 0; {
			k := min(cut, len(p))
			frames += f.feed(p[:k], func(b byte) {
				if b == 0xFD {
					enc++
				} else {
					plain++
				}
			})
			p = p[k:]
		}
		if frames != 3 || enc != 2 || plain != 1 {
			t.Errorf("cut %d: %d frames, %d encrypted, %d plain; want 3, 2, 1", cut, frames, enc, plain)
		}
	}
}

// slowEngine's files take d (default 100 ms) per I/O.
type slowEngine struct{ d time.Duration }

type slowFile struct{ d time.Duration }

func (e slowEngine) Name() string { return "slow" }
func (e slowEngine) Open(_ context.Context, j *Job, _ int) ([]File, error) {
	fs := make([]File, j.NrFiles)
	for i := range fs {
		fs[i] = slowFile{d: cmp.Or(e.d, 100*time.Millisecond)}
	}
	return fs, nil
}
func (f slowFile) ReadAt(p []byte, _ int64) error  { time.Sleep(f.d); return nil }
func (f slowFile) WriteAt(p []byte, _ int64) error { time.Sleep(f.d); return nil }
func (slowFile) Close() error                      { return nil }

// A time-based run counts only the I/Os that completed within its runtime: with
// 100 ms per I/O and 250 ms of runtime, each of the 4 workers completes at most 2
// (at 100 and 200 ms); its third, issued at 200 ms, ends after the deadline.
// Counting it over 250 ms would report 1.5× what the target did. The same holds
// for an engine that starts I/O and calls back (as the NFS engine does).
func TestTimeBasedCountsOnlyWithinRuntime(t *testing.T) {
	for _, e := range []Engine{slowEngine{}, asyncSlowEngine{}} {
		res, err := Run(context.Background(), e, Job{Name: "s", RW: "read", BS: 4096, Size: 1 << 20, IODepth: 4,
			Runtime: 250 * time.Millisecond, TimeBased: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Jobs[0].Read; r == nil || r.ios > 2*4 || r.ios == 0 {
			t.Fatalf("%s: counted %+v I/Os; want 1 to 8 (at most 2 per worker complete within 250 ms)", e.Name(), r)
		}
	}
}

// An I/O counts when it completes inside the measured window, wherever it
// started: with 100 ms per I/O, a 50 ms ramp and 300 ms of runtime, each of the
// 4 workers completes 3 I/Os in the window (at 100, 200 and 300 ms), the first
// of them started during the ramp. That is the rate the target ran at (4 I/Os
// per 100 ms); leaving out the I/Os that started before the window too would
// report 2 per worker, 0.67× of it.
func TestTimeBasedCountsWhatCompletesInTheWindow(t *testing.T) {
	for _, e := range []Engine{slowEngine{}, asyncSlowEngine{}} {
		res, err := Run(context.Background(), e, Job{Name: "s", RW: "read", BS: 4096, Size: 1 << 20, IODepth: 4,
			Ramp: 50 * time.Millisecond, Runtime: 300 * time.Millisecond, TimeBased: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Jobs[0].Read; r == nil || r.ios != 3*4 {
			t.Fatalf("%s: counted %+v I/Os; want 12 (3 per worker complete within the window)", e.Name(), r)
		}
	}
}

// asyncSlowEngine's files are slowFile started asynchronously: each I/O completes 100 ms
// later, on a timer's goroutine.
type asyncSlowEngine struct{}

type asyncSlowFile struct{ slowFile }

func (asyncSlowEngine) Name() string { return "slow-async" }
func (asyncSlowEngine) Open(_ context.Context, j *Job, _ int) ([]File, error) {
	fs := make([]File, j.NrFiles)
	for i := range fs {
		fs[i] = asyncSlowFile{}
	}
	return fs, nil
}
func (asyncSlowFile) StartRead(_ []byte, _ int64, done func(error)) error {
	time.AfterFunc(100*time.Millisecond, func() { done(nil) })
	return nil
}
func (f asyncSlowFile) StartWrite(p []byte, off int64, done func(error)) error {
	return f.StartRead(p, off, done)
}

// memEngine keeps its files in memory and completes their I/O asynchronously,
// each on a goroutine of its own; it counts what it was asked to do.
type memEngine struct {
	mu       sync.Mutex
	files    map[string]*memFile
	syncIOs  atomic.Int64 // ReadAt and WriteAt calls: none when Run drives I/O asynchronously
	failAt   int64        // the I/O (counting from 1) whose completion fails; 0 for none
	startErr bool         // and fails to start instead
	started  atomic.Int64
}

type memFile struct {
	e      *memEngine
	mu     sync.Mutex
	data   []byte
	writes map[int64]int // writes per offset
}

func (e *memEngine) Name() string { return "mem" }
func (e *memEngine) Open(_ context.Context, j *Job, n int) ([]File, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var fs []File
	for i := range j.NrFiles {
		name := fmt.Sprintf("%s.%d.%d", j.Name, n, i)
		if e.files[name] == nil {
			e.files[name] = &memFile{e: e, data: make([]byte, j.Size), writes: map[int64]int{}}
		}
		fs = append(fs, e.files[name])
	}
	return fs, nil
}
func (f *memFile) ReadAt(p []byte, off int64) error  { f.e.syncIOs.Add(1); return nil }
func (f *memFile) WriteAt(p []byte, off int64) error { f.e.syncIOs.Add(1); return nil }
func (f *memFile) Close() error                      { return nil }
func (f *memFile) start(p []byte, off int64, write bool, done func(error)) error {
	n := f.e.started.Add(1)
	if n == f.e.failAt && f.e.startErr {
		return errors.New("mem: cannot start")
	}
	go func() {
		f.mu.Lock()
		if write {
			copy(f.data[off:], p)
			f.writes[off]++
		} else {
			copy(p, f.data[off:])
		}
		f.mu.Unlock()
		if n == f.e.failAt {
			done(errors.New("mem: I/O error"))
			return
		}
		done(nil)
	}()
	return nil
}
func (f *memFile) StartRead(p []byte, off int64, done func(error)) error {
	return f.start(p, off, false, done)
}
func (f *memFile) StartWrite(p []byte, off int64, done func(error)) error {
	return f.start(p, off, true, done)
}

// With an engine that starts I/O and calls back, Run keeps iodepth I/Os in
// flight from completions, with no goroutine per worker: a size-bounded run
// writes every block of every file exactly once, and reads read what was
// written.
func TestAsyncEngine(t *testing.T) {
	e := &memEngine{files: map[string]*memFile{}}
	j := Job{Name: "w", RW: "write", BS: 4096, Size: 1 << 20, NrFiles: 2, NumJobs: 2, IODepth: 8}
	res, err := Run(context.Background(), e, j, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := res.Jobs[0].Write; w == nil || w.bytes != 2*2*1<<20 || w.ios != 2*2*256 {
		t.Fatalf("wrote %+v", w)
	}
	if len(e.files) != 4 {
		t.Fatalf("files %v", e.files)
	}
	for name, f := range e.files {
		for off := int64(0); off < j.Size; off += j.BS {
			if f.writes[off] != 1 {
				t.Fatalf("%s: block at %d written %d times", name, off, f.writes[off])
			}
		}
		if bytes.Count(f.data, []byte{0}) > len(f.data)/100 {
			t.Fatalf("%s: the workers' data did not land", name)
		}
	}
	j.RW, j.Runtime, j.TimeBased = "randread", 50*time.Millisecond, true
	res, err = Run(context.Background(), e, j, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Jobs[0].Read; r == nil || r.ios == 0 || res.Jobs[0].Write != nil {
		t.Fatalf("read %+v", r)
	}
	if n := e.syncIOs.Load(); n != 0 {
		t.Fatalf("%d I/Os went through ReadAt or WriteAt", n)
	}
}

// An I/O that fails, on completion or at its start, ends the run with an
// error naming the job.
func TestAsyncEngineErrors(t *testing.T) {
	for _, startErr := range []bool{false, true} {
		e := &memEngine{files: map[string]*memFile{}, failAt: 50, startErr: startErr}
		_, err := Run(context.Background(), e, Job{Name: "f", RW: "randwrite", BS: 4096, Size: 1 << 20, IODepth: 4, Runtime: time.Minute, TimeBased: true}, nil)
		want := "mem: I/O error"
		if startErr {
			want = "mem: cannot start"
		}
		if err == nil || !strings.Contains(err.Error(), "job f.0: "+want) {
			t.Errorf("start error %v: %v, want %q", startErr, err, want)
		}
	}
}

// After a ramp, the I/Os in flight when the window opens count once they
// complete: with 200 ms per I/O, a 300 ms ramp and 450 ms of runtime (the window
// is [300, 750] ms), each of the 4 workers completes 2 in it (at 400 and 600 ms).
// Counting by start time would keep only the one started at 400 ms.
func TestRampCountsWhatCompletesInTheWindow(t *testing.T) {
	res, err := Run(context.Background(), slowEngine{d: 200 * time.Millisecond}, Job{Name: "s", RW: "read", BS: 4096, Size: 1 << 20, IODepth: 4,
		Ramp: 300 * time.Millisecond, Runtime: 450 * time.Millisecond, TimeBased: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Jobs[0].Read; r == nil || r.ios < 6 || r.ios > 8 {
		t.Fatalf("counted %+v I/Os; want 6 to 8 (2 per worker complete within the window)", r)
	}
}
