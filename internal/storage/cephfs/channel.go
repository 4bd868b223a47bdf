package cephfs

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/jsonline"
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

// channel is the backend's RADOS client (mgr.py through jsonline).
type channel struct {
	conf, id, keyring string
	// wrap, if set, is the start of the helper's command line, before the
	// interpreter (tests: an environment with a stand-in rados module).
	wrap []string

	once sync.Once
	h    *jsonline.Helper
}

type answer struct {
	RC  *int   `json:"rc"` // nil: no answer (taken as a failure, never as success)
	Out string `json:"out"`
	Err string `json:"err"`
}

// err is the refusal an answer to cmd carries, nil if it succeeded.
func (a *answer) err(cmd map[string]any) error {
	switch {
	case a == nil || a.RC == nil:
		return &cmdError{Cmd: fmt.Sprint(cmd["prefix"]), Errno: syscall.EIO, Msg: "the helper gave no answer"}
	case *a.RC != 0:
		return &cmdError{Cmd: fmt.Sprint(cmd["prefix"]), Errno: syscall.Errno(max(*a.RC, -*a.RC)), Msg: a.Err}
	}
	return nil
}

func (c *channel) helper() *jsonline.Helper {
	c.once.Do(func() {
		c.h = &jsonline.Helper{Name: "ceph channel (client." + c.id + ")", Argv: append(slices.Clone(c.wrap), python, "-c", mgrPy, c.conf, c.id, c.keyring)}
	})
	return c.h
}

// call runs one command on target ("mon" or "mgr") and returns its output; a
// refusal is a *cmdError. The helper is started on first use and again after
// it died or a call was cut short; a command whose helper died under it is
// sent once more to a new one (Basin's commands are idempotent).
func (c *channel) call(ctx context.Context, target string, cmd map[string]any) ([]byte, error) {
	var a answer
	err := c.helper().CallFunc(ctx, func() any {
		return map[string]any{"target": target, "cmd": cmd, "timeout": timeoutOf(ctx)}
	}, &a)
	if err != nil {
		return nil, err
	}
	if err := a.err(cmd); err != nil {
		return nil, err
	}
	return []byte(a.Out), nil
}

// callAll runs cmds on target all at once (the helper sends them together)
// and returns each one's error, in order; err is the channel's own.
func (c *channel) callAll(ctx context.Context, target string, cmds []map[string]any) (errs []error, err error) {
	var a struct {
		Answers []*answer `json:"answers"`
	}
	err = c.helper().CallFunc(ctx, func() any {
		return map[string]any{"target": target, "cmds": cmds, "timeout": timeoutOf(ctx)}
	}, &a)
	if err != nil {
		return nil, err
	}
	if len(a.Answers) != len(cmds) {
		return nil, fmt.Errorf("%d answers to %d commands", len(a.Answers), len(cmds))
	}
	errs = make([]error, len(cmds))
	for i, an := range a.Answers {
		errs[i] = an.err(cmds[i])
	}
	return errs, nil
}

// timeoutOf is the seconds a command sent now may take: what is left of
// ctx, at least 1, or 60 without a deadline.
func timeoutOf(ctx context.Context) int {
	if dl, ok := ctx.Deadline(); ok {
		return max(1, int(time.Until(dl).Seconds()))
	}
	return 60
}

// close stops the helper.
func (c *channel) close() { c.helper().Close() }
