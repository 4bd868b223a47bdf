package qos

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// Op is the kind of one Change.
type Op string

// The changes Plan produces, in the order Apply runs them.
const (
	OpDeleteAddr  Op = "delete-addr"  // stop classifying Addr into Key
	OpDeleteClass Op = "delete-class" // delete class Key (its children are deleted before it)
	OpChangeClass Op = "change-class" // change Key's rate/ceil in place: counters and queue stay
	OpAddClass    Op = "add-class"    // add Class (its parent is added before it)
	OpAddAddr     Op = "add-addr"     // classify Addr into Key
)

// Change is one step from a live tree towards a desired one.
type Change struct {
	Op    Op
	Key   string
	Class Class      // OpAddClass, OpChangeClass: the desired class, without Addrs
	Addr  netip.Addr // OpAddAddr, OpDeleteAddr
}

func (c Change) String() string {
	switch c.Op {
	case OpAddAddr, OpDeleteAddr:
		return fmt.Sprintf("%s %s %v", c.Op, c.Key, c.Addr)
	case OpAddClass, OpChangeClass:
		return fmt.Sprintf("%s %s parent=%q rate=%d ceil=%d", c.Op, c.Key, c.Class.Parent, c.Class.Rate, c.Class.Ceil)
	}
	return fmt.Sprintf("%s %s", c.Op, c.Key)
}

// Plan returns the changes that turn live into desired, touching nothing that is
// equal in both: address deletions, class deletions (children first), in-place
// rate/ceil changes, class additions (parents first), address additions. HTB cannot
// move a class to another parent, so a class whose Parent differs is deleted and
// added again (its counters restart). Both trees must be valid.
func Plan(live, desired Tree) []Change {
	lv, ds := index(live), index(desired)
	var out []Change
	// gone: in live but not kept as the same class (absent or re-parented).
	gone := map[string]bool{}
	for k, l := range lv {
		if d, ok := ds[k]; !ok || d.Parent != l.Parent {
			gone[k] = true
		}
	}
	// A class under a gone parent is gone too: the kernel deletes a subtree bottom-up only.
	for changed := true; changed; {
		changed = false
		for k, l := range lv {
			if !gone[k] && l.Parent != "" && gone[l.Parent] {
				gone[k], changed = true, true
			}
		}
	}
	// Address deletions: from gone classes, and addresses that left a kept class.
	for _, k := range sortedKeys(lv) {
		want := map[netip.Addr]bool{}
		if !gone[k] {
			for _, a := range ds[k].Addrs {
				want[a] = true
			}
		}
		for _, a := range sortedAddrs(lv[k].Addrs) {
			if !want[a] {
				out = append(out, Change{Op: OpDeleteAddr, Key: k, Addr: a})
			}
		}
	}
	// Class deletions, deepest first.
	var dels []string
	for k := range gone {
		dels = append(dels, k)
	}
	slices.SortFunc(dels, func(a, b string) int {
		return cmp.Or(cmp.Compare(depth(lv, b), depth(lv, a)), cmp.Compare(a, b))
	})
	for _, k := range dels {
		out = append(out, Change{Op: OpDeleteClass, Key: k})
	}
	// In-place changes.
	for _, k := range sortedKeys(ds) {
		l, ok := lv[k]
		if ok && !gone[k] && (l.Rate != ds[k].Rate || l.Ceil != ds[k].Ceil) {
			out = append(out, Change{Op: OpChangeClass, Key: k, Class: bare(ds[k])})
		}
	}
	// Additions, parents first.
	var adds []string
	for k := range ds {
		if _, ok := lv[k]; !ok || gone[k] {
			adds = append(adds, k)
		}
	}
	slices.SortFunc(adds, func(a, b string) int {
		return cmp.Or(cmp.Compare(depth(ds, a), depth(ds, b)), cmp.Compare(a, b))
	})
	for _, k := range adds {
		out = append(out, Change{Op: OpAddClass, Key: k, Class: bare(ds[k])})
	}
	// Address additions.
	for _, k := range sortedKeys(ds) {
		have := map[netip.Addr]bool{}
		if !gone[k] {
			if l, ok := lv[k]; ok {
				for _, a := range l.Addrs {
					have[a] = true
				}
			}
		}
		for _, a := range sortedAddrs(ds[k].Addrs) {
			if !have[a] {
				out = append(out, Change{Op: OpAddAddr, Key: k, Addr: a})
			}
		}
	}
	return out
}

func index(t Tree) map[string]Class {
	m := make(map[string]Class, len(t.Classes))
	for _, c := range t.Classes {
		m[c.Key] = c
	}
	return m
}

func bare(c Class) Class { c.Addrs = nil; return c }

func depth(m map[string]Class, k string) int {
	n := 0
	for p := m[k].Parent; p != "" && n <= len(m); p = m[p].Parent {
		n++
	}
	return n
}

func sortedKeys(m map[string]Class) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sortedAddrs(as []netip.Addr) []netip.Addr {
	as = slices.Clone(as)
	slices.SortFunc(as, netip.Addr.Compare)
	return as
}

// Burst is the HTB burst (and cburst) in bytes for a rate in bytes per second: 10 ms
// of the rate, at least 32 KiB. HTB's default is about one MTU, with which classes
// delivered only 87–95 % of their rate.
func Burst(rate uint64) uint32 {
	const minBurst = 32 << 10
	b := rate / 100
	if b < minBurst {
		b = minBurst
	}
	return uint32(min(b, math.MaxUint32))
}

// Quantum is a class's HTB quantum: the bytes it may send per round when it borrows
// from its parent, so siblings share spare bandwidth in proportion to it. One
// millisecond of the rate, kept between 60,000 bytes (above the MTU, so every round
// sends) and 200,000 (HTB warns above that).
func Quantum(rate uint64) uint32 {
	return uint32(min(max(rate/1000, 60000), 200000))
}
