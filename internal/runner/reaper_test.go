package runner

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanOf starts sh (leading a session of its own if setsid), which starts a
// child that outlives it and exits; it returns the child's pid and the session.
func orphanOf(t *testing.T, setsid bool) (orphan, sid int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 1 >/dev/null 2>&1 & echo $!")
	if setsid {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err = strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("orphan pid %q: %v", out, err)
	}
	if f := statFields(orphan); len(f) < 4 || string(f[1]) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("orphan %d stat %q: its parent is not this process", orphan, f)
	}
	sid, _ = strconv.Atoi(string(statFields(orphan)[3]))
	return orphan, sid
}

// gone waits until pid is reaped (bounded).
func gone(t *testing.T, pid int) {
	t.Helper()
	for range 250 {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("orphan %d still has its pid 5 s after it exited: %q", pid, statFields(pid))
}

// A daemon's child that outlives it becomes this process's and is reaped as
// soon as it exits: nothing of its session is left, not even a zombie. Before
// the reaper, the orphan went to init, which reaps late on the VMs Basin runs on.
func TestReaperReapsADaemonsOrphans(t *testing.T) {
	if err := StartReaper(); err != nil {
		t.Fatal(err)
	}
	orphan, sid := orphanOf(t, true)
	start := time.Now()
	if err := WaitSessionGone(sid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("session %d gone %v after its leader, orphan %d reaped", sid, time.Since(start), orphan)
	gone(t, orphan)
}

// An orphan in this process's own session is reaped too (an AD DC's helpers in
// the tests' fixtures; any program that leaves a child behind), where os/exec
// tells its own children by their pidfds.
func TestReaperReapsOrphansOfItsOwnSession(t *testing.T) {
	if err := StartReaper(); err != nil {
		t.Fatal(err)
	}
	if !reaper.pidfds {
		t.Skip("os/exec holds no pidfds here: orphans are told by session only")
	}
	orphan, sid := orphanOf(t, false)
	if sid != mySession() {
		t.Fatalf("orphan in session %d, want this process's %d", sid, mySession())
	}
	gone(t, orphan)
}

// The reaper never takes a child that was started here: each one's Wait gets
// its own exit status, with the reaper running flat out meanwhile.
func TestReaperLeavesOwnChildren(t *testing.T) {
	if err := StartReaper(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				ReapOrphans()
			}
		}
	}()
	for i := range 40 {
		cmd := exec.Command("sh", "-c", "exit "+strconv.Itoa(3+i%5))
		if i%2 == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3+i%5 {
			t.Fatalf("child %d (setsid %v): %v, want exit status %d", i, i%2 == 0, err, 3+i%5)
		}
	}
}

func TestHeldPidfds(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	held := heldPidfds()
	if !held[cmd.Process.Pid] {
		t.Skipf("os/exec holds no pidfd of its child %d here (held: %v)", cmd.Process.Pid, held)
	}
	if held[os.Getpid()] {
		t.Fatal("this process taken for one held by a pidfd")
	}
}

func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if kids := children(); !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("children() = %v, without %d", kids, cmd.Process.Pid)
	}
}
