package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/runner"
)

// Service is a daemon a sandbox runs and keeps running: Ganesha and what it needs
// (a private dbus-daemon, rpcbind) today, smbd and winbindd later. The supervisor
// knows services only through these fields.
type Service struct {
	Name string
	Argv []string
	// Env is added to the daemon's environment.
	Env []string
	// Caps is the capability bounding set the daemon keeps, in setpriv's syntax
	// ("-all,+chown,…"); "" keeps none.
	Caps string
	// Wrap, if set, runs before setpriv, with every capability, and must exec "$@"
	// (rpcbind's private netconfig is bound this way).
	Wrap []string
	// DependsOn names services that must be ready before this one starts. When one
	// of them exits, this one is restarted too, once they are ready again.
	DependsOn []string
	// Ready, if set, is polled after each start until it returns nil: until then
	// the daemon is not ready and its dependents wait. A daemon not ready within the
	// supervisor's ReadyTimeout is killed and started again.
	Ready func(ctx context.Context) error
	// AfterExit, if set, runs once the daemon's process has exited (a crash, a
	// restart or stop), before it is started again: it ends what the daemon left
	// behind (Samba's children keep its listening sockets).
	AfterExit func(pid int)
	// BeforeStart, if set, runs before every start of the daemon (not an
	// adoption): it writes what the daemon reads as it starts (Ganesha's
	// configuration with its exports). An error fails the start, which is
	// tried again with backoff.
	BeforeStart func() error
	// Reapply, if set, runs after every restart (not the first start), once Ready
	// passed and before the daemon counts as ready: it gives a daemon that starts
	// empty its state again (Ganesha's exports). ctx ends when the process does.
	Reapply func(ctx context.Context) error
	// Watch, if set, runs from the moment the daemon is ready until its process
	// ends (ctx ends then). It returns only to report the daemon wedged: alive
	// but serving nothing. The supervisor then kills it (SIGKILL) and starts it
	// again like a daemon that died, counting the restart as RestartWedged.
	Watch func(ctx context.Context) error
}

// supervisorOptions configure a supervisor; the zero value of each field but
// Starter has a default.
type supervisorOptions struct {
	Starter runner.Starter
	// Command turns a service into the command that runs it (the sandbox wraps it
	// in nsenter and setpriv); nil runs Argv with Env.
	Command func(Service) runner.Command
	// Output opens where a service's standard output and error go for one run; nil
	// discards them.
	Output func(service string) io.WriteCloser
	Log    *slog.Logger
	// ReadyTimeout bounds each start's wait for Ready (default 20 s).
	ReadyTimeout time.Duration
	// MinBackoff (100 ms) doubles after each crash up to MaxBackoff (5 s), and
	// resets once a run lasted ResetAfter (30 s).
	MinBackoff, MaxBackoff, ResetAfter time.Duration
	// StopTimeout is how long a daemon has between SIGTERM and SIGKILL (5 s).
	StopTimeout time.Duration
	// OnRestart, if set, is called each time a service is about to be started
	// again, with its name and why: RestartExited (it exited, failed to start or
	// was killed for not being ready), RestartWedged (its Watch found it wedged)
	// or RestartDependency.
	OnRestart func(service, reason string)
	// Adopt, if set, is asked once per service, as the supervisor starts, for a
	// process of that service already running (started by an earlier Basin,
	// which left its data plane serving). A process it returns is supervised as
	// if started here — probed until Ready, watched, waited for, restarted when
	// it exits — and is not started again. A service is adopted only if every
	// service it depends on was: one whose dependency had to be started afresh
	// is ended (SIGKILL) and started after it, as after a dependency's restart
	// (Ganesha registered with an rpcbind that is gone).
	Adopt func(service string) runner.Process
	// Started, if set, is called with each process started or adopted, before
	// it counts as running (the sandbox records it, to adopt it after a restart).
	Started func(service string, p runner.Process)
}

