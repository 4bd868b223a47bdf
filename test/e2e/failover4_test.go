package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// nfs4Writer writes a new file every 100 ms through an NFSv4.1 session from
// a client host: OPEN (create), WRITE with FILE_SYNC and CLOSE, and
// remembers the writes the server acknowledged. When a call fails for the
// connection, a timeout or a session the server no longer knows, it does
// what a Linux client does when the server it reaches is another one (a new
// server scope): a new connection to the same address, a new client ID and
// session under the same client owner and boot verifier (so a server that
// recorded it, and restarted since, knows it and lets its RECLAIM_COMPLETE
// end the grace), and the same file handle as before (its directory's, kept
// from the first lookup), then a new file. NFS4ERR_GRACE is waited out, as a
// client retries it; any other refusal is an error a client would see.
type nfs4Writer struct {
	h     *clienthost.Host
	ep    netip.Addr
	dir   []byte // the volume's root, looked up once
	owner string
	boot  [8]byte // the client's boot verifier, kept across connections

	mu     sync.Mutex
	c      *nfsraw.Client
	acked  []string
	at     []time.Time
	errors []string
	events []string // what else happened, when: waits on grace, new sessions
}

// event notes what happened at now, once per kind in a row.
func (w *nfs4Writer) event(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.events); n > 0 && w.events[n-1][13:] == what {
		return
	}
	w.events = append(w.events, time.Now().Format("15:04:05.000")+" "+what)
}

// newNFS4Writer connects from h to the volume exported at ep as export.
func newNFS4Writer(ctx context.Context, h *clienthost.Host, ep netip.Addr, export, owner string) (*nfs4Writer, error) {
	w := &nfs4Writer{h: h, ep: ep, owner: owner}
	copy(w.boot[:], time.Now().Format("05.00000"))
	if err := w.dial(ctx); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dir, err := w.c.LookupPath(dctx, export)
	if err != nil {
		w.c.Close()
		return nil, fmt.Errorf("look up %s: %w", export, err)
	}
	w.dir = dir
	return w, nil
}

func (w *nfs4Writer) dial(ctx context.Context) error {
	return w.h.Within(func() error {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := nfsraw.Dial41With(dctx, w.ep.String(), 2049, nfsraw.Auth{Machine: w.owner},
			nfsraw.Options41{Owner: w.owner, Verifier: w.boot})
		if err == nil {
			w.c = c
		}
		return err
	})
}

// write makes file name holding its name, acknowledged with FILE_SYNC.
func (w *nfs4Writer) write(ctx context.Context, name string) error {
	fh, sid, err := w.c.OpenFile(ctx, w.dir, name, nfsraw.ShareAccessWrite, nfsraw.ShareDenyNone, []byte(w.owner+"/"+name), true)
	if err != nil {
		return err
	}
	wr := &nfsraw.Write{StateID: sid, Data: []byte(name)}
	if err := w.c.Run(ctx, &nfsraw.PutFH{FH: fh}, wr); err != nil {
		return err
	}
	if wr.Count != uint32(len(name)) {
		return fmt.Errorf("short write: %d of %d bytes", wr.Count, len(name))
	}
	// Written with FILE_SYNC: the write is acknowledged whatever CLOSE says.
	w.c.Run(ctx, &nfsraw.PutFH{FH: fh}, &nfsraw.Close{StateID: sid}) //nolint:errcheck // see above
	return nil
}

// run writes until stop is closed or ctx ends.
func (w *nfs4Writer) run(ctx context.Context, stop <-chan struct{}) {
	defer func() { w.c.Close() }()
	for i := 0; ctx.Err() == nil; {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("v4-%05d", i)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.write(wctx, name)
		cancel()
		i++ // a name is never written twice: a late attempt must not truncate an acknowledged file
		if err == nil {
			w.event("acked")
			w.mu.Lock()
			w.acked, w.at = append(w.acked, name), append(w.at, time.Now())
			w.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if st, ok := nfsraw.StatusOf(err); ok && st == nfsraw.ErrGrace {
			w.event("NFS4ERR_GRACE")
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if st, ok := nfsraw.StatusOf(err); ok && !nfsraw.NeedsReestablish(err) {
			w.mu.Lock()
			w.errors = append(w.errors, fmt.Sprintf("%s at %s: %v", name, time.Now().Format(time.StampMilli), st))
			w.mu.Unlock()
		}
		w.event(fmt.Sprintf("new session after: %v", err))
		w.c.Close()
		time.Sleep(200 * time.Millisecond)
		for ctx.Err() == nil && w.dial(ctx) != nil {
			time.Sleep(200 * time.Millisecond)
		}
		w.event("connected")
	}
}

// snapshot returns what was acknowledged and the errors so far.
func (w *nfs4Writer) snapshot() (acked []string, at []time.Time, errs []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acked...), append([]time.Time(nil), w.at...), append([]string(nil), w.errors...)
}

// start runs the writer in the background; the returned stop ends it and
// waits for it.
func (w *nfs4Writer) start(ctx context.Context) (stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); w.run(ctx, quit) }()
	var once sync.Once
	return func() { once.Do(func() { close(quit) }); <-done }
}

// waitAcked waits until the writer has n acknowledged writes in all.
func (w *nfs4Writer) waitAcked(ctx context.Context, n int) error {
	for {
		if acked, _, _ := w.snapshot(); len(acked) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			acked, _, errs := w.snapshot()
			return fmt.Errorf("%d NFSv4.1 writes acknowledged, want %d; errors %q", len(acked), n, errs)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
