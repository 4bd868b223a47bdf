package nfsops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

// Timeout is how long a call aimed at a special file may take before it counts
// as hung: a server answers each of them at once.
const Timeout = 5 * time.Second

// hung says whether err is a call that got no answer in time.
func hung(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// CheckV3 sends each call and fails t when one hangs (no answer within Timeout)
// or, being a Data call, succeeds. It logs every answer.
func CheckV3(t testing.TB, ctx context.Context, c *nfs3.Client, what string, calls []V3Call) {
	t.Helper()
	var rows []string
	for _, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, Timeout)
		st, err := call.Run(cctx, c)
		cancel()
		switch {
		case hung(err):
			t.Errorf("NFSv3 %s on %s: no answer within %v: the call holds a server thread", call.Name, what, Timeout)
			rows = append(rows, "HUNG     "+call.Name)
		case err != nil:
			t.Errorf("NFSv3 %s on %s: %v", call.Name, what, err)
		case call.Data && st == 0:
			t.Errorf("NFSv3 %s on %s: allowed; a special file's data must never be opened", call.Name, what)
			rows = append(rows, "ALLOWED  "+call.Name)
		default:
			rows = append(rows, fmt.Sprintf("%-8s %s", statusName3(st), call.Name))
		}
	}
	t.Logf("NFSv3 on %s:\n%s", what, strings.Join(rows, "\n"))
}

func statusName3(st nfs3.Status) string {
	if st == 0 {
		return "OK"
	}
	return st.Error()
}

// Dial4 opens a fresh NFSv4 connection (a call that hung leaves its
// connection, and an NFSv4.1 session's slot, unusable).
type Dial4 func(ctx context.Context) (*nfsraw.Client, error)

// CheckV4 sends each call of calls(clientID) on connections from dial and fails
// t when one hangs or, being a Data call, succeeds. It logs every answer.
func CheckV4(t testing.TB, ctx context.Context, dial Dial4, what string, calls func(clientID uint64) []V4Call) {
	t.Helper()
	c, err := dial(ctx)
	if err != nil {
		t.Fatalf("NFSv4 connection: %v", err)
	}
	defer func() { c.Close() }()
	var rows []string
	version := fmt.Sprintf("NFSv4.%d", c.MinorVersion())
	list := calls(c.ClientID())
	for i := range list {
		call := list[i]
		cctx, cancel := context.WithTimeout(ctx, Timeout)
		st, _, err := c.Compound(cctx, call.Ops...)
		cancel()
		switch {
		case hung(err):
			t.Errorf("%s %s on %s: no answer within %v: the call holds a server thread", version, call.Name, what, Timeout)
			rows = append(rows, "HUNG     "+call.Name)
		case err != nil:
			t.Errorf("%s %s on %s: %v", version, call.Name, what, err)
		case call.Data && st == nfsraw.OK:
			t.Errorf("%s %s on %s: allowed; a special file's data must never be opened", version, call.Name, what)
			rows = append(rows, "ALLOWED  "+call.Name)
		default:
			rows = append(rows, fmt.Sprintf("%-8s %s", st, call.Name))
		}
		if err != nil {
			// The connection (and a session's slot) is spent: take a new one,
			// whose client ID the remaining calls use.
			c.Close()
			if c, err = dial(ctx); err != nil {
				t.Fatalf("NFSv4 connection: %v", err)
			}
			list = calls(c.ClientID())
		}
	}
	t.Logf("%s on %s:\n%s", version, what, strings.Join(rows, "\n"))
}

// FloodCall is one call of a flood: it returns the status the server answered
// (its name) and an error only when the call itself failed.
type FloodCall func(ctx context.Context) (status string, err error)

// Flood sends n calls at once, call i being calls[i%len(calls)], each on its own
// goroutine with its own deadline (twice Timeout). It returns how many calls got
// each answer ("HUNG" for no answer in time) and the first other error. Calls
// that hang keep their goroutine until their deadline.
func Flood(ctx context.Context, n int, calls []FloodCall) (outcomes map[string]int, firstErr error) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	outcomes = map[string]int{}
	for i := 0; i < n; i++ {
		call := calls[i%len(calls)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*Timeout)
			defer cancel()
			st, err := call(cctx)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case hung(err):
				outcomes["HUNG"]++
			case err != nil:
				outcomes["error"]++
				if firstErr == nil {
					firstErr = err
				}
			default:
				outcomes[st]++
			}
		}()
	}
	wg.Wait()
	return outcomes, firstErr
}

// V3Flood is call as a FloodCall on c.
func V3Flood(c *nfs3.Client, call V3Call) FloodCall {
	return func(ctx context.Context) (string, error) {
		st, err := call.Run(ctx, c)
		return statusName3(st), err
	}
}

// V4Flood is call as a FloodCall on a connection of its own from dial.
func V4Flood(dial Dial4, call V4Call) FloodCall {
	return func(ctx context.Context) (string, error) {
		c, err := dial(ctx)
		if err != nil {
			return "", err
		}
		defer c.Close()
		st, _, err := c.Compound(ctx, call.Ops...)
		return st.String(), err
	}
}
