package dataplane

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/basin-nas/basin/internal/runner"
)

// clockStarter records when each start was attempted.
type clockStarter struct {
	*runner.FakeStarter
	mu    sync.Mutex
	times map[string][]time.Time
}

func newClockStarter() *clockStarter {
	return &clockStarter{FakeStarter: &runner.FakeStarter{}, times: map[string][]time.Time{}}
}

func (c *clockStarter) Start(ctx context.Context, cmd runner.Command) (runner.Process, error) {
	c.mu.Lock()
	c.times[cmd.Name] = append(c.times[cmd.Name], time.Now())
	c.mu.Unlock()
	return c.FakeStarter.Start(ctx, cmd)
}

// gaps returns the time between consecutive starts of name.
func (c *clockStarter) gaps(name string) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	ts := c.times[name]
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]))
	}
	return out
}

func newTestSupervisor(t *testing.T, st runner.Starter, services ...Service) *supervisor {
	t.Helper()
	sup, err := newSupervisor(supervisorOptions{Starter: st}, services)
	if err != nil {
		t.Fatal(err)
	}
	sup.start(context.Background())
	t.Cleanup(sup.stop)
	return sup
}

var errCrash = errors.New("exit status 1")

const ms = time.Millisecond

// A daemon that cannot start is tried again with doubling backoff up to 5 s: in a
// minute of failures it is tried 17 times, not in a busy loop.
func TestSupervisorBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newClockStarter()
		cs.Fail = func(runner.Command) error { return errors.New("no such file or directory") }
		sup := newTestSupervisor(t, cs, Service{Name: "d", Argv: []string{"d"}})
		time.Sleep(time.Minute)
		sup.stop()
		want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms}
		for len(want) < 16 {
			want = append(want, 5*time.Second)
		}
		if got := cs.gaps("d"); !slices.Equal(got, want) {
			t.Fatalf("gaps between starts %v, want %v", got, want)
		}
	})
}

// A daemon that crashes is restarted with backoff; one that ran for a while before
// crashing is restarted quickly again.
func TestSupervisorRestartsCrashes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newClockStarter()
		newTestSupervisor(t, cs, Service{Name: "d", Argv: []string{"d"}})
		var crashes []time.Time
		crashAfter := func(d time.Duration) {
			t.Helper()
			p := cs.Running("d")
			for wait := time.Duration(0); p == nil; wait += ms {
				if wait > 10*time.Second {
					t.Fatalf("d is not running; gaps %v", cs.gaps("d"))
				}
				time.Sleep(ms)
				p = cs.Running("d")
			}
			time.Sleep(d)
			p.Exit(errCrash)
			crashes = append(crashes, time.Now())
		}
		crashAfter(time.Second)
		time.Sleep(99 * ms)
		if cs.Running("d") != nil {
			t.Fatal("restarted before its backoff")
		}
		crashAfter(0)
		crashAfter(0)
		crashAfter(40 * time.Second) // ran long: backoff starts over
		time.Sleep(time.Second)
		cs.mu.Lock()
		starts := cs.times["d"]
		cs.mu.Unlock()
		if len(starts) != len(crashes)+1 {
			t.Fatalf("%d starts after %d crashes", len(starts), len(crashes))
		}
		var got []time.Duration
		for i, c := range crashes {
			got = append(got, starts[i+1].Sub(c))
		}
		if want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 100 * ms}; !slices.Equal(got, want) {
			t.Fatalf("restarts %v after each crash, want %v", got, want)
		}
	})
}

// sandboxServices are the shape of a sandbox: ganesha depends on dbus and rpcbind;
// readiness is controlled by the test and re-applies are counted.
type testServices struct {
	ready    map[string]*atomic.Bool
	reapply  atomic.Int32
	services []Service
}

