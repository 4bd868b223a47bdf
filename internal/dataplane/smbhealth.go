package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/smb"
)

// smbdProbeTimeout bounds one readiness probe of smbd (connect and NEGOTIATE).
const smbdProbeTimeout = 2 * time.Second

// smbdStuckAfter is how long an smbd may fail its probe before its state is
// logged (once per start): what it waits on, and its log's last lines.
const smbdStuckAfter = 10 * time.Second

// probeState is what the instance's smbd readiness probe saw last.
type probeState struct {
	mu       sync.Mutex
	pid      int       // the smbd the probes were for
	since    time.Time // its first failed probe
	last     error     // the last probe's error, nil once it answered
	reported bool      // its state was logged
}

// smbdReady is smbd's readiness: a TCP connection to the instance's own
// loopback address, port 445, from inside the sandbox, and an SMB2 NEGOTIATE
// answered on it (smb.Negotiate). Listening is not enough: smbd accepts
// connections as soon as it listens, and each is served by a child it forks,
// which must get as far as its protocol code. An smbd that fails its probe for
// smbdStuckAfter has its state logged (stuckReport).
func (in *smbInstance) smbdReady(ctx context.Context) error {
	addr := netip.AddrPortFrom(smbLoopback(in.id), 445).String()
	pctx, cancel := context.WithTimeout(ctx, smbdProbeTimeout)
	defer cancel()
	c, err := dialInNetns(pctx, in.sb.ns, "tcp", addr)
	if err == nil {
		_, err = smb.Negotiate(pctx, c)
		c.Close()
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("smbd did not answer an SMB2 NEGOTIATE on %s: %w", addr, err)
	}
	in.noteProbe(err)
	return err
}

// noteProbe records a probe's outcome and logs a stuck smbd's state once.
func (in *smbInstance) noteProbe(err error) {
	pid := in.pid("smbd")
	p := &in.probe
	p.mu.Lock()
	if pid != p.pid {
		p.pid, p.since, p.reported = pid, time.Now(), false
	}
	p.last = err
	report := err != nil && !p.reported && time.Since(p.since) >= smbdStuckAfter
	if report {
		p.reported = true
	}
	since := p.since
	p.mu.Unlock()
	if report {
		in.log.Warn("smbd is not answering", "pid", pid, "for", time.Since(since).Round(time.Second), "err", err,
			"state", processState(pid), "log", tailLines(filepath.Join(in.dirs().Log, "log.smbd"), 12))
	}
}

// lastProbe is the last readiness probe's error (nil if it answered).
func (in *smbInstance) lastProbe() error {
	in.probe.mu.Lock()
	defer in.probe.mu.Unlock()
	return in.probe.last
}

// processState describes what pid and its children wait on: each one's state,
// kernel wait channel and (root can read it) kernel stack.
func processState(pid int) string {
	if pid == 0 {
		return "no process"
	}
	var b strings.Builder
	pids := append([]int{pid}, childPids(pid)...)
	for _, p := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(p))
		stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) {
			state = string(stat[i+2 : i+3])
		}
		wchan, _ := os.ReadFile(filepath.Join(dir, "wchan"))
		stack, _ := os.ReadFile(filepath.Join(dir, "stack"))
		fmt.Fprintf(&b, "[%d %s wchan=%s stack=%s] ", p, state, wchan, strings.Join(strings.Fields(string(stack)), " "))
	}
	return strings.TrimSpace(b.String())
}

// childPids lists pid's direct children.
func childPids(pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// tailLines returns the last n lines of the file (at most 4 KiB of it).
func tailLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-4096, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Bounds of an instance's logs. Every file has a fixed name (see
// smb.RenderGlobal: no client names one), Samba rotates each at
// smb.MaxLogKiB to one .old copy, and boundLogs empties any file past smbLogMax
// (a daemon logging while it acts as a user skips Samba's own check), so an
// instance's logs stay within the number of its daemons × 2 × smbLogMax however
// much a client makes them log.
const (
	smbLogMax   = 16 << 20
	smbLogCheck = 10 * time.Second
)

// boundLogs keeps the instance's log files within smbLogMax until ctx ends.
func (in *smbInstance) boundLogs(ctx context.Context) {
	t := time.NewTicker(smbLogCheck)
	defer t.Stop()
	for {
		for _, f := range truncateLogs(smbLogMax, in.dirs().Log, filepath.Join(in.dir, "var", "log", "samba")) {
			in.log.Warn("samba log over its bound; emptied", "file", f, "bound", smbLogMax)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// truncateLogs empties every regular file in dirs larger than limit and
// returns their paths. Samba appends (O_APPEND), so a daemon writing one goes on
// at its new end.
func truncateLogs(limit int64, dirs ...string) []string {
	var done []string
	for _, dir := range dirs {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if fi, err := e.Info(); err == nil && fi.Size() > limit && os.Truncate(p, 0) == nil {
				done = append(done, p)
			}
		}
	}
	return done
}

// pipeProbeTimeout bounds one probe of a samba-dcerpcd pipe.
const pipeProbeTimeout = 2 * time.Second

// pipeServed is samba-dcerpcd's readiness: it serves the named-pipe socket at
// path. The probe connects and sends a named-pipe auth request of length zero,
// which samba-dcerpcd, once it accepts, reads and refuses by closing the
// connection. A socket that exists but is not accepted on takes the connection
// into its backlog and never answers: that samba-dcerpcd is not ready, however
// long its pipes have been there.
func pipeServed(path string) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, pipeProbeTimeout)
		defer cancel()
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl) //nolint:errcheck // a fresh connection
		}
		start := time.Now()
		if _, err := c.Write([]byte{0, 0, 0, 0}); err != nil {
			return fmt.Errorf("probe %s: %w", path, err)
		}
		var buf [1]byte
		n, err := c.Read(buf[:])
		switch {
		case n > 0 || errors.Is(err, io.EOF):
			return nil // Samba's refusal (a clean close), or any answer: accepted
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("nobody accepts on %s: no answer in %v", path, time.Since(start).Round(time.Millisecond))
		default:
			// A reset: the daemon died with the connection unaccepted.
			return fmt.Errorf("probe %s: %w", path, err)
		}
	}
}
