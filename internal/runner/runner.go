// Package runner runs external commands (btrfs, mount, losetup, ip, tc …) with a
// context. Its errors carry argv, exit code and stderr, so a failure in a driver
// reads like the shell session that would reproduce it.
//
// A Runner runs a command to completion; a Starter starts a long-running one (a
// daemon) and hands back a Process to wait on and signal. FakeStarter models
// processes for tests of supervisors, without root and without real daemons.
//
// Drivers import it; it imports nothing of Basin's.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs a command and returns its standard output.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Exec runs real commands.
type Exec struct{}

// Error describes a failed command.
type Error struct {
	Argv     []string
	ExitCode int
	Stderr   string
	Err      error
}

func (e *Error) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s: exit %d: %s", strings.Join(e.Argv, " "), e.ExitCode, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Run implements Runner.
func (Exec) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return Output(exec.CommandContext(ctx, name, args...), append([]string{name}, args...))
}

// Output runs a prepared command (its own stdin, environment, namespaces) and
// returns its standard output; a failure is an *Error naming argv.
func Output(cmd *exec.Cmd, argv []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return stdout.Bytes(), &Error{Argv: argv, ExitCode: code, Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// StderrContains reports whether err is a command error whose stderr contains s.
func StderrContains(err error, s string) bool {
	var re *Error
	return errors.As(err, &re) && strings.Contains(re.Stderr, s)
}
