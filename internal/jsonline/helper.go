// Package jsonline runs a helper process that answers requests one JSON
// document per line: Basin's channels to a Ceph cluster, which use Ceph's own
// Python bindings (python3-rados) in a process kept open, so that a request
// costs a round trip and not a CLI's start.
//
// The helper prints {"ready": true} once it is connected, then reads one
// request per line on stdin and writes one answer per line on stdout, in order.
package jsonline

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Helper is a helper process, started on first use and again after it died
// or a call was cut short. Calls are serialized.
type Helper struct {
	// Name names the helper in errors ("ceph channel").
	Name string
	// Argv is the helper's command line.
	Argv []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	done chan struct{}
	errb *limitedBuffer
}

// Call sends req (marshalled as JSON) and decodes the answer into ans. A
// request whose helper died under it is sent once more to a new one: callers
// send only requests that are safe to repeat.
func (h *Helper) Call(ctx context.Context, req, ans any) error {
	return h.CallFunc(ctx, func() any { return req }, ans)
}

// CallFunc is Call with the request built by req once the call's turn has
// come (calls are serialized): a request that carries a timeout computes it
// from the time left then, not before waiting for the calls ahead.
func (h *Helper) CallFunc(ctx context.Context, req func() any, ans any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.Marshal(req())
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err = h.roundTrip(ctx, b, ans); err == nil {
			return nil
		}
		h.stop()
		if attempt > 0 || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

// Close stops the helper; a later Call starts another.
func (h *Helper) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stop()
}

// Kill kills the helper without waiting for it (tests: a helper that dies).
func (h *Helper) Kill() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		h.cmd.Process.Kill() //nolint:errcheck // it may be gone
	}
}

// start starts the helper and waits for it to be ready.
func (h *Helper) start(ctx context.Context) error {
	if len(h.Argv) == 0 {
		return errors.New("no command")
	}
	cmd := exec.Command(h.Argv[0], h.Argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A child the helper left holding its pipes cannot keep Wait (and so
	// stop, under the lock) waiting.
	cmd.WaitDelay = 2 * time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errb := &limitedBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // its stderr says why
	h.cmd, h.in, h.out, h.done, h.errb = cmd, in, bufio.NewReader(out), done, errb
	var ready struct {
		Ready bool `json:"ready"`
	}
	if err := h.read(ctx, &ready); err != nil || !ready.Ready {
		h.stop()
		if err == nil {
			err = fmt.Errorf("not ready: %s", errb.String())
		}
		return fmt.Errorf("start: %w", err)
	}
	return nil
}

// read reads one line into v, giving up (and stopping the helper) when ctx
// ends.
func (h *Helper) read(ctx context.Context, v any) error {
	type line struct {
		b   []byte
		err error
	}
	got := make(chan line, 1)
	out := h.out
	go func() {
		b, err := out.ReadBytes('\n')
		got <- line{b, err}
	}()
	select {
	case l := <-got:
		if l.err != nil {
			// The helper is gone: once it is reaped, its stderr is whole.
			errb := h.errb
			h.stop()
			if errb != nil && errb.String() != "" {
				return fmt.Errorf("%w: %s", l.err, errb.String())
			}
			return l.err
		}
		return json.Unmarshal(l.b, v)
	case <-ctx.Done():
		h.stop() // the reader goroutine ends with the pipe
		return ctx.Err()
	}
}

func (h *Helper) stop() {
	if h.cmd == nil {
		return
	}
	h.cmd.Process.Kill() //nolint:errcheck // it may be gone
	<-h.done
	h.cmd = nil
}

// roundTrip sends one request and reads its answer, starting the helper if
// there is none.
func (h *Helper) roundTrip(ctx context.Context, req []byte, ans any) error {
	if h.cmd != nil {
		select {
		case <-h.done:
			h.cmd = nil
		default:
		}
	}
	if h.cmd == nil {
		if err := h.start(ctx); err != nil {
			return err
		}
	}
	if _, err := h.in.Write(append(req, '\n')); err != nil {
		return err
	}
	return h.read(ctx, ans)
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