func newTestServices() *testServices {
	ts := &testServices{ready: map[string]*atomic.Bool{}}
	for _, name := range []string{"dbus", "rpcbind", "ganesha"} {
		ts.ready[name] = &atomic.Bool{}
		ts.ready[name].Store(true)
		s := Service{Name: name, Argv: []string{name}, Ready: func(context.Context) error {
			if !ts.ready[name].Load() {
				return errors.New("not yet")
			}
			return nil
		}}
		if name == "ganesha" {
			s.DependsOn = []string{"dbus", "rpcbind"}
			s.Reapply = func(context.Context) error { ts.reapply.Add(1); return nil }
		}
		ts.services = append(ts.services, s)
	}
	return ts
}

// When a dependency restarts, its dependents restart (after it is ready again) and
// re-apply their state; other services are left alone. A dependent's own restart
// touches nothing else.
func TestSupervisorRestartsDependents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &runner.FakeStarter{}
		ts := newTestServices()
		sup := newTestSupervisor(t, fs, ts.services...)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := ts.reapply.Load(); n != 0 {
			t.Fatalf("re-applied %d times on the first start", n)
		}
		dbus, rpcbind, ganesha := fs.Running("dbus"), fs.Running("rpcbind"), fs.Running("ganesha")

		ts.ready["dbus"].Store(false)
		dbus.Exit(errCrash)
		synctest.Wait()
		if !ganesha.Exited() || !slices.Contains(ganesha.Signals(), os.Signal(syscall.SIGTERM)) {
			t.Fatalf("ganesha not stopped when dbus died: signals %v", ganesha.Signals())
		}
		time.Sleep(time.Second) // dbus is restarted, but not ready: ganesha waits
		if fs.Running("dbus") == nil || fs.Running("ganesha") != nil {
			t.Fatalf("dbus running %v, ganesha running %v: ganesha must wait for dbus", fs.Running("dbus") != nil, fs.Running("ganesha") != nil)
		}
		ts.ready["dbus"].Store(true)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		if fs.Running("ganesha") == nil || ts.reapply.Load() != 1 {
			t.Fatalf("ganesha running %v, re-applied %d times; want running, once", fs.Running("ganesha") != nil, ts.reapply.Load())
		}
		if fs.Running("rpcbind") != rpcbind || len(fs.Starts("rpcbind")) != 1 {
			t.Fatal("rpcbind restarted with dbus")
		}

		fs.Running("ganesha").Exit(errCrash)
		time.Sleep(time.Second)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(fs.Starts("ganesha")) != 3 || len(fs.Starts("dbus")) != 2 || len(fs.Starts("rpcbind")) != 1 || ts.reapply.Load() != 2 {
			t.Fatalf("starts: ganesha %d dbus %d rpcbind %d, re-applies %d; want 3 2 1, 2",
				len(fs.Starts("ganesha")), len(fs.Starts("dbus")), len(fs.Starts("rpcbind")), ts.reapply.Load())
		}
	})
}

// Dependents start only once what they depend on is ready; a daemon never ready is
// killed after ReadyTimeout and started again.
func TestSupervisorReadinessGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &runner.FakeStarter{}
		ts := newTestServices()
		ts.ready["rpcbind"].Store(false)
		sup, err := newSupervisor(supervisorOptions{Starter: fs, ReadyTimeout: 10 * time.Second}, ts.services)
		if err != nil {
			t.Fatal(err)
		}
		sup.start(context.Background())
		defer sup.stop()
		time.Sleep(5 * time.Second)
		if fs.Running("rpcbind") == nil || fs.Running("dbus") == nil || len(fs.Starts("ganesha")) != 0 {
			t.Fatalf("ganesha started (%d) before rpcbind was ready", len(fs.Starts("ganesha")))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := sup.waitReady(ctx); err == nil {
			t.Fatal("ready without rpcbind")
		}
		time.Sleep(5 * time.Second) // past ReadyTimeout
		synctest.Wait()
		if first := fs.Starts("rpcbind")[0]; !first.Exited() || !slices.Contains(first.Signals(), os.Signal(syscall.SIGKILL)) {
			t.Fatal("rpcbind not killed after its ready timeout")
		}
		time.Sleep(time.Second)
		if n := len(fs.Starts("rpcbind")); n != 2 {
			t.Fatalf("rpcbind started %d times, want 2", n)
		}
		ts.ready["rpcbind"].Store(true)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(fs.Starts("ganesha")) != 1 || ts.reapply.Load() != 0 {
			t.Fatalf("ganesha started %d times, re-applied %d", len(fs.Starts("ganesha")), ts.reapply.Load())
		}
	})
}

