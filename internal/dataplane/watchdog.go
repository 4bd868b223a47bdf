package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
)

// The Ganesha watchdog (docs/architecture.md, "Stuck requests and a wedged
// Ganesha"). While a sandbox's Ganesha is ready, every watchEvery it asks
// Ganesha over DBus for its requests in flight (Basin's patch 0008): each
// request in flight longer than StuckRequestAfter is logged once, with what it
// is, its client and its export, and counted. Ganesha made progress if a
// request finished since the last look, or else if it answers an NFS NULL call
// on its own port (a new TCP connection, inside the sandbox: the same transport
// and pool of workers clients use). One that made no progress for WedgedAfter is
// wedged: Service.Watch returns, and the supervisor kills it and starts it again
// with its exports, as it does for one that died. A server that is slow but
// finishes requests is never restarted, however old its oldest request.

// Defaults of Options.StuckRequestAfter and Options.WedgedAfter.
const (
	DefaultStuckRequestAfter = 30 * time.Second
	DefaultWedgedAfter       = 60 * time.Second
)

// inFlightBus is what the watchdog asks Ganesha: nfs.DBus.
type inFlightBus interface {
	RequestsInFlight(ctx context.Context, olderThan time.Duration, after uint64) (nfs.InFlight, error)
}

var _ inFlightBus = (*nfs.DBus)(nil)

// watchdog watches one Ganesha process.
type watchdog struct {
	stuckAfter, wedgedAfter time.Duration
	bus                     inFlightBus
	// probe sends an NFS NULL call and waits for the answer.
	probe func(ctx context.Context) error
	// export names an export for the log ("" if unknown).
	export func(id int32) string
	// onStuck, if set, gets the requests found stuck since the last look and
	// those stuck now, after each look (and 0, 0 when the watch ends).
	onStuck func(found, stuck int)
	log     *slog.Logger
}

// every is how often the watchdog looks: 5 s, or a third of the shorter bound.
func (w *watchdog) every() time.Duration {
	return max(100*time.Millisecond, min(5*time.Second, w.stuckAfter/3, w.wedgedAfter/3))
}

// run watches until ctx ends (nil) or Ganesha is wedged (an error saying why).
func (w *watchdog) run(ctx context.Context) error {
	every := w.every()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var (
		after         uint64 // the largest sequence number seen stuck
		finished      uint64
		known         bool
		last          nfs.InFlight
		busErr, prErr error
		progress      = time.Now()
	)
	defer func() {
		if w.onStuck != nil {
			w.onStuck(0, 0) // the process is going: its requests with it
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		progressed := false
		lctx, cancel := context.WithTimeout(ctx, every)
		r, err := w.bus.RequestsInFlight(lctx, w.stuckAfter, after)
		cancel()
		busErr = err
		if err == nil {
			progressed = known && r.Finished != finished
			finished, known, last = r.Finished, true, r
			for _, q := range r.Requests {
				w.log.Warn("NFS request stuck", "op", q.Op(), "client", q.Client, "export", w.exportName(q.ExportID),
					"for", q.Age.Round(time.Second), "xid", q.XID, "bound", w.stuckAfter)
			}
			if more := r.New - len(r.Requests); more > 0 {
				w.log.Warn("more NFS requests stuck", "count", more, "bound", w.stuckAfter)
			}
			after = max(after, r.MaxSeq)
			if w.onStuck != nil {
				w.onStuck(r.New, r.Older)
			}
		}
		if !progressed {
			pctx, cancel := context.WithTimeout(ctx, every)
			prErr = w.probe(pctx)
			cancel()
			progressed = prErr == nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if progressed {
			progress = time.Now()
			continue
		}
		if since := time.Since(progress); since >= w.wedgedAfter {
			return fmt.Errorf("no request finished and no NULL call answered for %v (in flight %d, %d of them for over %v, the oldest for %v; DBus: %v; NULL: %v)",
				since.Round(time.Second), last.Now, last.Older, w.stuckAfter, last.Oldest.Round(time.Second), errText(busErr), errText(prErr))
		}
	}
}

func (w *watchdog) exportName(id int32) string {
	if id < 0 || w.export == nil {
		return ""
	}
	return w.export(id)
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// nfsLoopback is where the watchdog's NULL calls go, inside the sandbox: Ganesha
// listens on every address of the sandbox's network namespace.
var nfsLoopback = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 2049)

// watchGanesha is the Ganesha service's Watch: the watchdog, and the grace
// kick beside it (gracekick.go).
func (sb *sandbox) watchGanesha(ctx context.Context) error {
	go sb.kickGrace(ctx)
	bus, ok := sb.bus.(inFlightBus)
	if !ok {
		<-ctx.Done()
		return nil
	}
	w := &watchdog{stuckAfter: sb.watch.stuckAfter, wedgedAfter: sb.watch.wedgedAfter, bus: bus, log: sb.log.With("daemon", "ganesha"),
		probe:  sb.probeNFS,
		export: sb.exportPseudo,
	}
	if sb.watch.onStuck != nil {
		w.onStuck = func(found, stuck int) { sb.watch.onStuck(sb.net.Name, found, stuck) }
	}
	return w.run(ctx)
}

// probeNFS sends an NFS NULL call to Ganesha from inside the sandbox.
func (sb *sandbox) probeNFS(ctx context.Context) error {
	c, err := dialInNetns(ctx, sb.ns, "tcp", nfsLoopback.String())
	if err != nil {
		return err
	}
	defer c.Close()
	return nfs.Null(ctx, c)
}

// exportPseudo is export id's pseudo path, or its number if it is not loaded
// (or the exports are being changed: the watchdog never waits for them).
func (sb *sandbox) exportPseudo(id int32) string {
	if !sb.exportMu.TryLock() {
		return fmt.Sprint(id)
	}
	defer sb.exportMu.Unlock()
	if le, ok := sb.loaded[uint64(id)]; ok {
		return le.ex.Pseudo
	}
	return fmt.Sprint(id)
}
