package runner

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"syscall"
)

// FakeStarter is a Starter for tests: it models processes that run until they are
// told to exit (Exit) or are signalled, and records every start.
type FakeStarter struct {
	// Fail, when set, is asked before each start; an error fails the start, as a
	// missing binary would.
	Fail func(c Command) error
	// IgnoreTerm, when set, makes processes survive SIGTERM (SIGKILL still ends them).
	IgnoreTerm bool

	mu      sync.Mutex
	procs   []*FakeProcess
	nextPid int
	fails   int
}

var _ Starter = (*FakeStarter)(nil)

// Start implements Starter.
func (f *FakeStarter) Start(ctx context.Context, c Command) (Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		if err := f.Fail(c); err != nil {
			f.fails++
			return nil, &Error{Argv: c.Argv(), ExitCode: -1, Err: err}
		}
	}
	f.nextPid++
	p := &FakeProcess{Cmd: c, pid: 1000 + f.nextPid, done: make(chan struct{}), ignoreTerm: f.IgnoreTerm}
	f.procs = append(f.procs, p)
	go func() {
		select {
		case <-ctx.Done():
			p.Exit(errors.New("signal: killed"))
		case <-p.done:
		}
	}()
	return p, nil
}

// Started returns every process started so far, in order.
func (f *FakeStarter) Started() []*FakeProcess {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// Failed returns how many starts Fail refused.
func (f *FakeStarter) Failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fails
}

// Starts returns the processes started whose command is name, in order.
func (f *FakeStarter) Starts(name string) []*FakeProcess {
	var out []*FakeProcess
	for _, p := range f.Started() {
		if p.Cmd.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// Running returns the running process whose command is name, or nil.
func (f *FakeStarter) Running(name string) *FakeProcess {
	var found *FakeProcess
	for _, p := range f.Starts(name) {
		if !p.Exited() {
			found = p
		}
	}
	return found
}

// FakeProcess is a process of a FakeStarter.
type FakeProcess struct {
	Cmd        Command
	pid        int
	ignoreTerm bool

	mu      sync.Mutex
	done    chan struct{}
	err     error
	signals []os.Signal
}

// Pid implements Process.
func (p *FakeProcess) Pid() int { return p.pid }

// Wait implements Process.
func (p *FakeProcess) Wait() error {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Signal implements Process: SIGKILL ends the process, and so does SIGTERM unless
// the starter's IgnoreTerm is set; every signal is recorded.
func (p *FakeProcess) Signal(sig os.Signal) error {
	p.mu.Lock()
	p.signals = append(p.signals, sig)
	p.mu.Unlock()
	if sig == syscall.SIGKILL || (sig == syscall.SIGTERM && !p.ignoreTerm) {
		p.Exit(errors.New("signal: " + sig.String()))
	}
	return nil
}

// Signals returns the signals sent to the process.
func (p *FakeProcess) Signals() []os.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.signals)
}

// Exit ends the process with err (a crash, when not nil); ending an ended process
// does nothing.
func (p *FakeProcess) Exit(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	p.err = err
	close(p.done)
}

// Exited reports whether the process has ended.
func (p *FakeProcess) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