// stop ends every daemon, dependents first, kills one that ignores SIGTERM, and
// starts nothing afterwards.
func TestSupervisorStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &runner.FakeStarter{IgnoreTerm: true}
		ts := newTestServices()
		sup := newTestSupervisor(t, fs, ts.services...)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		var order []string
		var mu sync.Mutex
		for _, p := range fs.Started() {
			go func() {
				p.Wait()
				mu.Lock()
				order = append(order, p.Cmd.Name)
				mu.Unlock()
			}()
		}
		start := time.Now()
		sup.stop()
		synctest.Wait()
		if d := time.Since(start); d != 15*time.Second {
			t.Fatalf("stop took %v; want 3 × the 5 s SIGTERM grace", d)
		}
		if order[0] != "ganesha" || len(order) != 3 {
			t.Fatalf("exit order %v, want ganesha first", order)
		}
		for _, p := range fs.Started() {
			if !p.Exited() || !slices.Equal(p.Signals(), []os.Signal{syscall.SIGTERM, syscall.SIGKILL}) {
				t.Fatalf("%s: exited %v, signals %v", p.Cmd.Name, p.Exited(), p.Signals())
			}
		}
		time.Sleep(time.Minute)
		if n := len(fs.Started()); n != 3 {
			t.Fatalf("%d processes started, want 3: stop must start nothing", n)
		}
		sup.stop() // twice is fine
	})
}

// Bad service sets are refused.
func TestSupervisorRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		services []Service
	}{
		{"unknown dependency", []Service{{Name: "a", Argv: []string{"a"}, DependsOn: []string{"b"}}}},
		{"cycle", []Service{{Name: "a", Argv: []string{"a"}, DependsOn: []string{"b"}}, {Name: "b", Argv: []string{"b"}, DependsOn: []string{"a"}}}},
		{"duplicate", []Service{{Name: "a", Argv: []string{"a"}}, {Name: "a", Argv: []string{"a"}}}},
		{"no command", []Service{{Name: "a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newSupervisor(supervisorOptions{}, tc.services); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// restartCounts counts the restarts a supervisor reports, by "service reason".
type restartCounts struct {
	mu  sync.Mutex
	got map[string]int
}

func (r *restartCounts) add(service, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]int{}
	}
	r.got[service+" "+reason]++
}

func (r *restartCounts) get() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.got)
}

// Every restart is reported with its reason: a daemon that crashed "exited", its
// dependents "dependency"; first starts and stop report nothing.
func TestSupervisorReportsRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &runner.FakeStarter{}
		ts := newTestServices()
		restarts := &restartCounts{}
		sup, err := newSupervisor(supervisorOptions{Starter: fs, OnRestart: restarts.add}, ts.services)
		if err != nil {
			t.Fatal(err)
		}
		sup.start(context.Background())
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		fs.Running("dbus").Exit(errCrash)
		time.Sleep(time.Second)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		fs.Running("ganesha").Exit(errCrash)
		time.Sleep(time.Second)
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		sup.stop()
		want := map[string]int{"dbus exited": 1, "ganesha dependency": 1, "ganesha exited": 1}
		if got := restarts.get(); !maps.Equal(got, want) {
			t.Fatalf("restarts reported %v, want %v", got, want)
		}
	})
}

