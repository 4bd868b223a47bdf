package controller

import "sync"

// lockSet names the resources an operation (or a resync of one volume) works on:
// Exclusive ones no other work may touch meanwhile; Shared ones must not change
// under it, so they exclude exclusive holders but not other shared ones. A volume's
// operation holds its volume exclusively and its pool shared: two volumes of one
// pool change side by side, and both wait while an operation changes the pool. A
// snapshot's operation holds its volume exclusively (snapshot exports and reverts
// of one volume never interleave).
type lockSet struct {
	Exclusive []string
	Shared    []string
}

// lockTable grants lock sets all at once or not at all, so work that holds some
// resource never waits for another (no deadlock).
type lockTable struct {
	mu     sync.Mutex
	excl   map[string]bool
	shared map[string]int
}

func newLockTable() *lockTable {
	return &lockTable{excl: map[string]bool{}, shared: map[string]int{}}
}

// tryAcquire grants ls if nothing conflicts with it.
func (l *lockTable) tryAcquire(ls lockSet) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ls.Exclusive {
		if l.excl[r] || l.shared[r] > 0 {
			return false
		}
	}
	for _, r := range ls.Shared {
		if l.excl[r] {
			return false
		}
	}
	for _, r := range ls.Exclusive {
		l.excl[r] = true
	}
	for _, r := range ls.Shared {
		l.shared[r]++
	}
	return true
}

func (l *lockTable) release(ls lockSet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ls.Exclusive {
		delete(l.excl, r)
	}
	for _, r := range ls.Shared {
		if l.shared[r]--; l.shared[r] <= 0 {
			delete(l.shared, r)
		}
	}
}

// claims remembers, during one scheduling pass, the resources of operations that
// could not start, so that a later operation on the same resource does not overtake
// an earlier one: each resource's operations run in the order they were created.
type claims struct {
	excl, shared map[string]bool
}

func (c *claims) conflicts(ls lockSet) bool {
	for _, r := range ls.Exclusive {
		if c.excl[r] || c.shared[r] {
			return true
		}
	}
	for _, r := range ls.Shared {
		if c.excl[r] {
			return true
		}
	}
	return false
}

func (c *claims) add(ls lockSet) {
	if c.excl == nil {
		c.excl, c.shared = map[string]bool{}, map[string]bool{}
	}
	for _, r := range ls.Exclusive {
		c.excl[r] = true
	}
	for _, r := range ls.Shared {
		c.shared[r] = true
	}
}
