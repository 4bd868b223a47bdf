package runner

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A daemon Basin started outlives Basin when it runs detached (ExecStarter's
// Detached): the next Basin finds it running and adopts it rather than start
// another. It is known by its pid and start time, recorded when it started: the
// pid alone may have gone to another process since (pids are reused within
// seconds on a busy host), the pair names one process for as long as the
// machine runs. Adopted processes are held by a pidfd from the moment the pair
// was checked, so that signals reach them or nobody, and their exit is seen by
// polling that pidfd: they are not Basin's children, and their exit status is
// their parent's (init's) to collect.

// ProcID names one process for the life of the machine: its pid and its start
// time in clock ticks since boot (StartTime).
type ProcID struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// ID returns the ProcID of the running process pid (not a zombie).
func ID(pid int) (ProcID, error) {
	start, ok := StartTime(pid)
	if !ok || isZombie(pid) {
		return ProcID{}, fmt.Errorf("process %d: not running", pid)
	}
	return ProcID{Pid: pid, Start: start}, nil
}

// isZombie reports whether pid is a zombie (or gone).
func isZombie(pid int) bool {
	f := statFields(pid)
	return len(f) == 0 || len(f[0]) != 1 || f[0][0] == 'Z' || f[0][0] == 'X'
}

// ErrNotRunning is Adopt's error for a process that is gone, a zombie, or whose
// pid now belongs to another process.
var ErrNotRunning = errors.New("process not running")

// ErrAdoptedExit is what Wait returns for an adopted process that exited: its
// exit status went to its parent.
var ErrAdoptedExit = errors.New("adopted process exited")

// Adopt holds the running process id names, checking that its pid still names
// the process that started at id.Start. The returned Process waits for its exit
// and signals it through a pidfd.
func Adopt(id ProcID) (Process, error) {
	if id.Pid <= 0 {
		return nil, fmt.Errorf("process %d: %w", id.Pid, ErrNotRunning)
	}
	fd, err := unix.PidfdOpen(id.Pid, 0)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", id.Pid, ErrNotRunning)
	}
	// Held: from here id.Pid names fd's process until it is reaped; the start
	// time read now is that process's, or it is gone.
	start, ok := StartTime(id.Pid)
	if !ok || start != id.Start || isZombie(id.Pid) {
		unix.Close(fd)
		return nil, fmt.Errorf("process %d: %w", id.Pid, ErrNotRunning)
	}
	p := &adopted{id: id, fd: fd, done: make(chan struct{})}
	go p.watch()
	return p, nil
}

type adopted struct {
	id   ProcID
	fd   int
	done chan struct{}
	mu   sync.Mutex // guards fd's close against Signal
	shut bool
}

// watch waits until the pidfd is readable (the process exited), then closes it.
func (p *adopted) watch() {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == nil && n > 0 {
			break
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			break // a pidfd that cannot be polled: treat the process as gone
		}
	}
	p.mu.Lock()
	p.shut = true
	unix.Close(p.fd)
	p.mu.Unlock()
	close(p.done)
}

func (p *adopted) Pid() int { return p.id.Pid }

func (p *adopted) Wait() error {
	<-p.done
	return ErrAdoptedExit
}

func (p *adopted) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v: not a syscall.Signal", sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		return nil
	}
	if err := unix.PidfdSendSignal(p.fd, s, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}
