// Package tick runs a function on a beat until a context ends: the heartbeat,
// lease renewals and periodic passes of the daemon, controller and API.
package tick

import (
	"context"
	"time"
)

// Every calls fn every d until ctx ends (the first call d after the start).
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// Paced calls fn until ctx ends, each time next() after the call before
// ended (the first next() after the start) or at once when kick receives,
// whichever comes first: a loop whose beat follows what it last found.
func Paced(ctx context.Context, next func() time.Duration, kick <-chan struct{}, fn func()) {
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		fn()
		t.Reset(next()) // since Go 1.23 no stale tick survives a Reset

	}
}