// Why a service is started again (supervisorOptions.OnRestart).
const (
	RestartExited     = "exited"
	RestartWedged     = "wedged"
	RestartDependency = "dependency"
	// RestartUpgrade: ended to run a new build of its program (restart).
	RestartUpgrade = "upgrade"
	// RestartConfig: ended to start with a changed configuration that takes
	// effect only at start (Ganesha's Kerberos identity).
	RestartConfig = "config"
)

// readyPoll is how often a supervisor polls a starting service's Ready.
const readyPoll = 50 * time.Millisecond

// supervisor runs services in dependency order and restarts them when they exit:
// with backoff when one crashes, at once (after its dependencies are ready again)
// when a dependency of it restarted.
type supervisor struct {
	opts     supervisorOptions
	services []Service            // dependencies first
	users    map[string][]string  // service → services that depend on it directly
	state    map[string]*svcState // guarded by mu

	// procCtx ends every process (stop, or the parent context ending); ctx,
	// below it, ends the loops, and is cancelled alone by detach, which leaves
	// the processes running.
	procCtx    context.Context
	procCancel context.CancelFunc
	ctx        context.Context
	cancel     context.CancelFunc

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced whenever a state changes
	stopping  bool
	detaching bool
	wg        sync.WaitGroup
}

type svcState struct {
	proc    runner.Process // nil while not running
	adopted runner.Process // a running process to adopt instead of the first start
	exited  chan struct{}  // closed once proc has exited
	ready   bool
	starts  int
	restart string // why it was ended to be started again (RestartDependency, RestartUpgrade): no crash
	wedged  bool   // its Watch found it wedged and it was killed
}

