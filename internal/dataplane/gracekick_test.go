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
)

// fakeGrace is a Ganesha's grace as the kick sees it: answers to InGrace in
// order (the last one repeated), and the kicks it got.
type fakeGrace struct {
	mu      sync.Mutex
	answers []graceAnswer
	kickErr error
	kicks   []time.Time
	asks    int
}

type graceAnswer struct {
	in  bool
	err error
}

func (f *fakeGrace) inGrace(ctx context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.answers[min(f.asks, len(f.answers)-1)]
	f.asks++
	return a.in, a.err
}

func (f *fakeGrace) kick(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kickErr != nil {
		return f.kickErr
	}
	f.kicks = append(f.kicks, time.Now())
	return nil
}

func TestGraceKick(t *testing.T) {
	in, out := graceAnswer{in: true}, graceAnswer{}
	down := graceAnswer{err: errors.New("dbus: not answering")}
	for _, c := range []struct {
		name      string
		answers   []graceAnswer
		kickErr   error
		cancelAt  time.Duration // 0: never
		wantLift  bool
		wantKicks int
		wantLog   string
	}{
		{name: "lifted after three kicks", answers: []graceAnswer{in, in, in, out}, wantLift: true, wantKicks: 3, wantLog: "grace lifted"},
		{name: "not in grace: no kick", answers: []graceAnswer{out}, wantLift: true},
		{name: "not answering, then in grace, then lifted", answers: []graceAnswer{down, down, in, out}, wantLift: true, wantKicks: 1, wantLog: "grace lifted"},
		{name: "a client never reclaims: kicks end at the bound", answers: []graceAnswer{in}, wantKicks: 61, wantLog: "giving up"}, // at 0 s, 1 s, … 60 s
		{name: "the Ganesha ends: kicks end at once", answers: []graceAnswer{in}, cancelAt: 2500 * time.Millisecond, wantKicks: 3},
		{name: "a failed kick is not counted, and the next goes on", answers: []graceAnswer{in, in, out}, kickErr: errors.New("rados: timed out"),
			wantLift: true, wantKicks: 0, wantLog: "rados: timed out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs bytes.Buffer
				f := &fakeGrace{answers: c.answers, kickErr: c.kickErr}
				g := &graceKicker{inGrace: f.inGrace, kick: f.kick, every: time.Second, bound: 60 * time.Second,
					log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if c.cancelAt > 0 {
					time.AfterFunc(c.cancelAt, cancel)
				}
				start := time.Now()
				lifted, kicks := g.run(ctx)
				took := time.Since(start)
				if lifted != c.wantLift || kicks != c.wantKicks || len(f.kicks) != c.wantKicks {
					t.Fatalf("lifted %v after %d kicks (%d made), want %v after %d", lifted, kicks, len(f.kicks), c.wantLift, c.wantKicks)
				}
				if c.wantLog != "" && !strings.Contains(logs.String(), c.wantLog) {
					t.Errorf("log %q does not say %q", logs.String(), c.wantLog)
				}
				for i := 1; i < len(f.kicks); i++ {
					if d := f.kicks[i].Sub(f.kicks[i-1]); d != time.Second {
						t.Errorf("kick %d came %v after the one before, want 1s", i, d)
					}
				}
				if took > g.bound {
					t.Errorf("kicked for %v, past the bound of %v", took, g.bound)
				}
				if c.cancelAt > 0 && took != c.cancelAt {
					t.Errorf("returned %v after the start, want at the cancel (%v)", took, c.cancelAt)
				}
			})
		})
	}
}
