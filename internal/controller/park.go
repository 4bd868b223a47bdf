package controller

import (
	"fmt"
	"time"
)

// An operation whose storage work goes on without it (a clone the backend
// copies in the background) does not keep a worker while it waits: it parks.
// Its run returns a *parkError; the scheduler keeps the operation's locks (no
// other work touches its volume or changes its pool meanwhile), frees the
// worker, and runs the operation again once the wait is over. Parking is in
// memory only: after a restart the operation resumes like any unfinished one.

// parkError ends a run that waits for storage work in progress.
type parkError struct{ wait time.Duration }

func (e *parkError) Error() string {
	return fmt.Sprintf("waiting %s for storage work in progress", e.wait)
}

// parked is an operation between two runs: when it may run again and the
// locks it holds meanwhile.
type parked struct {
	until time.Time
	locks lockSet
}

// nextParkWait is how long operation name waits before it asks again: from
// firstInProgressWait, doubled each time it parks, up to inProgressWait.
func (c *Controller) nextParkWait(name string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.parkWait[name]
	if w == 0 {
		w = firstInProgressWait
	} else {
		w = min(2*w, inProgressWait)
	}
	c.parkWait[name] = w
	return w
}

// park records that op's run parked for wait, holding ls.
func (c *Controller) park(name string, ls lockSet, wait time.Duration) {
	c.mu.Lock()
	c.parkedOps[name] = parked{until: time.Now().Add(wait), locks: ls}
	delete(c.running, name)
	c.mu.Unlock()
	time.AfterFunc(wait, c.Wake)
}

// unparkLocked forgets a parked operation that will not run here again (it is
// finished, or another node runs it) and releases its locks. Called with
// c.mu held.
func (c *Controller) unparkLocked(name string) {
	if p, ok := c.parkedOps[name]; ok {
		c.locks.release(p.locks)
		delete(c.parkedOps, name)
	}
	delete(c.parkWait, name)
}