// newSupervisor checks services (unique names, known dependencies, no cycle) and
// orders them; nothing runs before start.
func newSupervisor(opts supervisorOptions, services []Service) (*supervisor, error) {
	if opts.Starter == nil {
		opts.Starter = runner.ExecStarter{}
	}
	if opts.Command == nil {
		opts.Command = func(s Service) runner.Command {
			return runner.Command{Name: s.Argv[0], Args: s.Argv[1:], Env: s.Env}
		}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&opts.ReadyTimeout, 20*time.Second)
	def(&opts.MinBackoff, 100*time.Millisecond)
	def(&opts.MaxBackoff, 5*time.Second)
	def(&opts.ResetAfter, 30*time.Second)
	def(&opts.StopTimeout, 5*time.Second)
	byName := map[string]Service{}
	for _, s := range services {
		if s.Name == "" || len(s.Argv) == 0 {
			return nil, fmt.Errorf("service %q: a name and a command are required", s.Name)
		}
		if _, dup := byName[s.Name]; dup {
			return nil, fmt.Errorf("service %q defined twice", s.Name)
		}
		byName[s.Name] = s
	}
	sup := &supervisor{opts: opts, users: map[string][]string{}, state: map[string]*svcState{}, changed: make(chan struct{})}
	// Depth-first topological order; 1 = visiting, 2 = done.
	mark := map[string]int{}
	var visit func(name string, from string) error
	visit = func(name, from string) error {
		s, ok := byName[name]
		switch {
		case !ok:
			return fmt.Errorf("service %q depends on unknown service %q", from, name)
		case mark[name] == 1:
			return fmt.Errorf("service %q: dependency cycle", name)
		case mark[name] == 2:
			return nil
		}
		mark[name] = 1
		for _, d := range s.DependsOn {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		mark[name] = 2
		sup.services = append(sup.services, s)
		return nil
	}
	for _, s := range services {
		if err := visit(s.Name, ""); err != nil {
			return nil, err
		}
		for _, d := range s.DependsOn {
			sup.users[d] = append(sup.users[d], s.Name)
		}
		sup.state[s.Name] = &svcState{}
	}
	return sup, nil
}

// start runs every service until stop or until ctx ends (which kills them), or
// until detach (which leaves them running). Services Adopt finds running are
// adopted first, dependencies before what depends on them.
func (s *supervisor) start(ctx context.Context) {
	s.procCtx, s.procCancel = context.WithCancel(ctx)
	s.ctx, s.cancel = context.WithCancel(s.procCtx)
	if s.opts.Adopt != nil {
		adopted := map[string]bool{}
		for _, svc := range s.services {
			p := s.opts.Adopt(svc.Name)
			if p == nil {
				continue
			}
			deps := true
			for _, d := range svc.DependsOn {
				deps = deps && adopted[d]
			}
			if !deps {
				s.opts.Log.Info("not adopting a daemon whose dependency is started afresh", "daemon", svc.Name, "pid", p.Pid())
				p.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
				p.Wait()                  //nolint:errcheck // only its end matters
				if svc.AfterExit != nil {
					svc.AfterExit(p.Pid())
				}
				continue
			}
			adopted[svc.Name] = true
			s.state[svc.Name].adopted = p
			s.opts.Log.Info("daemon adopted", "daemon", svc.Name, "pid", p.Pid())
		}
	}
	for _, svc := range s.services {
		s.wg.Add(1)
		go s.loop(svc)
	}
}

// broadcast wakes everything waiting for a state change; callers hold mu.
func (s *supervisor) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitReady waits until every service is ready.
func (s *supervisor) waitReady(ctx context.Context) error {
	for {
		s.mu.Lock()
		var waiting []string
		for _, svc := range s.services {
			if !s.state[svc.Name].ready {
				waiting = append(waiting, svc.Name)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("not ready: %v: %w", waiting, ctx.Err())
		case <-s.ctx.Done():
			return errors.New("supervisor stopped")
		}
	}
}

// loop keeps one service running.
func (s *supervisor) loop(svc Service) {
	defer s.wg.Done()
	log := s.opts.Log.With("daemon", svc.Name)
	st := s.state[svc.Name]
	backoff := s.opts.MinBackoff
	for {
		proc, exited, restart, err := s.launch(svc)
		if proc == nil && err == nil {
			return // stopping
		}
		started := time.Now()
		if err == nil {
			pctx, cancel := context.WithCancel(s.ctx)
			go s.settle(pctx, svc, proc, restart, log)
			var left bool
			err, left = s.wait(proc)
			cancel()
			if left {
				return // detached: the process runs on
			}
			if svc.AfterExit != nil {
				svc.AfterExit(proc.Pid())
			}
		}
		s.mu.Lock()
		if proc != nil {
			close(exited)
		}
		st.proc, st.exited, st.ready = nil, nil, false
		restartFor, wedged := st.restart, st.wedged
		st.restart, st.wedged = "", false
		stopping := s.stopping
		if !stopping {
			for _, u := range s.users[svc.Name] {
				s.restartUser(u)
			}
		}
		s.broadcast()
		s.mu.Unlock()
		if stopping || s.ctx.Err() != nil {
			return
		}
		if restartFor != "" {
			log.Info("daemon restarting", "reason", restartFor)
			s.restarted(svc.Name, restartFor)
			continue
		}
		if wedged {
			s.restarted(svc.Name, RestartWedged)
		} else {
			s.restarted(svc.Name, RestartExited)
		}
		if time.Since(started) >= s.opts.ResetAfter {
			backoff = s.opts.MinBackoff
		}
		log.Warn("daemon exited; restarting", "err", err, "backoff", backoff)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
	}
}

// wait waits until proc exits, and returns how. If the processes' context ends
// first, it kills proc and waits for it; if the supervisor detaches first, it
// returns at once with left set, proc still running.
func (s *supervisor) wait(proc runner.Process) (err error, left bool) {
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	select {
	case err := <-exited:
		return err, false
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	detaching := s.detaching
	s.mu.Unlock()
	if detaching {
		return nil, true
	}
	select {
	case err := <-exited:
		return err, false
	case <-s.procCtx.Done():
		proc.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
		return <-exited, false
	}
}

// restarted reports a restart to OnRestart.
func (s *supervisor) restarted(name, reason string) {
	if s.opts.OnRestart != nil {
		s.opts.OnRestart(name, reason)
	}
}

// launch waits until svc's dependencies are ready and starts it. It returns a nil
// process and error when the supervisor stops first.
func (s *supervisor) launch(svc Service) (runner.Process, chan struct{}, bool, error) {
	for {
		s.mu.Lock()
		if s.stopping || s.ctx.Err() != nil {
			s.mu.Unlock()
			return nil, nil, false, nil
		}
		ready := true
		for _, d := range svc.DependsOn {
			ready = ready && s.state[d].ready
		}
		if ready {
			// Started under mu: a dependency that exits from now on finds this
			// process registered and restarts it.
			st := s.state[svc.Name]
			if p := st.adopted; p != nil {
				st.adopted = nil
				st.starts++
				st.proc, st.exited = p, make(chan struct{})
				if s.opts.Started != nil {
					s.opts.Started(svc.Name, p)
				}
				exited := st.exited
				s.mu.Unlock()
				return p, exited, false, nil
			}
			if svc.BeforeStart != nil {
				if err := svc.BeforeStart(); err != nil {
					restart := st.starts > 0
					st.starts++
					s.mu.Unlock()
					return nil, nil, restart, fmt.Errorf("before start: %w", err)
				}
			}
			c := s.opts.Command(svc)
			var out io.WriteCloser
			if s.opts.Output != nil {
				out = s.opts.Output(svc.Name)
				c.Output = out
			}
			proc, err := s.opts.Starter.Start(s.procCtx, c)
			restart := st.starts > 0
			st.starts++
			if err != nil {
				s.mu.Unlock()
				if out != nil {
					out.Close()
				}
				return nil, nil, restart, err
			}
			st.proc, st.exited = proc, make(chan struct{})
			if s.opts.Started != nil {
				s.opts.Started(svc.Name, proc)
			}
			if out != nil {
				go func(exited chan struct{}) { <-exited; out.Close() }(st.exited)
			}
			exited := st.exited
			s.mu.Unlock()
			return proc, exited, restart, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-s.ctx.Done():
		}
	}
}

// restartUser ends service name because a dependency of it exited; its loop starts
// it again once its dependencies are ready. Callers hold mu.
func (s *supervisor) restartUser(name string) {
	st := s.state[name]
	st.ready = false
	if p := st.adopted; p != nil {
		// Adopted but not yet running here: what it relied on is gone.
		st.adopted = nil
		p.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
	}
	if st.proc == nil {
		return
	}
	st.restart = RestartDependency
	proc, exited := st.proc, st.exited
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.terminate(proc, exited)
	}()
}

// settle waits for a started process to be ready, re-applies its state after a
// restart, and marks it ready. A process not ready in time is killed.
func (s *supervisor) settle(ctx context.Context, svc Service, proc runner.Process, restart bool, log *slog.Logger) {
	launched := time.Now()
	if svc.Ready != nil {
		deadline := time.Now().Add(s.opts.ReadyTimeout)
		for {
			err := svc.Ready(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				log.Warn("daemon not ready in time; killing it", "err", err, "timeout", s.opts.ReadyTimeout)
				proc.Signal(syscall.SIGKILL) //nolint:errcheck // it is restarted either way
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(readyPoll):
			}
		}
	}
	if restart && svc.Reapply != nil {
		if err := svc.Reapply(ctx); err != nil {
			log.Warn("re-apply after a restart", "err", err)
		}
	}
	s.mu.Lock()
	st := s.state[svc.Name]
	ready := st.proc == proc && ctx.Err() == nil
	if ready {
		st.ready = true
		s.broadcast()
	}
	s.mu.Unlock()
	if ready {
		log.Debug("daemon ready", "after", time.Since(launched).Round(time.Millisecond), "restart", restart)
	}
	if !ready || svc.Watch == nil {
		return
	}
	err := svc.Watch(ctx)
	if err == nil || ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	if st.proc == proc {
		st.wedged = true
	}
	s.mu.Unlock()
	log.Error("daemon wedged; killing it to start it again", "err", err)
	proc.Signal(syscall.SIGKILL) //nolint:errcheck // it is restarted either way
}

// terminate sends SIGTERM, then SIGKILL after StopTimeout, and waits for the exit.
func (s *supervisor) terminate(proc runner.Process, exited chan struct{}) {
	proc.Signal(syscall.SIGTERM) //nolint:errcheck // gone already is fine
	select {
	case <-exited:
		return
	case <-time.After(s.opts.StopTimeout):
	}
	proc.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
	<-exited
}

// restart ends the service's running process (SIGTERM, SIGKILL after
// StopTimeout) for its loop to start it again at once, counted with reason,
// and waits until the new process is ready. It returns how long the service
// was not ready: from the moment it was told to stop.
func (s *supervisor) restart(ctx context.Context, name, reason string) (time.Duration, error) {
	s.mu.Lock()
	st := s.state[name]
	if st == nil || st.proc == nil || s.stopping {
		s.mu.Unlock()
		return 0, fmt.Errorf("%s is not running", name)
	}
	st.restart = reason
	st.ready = false
	old, exited := st.proc, st.exited
	s.broadcast()
	s.mu.Unlock()
	t0 := time.Now()
	s.terminate(old, exited)
	for {
		s.mu.Lock()
		ready := st.ready && st.proc != nil && st.proc != old
		changed := s.changed
		s.mu.Unlock()
		if ready {
			return time.Since(t0), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Since(t0), fmt.Errorf("%s not ready again: %w", name, ctx.Err())
		case <-s.ctx.Done():
			return time.Since(t0), errors.New("supervisor stopped")
		}
	}
}

// pid returns the pid of the service's running process, 0 if none.
func (s *supervisor) pid(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state[name]; st != nil && st.proc != nil {
		return st.proc.Pid()
	}
	return 0
}

// signal sends sig to the service's running process, if any.
func (s *supervisor) signal(name string, sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state[name]; st != nil && st.proc != nil {
		st.proc.Signal(sig) //nolint:errcheck // gone already is fine
	}
}

// stop ends the services, dependents before what they depend on (Ganesha before
// rpcbind, so it unregisters), and waits until every loop has returned. It is safe
// to call more than once, before start, and after detach (it then ends nothing).
func (s *supervisor) stop() {
	if s.ctx == nil {
		return
	}
	s.mu.Lock()
	if s.detaching {
		s.mu.Unlock()
		return // detached: the processes are no longer this supervisor's
	}
	s.stopping = true
	s.broadcast()
	s.mu.Unlock()
	for i := len(s.services) - 1; i >= 0; i-- {
		s.mu.Lock()
		st := s.state[s.services[i].Name]
		proc, exited := st.proc, st.exited
		if proc == nil && st.adopted != nil {
			// Adopted but never reached (stopped right after start).
			proc, st.adopted = st.adopted, nil
		}
		s.mu.Unlock()
		if proc != nil && exited != nil {
			s.terminate(proc, exited)
		} else if proc != nil {
			proc.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
			proc.Wait()                  //nolint:errcheck // only its end matters
		}
	}
	s.procCancel()
	s.wg.Wait()
}

// detach stops supervising and leaves every process running (Basin stops, its
// data plane serves on; the next Basin adopts them). It waits until every loop
// and probe has returned. Safe before start and after stop.
func (s *supervisor) detach() {
	if s.ctx == nil {
		return
	}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping, s.detaching = true, true
	s.broadcast()
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}
