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
