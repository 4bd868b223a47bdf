package nfsops

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
)

// ReadBound is how long another tenant's read may take while an attack runs.
const ReadBound = 5 * time.Second

// Reader reads a file over and over, as another tenant's client would while an
// attack runs, and remembers the slowest read and every failure.
type Reader struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	reads   int
	slowest time.Duration
	fails   []string
}

// StartReader reads fh (whose content is want) through c every 20 ms, each
// read with a deadline of ReadBound, until Stop.
func StartReader(ctx context.Context, c *nfs3.Client, fh []byte, want string) *Reader {
	r := &Reader{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, 64)
		for {
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			rctx, cancel := context.WithTimeout(ctx, ReadBound)
			t0 := time.Now()
			n, _, err := c.Read(rctx, fh, buf, 0)
			took := time.Since(t0)
			cancel()
			r.mu.Lock()
			r.reads++
			r.slowest = max(r.slowest, took)
			if err != nil || string(buf[:n]) != want {
				r.fails = append(r.fails, fmt.Sprintf("%s: %q %v", time.Now().Format("15:04:05.000"), buf[:n], err))
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// Check fails t if a read so far failed or took ReadBound or longer.
func (r *Reader) Check(t testing.TB, when string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("another tenant's reads %s: %d, the slowest %v", when, r.reads, r.slowest)
	if len(r.fails) > 0 {
		t.Errorf("another tenant's reads failed %s (%d of %d): %v", when, len(r.fails), r.reads, r.fails[:min(len(r.fails), 5)])
	}
	if r.slowest >= ReadBound {
		t.Errorf("another tenant's read took %v %s (bound %v)", r.slowest, when, ReadBound)
	}
}

// Reads is the number of reads so far.
func (r *Reader) Reads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// Stop stops the reads.
func (r *Reader) Stop() { close(r.stop); <-r.done }
