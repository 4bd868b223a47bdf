package qos

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The EDT spike (BASIN_QOS_EDT=1) asks whether an Earliest-Departure-Time
// arrangement (a SCHED_CLS program stamping skb->tstamp from a per-endpoint
// budget, fq enforcing the stamps) is cheaper than the driver's IFB+HTB tree.
// This kernel has no sch_fq (nor etf, nor modules), so nothing enforces a
// departure time: the spike measures the program's own cost with the stamps
// unenforced ("EDT stamp, no fq"), and the variant that needs no qdisc, the same
// budget turned into a policer ("EDT police": a packet whose departure time lies
// more than a horizon ahead is dropped). Both programs share one hash map keyed
// by endpoint IPv4 between the sandbox's eth0 egress (reads, key = source) and
// the host-side veth peer's egress (writes, key = destination), so read and
// write draw on one budget.
//
// Namespaces bqx-hst (bridge bqxbr0), bqx-srv (eth0, 10.99.74.11) and bqx-cli
// (eth1, 10.99.74.2). The 999 other map entries and tree leaves use keys that
// are never assigned to an interface or addressed (filter keys only).
const (
	edtHost  = "bqx-hst"
	edtSrv   = "bqx-srv"
	edtCli   = "bqx-cli"
	edtSrvIP = "10.99.74.11"
	edtCliIP = "10.99.74.2"
	edtPort  = "bqxs0" // host-side peer of the sandbox's eth0
)

// edtValue is the map value: the rate as picoseconds per byte, the next
// departure time (ns, CLOCK_MONOTONIC), and counters of bytes let through and
// packets dropped.
type edtValue struct{ PsPerByte, Next, Bytes, Drops uint64 }

func psPerByte(bytesPerSec float64) uint64 { return uint64(1e12 / bytesPerSec) }

// edtProgram builds the classifier. keyOff is the offset of the key address in
// the Ethernet frame (26: IPv4 source, 30: destination). With police, a packet
// whose departure time lies more than horizon ns ahead is dropped and costs no
// budget; without, the departure time is written to skb->tstamp. Non-IPv4
// packets, addresses in no entry and packets of at most 128 bytes (pure ACKs,
// as the driver lets pure ACKs pass by) go their way untouched.
func edtProgram(m *ebpf.Map, keyOff int16, police bool, horizon int32) (*ebpf.Program, error) {
	const (
		skbLen     = 0
		skbData    = 76
		skbDataEnd = 80
		skbTstamp  = 152
	)
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, skbData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, skbDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 34),
		asm.JGT.Reg(asm.R4, asm.R3, "ok"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, "ok"), // ETH_P_IP in network order, loaded little-endian
		asm.LoadMem(asm.R7, asm.R6, skbLen, asm.Word),
		asm.JLE.Imm(asm.R7, 128, "ok"),
		asm.LoadMem(asm.R5, asm.R2, keyOff, asm.Word),
		asm.StoreMem(asm.RFP, -4, asm.R5, asm.Word),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "ok"),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.FnKtimeGetNs.Call(), // r0 = now
		asm.LoadMem(asm.R9, asm.R8, 8, asm.DWord),
		asm.JGE.Reg(asm.R9, asm.R0, "have"),
		asm.Mov.Reg(asm.R9, asm.R0), // r9 = t = max(now, next)
		asm.LoadMem(asm.R1, asm.R8, 0, asm.DWord).WithSymbol("have"),
		asm.Mul.Reg(asm.R1, asm.R7),
		asm.Div.Imm(asm.R1, 1000), // r1 = len × ps/B / 1000 = ns
	}
	if police {
		insns = append(insns,
			asm.Mov.Reg(asm.R2, asm.R9),
			asm.Sub.Reg(asm.R2, asm.R0),
			asm.JGT.Imm(asm.R2, horizon, "drop"),
		)
	} else {
		insns = append(insns, asm.StoreMem(asm.R6, skbTstamp, asm.R9, asm.DWord))
	}
	insns = append(insns,
		asm.Add.Reg(asm.R1, asm.R9),
		asm.StoreMem(asm.R8, 8, asm.R1, asm.DWord), // next = t + len/rate (racy across CPUs)
		asm.AddAtomic.Mem(asm.R8, asm.R7, asm.DWord, 16),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("ok"), // TC_ACT_OK
		asm.Return(),
	)
	if police {
		insns = append(insns,
			asm.Mov.Imm(asm.R1, 1).WithSymbol("drop"),
			asm.AddAtomic.Mem(asm.R8, asm.R1, asm.DWord, 24),
			asm.Mov.Imm(asm.R0, 2), // TC_ACT_SHOT
			asm.Return(),
		)
	}
	return ebpf.NewProgram(&ebpf.ProgramSpec{Name: "basin_edt", Type: ebpf.SchedCLS, License: "GPL", Instructions: insns})
}

