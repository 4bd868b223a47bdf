package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// Command is a long-running command for a Starter.
type Command struct {
	Name string
	Args []string
	// Env is added to Basin's own environment.
	Env []string
	// Output receives the command's standard output and error; nil discards them.
	Output io.Writer
}

// Argv returns the command line.
func (c Command) Argv() []string { return append([]string{c.Name}, c.Args...) }

// Process is a started command.
type Process interface {
	Pid() int
	// Wait returns once the process has exited, with how it ended; any number of
	// callers may wait.
	Wait() error
	// Signal sends sig; a process that has exited already is not an error.
	Signal(sig os.Signal) error
}

// Starter starts long-running commands (daemons) that a caller supervises.
type Starter interface {
	Start(ctx context.Context, c Command) (Process, error)
}

// ExecStarter starts real processes, each leading a session of its own (a
// terminal's Ctrl-C, sent to Basin's process group, does not reach them; what a
// daemon forks stays in its session). By default they get SIGKILL if Basin dies
// (parent-death signal) and when ctx is cancelled.
//
// Detached processes outlive Basin: they get no parent-death signal, and ctx
// does not end them (whoever supervises them signals them). Their output must then be a file (or nil): a pipe to Basin
// would break when Basin exits, and the daemon with it.
type ExecStarter struct {
	Detached bool
}

var _ Starter = ExecStarter{}

// Start implements Starter.
func (s ExecStarter) Start(ctx context.Context, c Command) (Process, error) {
	var cmd *exec.Cmd
	if s.Detached {
		if c.Output != nil {
			if _, ok := c.Output.(*os.File); !ok {
				return nil, &Error{Argv: c.Argv(), ExitCode: -1, Err: errors.New("a detached process's output must be a file")}
			}
		}
		cmd = exec.Command(c.Name, c.Args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd = exec.CommandContext(ctx, c.Name, c.Args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	}
	cmd.Env = append(os.Environ(), c.Env...)
	if c.Output != nil {
		cmd.Stdout, cmd.Stderr = c.Output, c.Output
	}
	if err := cmd.Start(); err != nil {
		return nil, &Error{Argv: c.Argv(), ExitCode: -1, Err: err}
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err != nil {
			code := -1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			err = &Error{Argv: c.Argv(), ExitCode: code, Err: err}
		}
		p.err = err
		close(p.done)
	}()
	return p, nil
}

type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

func (p *execProcess) Pid() int { return p.cmd.Process.Pid }

func (p *execProcess) Wait() error {
	<-p.done
	return p.err
}

func (p *execProcess) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
