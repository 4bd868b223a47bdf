package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon that dies before its children orphans them, and an orphan is
// reparented to init, which on some hosts reaps late (seconds, on the VMs Basin
// is tested on) or never. Until it is reaped, a dead process still has its pid,
// and Samba then takes it for alive: smbd's notifyd is known by name to every
// smbd process, and a new notifyd may take the name only once the old holder's
// pid is gone. A restarted smbd's notifyd was refused its name while the old one
// lingered as a zombie, and the clients that connected meanwhile were handed the
// dead one: every change notify failed with OBJECT_NAME_NOT_FOUND.
//
// So Basin makes itself the child subreaper of what it starts
// (PR_SET_CHILD_SUBREAPER): orphans become its children, and it reaps them as
// they come. It reaps only what it can tell is an orphan, never a child it
// started itself: os/exec waits for those, and a child reaped behind its back
// would lose its exit status. os/exec holds a pidfd of every child it starts,
// from the fork until its Wait has reaped it (Go 1.23 on, on kernels with
// CLONE_PIDFD); a zombie child nobody here holds a pidfd of is an orphan.
// Where os/exec does not use pidfds (checked once, with a child of its own),
// Basin tells orphans by session instead: a process's session changes only by
// setsid(2), which makes it the new session's leader, so a direct child is in
// Basin's own session or leads its own, and a child in another session that is
// not its leader was reparented (a daemon's orphan: the daemons run in sessions
// of their own). Orphans in Basin's own session are then left as zombies.

var reaper struct {
	once    sync.Once
	err     error
	pidfds  bool // os/exec holds a pidfd of each child it starts
	scanned sync.Mutex
}

// StartReaper makes the process the child subreaper of its descendants and
// starts reaping their orphans (on SIGCHLD, and every few seconds besides).
// It is safe to call more than once; the first call's error is returned.
func StartReaper() error {
	reaper.once.Do(func() {
		reaper.pidfds = execHoldsPidfds()
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			reaper.err = fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			tick := time.NewTicker(5 * time.Second)
			for {
				select {
				case <-ch:
				case <-tick.C:
				}
				ReapOrphans()
				// At most ten passes a second, however many children end: the
				// signals of a burst are one (ch holds one), and a daemon's
				// AfterExit reaps its session's orphans itself.
				time.Sleep(100 * time.Millisecond)
			}
		}()
	})
	return reaper.err
}

// execHoldsPidfds starts a child and reports whether os/exec holds a pidfd of it.
func execHoldsPidfds() bool {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		return false
	}
	held := heldPidfds()[cmd.Process.Pid]
	cmd.Wait() //nolint:errcheck // only its pidfd mattered
	return held
}

// heldPidfds returns the pids this process holds a pidfd of.
func heldPidfds() map[int]bool {
	held := map[int]bool{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "anon_inode:[pidfd]" {
			continue
		}
		data, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
					held[pid] = true
				}
			}
		}
	}
	return held
}

// ReapOrphans reaps the zombies among the process's children that it did not
// start (see above), and returns their pids.
func ReapOrphans() []int {
	reaper.scanned.Lock()
	defer reaper.scanned.Unlock()
	self, own := os.Getpid(), mySession()
	type zombie struct {
		sid   int
		start uint64
	}
	zombies := map[int]zombie{}
	for _, pid := range children() {
		if sid, start, ok := zombieChild(pid, self); ok {
			zombies[pid] = zombie{sid, start}
		}
	}
	if len(zombies) == 0 {
		return nil
	}
	// Listed after the zombies: a child os/exec started had its pidfd before it
	// could be a zombie, and keeps it until os/exec has reaped it.
	held := heldPidfds()
	var reaped []int
	for pid, z := range zombies {
		if reaper.pidfds {
			if held[pid] {
				continue
			}
		} else if z.sid == own || z.sid == pid {
			continue
		}
		// Held by a pidfd of its own from here: if pid was reaped and reused since
		// the listing, the process held is another, which the check refuses.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if sid, start, ok := zombieChild(pid, self); ok && sid == z.sid && start == z.start {
			var info unix.Siginfo
			if unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil) == nil {
				reaped = append(reaped, pid)
			}
		}
		unix.Close(fd)
	}
	return reaped
}

// children lists the process's children, from each thread's children file
// (an orphan's new parent is one of the threads), or, on a kernel without those
// files, every process there is.
func children() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return Matching(func(int) bool { return true })
	}
	var pids []int
	for _, t := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if errors.Is(err, os.ErrNotExist) {
			if _, err := os.Stat("/proc/self/task/" + t.Name()); err == nil {
				return Matching(func(int) bool { return true }) // no CONFIG_PROC_CHILDREN
			}
			continue // the thread ended
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// zombieChild reports whether pid is a zombie child of self, with its session
// and start time.
func zombieChild(pid, self int) (sid int, start uint64, ok bool) {
	f := statFields(pid)
	if len(f) < 20 || string(f[0]) != "Z" {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	return sid, start, err1 == nil && err2 == nil && err3 == nil && ppid == self
}

func mySession() int {
	sid, err := unix.Getsid(0)
	if err != nil {
		return -1
	}
	return sid
}

// WaitSessionGone waits until no process of session sid is left, zombies
// included: it reaps those that are this process's orphans, and waits for
// whoever else is their parent. It is for after KillAll: a session's pids are
// free for the next daemon only once reaped. It returns an error naming what is
// left after timeout.
func WaitSessionGone(sid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	inSession := func(pid int) bool {
		s, _, ok := procStat(pid)
		return ok && s == sid
	}
	for {
		ReapOrphans()
		left := Matching(inSession)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of session %d not reaped: %v", sid, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
