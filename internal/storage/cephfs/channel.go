package cephfs

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// The backend talks to the cluster's monitors and managers through one RADOS
// client it keeps open (mgr.py, on Ceph's own Python bindings): a command
// costs a round trip, not the ~0.3 s of starting the ceph CLI.

//go:embed mgr.py
var mgrPy string

// python is Debian's interpreter, the one python3-rados is installed for (a
// python3 first on PATH may be another's).
const python = "/usr/bin/python3"

// cmdError is a command the cluster refused: Errno and its status text.
type cmdError struct {
	Cmd   string
	Errno syscall.Errno
	Msg   string
}

func (e *cmdError) Error() string { return fmt.Sprintf("ceph %s: %v: %s", e.Cmd, e.Errno, e.Msg) }

// errno is the errno a refused command carries, or 0.
func errno(err error) syscall.Errno {
	var ce *cmdError
	if errors.As(err, &ce) {
		return ce.Errno
	}
	return 0
}

type channel struct {
	conf, id, keyring string

	mu   sync.Mutex // one command at a time
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	done chan struct{}
}

type answer struct {
	RC  int    `json:"rc"`
	Out string `json:"out"`
	Err string `json:"err"`
}

// start starts the helper and waits for it to connect.
func (c *channel) start(ctx context.Context) error {
	cmd := exec.Command(python, "-c", mgrPy, c.conf, c.id, c.keyring)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ceph channel: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // its stderr says why
	c.cmd, c.in, c.out, c.done = cmd, in, bufio.NewReader(out), done
	var ready struct {
		Ready bool `json:"ready"`
	}
	if err := c.read(ctx, &ready); err != nil || !ready.Ready {
		c.stop()
		return fmt.Errorf("ceph channel: connect as client.%s: %v %s", c.id, err, stderr.String())
	}
	return nil
}

// read reads one line into v, giving up (and stopping the helper) when ctx
// ends.
func (c *channel) read(ctx context.Context, v any) error {
	type line struct {
		b   []byte
		err error
	}
	got := make(chan line, 1)
	go func() {
		b, err := c.out.ReadBytes('\n')
		got <- line{b, err}
	}()
	select {
	case l := <-got:
		if l.err != nil {
			return l.err
		}
		return json.Unmarshal(l.b, v)
	case <-ctx.Done():
		c.stop() // the reader goroutine ends with the pipe
		return ctx.Err()
	}
}

func (c *channel) stop() {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Kill() //nolint:errcheck // it may be gone
	<-c.done
	c.cmd = nil
}

// call runs one command on target ("mon" or "mgr") and returns its output; a
// refusal is a *cmdError. The helper is started on first use and again after
// it died or a call was cut short; a command whose helper died under it is
// sent once more to a new one (Basin's commands are idempotent).
func (c *channel) call(ctx context.Context, target string, cmd map[string]any) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	timeout := 60
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(1, int(time.Until(dl).Seconds()))
	}
	req, err := json.Marshal(map[string]any{"target": target, "cmd": cmd, "timeout": timeout})
	if err != nil {
		return nil, err
	}
	var a answer
	for attempt := 0; ; attempt++ {
		if err = c.roundTrip(ctx, req, &a); err == nil {
			break
		}
		c.stop()
		if attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("ceph channel: %w", err)
		}
	}
	if a.RC != 0 {
		rc := a.RC
		if rc < 0 {
			rc = -rc
		}
		return nil, &cmdError{Cmd: fmt.Sprint(cmd["prefix"]), Errno: syscall.Errno(rc), Msg: a.Err}
	}
	return []byte(a.Out), nil
}

// roundTrip sends one request and reads its answer, starting the helper if
// there is none.
func (c *channel) roundTrip(ctx context.Context, req []byte, a *answer) error {
	if c.cmd != nil {
		select {
		case <-c.done:
			c.cmd = nil
		default:
		}
	}
	if c.cmd == nil {
		if err := c.start(ctx); err != nil {
			return err
		}
	}
	if _, err := c.in.Write(append(req, '\n')); err != nil {
		return err
	}
	return c.read(ctx, a)
}

// close stops the helper.
func (c *channel) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop()
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := 4096 - len(b.buf); n > 0 {
		b.buf = append(b.buf, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
