package pkg

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/clienthost"
)

// A stream is a client on a volume's network writing blocks of a file and
// reading earlier ones back, one operation at a time, as an application on a
// hard NFS mount does: an operation that cannot reach the server (a
// connection lost, refused, timed out) is sent again on a new connection with
// the same file handle until it succeeds, the way the kernel's client retries
// it. What the application would see fail is counted as failed I/O: an error
// the server answers (a stale handle included), data that reads back otherwise
// than it was last written, or an operation that never gets through.
type stream struct {
	h           *clienthost.Host
	server, dir string

	mu         sync.Mutex
	c          *nfs3.Client
	fh         []byte
	gen        [streamBlocks]uint32 // the generation each block was last written with (0: never)
	ops        int
	phase      string
	events     []event // interruptions and failures, as they happened
	failures   []event
	corrupt    []string
	reconnects int
	waited     time.Duration // time operations spent waiting to get through
	stopc      chan struct{}
	done       chan struct{}
}

type event struct {
	at    time.Time
	phase string
	op    string
	err   error
}

func (e event) String() string {
	return fmt.Sprintf("%s %s (%s): %v", e.at.Format("15:04:05.000"), e.op, e.phase, e.err)
}

const (
	streamBlocks    = 256
	streamBlockSize = 64 << 10
	streamFile      = "stream.dat"
	streamGiveUp    = 5 * time.Minute // an operation that cannot get through for this long has failed
	streamMaxRun    = 20 * time.Minute
)

// pattern is block b's content at generation g: every 8 bytes say which block,
// generation and word they are.
func pattern(b int, g uint32) []byte {
	p := make([]byte, streamBlockSize)
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], uint64(b)<<48|uint64(g)<<24|uint64(i/8))
	}
	return p
}

func startStream(t *testing.T, h *clienthost.Host, server, dir string) *stream {
	t.Helper()
	s := &stream{h: h, server: server, dir: dir, phase: "before", stopc: make(chan struct{}), done: make(chan struct{})}
	if err := s.connect(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fh, err := s.c.CreateWith(ctx, s.c.Root, streamFile, nfs3.CreateArgs{How: nfs3.Unchecked, Attrs: nfs3.SetAttrs{Mode: nfs3.Mode(0o644), Size: nfs3.Size(0)}})
	if err != nil {
		t.Fatalf("create %s: %v", streamFile, err)
	}
	s.fh = fh
	t.Cleanup(func() {
		s.stop()
		if s.c != nil {
			s.c.Close()
		}
	})
	go s.run()
	return s
}

// connect mounts the export again, from inside the client host.
func (s *stream) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c *nfs3.Client
	err := s.h.Within(func() (err error) {
		c, err = nfs3.Mount(ctx, s.server, s.dir, nfs3.Options{})
		return err
	})
	if err != nil {
		return err
	}
	if s.c != nil {
		s.c.Close()
	}
	s.c = c
	return nil
}

func (s *stream) run() {
	defer close(s.done)
	start := time.Now()
	buf := make([]byte, streamBlockSize)
	for i := 0; time.Since(start) < streamMaxRun; i++ {
		select {
		case <-s.stopc:
			return
		default:
		}
		b := i % streamBlocks
		g := s.gen[b] + 1
		data := pattern(b, g)
		if err := s.do("write", func(ctx context.Context, c *nfs3.Client, fh []byte) error {
			n, err := c.Write(ctx, fh, data, int64(b)*streamBlockSize, nfs3.FileSync)
			if err == nil && n != len(data) {
				err = fmt.Errorf("short write: %d of %d bytes", n, len(data))
			}
			return err
		}); err != nil {
			return
		}
		s.mu.Lock()
		s.gen[b] = g
		s.mu.Unlock()
		// Read back a block written before, lately or long ago.
		rb := (i * 7919) % min(i+1, streamBlocks)
		if err := s.do("read", func(ctx context.Context, c *nfs3.Client, fh []byte) error {
			n, _, err := c.Read(ctx, fh, buf, int64(rb)*streamBlockSize)
			if err == nil && n != len(buf) {
				err = fmt.Errorf("short read: %d of %d bytes", n, len(buf))
			}
			return err
		}); err != nil {
			return
		}
		s.check(rb, buf, "read")
		s.mu.Lock()
		s.ops += 2
		s.mu.Unlock()
		time.Sleep(time.Millisecond) // leave the machine's two cores to the rest
	}
}

