package qos

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// memoryOf is the memory a driver has of a link after applying t to it from
// nothing: the minors and handles allocated in Plan's order.
func memoryOf(t *testing.T, tree Tree) *linkState {
	t.Helper()
	st := newLinkState()
	for _, c := range Plan(Tree{}, tree) {
		switch c.Op {
		case OpAddClass:
			if _, err := st.allocMinor(c.Key); err != nil {
				t.Fatal(err)
			}
			st.tree[c.Key] = c.Class
		case OpAddAddr:
			for dir := range 2 {
				if _, err := st.allocHandle(dir, c.Addr); err != nil {
					t.Fatal(err)
				}
			}
			cl := st.tree[c.Key]
			cl.Addrs = append(cl.Addrs, c.Addr)
			st.tree[c.Key] = cl
		}
	}
	return st
}

var testLink = Link{Netns: "basin-net1", Dev: "eth0"}

func TestStateFileRoundTrip(t *testing.T) {
	st := memoryOf(t, sampleTree())
	b, err := json.Marshal(encodeState(testLink, true, 7, st))
	if err != nil {
		t.Fatal(err)
	}
	var f linkFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	got, err := f.memory(testLink, true)
	if err != nil {
		t.Fatal(err)
	}
	if !got.liveTree().Equal(sampleTree()) {
		t.Errorf("tree %+v", got.liveTree().Canonical())
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{{"minor", got.minor, st.minor}, {"used", got.used, st.used}, {"handles", got.handles, st.handles}, {"nodes", got.nodes, st.nodes}} {
		if b1, _ := json.Marshal(c.got); string(b1) != string(mustJSON(t, c.want)) {
			t.Errorf("%s: %s, want %s", c.name, b1, mustJSON(t, c.want))
		}
	}
	// The file names what it holds: a person reading it sees the tree.
	for _, s := range []string{`"version":1`, `"passACKs":true`, `"ifbIndex":7`, `"key":"volume/a"`, `"minor":19`, `"addr":"10.99.200.11"`,
		fmt.Sprintf(`"handles":[%d,%d]`, 0x1000b001, 0x1010b001)} {
		if !strings.Contains(string(b), s) {
			t.Errorf("state file lacks %s: %s", s, b)
		}
	}
	// Allocation goes on from the memory read back: the next minor and handle are free ones.
	if m, _ := got.allocMinor("volume/new"); m != firstMinor+5 {
		t.Errorf("next minor %#x", m)
	}
	if h, _ := got.allocHandle(0, netip.MustParseAddr("10.99.201.11")); h != 0x1000b002 {
		t.Errorf("next handle in bucket b: %#x", h)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStateFileRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(f *linkFile)
		want string
	}{
		{"another version", func(f *linkFile) { f.Version = 2 }, "format version 2"},
		{"another link", func(f *linkFile) { f.Dev = "eth1" }, "written for link basin-net1/eth1"},
		{"another mode", func(f *linkFile) { f.PassACKs = true }, "pure ACKs passing the IFB by, this driver has them shaped"},
		{"another IFB", func(f *linkFile) { f.IFB = "ifb0" }, `IFB "ifb0"`},
		{"no IFB index", func(f *linkFile) { f.IFBIndex = 0 }, "of index 0"},
		{"minor out of range", func(f *linkFile) { f.Classes[0].Minor = defaultMinor }, "out of range"},
		{"minor twice", func(f *linkFile) { f.Classes[1].Minor = f.Classes[0].Minor }, "given twice"},
		{"key twice", func(f *linkFile) { f.Classes[1].Key = f.Classes[0].Key }, "twice"},
		{"handle in another bucket", func(f *linkFile) { f.Classes[4].Addrs[0].Handles[0] = 0x1000b001 }, "not in its hash bucket"},
		{"handle in the other direction's table", func(f *linkFile) { f.Classes[4].Addrs[0].Handles[1] = 0x1000c001 }, "not in its hash bucket"},
		{"handle node 0", func(f *linkFile) { f.Classes[4].Addrs[0].Handles[0] = 0x1000c000 }, "not in its hash bucket"},
		{"handle twice", func(f *linkFile) {
			f.Classes[4].Addrs[1].Addr = netip.MustParseAddr("10.99.202.12")
			f.Classes[4].Addrs[1].Handles = f.Classes[4].Addrs[0].Handles
		}, "given twice"},
		{"address twice", func(f *linkFile) { f.Classes[4].Addrs[1] = f.Classes[4].Addrs[0] }, "twice"},
		{"IPv6 address", func(f *linkFile) { f.Classes[4].Addrs[0].Addr = netip.MustParseAddr("fd00::c") }, "not IPv4"},
		{"no address", func(f *linkFile) { f.Classes[4].Addrs[0].Addr = netip.Addr{} }, "not IPv4"},
		{"invalid tree", func(f *linkFile) { f.Classes[2].Rate = 1 << 40 }, "invalid qos tree"},
		{"missing parent", func(f *linkFile) { f.Classes = f.Classes[1:] }, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := encodeState(testLink, false, 7, memoryOf(t, sampleTree()))
			// Classes sorted by key: pool/flex, project/p1, volume/a, volume/b, volume/c.
			if f.Classes[3].Key != "volume/b" || f.Classes[4].Key != "volume/c" {
				t.Fatalf("classes %+v", f.Classes)
			}
			f.Classes[3], f.Classes[4] = f.Classes[4], f.Classes[3] // volume/b (10.99.200.12, 10.99.201.12) last
			tc.edit(&f)
			if _, err := f.memory(testLink, false); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("memory = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestStateFileName(t *testing.T) {
	links := []Link{{"", "eth0"}, {"-", "eth0"}, {"basin-net1", "eth0"}, {"a@b", "c"}, {"a", "b@c"}, {"a/b", "c"}, {"a%2Fb", "c"}, {"..", "eth0"}}
	seen := map[string]Link{}
	for _, l := range links {
		n := stateFileName(l)
		if strings.ContainsRune(n, '/') || strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".json") {
			t.Errorf("%v: file name %q", l, n)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("%v and %v share the file name %q", o, l, n)
		}
		seen[n] = l
	}
	if n := stateFileName(Link{"basin-net1", "eth0"}); n != "basin-net1@eth0.json" {
		t.Errorf("file name %q", n)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qos")
	for _, data := range []string{"one", "two"} {
		if err := writeFileAtomic(dir, "f.json", []byte(data)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "f.json")); err != nil || string(b) != data {
			t.Fatalf("read %q, %v", b, err)
		}
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Errorf("files left: %v", files)
	}
	if fi, err := os.Stat(filepath.Join(dir, "f.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
}

// kernelOf is what the kernel lists for a link shaped by a driver whose memory is
// st (without the pure-ACK bypass), as netlink objects: the shape of each as
// read back from the kernel (TestRootAdopt* check it against the kernel itself).
func kernelOf(st *linkState, ifbIndex int) kernelLink {
	root := netlink.MakeHandle(htbMajor, 0)
	k := kernelLink{ifb: &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: ifbName("eth0"), Index: ifbIndex, Flags: net.FlagUp, TxQLen: ifbQueueLen}}}
	k.devQdiscs = []netlink.Qdisc{
		&netlink.GenericQdisc{QdiscType: "noqueue", QdiscAttrs: netlink.QdiscAttrs{Parent: netlink.HANDLE_ROOT}},
		&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}},
	}
	k.ifbQdiscs = []netlink.Qdisc{
		&netlink.Htb{QdiscAttrs: netlink.QdiscAttrs{Handle: root, Parent: netlink.HANDLE_ROOT}, Defcls: defaultMinor, Rate2Quantum: 100},
		&netlink.GenericQdisc{QdiscType: "pfifo", QdiscAttrs: netlink.QdiscAttrs{Handle: netlink.MakeHandle(defaultMinor, 0), Parent: classid(defaultMinor)}},
	}
	class := func(minor uint16, parent uint32, rate, ceil uint64) *netlink.HtbClass {
		tu := tuningOf(rate, ceil)
		return &netlink.HtbClass{ClassAttrs: netlink.ClassAttrs{Handle: classid(minor), Parent: parent}, Rate: rate, Ceil: ceil,
			Buffer: tu.buffer, Cbuffer: tu.cbuffer, Quantum: tu.quantum}
	}
	k.classes = []netlink.Class{class(defaultMinor, netlink.HANDLE_ROOT, defaultRate, defaultRate)}
	inner := map[string]bool{}
	for _, c := range st.tree {
		inner[c.Parent] = true
	}
	for _, key := range slices.Sorted(maps.Keys(st.tree)) {
		c, m := st.tree[key], st.minor[key]
		parent := uint32(netlink.HANDLE_ROOT)
		if c.Parent != "" {
			parent = classid(st.minor[c.Parent])
		}
		k.classes = append(k.classes, class(m, parent, c.Rate, c.Ceil))
		if !inner[key] {
			k.ifbQdiscs = append(k.ifbQdiscs, &netlink.GenericQdisc{QdiscType: "pfifo", QdiscAttrs: netlink.QdiscAttrs{Handle: netlink.MakeHandle(m, 0), Parent: classid(m)}})
		}
	}
	u32 := func(prio, proto uint16, h uint32, f netlink.U32) *netlink.U32 {
		f.FilterAttrs = netlink.FilterAttrs{Priority: prio, Protocol: proto, Handle: h}
		return &f
	}
	mirred := func() []netlink.Action { return []netlink.Action{netlink.NewMirredAction(ifbIndex)} }
	addrSel := func(a netip.Addr, off int32) *nl.TcU32Sel {
		return &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Nkeys: 1, Keys: []nl.TcU32Key{{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(a.AsSlice()), Off: off}}}
	}
	const ip, all = unix.ETH_P_IP, unix.ETH_P_ALL
	// As netlink lists them: without hash tables, nor the entry of each priority.
	k.ifbFilters = []netlink.Filter{
		u32(1, ip, 0x80000800, netlink.U32{Hash: 0x80000000, Link: 0x10000000, Sel: &nl.TcU32Sel{Nkeys: 1, Hoff: 12, Hmask: 0xff, Keys: []nl.TcU32Key{{}}}}),
		u32(1, ip, 0x80000801, netlink.U32{Hash: 0x80000000, Link: 0x10100000, Sel: &nl.TcU32Sel{Nkeys: 1, Hoff: 16, Hmask: 0xff, Keys: []nl.TcU32Key{{}}}}),
	}
	k.egress = []netlink.Filter{
		u32(2, ip, 0x80100800, netlink.U32{Hash: 0x80100000, Link: 0x10200000, Sel: &nl.TcU32Sel{Nkeys: 1, Hoff: 12, Hmask: 0xff, Keys: []nl.TcU32Key{{}}}}),
	}
	for key, c := range st.tree {
		for _, a := range c.Addrs {
			for dir := range 2 {
				h := st.handles[dir][a]
				k.ifbFilters = append(k.ifbFilters, u32(1, ip, h, netlink.U32{Hash: h &^ 0xfff, ClassId: classid(st.minor[key]), Sel: addrSel(a, int32(dirOffset(dir)))}))
			}
			h := countHandle(st.handles[0][a])
			k.egress = append(k.egress, u32(2, ip, h, netlink.U32{Hash: h &^ 0xfff, ClassId: classid(st.minor[key]), Sel: addrSel(a, offSrc), Actions: mirred()}))
		}
	}
	matchAll := func(root uint32) netlink.Filter {
		return u32(3, all, root|0x800, netlink.U32{Hash: root, Sel: &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Nkeys: 1, Keys: []nl.TcU32Key{{}}}, Actions: mirred()})
	}
	// u32 keeps its tables per qdisc: each direction's list holds both
	// directions' filters of a priority they share.
	k.egress = append(k.egress, matchAll(0x80200000), matchAll(0x80300000))
	k.ingress = []netlink.Filter{matchAll(0x80200000), matchAll(0x80300000)}
	return k
}

