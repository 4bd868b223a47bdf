package runner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Processes Basin finds rather than started itself (what is left in a network
// namespace it made, the children of a daemon's session) are signalled through a
// pidfd, and only if they still match once held by it: a pid read from /proc may
// belong to another process by the time it is signalled, since pids are reused
// (on a busy host with pid_max 32768, within seconds), and kill(2) by number would
// then hit whatever process, of whichever program, got that number.

// A ProcMatch reports whether the process pid is one to signal.
type ProcMatch func(pid int) bool

// InNetns matches the processes in the network namespace bound at nsFile (an
// `ip netns` name's /run/netns/<name>); nothing if nsFile is not there.
func InNetns(nsFile string) ProcMatch {
	want, err := os.Stat(nsFile)
	if err != nil {
		return func(int) bool { return false }
	}
	return func(pid int) bool {
		fi, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
		return err == nil && os.SameFile(fi, want)
	}
}

// InSession matches the live (not zombie) processes of session sid.
func InSession(sid int) ProcMatch {
	return func(pid int) bool {
		s, state, ok := procStat(pid)
		return ok && s == sid && state != 'Z'
	}
}

// procStat reads a process's session id and state from /proc/<pid>/stat.
func procStat(pid int) (sid int, state byte, ok bool) {
	f := statFields(pid)
	if len(f) < 4 || len(f[0]) != 1 {
		return 0, 0, false
	}
	sid, err := strconv.Atoi(string(f[3]))
	return sid, f[0][0], err == nil
}

// statFields returns the fields of /proc/<pid>/stat after the command name
// (state, ppid, pgrp, session, …), nil if there is no such process.
func statFields(pid int) [][]byte {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// pid (comm) state ppid pgrp session ...; comm may hold spaces or ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil
	}
	return bytes.Fields(data[i+1:])
}

// StartTime returns when process pid started (clock ticks since boot): with the
// pid, it tells a process from a later one given the same pid. ok is false if
// there is no process pid (a zombie still has one).
func StartTime(pid int) (start uint64, ok bool) {
	f := statFields(pid)
	if len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	return start, err == nil
}

// Matching lists the processes match matches now (not the caller).
func Matching(match ProcMatch) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if match(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Signal sends sig to each process match matches, holding it by a pidfd and
// checking the match again before signalling, so that a pid reused by another
// process is never signalled. It returns the pids it signalled.
func Signal(match ProcMatch, sig syscall.Signal) []int {
	var sent []int
	for _, pid := range Matching(match) {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone
		}
		// Held: from here pid names the process fd holds until it is reaped; if
		// it was reaped and pid reused since the listing, the new process must
		// match too to be signalled, and then fd's (gone) process gets the signal.
		if match(pid) && unix.PidfdSendSignal(fd, unix.Signal(sig), nil, 0) == nil {
			sent = append(sent, pid)
		}
		unix.Close(fd)
	}
	return sent
}

// KillAll sends SIGKILL to what match matches, again as long as anything matches
// (children forked meanwhile), and waits until nothing does or timeout passes.
func KillAll(match ProcMatch, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		Signal(match, syscall.SIGKILL)
		left := Matching(match)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still running after SIGKILL: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