// A daemon whose Watch reports it wedged is killed and started again, its state
// re-applied and the restart reported as "wedged"; its Watch runs only while it
// is ready and ends with its process.
func TestSupervisorKillsWedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &runner.FakeStarter{}
		ts := newTestServices()
		var wedge atomic.Bool
		var watching atomic.Int32
		ts.services[2].Watch = func(ctx context.Context) error {
			watching.Add(1)
			defer watching.Add(-1)
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				if wedge.CompareAndSwap(true, false) {
					return errors.New("no request finished for 60s")
				}
			}
		}
		restarts := &restartCounts{}
		sup, err := newSupervisor(supervisorOptions{Starter: fs, OnRestart: restarts.add}, ts.services)
		if err != nil {
			t.Fatal(err)
		}
		sup.start(context.Background())
		defer sup.stop()
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute) // healthy: left alone
		first := fs.Running("ganesha")
		if len(fs.Starts("ganesha")) != 1 || watching.Load() != 1 {
			t.Fatalf("a healthy daemon: %d starts, %d watches", len(fs.Starts("ganesha")), watching.Load())
		}
		wedge.Store(true)
		time.Sleep(1500 * ms)
		synctest.Wait()
		if !first.Exited() || !slices.Equal(first.Signals(), []os.Signal{syscall.SIGKILL}) {
			t.Fatalf("the wedged daemon: exited %v, signals %v; want killed", first.Exited(), first.Signals())
		}
		if err := sup.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if len(fs.Starts("ganesha")) != 2 || ts.reapply.Load() != 1 || watching.Load() != 1 {
			t.Fatalf("after the kill: %d starts, %d re-applies, %d watches; want 2, 1, 1", len(fs.Starts("ganesha")), ts.reapply.Load(), watching.Load())
		}
		fs.Running("ganesha").Exit(errCrash) // a crash ends its watch
		synctest.Wait()
		if watching.Load() != 0 {
			t.Fatal("the watch outlived its process")
		}
		time.Sleep(time.Second)
		sup.stop()
		if got, want := restarts.get(), map[string]int{"ganesha wedged": 1, "ganesha exited": 1}; !maps.Equal(got, want) {
			t.Fatalf("restarts reported %v, want %v", got, want)
		}
	})
}

