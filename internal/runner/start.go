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

// ExecStarter starts real processes. They get SIGKILL if Basin dies (parent-death
// signal) and when ctx is cancelled.
type ExecStarter struct{}

var _ Starter = ExecStarter{}

// Start implements Starter.
func (ExecStarter) Start(ctx context.Context, c Command) (Process, error) {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout, cmd.Stderr = c.Output, c.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
