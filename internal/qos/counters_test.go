package qos

import (
	"math"
	"testing"
	"time"
)

func TestBetween(t *testing.T) {
	const ceil = 1 << 20 // bytes per second
	dt := 10 * time.Second
	base := Counters{Bytes: 5e9, Sent: 4e9, Overlimits: 1000, Drops: 7, Backlog: 3000, Ceil: ceil}
	for _, tc := range []struct {
		name string
		cur  Counters
		want Interval
	}{
		{name: "idle", cur: base, want: Interval{}},
		{name: "held at the ceiling all along: one overlimit per frame sent",
			cur:  Counters{Bytes: base.Bytes + 10*ceil, Sent: base.Sent + 10*ceil - 1e5, Overlimits: base.Overlimits + 160, Drops: base.Drops, Backlog: base.Backlog, Ceil: ceil},
			want: Interval{Sent: 10*ceil - 1e5, Received: 1e5, AtCeiling: 1}},
		{name: "bursts paced by the ceiling, 40 % of the time",
			cur:  Counters{Bytes: base.Bytes + 4*ceil, Sent: base.Sent + 4*ceil, Overlimits: base.Overlimits + 70, Drops: base.Drops, Backlog: base.Backlog, Ceil: ceil},
			want: Interval{Sent: 4 * ceil, AtCeiling: 0.4}},
		{name: "90 % of the ceiling, smooth: three frames throttled",
			cur:  Counters{Bytes: base.Bytes + 9*ceil, Sent: base.Sent + 9*ceil, Overlimits: base.Overlimits + 3, Drops: base.Drops, Backlog: base.Backlog, Ceil: ceil},
			want: Interval{Sent: 9 * ceil, AtCeiling: 3 * MaxFrame / (10.0 * ceil)}},
		{name: "busy below the ceiling, never over it",
			cur:  Counters{Bytes: base.Bytes + 9*ceil, Sent: base.Sent + 9*ceil, Overlimits: base.Overlimits, Drops: base.Drops, Backlog: base.Backlog, Ceil: ceil},
			want: Interval{Sent: 9 * ceil}},
		{name: "writes: what came through beyond what was sent, the queue's growth included",
			cur:  Counters{Bytes: base.Bytes + 2e6, Sent: base.Sent + 5e4, Overlimits: base.Overlimits, Drops: base.Drops + 2, Backlog: base.Backlog + 1e5, Ceil: ceil},
			want: Interval{Sent: 5e4, Received: 2e6 + 1e5 - 5e4, Drops: 2}},
		{name: "sent packets still queued: received never below zero",
			cur:  Counters{Bytes: base.Bytes + 1e5, Sent: base.Sent + 2e5, Overlimits: base.Overlimits, Drops: base.Drops, Backlog: 0, Ceil: ceil},
			want: Interval{Sent: 2e5}},
		{name: "32-bit overlimits and drops wrap",
			cur:  Counters{Bytes: base.Bytes + 10*ceil, Sent: base.Sent + 10*ceil, Overlimits: (base.Overlimits + 1<<32 - 1000 + 200) & (1<<32 - 1), Drops: 3, Backlog: base.Backlog, Ceil: ceil},
			want: Interval{Sent: 10 * ceil, Drops: 7 + 3, AtCeiling: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := base
			if tc.name == "32-bit overlimits and drops wrap" {
				prev.Overlimits = 1<<32 - 1000
				prev.Drops = 1<<32 - 7
			}
			got, ok := Between(prev, tc.cur, dt)
			if !ok {
				t.Fatal("not ok")
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{{"Sent", got.Sent, tc.want.Sent}, {"Received", got.Received, tc.want.Received}, {"Drops", got.Drops, tc.want.Drops},
				{"AtCeiling", got.AtCeiling, tc.want.AtCeiling}} {
				if math.Abs(f.got-f.want) > 1e-9*max(1, math.Abs(f.want)) {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
		})
	}
	// Counters that went back (the class made again) say nothing of the interval.
	// A class made again can have moved more bytes by the next read than its
	// predecessor had: its 32-bit drops or overlimits going back say so.
	remade := Counters{Bytes: base.Bytes + 1e6, Sent: base.Sent + 1e5, Overlimits: base.Overlimits, Drops: 2, Ceil: ceil}
	remadeOver := Counters{Bytes: base.Bytes + 1e6, Sent: base.Sent + 1e5, Overlimits: 10, Drops: base.Drops, Ceil: ceil}
	for _, cur := range []Counters{{Bytes: base.Bytes - 1, Sent: base.Sent + 1}, {Bytes: base.Bytes + 1, Sent: base.Sent - 1}, remade, remadeOver} {
		if _, ok := Between(base, cur, dt); ok {
			t.Errorf("Between(%+v, %+v) ok after a reset", base, cur)
		}
	}
	if _, ok := Between(base, base, 0); ok {
		t.Error("Between with dt 0 ok")
	}
	// No ceiling known: no share at it.
	noCeil := base
	noCeil.Ceil = 0
	cur := noCeil
	cur.Bytes += 1e6
	cur.Overlimits += 100
	if iv, _ := Between(noCeil, cur, dt); iv.AtCeiling != 0 {
		t.Errorf("AtCeiling %v without a ceiling", iv.AtCeiling)
	}
}
