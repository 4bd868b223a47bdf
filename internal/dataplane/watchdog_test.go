package dataplane

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
)

// fakeInFlight is a Ganesha's requests as the watchdog sees them: requests that
// started at given times (never finishing unless removed), and a finished
// counter the test moves.
type fakeInFlight struct {
	mu       sync.Mutex
	finished uint64
	started  map[uint64]time.Time // seq → start
	fail     error
	probeErr error
	probes   int
}

func (f *fakeInFlight) RequestsInFlight(ctx context.Context, olderThan time.Duration, after uint64) (nfs.InFlight, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nfs.InFlight{}, f.fail
	}
	r := nfs.InFlight{Finished: f.finished, Now: len(f.started)}
	for seq, t0 := range f.started {
		age := time.Since(t0)
		r.Oldest = max(r.Oldest, age)
		if age < olderThan {
			continue
		}
		r.Older++
		r.MaxSeq = max(r.MaxSeq, seq)
		if seq > after {
			r.New++
			if len(r.Requests) < 2 { // Ganesha describes 32; two here
				r.Requests = append(r.Requests, nfs.Request{Seq: seq, Age: age, Program: 100003, Version: 3, Proc: 21, V4Op: -1,
					ExportID: 7, Client: "10.99.0.201"})
			}
		}
	}
	return r, nil
}

func (f *fakeInFlight) probe(ctx context.Context) error {
	f.mu.Lock()
	f.probes++
	err := f.probeErr
	f.mu.Unlock()
	if err != nil {
		<-ctx.Done() // a wedged server never answers
		return err
	}
	return nil
}

func (f *fakeInFlight) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

type stuckCounts struct {
	mu           sync.Mutex
	found, stuck int
	calls        int
}

func (s *stuckCounts) on(found, stuck int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.found += found
	s.stuck = stuck
	s.calls++
}

func (s *stuckCounts) get() (found, stuck int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.found, s.stuck
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newTestWatchdog(f *fakeInFlight, counts *stuckCounts, logs *lockedBuf) *watchdog {
	return &watchdog{stuckAfter: 30 * time.Second, wedgedAfter: 60 * time.Second, bus: f, probe: f.probe,
		export:  func(id int32) string { return "/vol7" },
		onStuck: counts.on, log: slog.New(slog.NewTextHandler(logs, nil))}
}

// A request stuck on a server that keeps finishing others is logged once and
// counted once, and the server is left alone for as long as it progresses.
func TestWatchdogStuckButProgressing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeInFlight{started: map[uint64]time.Time{}}
		counts, logs := &stuckCounts{}, &lockedBuf{}
		w := newTestWatchdog(f, counts, logs)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.run(ctx) }()
		f.set(func() { f.started[5] = time.Now() })
		for range 120 { // ten minutes, a request finishing every 5 s
			time.Sleep(5 * time.Second)
			f.set(func() { f.finished++ })
		}
		select {
		case err := <-done:
			t.Fatalf("a progressing server was found wedged: %v", err)
		default:
		}
		if found, stuck := counts.get(); found != 1 || stuck != 1 {
			t.Fatalf("found %d stuck, %d stuck now; want 1, 1", found, stuck)
		}
		if n := strings.Count(logs.String(), "NFS request stuck"); n != 1 || !strings.Contains(logs.String(), `op="NFSv3 COMMIT" client=10.99.0.201 export=/vol7`) {
			t.Fatalf("logged %d times:\n%s", n, logs.String())
		}
		// Two more stuck at once, one of them past the two described: counted,
		// and the third summed up.
		f.set(func() { f.started[6], f.started[7], f.started[8] = time.Now(), time.Now(), time.Now() })
		time.Sleep(40 * time.Second)
		if found, stuck := counts.get(); found != 4 || stuck != 4 {
			t.Fatalf("found %d stuck, %d stuck now; want 4, 4", found, stuck)
		}
		if !strings.Contains(logs.String(), "more NFS requests stuck") {
			t.Fatalf("the requests past those described are not logged:\n%s", logs.String())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, stuck := counts.get(); stuck != 0 {
			t.Fatalf("%d stuck after the watch ended; want 0", stuck)
		}
	})
}

// An idle server (nothing finishes, nothing is asked) answers the NULL probe and
// is left alone; so is one whose DBus fails while its NFS answers.
func TestWatchdogIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeInFlight{started: map[uint64]time.Time{}}
		w := newTestWatchdog(f, &stuckCounts{}, &lockedBuf{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		go func() { time.Sleep(5 * time.Minute); f.set(func() { f.fail = errors.New("dbus: timeout") }) }()
		if err := w.run(ctx); err != nil {
			t.Fatalf("an idle server was found wedged: %v", err)
		}
		if f.probes < 100 {
			t.Fatalf("%d probes in 10 minutes", f.probes)
		}
	})
}

// A server that finishes nothing and answers no probe is wedged after
// WedgedAfter and at most one look more; also when its DBus does not answer
// either (a stopped process).
func TestWatchdogWedged(t *testing.T) {
	for _, dbusToo := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeInFlight{started: map[uint64]time.Time{1: time.Now()}, probeErr: errors.New("i/o timeout")}
			if dbusToo {
				f.fail = errors.New("dbus: context deadline exceeded")
			}
			w := newTestWatchdog(f, &stuckCounts{}, &lockedBuf{})
			t0 := time.Now()
			err := w.run(context.Background())
			took := time.Since(t0)
			if err == nil || !strings.Contains(err.Error(), "no request finished") {
				t.Fatalf("run = %v", err)
			}
			if took < w.wedgedAfter || took > w.wedgedAfter+2*w.every() {
				t.Fatalf("found wedged after %v; want between %v and %v", took, w.wedgedAfter, w.wedgedAfter+2*w.every())
			}
			t.Logf("DBus failing %v: wedged after %v: %v", dbusToo, took, err)
		})
	}
}
