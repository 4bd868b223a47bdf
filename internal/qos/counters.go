package qos

import (
	"math"
	"time"
)

// MaxFrame is the most HTB charges for one frame: a 64 KiB segmentation-offload
// frame counted as its segments, each with its Ethernet, IP and TCP headers
// (45 segments of 1,448 bytes, 66 bytes of headers each, rounded up).
const MaxFrame = 70000

// Interval is what a class did between two reads of its Counters.
type Interval struct {
	// Sent and Received are wire bytes its addresses sent (reads) and received
	// (writes); Drops are packets its queue dropped.
	Sent, Received, Drops float64
	// AtCeiling is the share of the interval the class spent held at its
	// ceiling, 0 to 1 (see Between).
	AtCeiling float64
}

// Between returns what a class did from prev to cur, read dt apart. ok is false
// when its counters went back (the class or an address's filter was made
// again; its drops or overlimits, 32-bit, went back even if its bytes did not):
// nothing can be said of that interval.
//
// Received is ΔBytes + ΔBacklog − ΔSent, at least 0: what HTB let through or
// still holds, less what the addresses sent; a packet the queue dropped on the
// sent direction makes it that much lower.
//
// AtCeiling estimates the time the class spent throttled by its ceiling. While
// held there it sends at exactly its ceiling and goes over it about once per
// frame; below it, it never goes over. So the time is at most the interval's
// wire bytes at the ceiling's rate (ΔBytes / Ceil), and at most the throttled
// frames' (ΔOverlimits × MaxFrame / Ceil): the share is the smaller of the two
// over dt, at most 1. A class held back by its parent (a project cap, a Flex
// pool's budget) rather than its own ceiling does not go over its own, and
// counts nothing here.
func Between(prev, cur Counters, dt time.Duration) (iv Interval, ok bool) {
	// Packets, drops, overlimits and the backlog are 32-bit in the kernel's
	// statistics: differences are taken modulo 2³², and so wrap correctly. A
	// difference of 2³¹ or more is a counter that went back (no class drops or
	// goes over 2³¹ times in one interval): a class made again, which can have
	// moved more bytes than its predecessor had by the next read.
	back32 := func(a, b uint64) bool { return uint32(b)-uint32(a) >= 1<<31 }
	if cur.Bytes < prev.Bytes || cur.Sent < prev.Sent || dt <= 0 ||
		back32(prev.Drops, cur.Drops) || back32(prev.Overlimits, cur.Overlimits) {
		return Interval{}, false
	}
	d32 := func(a, b uint64) float64 { return float64(uint32(b) - uint32(a)) }
	iv.Sent = float64(cur.Sent - prev.Sent)
	through := float64(cur.Bytes-prev.Bytes) + float64(int64(cur.Backlog)-int64(prev.Backlog))
	iv.Received = max(0, through-iv.Sent)
	iv.Drops = d32(prev.Drops, cur.Drops)
	if cur.Ceil > 0 {
		full := float64(cur.Ceil) * dt.Seconds()
		iv.AtCeiling = math.Min(1, math.Min(float64(cur.Bytes-prev.Bytes), d32(prev.Overlimits, cur.Overlimits)*MaxFrame)/full)
	}
	return iv, true
}