// runningElsewhere starts processes of the named commands on a starter of their
// own: daemons an earlier Basin left running, for a supervisor to adopt.
func runningElsewhere(t *testing.T, names ...string) (*runner.FakeStarter, map[string]runner.Process) {
	t.Helper()
	other := &runner.FakeStarter{}
	procs := map[string]runner.Process{}
	for _, n := range names {
		p, err := other.Start(context.Background(), runner.Command{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		procs[n] = p
	}
	return other, procs
}

// sandboxLike are three services shaped like a sandbox's: ganesha depends on
// dbus and rpcbind and gets its state re-applied after a restart.
func sandboxLike(reapplied *atomic.Int32) []Service {
	return []Service{
		{Name: "dbus", Argv: []string{"dbus"}},
		{Name: "rpcbind", Argv: []string{"rpcbind"}},
		{Name: "ganesha", Argv: []string{"ganesha"}, DependsOn: []string{"dbus", "rpcbind"},
			Reapply: func(context.Context) error { reapplied.Add(1); return nil }},
	}
}

// A supervisor that finds its daemons running (Basin restarted, its data plane
// served on) adopts them: nothing is started, nothing re-applied, and each is
// reported as started; an adopted daemon that exits later is restarted like any
// other, with its state re-applied.
func TestSupervisorAdopts(t *testing.T) {
	_, running := runningElsewhere(t, "dbus", "rpcbind", "ganesha")
	st := &runner.FakeStarter{}
	var reapplied atomic.Int32
	var mu sync.Mutex
	started := map[string]runner.Process{}
	sup, err := newSupervisor(supervisorOptions{Starter: st,
		Adopt: func(name string) runner.Process { return running[name] },
		Started: func(name string, p runner.Process) {
			mu.Lock()
			started[name] = p
			mu.Unlock()
		}}, sandboxLike(&reapplied))
	if err != nil {
		t.Fatal(err)
	}
	sup.start(context.Background())
	defer sup.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sup.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(st.Started()); n != 0 {
		t.Fatalf("%d processes started; want every daemon adopted", n)
	}
	if n := reapplied.Load(); n != 0 {
		t.Fatalf("state re-applied %d times to an adopted daemon", n)
	}
	mu.Lock()
	if !maps.Equal(started, running) {
		t.Fatalf("reported started %v, want the adopted %v", started, running)
	}
	mu.Unlock()
	for name, p := range running {
		if sup.pid(name) != p.Pid() {
			t.Fatalf("%s: pid %d, want the adopted %d", name, sup.pid(name), p.Pid())
		}
	}
	running["ganesha"].(*runner.FakeProcess).Exit(errCrash)
	for deadline := time.Now().Add(10 * time.Second); st.Running("ganesha") == nil || !sup.isReady("ganesha"); {
		if time.Now().After(deadline) {
			t.Fatal("the adopted ganesha was not restarted after it exited")
		}
		time.Sleep(5 * ms)
	}
	if n := reapplied.Load(); n != 1 {
		t.Fatalf("state re-applied %d times after the adopted ganesha's restart, want 1", n)
	}
	if len(st.Starts("dbus")) != 0 || len(st.Starts("rpcbind")) != 0 {
		t.Fatal("ganesha's exit restarted what it depends on")
	}
}

// A daemon is adopted only with what it depends on: when rpcbind had to be
// started afresh, the Ganesha found running (registered with an rpcbind that is
// gone) is killed and started again after it.
func TestSupervisorAdoptsOnlyOverAdoptedDependencies(t *testing.T) {
	_, running := runningElsewhere(t, "dbus", "ganesha")
	st := &runner.FakeStarter{}
	var reapplied atomic.Int32
	sup, err := newSupervisor(supervisorOptions{Starter: st,
		Adopt: func(name string) runner.Process {
			if p, ok := running[name]; ok {
				return p
			}
			return nil
		}}, sandboxLike(&reapplied))
	if err != nil {
		t.Fatal(err)
	}
	sup.start(context.Background())
	defer sup.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sup.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	g := running["ganesha"].(*runner.FakeProcess)
	if !g.Exited() || !slices.Contains(g.Signals(), os.Signal(syscall.SIGKILL)) {
		t.Fatalf("the ganesha found running was not killed: signals %v", g.Signals())
	}
	if running["dbus"].(*runner.FakeProcess).Exited() {
		t.Fatal("the adopted dbus was ended")
	}
	for _, name := range []string{"rpcbind", "ganesha"} {
		if st.Running(name) == nil {
			t.Fatalf("%s was not started", name)
		}
	}
	if st.Running("dbus") != nil {
		t.Fatal("dbus was started although one was adopted")
	}
}

// Detaching leaves every daemon running, unsignalled, and returns once the
// supervisor's loops and probes have; stop after it ends nothing.
func TestSupervisorDetach(t *testing.T) {
	st := &runner.FakeStarter{}
	var reapplied atomic.Int32
	watching := make(chan struct{})
	svcs := sandboxLike(&reapplied)
	svcs[2].Watch = func(ctx context.Context) error {
		close(watching)
		<-ctx.Done()
		return nil
	}
	sup, err := newSupervisor(supervisorOptions{Starter: st}, svcs)
	if err != nil {
		t.Fatal(err)
	}
	sup.start(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sup.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	<-watching
	done := make(chan struct{})
	go func() { sup.detach(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("detach did not return")
	}
	sup.stop()
	for _, p := range st.Started() {
		if p.Exited() || len(p.Signals()) > 0 {
			t.Fatalf("%s after detach: exited %v, signals %v", p.Cmd.Name, p.Exited(), p.Signals())
		}
	}
	if n := len(st.Started()); n != 3 {
		t.Fatalf("%d processes started, want 3", n)
	}
}
