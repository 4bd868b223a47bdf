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
}

// Why a service is started again (supervisorOptions.OnRestart).
const (
	RestartExited     = "exited"
	RestartWedged     = "wedged"
	RestartDependency = "dependency"
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

	ctx    context.Context // ends every process and loop; cancelled by stop
	cancel context.CancelFunc

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever a state changes
	stopping bool
	wg       sync.WaitGroup
}

type svcState struct {
	proc    runner.Process // nil while not running
	exited  chan struct{}  // closed once proc has exited
	ready   bool
	starts  int
	restart bool // a dependency restarted: this exit is no crash
	wedged  bool // its Watch found it wedged and it was killed
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

// start runs every service until stop or until ctx ends (which kills them).
func (s *supervisor) start(ctx context.Context) {
	s.ctx, s.cancel = context.WithCancel(ctx)
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
			err = proc.Wait()
			cancel()
			if svc.AfterExit != nil {
				svc.AfterExit(proc.Pid())
			}
		}
		s.mu.Lock()
		if proc != nil {
			close(exited)
		}
		st.proc, st.exited, st.ready = nil, nil, false
		byDependency, wedged := st.restart, st.wedged
		st.restart, st.wedged = false, false
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
		if byDependency {
			log.Info("daemon restarting after a dependency restarted")
			s.restarted(svc.Name, RestartDependency)
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
			c := s.opts.Command(svc)
			var out io.WriteCloser
			if s.opts.Output != nil {
				out = s.opts.Output(svc.Name)
				c.Output = out
			}
			proc, err := s.opts.Starter.Start(s.ctx, c)
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
	if st.proc == nil {
		return
	}
	st.restart = true
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
// to call more than once, and before start.
func (s *supervisor) stop() {
	if s.ctx == nil {
		return
	}
	s.mu.Lock()
	s.stopping = true
	s.broadcast()
	s.mu.Unlock()
	for i := len(s.services) - 1; i >= 0; i-- {
		s.mu.Lock()
		st := s.state[s.services[i].Name]
		proc, exited := st.proc, st.exited
		s.mu.Unlock()
		if proc != nil {
			s.terminate(proc, exited)
		}
	}
	s.cancel()
	s.wg.Wait()
}
