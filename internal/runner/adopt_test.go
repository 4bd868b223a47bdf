package runner

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startSleeper starts a child that sleeps until killed, in a session of its
// own, reaped by the test when it ends.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// An adopted process is the one recorded: its pid with its start time. Signals
// reach it, and its exit ends Wait, though it is not the adopter's child to reap.
func TestAdopt(t *testing.T) {
	cmd := startSleeper(t)
	id, err := ID(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Adopt(id)
	if err != nil {
		t.Fatalf("adopt %+v: %v", id, err)
	}
	if p.Pid() != cmd.Process.Pid {
		t.Fatalf("pid %d, want %d", p.Pid(), cmd.Process.Pid)
	}
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v while the process runs", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The process is this test's child: its parent reaps it, the adopter sees
	// it end.
	if err := cmd.Wait(); err == nil {
		t.Fatal("sleep ended cleanly after SIGTERM")
	}
	select {
	case err := <-waited:
		if !errors.Is(err, ErrAdoptedExit) {
			t.Fatalf("Wait: %v, want ErrAdoptedExit", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the process exited")
	}
	// Signalling a process that is gone is no error.
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("signal after exit: %v", err)
	}
}

// A record whose start time is not the running process's (its pid went to
// another process), or whose process is gone, or a zombie, adopts nothing.
func TestAdoptRefusesAnotherProcess(t *testing.T) {
	cmd := startSleeper(t)
	id, err := ID(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	other := id
	other.Start++
	if _, err := Adopt(other); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("adopt with another start time: %v, want ErrNotRunning", err)
	}
	if _, err := Adopt(ProcID{}); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("adopt of pid 0: %v", err)
	}
	// A zombie: killed, not reaped yet.
	cmd.Process.Signal(syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for !isZombie(id.Pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := Adopt(id); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("adopt of a zombie: %v, want ErrNotRunning", err)
	}
	cmd.Wait()
	if _, err := Adopt(id); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("adopt of a reaped process: %v, want ErrNotRunning", err)
	}
	if _, err := ID(id.Pid); err == nil {
		t.Fatal("ID of a reaped process succeeded")
	}
}

// A detached process leads its own session, and a detached start refuses an
// output that is not a file (a pipe to Basin would break when Basin exits).
func TestDetachedStart(t *testing.T) {
	s := ExecStarter{Detached: true}
	if _, err := s.Start(t.Context(), Command{Name: "true", Output: &nopWriter{}}); err == nil {
		t.Fatal("detached start with a non-file output succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	p, err := s.Start(ctx, Command{Name: "sleep", Args: []string{"600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Signal(syscall.SIGKILL); p.Wait() }()
	sid, _, ok := procStat(p.Pid())
	if !ok || sid != p.Pid() {
		t.Fatalf("session of the detached process: %d (ok %v), want its own %d", sid, ok, p.Pid())
	}
	// Its context ending does not end it: its supervisor does.
	cancel()
	time.Sleep(200 * time.Millisecond)
	if _, err := ID(p.Pid()); err != nil {
		t.Fatalf("the detached process ended with its context: %v", err)
	}
}

type nopWriter struct{}

func (*nopWriter) Write(b []byte) (int, error) { return len(b), nil }