// do runs one operation until it gets through; a non-nil error means it
// failed for good (and is recorded).
func (s *stream) do(op string, f func(ctx context.Context, c *nfs3.Client, fh []byte) error) error {
	var first time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f(ctx, s.c, s.fh)
		cancel()
		if err == nil {
			if !first.IsZero() {
				s.mu.Lock()
				s.waited += time.Since(first)
				s.mu.Unlock()
			}
			return nil
		}
		s.mu.Lock()
		ev := event{at: time.Now(), phase: s.phase, op: op, err: err}
		if first.IsZero() {
			first = ev.at
			s.events = append(s.events, ev)
		}
		s.mu.Unlock()
		if st, ok := nfs3.StatusOf(err); ok && st != nfs3.Status(10008) { // NFS3ERR_JUKEBOX: try again later
			// The server answered with an error: the application sees it.
			s.fail(ev)
			return err
		}
		if time.Since(first) > streamGiveUp {
			ev.err = fmt.Errorf("%w after %v: %v", errGaveUp, streamGiveUp, err)
			s.fail(ev)
			return ev.err
		}
		select {
		case <-s.stopc:
			ev.err = fmt.Errorf("stopped while retrying: %w", err)
			s.fail(ev)
			return ev.err
		case <-time.After(250 * time.Millisecond):
		}
		if s.connect() == nil {
			s.mu.Lock()
			s.reconnects++
			s.mu.Unlock()
		}
	}
}

func (s *stream) fail(ev event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, ev)
}

// check compares a block read back with what was last written to it.
func (s *stream) check(b int, got []byte, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := pattern(b, s.gen[b])
	if s.gen[b] == 0 {
		want = make([]byte, streamBlockSize) // never written: a hole
	}
	if string(got) != string(want) {
		word := binary.LittleEndian.Uint64(got)
		s.corrupt = append(s.corrupt, fmt.Sprintf("%s of block %d: want generation %d, first word says block %d generation %d",
			how, b, s.gen[b], word>>48, word>>24&0xffffff))
	}
}

func (s *stream) mark(phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = phase
}

func (s *stream) opsNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops
}

// waitOps waits until the stream has done n operations.
func (s *stream) waitOps(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for s.opsNow() < n {
		select {
		case <-s.done:
			t.Fatalf("the client stopped after %d operations: %v", s.opsNow(), s.failed())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client did %d operations in %v, want %d", s.opsNow(), timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *stream) stop() {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	<-s.done
}

// stopAndVerify stops the stream and reads the whole file back.
func (s *stream) stopAndVerify(t *testing.T) {
	t.Helper()
	s.stop()
	s.readAll(t, "final read")
}

// verifyAgain reads the file back through a new mount (the server having been
// restarted since), looking it up by name.
func (s *stream) verifyAgain(t *testing.T) {
	t.Helper()
	// Exported once the new Basin has mounted it again, maybe after READY=1.
	start := time.Now()
	for err := s.connect(); err != nil; err = s.connect() {
		if time.Since(start) > time.Minute {
			t.Fatalf("mount %s:%s again: %v", s.server, s.dir, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("mounted again %.1f s after READY=1", time.Since(start).Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fh, _, err := s.c.Lookup(ctx, s.c.Root, streamFile)
	if err != nil {
		t.Fatalf("lookup %s: %v", streamFile, err)
	}
	s.fh = fh
	before := len(s.corrupt)
	s.readAll(t, "read after reinstall")
	if len(s.corrupt) == before {
		t.Logf("the volume's file reads back whole after remove and reinstall (%d blocks)", streamBlocks)
	}
}

func (s *stream) readAll(t *testing.T, how string) {
	t.Helper()
	buf := make([]byte, streamBlockSize)
	for b := range streamBlocks {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, _, err := s.c.Read(ctx, s.fh, buf, int64(b)*streamBlockSize)
		cancel()
		if err != nil || n != len(buf) && s.gen[b] != 0 {
			t.Fatalf("%s of block %d: %d bytes, %v", how, b, n, err)
		}
		clear(buf[n:])
		s.check(b, buf, how)
	}
	if len(s.corrupt) > 0 {
		t.Errorf("data differs from what was written: %s", strings.Join(s.corrupt, "; "))
	}
}

// eventsIn lists what interrupted or failed the client in a phase.
func (s *stream) eventsIn(phase string) []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event
	for _, e := range s.events {
		if e.phase == phase {
			out = append(out, e)
		}
	}
	return out
}

// failed counts the operations that failed as the application would see it,
// and corrupt reads.
func (s *stream) failed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.failures) + len(s.corrupt)
}

func (s *stream) report(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("client: %d operations (64 KiB FILE_SYNC writes and reads), %d interrupted and retried, %d reconnections, %.1f s spent waiting, %d failed, %d corrupt",
		s.ops, len(s.events), s.reconnects, s.waited.Seconds(), len(s.failures), len(s.corrupt))
	for _, e := range s.events {
		t.Logf("  interrupted: %s", e)
	}
	for _, e := range s.failures {
		t.Logf("  FAILED: %s", e)
	}
}
