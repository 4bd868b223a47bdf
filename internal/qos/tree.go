package qos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Class is one HTB class of the desired tree. Rates are wire bytes per second.
type Class struct {
	Key    string       // stable identity chosen by the caller, e.g. "project/p1", "pool/…", "volume/…"
	Parent string       // Key of the parent class; "" = directly under the root
	Rate   uint64       // guaranteed (HTB rate)
	Ceil   uint64       // ceiling (HTB ceil), >= Rate
	Addrs  []netip.Addr // endpoint addresses classified into this class (leaves only): src = reads, dst = writes
}

// Tree is the desired (or live) set of classes on one link. An empty Tree means no
// shaping at all: Apply then removes everything.
type Tree struct{ Classes []Class }

// Link names the device whose traffic is shaped, e.g. {"basin-br0", "eth0"}.
// Netns "" is the current network namespace.
type Link struct {
	Netns string
	Dev   string
}

func (l Link) String() string {
	if l.Netns == "" {
		return l.Dev
	}
	return l.Netns + "/" + l.Dev
}

// Counters are a class's kernel statistics, cumulative since the class (or, for
// Sent, the address's filter) was made: what it let through, both directions
// together (Bytes, Packets: on the wire, Ethernet, IP and TCP headers included,
// a segmentation-offload frame as its segments), what its queue dropped (Drops,
// packets), how often it went over its ceiling (Overlimits: HTB counts each time
// the class runs out of ceiling tokens and must wait; a class held at its ceiling
// does so about once per frame it sends, a class below it never), what it holds
// queued now (Backlog, bytes), and its Rate and Ceil (bytes per second).
//
// Sent and SentPackets are what the class's addresses sent (the read direction:
// the endpoint is the source), counted as the link redirects them into the IFB,
// with the same lengths HTB charges; they count before the class's queue, Bytes
// after it. What the addresses received is therefore, over an interval,
// ΔBytes + ΔBacklog − ΔSent (less what the queue dropped of the sent direction).
type Counters struct {
	Bytes, Packets, Drops, Overlimits, Backlog uint64
	Rate, Ceil                                 uint64
	Sent, SentPackets                          uint64
}

// DefaultKey is the key under which Counters reports the default class, which holds
// unclassified traffic (ARP, addresses in no class). No Class may use it.
const DefaultKey = ""

// Driver applies desired trees to links and reads them back.
type Driver interface {
	// Apply makes the live tree on link equal t, changing only what differs: a class
	// whose rate/ceil changed is changed in place, so running I/O continues; new
	// classes/filters are added, gone ones removed. The first Apply on a link sets up
	// the IFB, the root HTB, the default class and the redirection.
	Apply(ctx context.Context, l Link, t Tree) error
	// Read returns the live tree on link, mapped back to Keys, in canonical order.
	Read(ctx context.Context, l Link) (Tree, error)
	// Counters returns per class Key what the kernel counted (DefaultKey: the default class).
	Counters(ctx context.Context, l Link) (map[string]Counters, error)
	// Remove takes down everything Apply made on link; idempotent.
	Remove(ctx context.Context, l Link) error
}

// ErrInvalid marks a tree that Validate refuses.
var ErrInvalid = errors.New("invalid qos tree")

func invalid(key, format string, args ...any) error {
	return fmt.Errorf("%w: class %q: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
}

// Validate checks a tree: unique non-empty keys, parents exist, no cycles, only
// leaves have Addrs, IPv4 addresses each in one class only, Ceil >= Rate > 0, and
// the sum of the children's Rate at most the parent's Rate (HTB enforces a parent's
// ceiling only then: a child under its own rate sends without asking its ancestors).
// Errors wrap ErrInvalid and name the offending Key.
func (t Tree) Validate() error {
	byKey := make(map[string]*Class, len(t.Classes))
	for i := range t.Classes {
		c := &t.Classes[i]
		if c.Key == DefaultKey {
			return invalid(c.Key, "empty key")
		}
		if _, dup := byKey[c.Key]; dup {
			return invalid(c.Key, "duplicate key")
		}
		byKey[c.Key] = c
	}
	children := map[string]uint64{} // parent key → Σ child rate
	hasChild := map[string]bool{}
	owner := map[netip.Addr]string{}
	for i := range t.Classes {
		c := &t.Classes[i]
		if c.Rate == 0 {
			return invalid(c.Key, "rate is 0")
		}
		if c.Ceil < c.Rate {
			return invalid(c.Key, "ceil %d below rate %d", c.Ceil, c.Rate)
		}
		if c.Parent != "" {
			if _, ok := byKey[c.Parent]; !ok {
				return invalid(c.Key, "parent %q does not exist", c.Parent)
			}
			children[c.Parent] += c.Rate
			hasChild[c.Parent] = true
		}
		for _, a := range c.Addrs {
			if !a.Is4() {
				return invalid(c.Key, "address %v is not IPv4", a)
			}
			if o, dup := owner[a]; dup {
				return invalid(c.Key, "address %v already in class %q", a, o)
			}
			owner[a] = c.Key
		}
	}
	for i := range t.Classes {
		c := &t.Classes[i]
		if hasChild[c.Key] && len(c.Addrs) > 0 {
			return invalid(c.Key, "has children and addresses: only leaves carry addresses")
		}
		if sum := children[c.Key]; sum > c.Rate {
			return invalid(c.Key, "children's rates sum to %d, above its rate %d", sum, c.Rate)
		}
		// Walk up: a chain longer than the number of classes is a cycle.
		p, n := c.Parent, 0
		for p != "" {
			if n++; n > len(t.Classes) || p == c.Key {
				return invalid(c.Key, "parent cycle")
			}
			p = byKey[p].Parent
		}
	}
	return nil
}

// Canonical returns a copy of t with classes sorted by Key and each class's
// addresses sorted; nil and empty address lists are the same. Read returns trees in
// this form; compare a desired tree's Canonical with it.
func (t Tree) Canonical() Tree {
	out := Tree{Classes: make([]Class, len(t.Classes))}
	for i, c := range t.Classes {
		c.Addrs = slices.Clone(c.Addrs)
		slices.SortFunc(c.Addrs, netip.Addr.Compare)
		if len(c.Addrs) == 0 {
			c.Addrs = nil
		}
		out.Classes[i] = c
	}
	slices.SortFunc(out.Classes, func(a, b Class) int { return cmp.Compare(a.Key, b.Key) })
	if len(out.Classes) == 0 {
		out.Classes = nil
	}
	return out
}

// Equal reports whether two trees hold the same classes, whatever their order.
func (t Tree) Equal(u Tree) bool {
	a, b := t.Canonical(), u.Canonical()
	return slices.EqualFunc(a.Classes, b.Classes, func(x, y Class) bool {
		return x.Key == y.Key && x.Parent == y.Parent && x.Rate == y.Rate && x.Ceil == y.Ceil && slices.Equal(x.Addrs, y.Addrs)
	})
}
