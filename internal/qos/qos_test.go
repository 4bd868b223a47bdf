package qos

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	a := netip.MustParseAddr("10.99.200.1")
	for _, tc := range []struct {
		name    string
		classes []Class
		wantKey string // "" = valid
		want    string
	}{
		{name: "empty tree", classes: nil},
		{name: "valid nest", classes: sampleTree().Classes},
		{name: "empty key", classes: []Class{{Key: "", Rate: 1, Ceil: 1}}, wantKey: `""`, want: "empty key"},
		{name: "duplicate key", classes: []Class{{Key: "v", Rate: 1, Ceil: 1}, {Key: "v", Rate: 1, Ceil: 1}}, wantKey: "v", want: "duplicate"},
		{name: "missing parent", classes: []Class{{Key: "v", Parent: "p", Rate: 1, Ceil: 1}}, wantKey: "v", want: "does not exist"},
		{name: "cycle", classes: []Class{{Key: "a", Parent: "b", Rate: 1, Ceil: 1}, {Key: "b", Parent: "a", Rate: 1, Ceil: 1}}, wantKey: "a", want: "cycle"},
		{name: "self parent", classes: []Class{{Key: "a", Parent: "a", Rate: 1, Ceil: 1}}, wantKey: "a", want: "cycle"},
		{name: "zero rate", classes: []Class{{Key: "v", Ceil: 1}}, wantKey: "v", want: "rate is 0"},
		{name: "ceil below rate", classes: []Class{{Key: "v", Rate: 2, Ceil: 1}}, wantKey: "v", want: "below rate"},
		{name: "addrs on inner class", classes: []Class{{Key: "p", Rate: 2, Ceil: 2, Addrs: []netip.Addr{a}}, {Key: "v", Parent: "p", Rate: 1, Ceil: 1}}, wantKey: "p", want: "only leaves"},
		{name: "address twice", classes: []Class{{Key: "v", Rate: 1, Ceil: 1, Addrs: []netip.Addr{a}}, {Key: "w", Rate: 1, Ceil: 1, Addrs: []netip.Addr{a}}}, wantKey: "w", want: "already in class"},
		{name: "ipv6", classes: []Class{{Key: "v", Rate: 1, Ceil: 1, Addrs: []netip.Addr{netip.MustParseAddr("fd00::1")}}}, wantKey: "v", want: "not IPv4"},
		{name: "children above parent rate (the cap would not hold)", classes: []Class{
			{Key: "p", Rate: 100, Ceil: 100}, {Key: "v", Parent: "p", Rate: 100, Ceil: 100}, {Key: "w", Parent: "p", Rate: 1, Ceil: 100}}, wantKey: "p", want: "sum to 101"},
		{name: "children at parent rate", classes: []Class{
			{Key: "p", Rate: 100, Ceil: 100}, {Key: "v", Parent: "p", Rate: 50, Ceil: 100}, {Key: "w", Parent: "p", Rate: 50, Ceil: 100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Tree{Classes: tc.classes}.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.wantKey) {
				t.Fatalf("Validate = %v, want ErrInvalid naming %s with %q", err, tc.wantKey, tc.want)
			}
		})
	}
}

func TestBurstQuantum(t *testing.T) {
	for _, tc := range []struct{ rate, burst, quantum uint64 }{
		{rate: 1 << 20, burst: 32 << 10, quantum: 60000},     // 10 ms = 10 KiB < 32 KiB minimum
		{rate: 20 << 20, burst: 209715, quantum: 60000},      // 10 ms of 20 MiB/s
		{rate: 100 << 20, burst: 1048576, quantum: 104857},   // 1 ms of rate
		{rate: 1250000000, burst: 12500000, quantum: 200000}, // capped
		{rate: 1 << 50, burst: 1<<32 - 1, quantum: 200000},   // no overflow
	} {
		if got := Burst(tc.rate); uint64(got) != tc.burst {
			t.Errorf("Burst(%d) = %d, want %d", tc.rate, got, tc.burst)
		}
		if got := Quantum(tc.rate); uint64(got) != tc.quantum {
			t.Errorf("Quantum(%d) = %d, want %d", tc.rate, got, tc.quantum)
		}
	}
}

