package qos

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRootCountersPerDirection moves data each way through a shaped address and
// checks the per-direction split of its class's counters: what the address sent
// (the counting redirect on eth0's egress) and what it received (the class's
// bytes less that) each hold the payload of their direction plus headers, and
// the other direction only acknowledgements. A missing counting redirect is
// reported by Read.
func TestRootCountersPerDirection(t *testing.T) {
	l := pair(t, "10.99.200.11", "10.99.200.12")
	ctx := context.Background()
	d := New(nil)
	t.Cleanup(func() { d.Remove(ctx, l) })
	tree := Tree{Classes: []Class{
		{Key: "volume/a", Rate: 32 << 20, Ceil: 32 << 20, Addrs: addrs("10.99.200.11")},
		{Key: "volume/b", Rate: 10000 << 20, Ceil: 10000 << 20, Addrs: addrs("10.99.200.12")},
	}}
	if err := d.Apply(ctx, l, tree); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Read(ctx, l); err != nil || !got.Equal(tree) {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	for _, read := range []bool{true, false} {
		name := map[bool]string{true: "read", false: "write"}[read]
		c0, err := d.Counters(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		const n = 64 << 20
		if got := transfer(t, "10.99.200.12", n, read, 30*time.Second); got != n {
			t.Fatalf("%s: moved %d bytes of %d", name, got, n)
		}
		c1, _ := d.Counters(ctx, l)
		iv, ok := Between(c0["volume/b"], c1["volume/b"], time.Second)
		if !ok {
			t.Fatalf("%s: counters went back: %+v → %+v", name, c0["volume/b"], c1["volume/b"])
		}
		data, acks := iv.Sent, iv.Received
		if !read {
			data, acks = acks, data
		}
		t.Logf("%s: %d payload bytes; wire: sent %.0f (%.4f × payload), received %.0f (%.4f × payload); class %d bytes, %d packets sent",
			name, n, iv.Sent, iv.Sent/n, iv.Received, iv.Received/n, c1["volume/b"].Bytes-c0["volume/b"].Bytes,
			c1["volume/b"].SentPackets-c0["volume/b"].SentPackets)
		// Data: the payload plus Ethernet, IP and TCP headers (~4.6 % at MTU 1500).
		if data < n || data > 1.1*n {
			t.Errorf("%s: the data direction counted %.0f wire bytes for %d of payload", name, data, n)
		}
		// The other direction: acknowledgements only, a few percent.
		if acks <= 0 || acks > 0.05*n {
			t.Errorf("%s: the acknowledging direction counted %.0f wire bytes for %d of payload", name, acks, n)
		}
		if c1["volume/a"] != c0["volume/a"] {
			t.Errorf("%s: volume/a counted %+v → %+v with no traffic of its own", name, c0["volume/a"], c1["volume/a"])
		}
	}
	if c, _ := d.Counters(ctx, l); c["volume/a"].Ceil != 32<<20 || c["volume/a"].Rate != 32<<20 {
		t.Errorf("volume/a's rate and ceiling read back as %d, %d", c["volume/a"].Rate, c["volume/a"].Ceil)
	}
	// Without its counting redirect an address is still shaped (the match-all
	// redirect), but not counted: Read says so.
	run(t, "tc", "-n", srvNS, "filter", "del", "dev", srvDev, "egress", "protocol", "ip", "prio", "2", "handle", "102:b:1", "u32")
	if _, err := d.Read(ctx, l); err == nil || !strings.Contains(err.Error(), "10.99.200.11") {
		t.Errorf("Read with 10.99.200.11's counting redirect gone: %v", err)
	}
}

// TestRootAtCeiling checks Between's AtCeiling against real HTB: a class held
// at its ceiling for a whole window, for half of one, paced below it in small
// writes (never held), and paced below it in 1 MiB bursts (each burst held at
// the ceiling while it lasts: about the share of time it takes).
func TestRootAtCeiling(t *testing.T) {
	l := pair(t, "10.99.200.11")
	ctx := context.Background()
	d := New(nil)
	t.Cleanup(func() { d.Remove(ctx, l) })
	const ceil = 16 << 20
	tree := Tree{Classes: []Class{{Key: "volume/a", Rate: ceil, Ceil: ceil, Addrs: addrs("10.99.200.11")}}}
	if err := d.Apply(ctx, l, tree); err != nil {
		t.Fatal(err)
	}
	const window = 5 * time.Second
	// measure runs load in the background, and returns the class's interval over
	// a window starting 500 ms into it.
	measure := func(load func()) (Interval, float64) {
		done := make(chan struct{})
		go func() { defer close(done); load() }()
		time.Sleep(500 * time.Millisecond)
		c0, err := d.Counters(ctx, l)
		t0 := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(window)
		c1, _ := d.Counters(ctx, l)
		dt := time.Since(t0)
		<-done
		iv, ok := Between(c0["volume/a"], c1["volume/a"], dt)
		if !ok {
			t.Fatal("counters went back")
		}
		return iv, float64(c1["volume/a"].Bytes-c0["volume/a"].Bytes) / ceil / dt.Seconds()
	}
	for _, tc := range []struct {
		name   string
		load   func()
		lo, hi float64
	}{
		{"reads held at the ceiling", func() { transfer(t, "10.99.200.11", 1<<40, true, window+time.Second) }, 0.85, 1},
		{"writes held at the ceiling", func() { transfer(t, "10.99.200.11", 1<<40, false, window+time.Second) }, 0.85, 1},
		{"held for half the window", func() { transfer(t, "10.99.200.11", 1<<40, true, 500*time.Millisecond+window/2) }, 0.35, 0.65},
		{"40 % in 64 KiB writes", func() { transferPaced(t, "10.99.200.11", 1<<40, true, window+time.Second, 0.4*ceil, 64<<10) }, 0, 0.1},
		{"40 % in 1 MiB bursts", func() { transferPaced(t, "10.99.200.11", 1<<40, true, window+time.Second, 0.4*ceil, 1<<20) }, 0.25, 0.5},
	} {
		iv, util := measure(tc.load)
		t.Logf("%s: at the ceiling %.3f of the time; wire %.3f of the ceiling", tc.name, iv.AtCeiling, util)
		if iv.AtCeiling < tc.lo || iv.AtCeiling > tc.hi {
			t.Errorf("%s: AtCeiling %.3f, want %.2f–%.2f", tc.name, iv.AtCeiling, tc.lo, tc.hi)
		}
		time.Sleep(time.Second) // the class's tokens refill between cases
	}
}
