package dataplane

import (
	"context"
	"log/slog"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
)

// The grace kick. A Ganesha with RADOS recovery (rados_cluster) starts in
// grace: new NFSv4 opens and locks are refused (NFS4ERR_GRACE) while the
// clients it recorded reclaim their state. It lifts the grace once every one
// of them has sent RECLAIM_COMPLETE, but it only looks when its reaper runs:
// every 10 s, or when its grace database is written (the write's RADOS notify
// wakes the reaper, rados_grace_watchcb). So a grace whose clients reclaimed
// in its first second still held new opens for up to 10 s more.
//
// While its Ganesha is in grace, Basin therefore writes the sandbox's grace
// database once a second: `ganesha-rados-grace enforce NODEID`, which sets the
// node's enforcing flag (held while in grace) and notifies. The write asserts
// the object's version, so a change Ganesha makes meanwhile is redone on top,
// not lost; a kick landing between Ganesha's lift (which clears the flag) and
// the next InGrace sets the flag again, which changes nothing with one member
// per grace database, as Basin makes them. The grace is lifted by Ganesha
// itself, on its own rule, never by Basin: a client that has not reclaimed
// holds it as before, for up to the grace period. After a crash the dead
// instance's watch stays on the object for up to 30 s, and each notify waits
// 3 s for it, so the kicks then come about every 4 s. The kicks end with the
// grace, with the Ganesha process (its context), with the sandbox's holder,
// when Basin lets go of the sandbox, or after graceKickBound, whichever comes
// first.

// graceKickEvery is the kick's period.
const graceKickEvery = time.Second

// graceKickBound bounds the kicks of one Ganesha start: its grace period and
// some more for a start that took long to enter it.
const graceKickBound = nfs.DefaultGracePeriod + 20*time.Second

// graceAskTimeout bounds one InGrace call.
const graceAskTimeout = 5 * time.Second

// graceBus is what the kick asks Ganesha: nfs.DBus.
type graceBus interface {
	InGrace(ctx context.Context) (bool, error)
}

var _ graceBus = (*nfs.DBus)(nil)

// graceKicker kicks one Ganesha's grace database while it is in grace.
type graceKicker struct {
	inGrace func(ctx context.Context) (bool, error)
	kick    func(ctx context.Context) error
	every   time.Duration
	bound   time.Duration
	log     *slog.Logger
}

// run kicks until the grace is over (true), or ctx ends or the bound passes
// (false). It returns the number of kicks sent.
func (g *graceKicker) run(ctx context.Context) (lifted bool, kicks int) {
	start := time.Now()
	deadline := start.Add(g.bound)
	var lastErr, lastKickErr string
	for {
		actx, cancel := context.WithTimeout(ctx, graceAskTimeout)
		in, err := g.inGrace(actx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return false, kicks
		case err != nil:
			// Not answering yet, or restarting: asked again at the next beat.
			if err.Error() != lastErr {
				g.log.Debug("grace kick: cannot ask Ganesha whether it is in grace", "err", err)
				lastErr = err.Error()
			}
		case !in:
			if kicks > 0 {
				g.log.Info("grace lifted", "after", time.Since(start).Round(100*time.Millisecond), "kicks", kicks)
			}
			return true, kicks
		default:
			if err := g.kick(ctx); err != nil {
				if ctx.Err() != nil {
					return false, kicks
				}
				if err.Error() != lastKickErr {
					g.log.Warn("grace kick", "err", err)
					lastKickErr = err.Error()
				}
			} else {
				kicks++
			}
		}
		if time.Now().Add(g.every).After(deadline) {
			g.log.Warn("grace kick: still in grace, giving up", "after", time.Since(start).Round(100*time.Millisecond), "kicks", kicks,
				"last_ask_error", lastErr)
			return false, kicks
		}
		select {
		case <-ctx.Done():
			return false, kicks
		case <-time.After(g.every):
		}
	}
}

// kickGrace kicks the sandbox's Ganesha while it is in grace (see above); ctx
// is that Ganesha process's. Nothing without RADOS recovery.
func (sb *sandbox) kickGrace(ctx context.Context) {
	bus, ok := sb.bus.(graceBus)
	if !ok || sb.radosRecovery() == nil {
		return
	}
	// The tool enters the holder's namespaces by pid: never once it is gone.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sb.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	g := &graceKicker{inGrace: bus.InGrace, every: graceKickEvery, bound: graceKickBound, log: sb.log.With("daemon", "ganesha"),
		kick: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return sb.graceTool(ctx, "enforce")
		}}
	g.run(ctx)
}