func changeStrings(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

func TestPlan(t *testing.T) {
	base := sampleTree()
	clone := func(f func(t *Tree)) Tree {
		c := Tree{Classes: slices.Clone(base.Classes)}
		for i := range c.Classes {
			c.Classes[i].Addrs = slices.Clone(c.Classes[i].Addrs)
		}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name          string
		live, desired Tree
		want          []string
	}{
		{name: "same", live: base, desired: base, want: nil},
		{name: "rate change is one in-place change", live: base,
			desired: clone(func(t *Tree) { t.Classes[2].Ceil = 60 << 20 }),
			want:    []string{`change-class volume/a parent="pool/flex" rate=20971520 ceil=62914560`}},
		{name: "from empty: parents first, then addresses", live: Tree{}, desired: base, want: []string{
			`add-class project/p1 parent="" rate=104857600 ceil=104857600`,
			`add-class pool/flex parent="project/p1" rate=41943040 ceil=41943040`,
			`add-class volume/c parent="project/p1" rate=52428800 ceil=83886080`,
			`add-class volume/a parent="pool/flex" rate=20971520 ceil=41943040`,
			`add-class volume/b parent="pool/flex" rate=20971520 ceil=41943040`,
			`add-addr volume/a 10.99.200.11`,
			`add-addr volume/b 10.99.200.12`,
			`add-addr volume/b 10.99.201.12`,
			`add-addr volume/c 10.99.200.13`,
		}},
		{name: "to empty: addresses, then children first", live: base, desired: Tree{}, want: []string{
			`delete-addr volume/a 10.99.200.11`,
			`delete-addr volume/b 10.99.200.12`,
			`delete-addr volume/b 10.99.201.12`,
			`delete-addr volume/c 10.99.200.13`,
			`delete-class volume/a`,
			`delete-class volume/b`,
			`delete-class pool/flex`,
			`delete-class volume/c`,
			`delete-class project/p1`,
		}},
		{name: "address moves between classes", live: base,
			desired: clone(func(t *Tree) {
				t.Classes[3].Addrs = t.Classes[3].Addrs[1:]
				t.Classes[4].Addrs = addrs("10.99.200.12", "10.99.200.13")
			}),
			want: []string{`delete-addr volume/b 10.99.200.12`, `add-addr volume/c 10.99.200.12`}},
		{name: "move to another parent is delete and add", live: base,
			desired: clone(func(t *Tree) {
				t.Classes[2].Parent = "project/p1"
				t.Classes[2].Rate = 10 << 20
				t.Classes[4].Rate = 30 << 20
			}),
			want: []string{
				`delete-addr volume/a 10.99.200.11`,
				`delete-class volume/a`,
				`change-class volume/c parent="project/p1" rate=31457280 ceil=83886080`,
				`add-class volume/a parent="project/p1" rate=10485760 ceil=41943040`,
				`add-addr volume/a 10.99.200.11`,
			}},
		{name: "deleting a parent takes its subtree", live: base,
			desired: Tree{Classes: []Class{base.Classes[0], base.Classes[4]}},
			want: []string{
				`delete-addr volume/a 10.99.200.11`,
				`delete-addr volume/b 10.99.200.12`,
				`delete-addr volume/b 10.99.201.12`,
				`delete-class volume/a`,
				`delete-class volume/b`,
				`delete-class pool/flex`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, tr := range []Tree{tc.live, tc.desired} {
				if err := tr.Validate(); err != nil {
					t.Fatalf("test tree invalid: %v", err)
				}
			}
			got := changeStrings(Plan(tc.live, tc.desired))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Plan =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestAllocation(t *testing.T) {
	st := newLinkState()
	for i, k := range []string{"a", "b", "c"} {
		m, err := st.allocMinor(k)
		if err != nil || m != uint16(firstMinor+i) {
			t.Fatalf("allocMinor(%s) = %#x, %v", k, m, err)
		}
	}
	st.freeMinor("b")
	if m, _ := st.allocMinor("d"); m != firstMinor+1 {
		t.Errorf("freed minor not reused: got %#x", m)
	}
	// Addresses sharing a last octet share a bucket and get distinct nodes.
	a1, a2 := netip.MustParseAddr("10.99.200.7"), netip.MustParseAddr("10.99.201.7")
	h1, _ := st.allocHandle(0, a1)
	h2, _ := st.allocHandle(0, a2)
	h3, _ := st.allocHandle(1, a1)
	if h1 != 0x10007001 || h2 != 0x10007002 || h3 != 0x10107001 {
		t.Errorf("handles %#x %#x %#x, want 0x10007001 0x10007002 0x10107001", h1, h2, h3)
	}
	if n := ifbName("eth0"); len(n) > 15 || n == ifbName("eth1") {
		t.Errorf("ifbName(eth0) = %q", n)
	}
}

func TestTreeEqualCanonical(t *testing.T) {
	a := sampleTree()
	b := Tree{Classes: slices.Clone(a.Classes)}
	slices.Reverse(b.Classes)
	b.Classes[1].Addrs = []netip.Addr{a.Classes[3].Addrs[1], a.Classes[3].Addrs[0]}
	if !a.Equal(b) {
		t.Error("reordered trees differ")
	}
	b.Classes[0].Ceil++
	if a.Equal(b) {
		t.Error("trees with another ceil are equal")
	}
}
