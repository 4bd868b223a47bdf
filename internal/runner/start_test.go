package runner

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
)

// A real process gets its environment and writes to Output; a signalled one ends
// with an error naming it; Wait can be called more than once; signalling an ended
// process is fine.
func TestExecStarter(t *testing.T) {
	ctx := context.Background()
	var out strings.Builder
	p, err := ExecStarter{}.Start(ctx, Command{Name: "sh", Args: []string{"-c", `echo "$GREETING"`}, Env: []string{"GREETING=hello"}, Output: &out})
	if err != nil {
		t.Skipf("no sh: %v", err)
	}
	if err := p.Wait(); err != nil || out.String() != "hello\n" {
		t.Fatalf("wait: %v, output %q", err, out.String())
	}
	if p, err = (ExecStarter{}).Start(ctx, Command{Name: "sleep", Args: []string{"60"}}); err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 0 {
		t.Fatalf("pid %d", p.Pid())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	var re *Error
	if !errors.As(err, &re) || re.Argv[0] != "sleep" {
		t.Fatalf("wait after SIGTERM: %v", err)
	}
	if again := p.Wait(); again != err {
		t.Fatalf("second wait: %v", again)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal after exit: %v", err)
	}
	if _, err := (ExecStarter{}).Start(ctx, Command{Name: "/nonexistent/daemon"}); err == nil {
		t.Fatal("missing binary started")
	}
}

// Cancelling the context kills the process.
func TestExecStarterContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := ExecStarter{}.Start(ctx, Command{Name: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Skipf("no sleep: %v", err)
	}
	cancel()
	if err := p.Wait(); err == nil {
		t.Fatal("killed process reported success")
	}
}
