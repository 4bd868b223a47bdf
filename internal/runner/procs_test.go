package runner

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// sleeper starts `sleep 60` in a session of its own, reaped at cleanup.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return cmd
}

// exited reports whether cmd has exited (or is a zombie) within a second.
func exited(cmd *exec.Cmd) bool {
	for range 50 {
		if !InSession(cmd.Process.Pid)(cmd.Process.Pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func TestSignalOnlyWhatMatches(t *testing.T) {
	a, b := sleeper(t), sleeper(t)
	if got := Matching(InSession(a.Process.Pid)); !slices.Equal(got, []int{a.Process.Pid}) {
		t.Fatalf("session %d: %v", a.Process.Pid, got)
	}
	if err := KillAll(InSession(a.Process.Pid), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !exited(a) {
		t.Fatal("the matched process lives")
	}
	if exited(b) {
		t.Fatal("a process of another session was signalled")
	}
}

// A process that stops matching between the listing and the signal (its pid
// reused by another) is not signalled.
func TestSignalChecksAgainOnceHeld(t *testing.T) {
	a := sleeper(t)
	calls := 0
	match := func(pid int) bool {
		if pid != a.Process.Pid {
			return false
		}
		calls++
		return calls == 1 // matches when listed, not once held
	}
	if sent := Signal(match, syscall.SIGKILL); len(sent) != 0 || calls != 2 {
		t.Fatalf("signalled %v after %d checks", sent, calls)
	}
	if InSession(a.Process.Pid)(a.Process.Pid) == false {
		t.Fatal("the process was signalled")
	}
}

func TestInNetnsOfNothing(t *testing.T) {
	if got := Matching(InNetns("/nonexistent/netns")); len(got) != 0 {
		t.Fatalf("matched %v", got)
	}
}