func TestLayout(t *testing.T) {
	const ifbIndex = 7
	st := memoryOf(t, sampleTree())
	must, may, want := expectedLayout(st, Link{Dev: "eth0"}, false, ifbIndex)
	check := func(name string, k kernelLink, missing, unexpected []string) {
		t.Helper()
		got, tune := k.layout()
		m, u := differences(must, may, got)
		if !slices.Equal(m, missing) || !slices.Equal(u, unexpected) {
			t.Errorf("%s: missing %q\nunexpected %q\nwant missing %q\nunexpected %q", name, m, u, missing, unexpected)
		}
		if name == "as made" && !maps.Equal(tune, want) {
			t.Errorf("tuning %v, want %v", tune, want)
		}
	}
	check("as made", kernelOf(st, ifbIndex), nil, nil)

	// Which of a leaf's pfifo is there does not matter (HTB gives a class whose
	// children were all deleted one of its own); one under an inner class does.
	k := kernelOf(st, ifbIndex)
	k.ifbQdiscs = slices.DeleteFunc(k.ifbQdiscs, func(q netlink.Qdisc) bool { return q.Attrs().Parent == classid(0x13) })
	check("a leaf without a pfifo", k, nil, nil)
	k.ifbQdiscs = append(k.ifbQdiscs, &netlink.GenericQdisc{QdiscType: "pfifo", QdiscAttrs: netlink.QdiscAttrs{Handle: netlink.MakeHandle(0x8001, 0), Parent: classid(0x13)}})
	check("a leaf with the kernel's pfifo", k, nil, nil)
	k.ifbQdiscs = append(k.ifbQdiscs, &netlink.GenericQdisc{QdiscType: "pfifo", QdiscAttrs: netlink.QdiscAttrs{Handle: netlink.MakeHandle(0x11, 0), Parent: classid(0x11)}})
	check("a pfifo under an inner class", k, nil, []string{"ifb qdisc pfifo parent 1:11"})

	class := func(k kernelLink, minor uint16) *netlink.HtbClass {
		for _, c := range k.classes {
			if c.Attrs().Handle == classid(minor) {
				return c.(*netlink.HtbClass)
			}
		}
		t.Fatalf("no class 1:%x", minor)
		return nil
	}
	k = kernelOf(st, ifbIndex)
	class(k, 0x13).Rate++ // volume/a
	check("a rate changed", k, []string{"ifb class htb 1:13 parent 1:11 rate 20971520 ceil 41943040"},
		[]string{"ifb class htb 1:13 parent 1:11 rate 20971521 ceil 41943040"})

	k = kernelOf(st, ifbIndex)
	class(k, 0x13).Quantum++
	got, tune := k.layout()
	if m, u := differences(must, may, got); len(m)+len(u) > 0 || tune[classid(0x13)] == want[classid(0x13)] || tune[classid(0x12)] != want[classid(0x12)] {
		t.Errorf("a quantum changed: missing %q, unexpected %q; tuning of 1:13 %+v (want %+v), 1:12 %+v", m, u, tune[classid(0x13)], want[classid(0x13)], tune[classid(0x12)])
	}

	k = kernelOf(st, ifbIndex)
	k.ifb.Attrs().TxQLen = 32
	check("the IFB's queue", k, []string{"ifb " + ifbName("eth0") + " up true txqueuelen 1000"}, []string{"ifb " + ifbName("eth0") + " up true txqueuelen 32"})

	// Filters: one into another class, a redirect to another device, one gone, one more.
	find := func(fs []netlink.Filter, h uint32) *netlink.U32 {
		for _, f := range fs {
			if f.Attrs().Handle == h {
				return f.(*netlink.U32)
			}
		}
		t.Fatalf("no filter %x", h)
		return nil
	}
	k = kernelOf(st, ifbIndex)
	find(k.ifbFilters, 0x1010b001).ClassId = classid(0x14)
	check("an address into another class", k, []string{"ifb u32 prio 1 proto 0800 handle 101:b:1 hash 101:b:0 classid 1:13 sel flags 1 hoff 0 hmask 0 0a63c80b/ffffffff@16"},
		[]string{"ifb u32 prio 1 proto 0800 handle 101:b:1 hash 101:b:0 classid 1:14 sel flags 1 hoff 0 hmask 0 0a63c80b/ffffffff@16"})
	k = kernelOf(st, ifbIndex)
	find(k.egress, 0x1020b001).Actions[0].(*netlink.MirredAction).Ifindex = 8
	check("a counting redirect to another device", k, []string{"clsact u32 prio 2 proto 0800 handle 102:b:1 hash 102:b:0 classid 1:13 sel flags 1 hoff 0 hmask 0 0a63c80b/ffffffff@12 redirect 7"},
		[]string{"clsact u32 prio 2 proto 0800 handle 102:b:1 hash 102:b:0 classid 1:13 sel flags 1 hoff 0 hmask 0 0a63c80b/ffffffff@12 redirect 8"})
	k = kernelOf(st, ifbIndex)
	k.egress, k.ingress = k.egress[:len(k.egress)-1], k.ingress[:1]
	check("no redirect on ingress", k, []string{"clsact u32 prio 3 proto 0003 handle auto hash auto sel flags 1 hoff 0 hmask 0 00000000/00000000@0 redirect 7"}, nil)
	k = kernelOf(st, ifbIndex)
	k.ingress = append(k.ingress, &netlink.MatchAll{FilterAttrs: netlink.FilterAttrs{Priority: 9, Protocol: unix.ETH_P_ALL, Handle: 1}})
	check("a filter of someone else's", k, nil, []string{"clsact matchall prio 9 proto 0003 handle 1"})
	k = kernelOf(st, ifbIndex)
	k.devQdiscs = k.devQdiscs[:1]
	check("no clsact", k, []string{"dev qdisc clsact ffff:0 parent ingress"}, nil)
}

func TestLayoutPassingACKs(t *testing.T) {
	st := memoryOf(t, sampleTree())
	must, _, _ := expectedLayout(st, Link{Dev: "eth0"}, true, 7)
	mustNot, _, _ := expectedLayout(st, Link{Dev: "eth0"}, false, 7)
	// Per direction 11 filters (TCP headers of 5 to 15 words).
	if d := len(must) - len(mustNot); d != 2*11 {
		t.Errorf("the ACK bypass adds %d lines, want 22", d)
	}
	if !slices.Contains(must, "clsact u32 prio 1 proto 0800 handle auto hash auto classid 1:2 sel flags 1 hoff 0 hmask 0 05000028/0f00ffff@0 00000000/00003fff@4 00060000/00ff0000@8 50000000/f0000000@32") {
		t.Errorf("no ACK filter for a 20-byte TCP header:\n%s", strings.Join(must, "\n"))
	}
}