// edt is one EDT arrangement on this machine: the map and the two programs.
type edt struct {
	m           *ebpf.Map
	read, write *ebpf.Program
}

func newEDT(t *testing.T, police bool, horizon time.Duration) *edt {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "basin_edt", Type: ebpf.Hash, KeySize: 4, ValueSize: 32, MaxEntries: 1024})
	if err != nil {
		t.Fatalf("map: %v", err)
	}
	e := &edt{m: m}
	if e.read, err = edtProgram(m, 26, police, int32(horizon.Nanoseconds())); err != nil {
		t.Fatalf("read program: %v", err)
	}
	if e.write, err = edtProgram(m, 30, police, int32(horizon.Nanoseconds())); err != nil {
		t.Fatalf("write program: %v", err)
	}
	return e
}

func (e *edt) Close() { e.read.Close(); e.write.Close(); e.m.Close() }

// set puts n entries at rate: the first is the server's address, the others keys only.
func (e *edt) set(t *testing.T, n int, rate float64) {
	t.Helper()
	for i := range n {
		a := netip.MustParseAddr(edtSrvIP).As4()
		if i > 0 {
			a = [4]byte{10, 99, byte(75 + i/250), byte(1 + i%250)}
		}
		v := edtValue{PsPerByte: psPerByte(rate)}
		if err := e.m.Put(binary.NativeEndian.Uint32(a[:]), v); err != nil {
			t.Fatalf("map put: %v", err)
		}
	}
}

func (e *edt) value(t *testing.T) edtValue {
	a := netip.MustParseAddr(edtSrvIP).As4()
	var v edtValue
	if err := e.m.Lookup(binary.NativeEndian.Uint32(a[:]), &v); err != nil {
		t.Fatalf("map lookup: %v", err)
	}
	return v
}

// attach puts prog on dev's clsact egress in ns (direct action).
func edtAttach(t *testing.T, ns, dev string, prog *ebpf.Program) {
	t.Helper()
	h, err := handle(Link{Netns: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	q := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := h.QdiscReplace(q); err != nil {
		t.Fatalf("clsact %s: %v", dev, err)
	}
	f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: netlink.HANDLE_MIN_EGRESS,
		Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL}, Fd: prog.FD(), Name: "basin_edt", DirectAction: true}
	if err := h.FilterAdd(f); err != nil {
		t.Fatalf("bpf filter %s: %v", dev, err)
	}
}

func edtDetach(ns, dev string) {
	exec.Command("tc", "-n", ns, "qdisc", "del", "dev", dev, "clsact").Run()
}

// edtNet builds the three namespaces and starts iperf3 servers on ports 5201 and
// 5202 of the server; everything goes when the test ends.
func edtNet(t *testing.T) {
	t.Helper()
	needRoot(t)
	for _, ns := range []string{edtHost, edtSrv, edtCli} {
		exec.Command("ip", "netns", "del", ns).Run()
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "-n", edtHost, "link", "add", "bqxbr0", "type", "bridge")
	run(t, "ip", "-n", edtHost, "link", "set", "bqxbr0", "up")
	for _, p := range [][3]string{{edtSrv, "eth0", edtPort}, {edtCli, "eth1", "bqxc0"}} {
		run(t, "ip", "-n", edtHost, "link", "add", p[2], "type", "veth", "peer", "name", p[1], "netns", p[0])
		run(t, "ip", "-n", edtHost, "link", "set", p[2], "master", "bqxbr0", "up")
		run(t, "ip", "-n", p[0], "link", "set", p[1], "up")
		// GRO off as in the data path spike.
		run(t, "ip", "netns", "exec", edtHost, "ethtool", "-K", p[2], "gro", "off")
		run(t, "ip", "netns", "exec", p[0], "ethtool", "-K", p[1], "gro", "off")
	}
	run(t, "ip", "-n", edtSrv, "addr", "add", edtSrvIP+"/24", "dev", "eth0")
	run(t, "ip", "-n", edtCli, "addr", "add", edtCliIP+"/24", "dev", "eth1")
	for _, port := range []string{"5201", "5202"} {
		srv := exec.Command("ip", "netns", "exec", edtSrv, "iperf3", "-s", "-B", edtSrvIP, "-p", port)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", edtSrv, "ss", "-Hltn").Output()
		if strings.Contains(string(out), ":5201") && strings.Contains(string(out), ":5202") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("iperf3 servers not listening: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// iperf runs one iperf3 client from the client namespace for secs seconds and
// returns the received payload rate in MiB/s.
func edtIperf(t *testing.T, read bool, port string, secs int) float64 {
	args := []string{"netns", "exec", edtCli, "iperf3", "-c", edtSrvIP, "-p", port, "-t", fmt.Sprint(secs), "-J"}
	if read {
		args = append(args, "-R")
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		t.Errorf("iperf3: %v\n%s", err, out)
		return 0
	}
	var j struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &j); err != nil {
		t.Errorf("iperf3 output: %v", err)
	}
	return j.End.SumReceived.BitsPerSecond / 8 / (1 << 20)
}

// edtSkip skips unless BASIN_QOS_EDT is set and reports what the kernel lacks.
func edtSkip(t *testing.T) {
	if os.Getenv("BASIN_QOS_EDT") == "" {
		t.Skip("set BASIN_QOS_EDT=1 to run the EDT spike")
	}
	needRoot(t)
	out, _ := exec.Command("sh", "-c", "zcat /proc/config.gz | grep -E 'CONFIG_NET_SCH_FQ[= ]|CONFIG_NET_SCH_ETF[= ]|CONFIG_NET_CLS_BPF[= ]|CONFIG_NET_ACT_BPF[= ]|CONFIG_MODULES[= ]'").Output()
	t.Logf("kernel: %s", strings.Join(strings.Fields(string(out)), " "))
}

// TestRootSpikeEDTCost: iperf3 -t 5, 5 rounds, arrangements alternating: off,
// the driver (IFB at the sandbox's eth0, 1,000 leaves far above demand), EDT
// stamps without fq (the program's cost alone), the EDT policer (1,000 entries
// far above demand) and stamps with a pfifo root on both devices (a lower bound
// for stamps + fq). Medians, MiB/s, and the median of each round's ratio to off
// in the same round (the machine's speed drifts between rounds).
func TestRootSpikeEDTCost(t *testing.T) {
	edtSkip(t)
	edtNet(t)
	ctx := context.Background()
	eth0 := Link{edtSrv, "eth0"}
	tree := Tree{Classes: []Class{{Key: "project", Rate: 10000 << 20, Ceil: 10000 << 20}}}
	for i := range 1000 {
		a := netip.MustParseAddr(edtSrvIP)
		if i > 0 {
			a = netip.AddrFrom4([4]byte{10, 99, byte(75 + i/250), byte(1 + i%250)})
		}
		tree.Classes = append(tree.Classes, Class{Key: fmt.Sprintf("volume/%d", i), Parent: "project",
			Rate: 10 << 20, Ceil: 10000 << 20, Addrs: []netip.Addr{a}})
	}
	d := New(nil)
	stamp, police := newEDT(t, false, 0), newEDT(t, true, 20*time.Millisecond)
	stamp.set(t, 1000, 10000<<20)
	police.set(t, 1000, 10000<<20)
	clear := func() {
		d.Remove(ctx, eth0)
		edtDetach(edtSrv, "eth0")
		edtDetach(edtHost, edtPort)
		exec.Command("tc", "-n", edtSrv, "qdisc", "del", "dev", "eth0", "root").Run()
		exec.Command("tc", "-n", edtHost, "qdisc", "del", "dev", edtPort, "root").Run()
	}
	t.Cleanup(func() { clear(); stamp.Close(); police.Close() })
	type arr struct {
		name string
		on   func()
	}
	bpf := func(e *edt) func() {
		return func() { edtAttach(t, edtSrv, "eth0", e.read); edtAttach(t, edtHost, edtPort, e.write) }
	}
	arrs := []arr{
		{"off", func() {}},
		{"driver (IFB+HTB at eth0, 1,000 leaves)", func() {
			if err := d.Apply(ctx, eth0, tree); err != nil {
				t.Fatal(err)
			}
		}},
		{"EDT stamp, no fq (1,000 entries)", bpf(stamp)},
		{"EDT police (1,000 entries)", bpf(police)},
		// fq is not built: a pfifo root on both devices stands for the cost of
		// having a qdisc there at all (fq's flow hashing and time-ordered
		// queues come on top), a lower bound for stamps + fq.
		{"EDT stamp + pfifo root on both (lower bound for fq)", func() {
			bpf(stamp)()
			run(t, "tc", "-n", edtSrv, "qdisc", "add", "dev", "eth0", "root", "pfifo", "limit", "1000")
			run(t, "tc", "-n", edtHost, "qdisc", "add", "dev", edtPort, "root", "pfifo", "limit", "1000")
		}},
	}
	res := map[string][]float64{}
	for range 5 {
		for _, a := range arrs {
			clear()
			a.on()
			for _, dir := range []string{"read", "write"} {
				k := a.name + " | " + dir
				res[k] = append(res[k], edtIperf(t, dir == "read", "5201", 5))
			}
		}
	}
	if v := police.value(t); v.Drops != 0 {
		t.Errorf("policer far above demand dropped %d packets", v.Drops)
	}
	if v := stamp.value(t); v.Bytes == 0 {
		t.Errorf("stamping program saw no bytes of the server's address")
	}
	for _, a := range arrs {
		for _, dir := range []string{"read", "write"} {
			r := res[a.name+" | "+dir]
			off := res["off | "+dir]
			var ratio []float64
			for i := range r {
				ratio = append(ratio, r[i]/off[i])
			}
			t.Logf("| %s | %s | %.0f (runs %s) | %.3f × off |", a.name, dir, median(r), fmtRuns(r), median(ratio))
		}
	}
}

// TestRootSpikeEDTAccuracy: a 20 MiB/s limit, reads, writes and both at once
// (which must sum to the limit), for the driver and the EDT policer at four
// horizons, and EDT stamps without fq to show nothing enforces them. The rate is
// iperf3's payload (goodput) over 5 s; for the policer also the bytes it let
// through (frames, headers included) per second.
func TestRootSpikeEDTAccuracy(t *testing.T) {
	edtSkip(t)
	edtNet(t)
	ctx := context.Background()
	eth0 := Link{edtSrv, "eth0"}
	const limit = 20 << 20
	d := New(nil)
	t.Cleanup(func() { d.Remove(ctx, eth0); edtDetach(edtSrv, "eth0"); edtDetach(edtHost, edtPort) })
	// measure logs one row per mode; with a policer of horizon ≤ 200 ms it also
	// checks that the bytes let through stay within 1.1 × the limit.
	measure := func(name string, bytes func() uint64, drops func() uint64, check bool) {
		for _, mode := range []string{"read", "write", "both"} {
			var b0, x0 uint64
			if bytes != nil {
				b0, x0 = bytes(), drops()
			}
			t0 := time.Now()
			var rd, wr float64
			var wg sync.WaitGroup
			if mode != "write" {
				wg.Go(func() { rd = edtIperf(t, true, "5201", 5) })
			}
			if mode != "read" {
				wg.Go(func() { wr = edtIperf(t, false, "5202", 5) })
			}
			wg.Wait()
			el := time.Since(t0).Seconds()
			line := fmt.Sprintf("| %s | %s | read %.2f | write %.2f | sum %.2f MiB/s = %.3f × limit |", name, mode, rd, wr, rd+wr, (rd+wr)*(1<<20)/limit)
			if bytes != nil {
				b1, x1 := bytes(), drops()
				passed := float64(b1-b0) / el
				line += fmt.Sprintf(" passed %.2f MiB/s (frames) | drops %d |", passed/(1<<20), x1-x0)
				if check && (passed > 1.1*limit || x1 == x0) {
					t.Errorf("%s %s: passed %.2f MiB/s with %d drops, want at most 1.1 × the limit, with drops", name, mode, passed/(1<<20), x1-x0)
				}
			}
			t.Log(line)
		}
	}
	tree := Tree{Classes: []Class{{Key: "volume/a", Rate: limit, Ceil: limit, Addrs: []netip.Addr{netip.MustParseAddr(edtSrvIP)}}}}
	if err := d.Apply(ctx, eth0, tree); err != nil {
		t.Fatal(err)
	}
	measure("driver", nil, nil, false)
	d.Remove(ctx, eth0)
	for _, c := range []struct {
		police  bool
		horizon time.Duration
	}{{true, 10 * time.Millisecond}, {true, 50 * time.Millisecond}, {true, 200 * time.Millisecond}, {true, time.Second}, {false, 0}} {
		e := newEDT(t, c.police, c.horizon)
		e.set(t, 1000, limit)
		edtAttach(t, edtSrv, "eth0", e.read)
		edtAttach(t, edtHost, edtPort, e.write)
		name := "EDT stamp, no fq"
		if c.police {
			name = fmt.Sprintf("EDT police, horizon %v", c.horizon)
		}
		measure(name, func() uint64 { return e.value(t).Bytes }, func() uint64 { return e.value(t).Drops },
			c.police && c.horizon <= 200*time.Millisecond)
		edtDetach(edtSrv, "eth0")
		edtDetach(edtHost, edtPort)
		e.Close()
	}
}
