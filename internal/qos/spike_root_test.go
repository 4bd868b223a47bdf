package qos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRootSpikeDataPathCost is the one-off measurement behind docs/benchmarks.md
// "QoS data path cost (spike)". It runs only with BASIN_QOS_SPIKE=1 (about three
// minutes, needs iperf3 and ethtool): a client and a server namespace on a bridge
// (in a third namespace, standing for the host), iperf3 -t 5 between them, reads
// (-R) and writes, with no shaping and with the driver's tree (1,000 leaves,
// limits far above demand) at the sandbox's eth0 or at its bridge port; rounds
// alternate the arrangements, and each reports the median of the rounds, the
// average packet size HTB counted (GSO segments) and the average skb the IFB (or,
// with no IFB, eth0) transmitted. BASIN_QOS_SPIKE=gro adds runs with GRO on the veths.
func TestRootSpikeDataPathCost(t *testing.T) {
	if os.Getenv("BASIN_QOS_SPIKE") == "" {
		t.Skip("set BASIN_QOS_SPIKE=1 to run the data path spike")
	}
	needRoot(t)
	hostNS := nsPrefix + "-hst"
	for _, ns := range []string{hostNS, srvNS, cliNS} {
		exec.Command("ip", "netns", "del", ns).Run()
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "-n", hostNS, "link", "add", "bqbr0", "type", "bridge")
	run(t, "ip", "-n", hostNS, "link", "set", "bqbr0", "up")
	for _, p := range [][3]string{{srvNS, srvDev, "bqs0"}, {cliNS, "eth1", "bqc0"}} {
		run(t, "ip", "-n", hostNS, "link", "add", p[2], "type", "veth", "peer", "name", p[1], "netns", p[0])
		run(t, "ip", "-n", hostNS, "link", "set", p[2], "master", "bqbr0", "up")
		run(t, "ip", "-n", p[0], "link", "set", p[1], "up")
	}
	run(t, "ip", "-n", srvNS, "addr", "add", "10.99.200.11/24", "dev", srvDev)
	run(t, "ip", "-n", cliNS, "addr", "add", cliIP+"/24", "dev", "eth1")
	srv := exec.Command("ip", "netns", "exec", srvNS, "iperf3", "-s", "-B", "10.99.200.11")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	time.Sleep(500 * time.Millisecond)

	tree := Tree{Classes: []Class{{Key: "project", Rate: 10000 << 20, Ceil: 10000 << 20}}}
	for i := range 1000 {
		a := netip.AddrFrom4([4]byte{10, 99, byte(200 + i/240), byte(11 + i%240)})
		tree.Classes = append(tree.Classes, Class{Key: fmt.Sprintf("volume/%d", i), Parent: "project",
			Rate: 10 << 20, Ceil: 10000 << 20, Addrs: []netip.Addr{a}})
	}
	eth0, port := Link{srvNS, srvDev}, Link{hostNS, "bqs0"}
	d := New(nil)
	ctx := context.Background()
	t.Cleanup(func() { d.Remove(ctx, eth0); d.Remove(ctx, port) })
	gro := func(on string) {
		run(t, "ip", "netns", "exec", srvNS, "ethtool", "-K", srvDev, "gro", on)
		run(t, "ip", "netns", "exec", hostNS, "ethtool", "-K", "bqs0", "gro", on)
		run(t, "ip", "netns", "exec", hostNS, "ethtool", "-K", "bqc0", "gro", on)
		run(t, "ip", "netns", "exec", cliNS, "ethtool", "-K", "eth1", "gro", on)
	}
	type arrangement struct {
		name   string
		link   *Link
		gro    string
		htbDev bool // a bare HTB (default class only) on eth0's egress: HTB without the IFB, reads only
	}
	arrs := []arrangement{
		{name: "off", gro: "off"},
		{name: "IFB at sandbox eth0", link: &eth0, gro: "off"},
		{name: "IFB at bridge port", link: &port, gro: "off"},
		{name: "HTB on eth0 egress, no IFB (reads only)", gro: "off", htbDev: true},
	}
	if os.Getenv("BASIN_QOS_SPIKE") == "gro" {
		arrs = append(arrs, arrangement{name: "off, veth GRO on", gro: "on"},
			arrangement{name: "IFB at sandbox eth0, veth GRO on", link: &eth0, gro: "on"})
	}
	htbDev := func(on bool) {
		exec.Command("tc", "-n", srvNS, "qdisc", "del", "dev", srvDev, "root").Run()
		if on {
			run(t, "tc", "-n", srvNS, "qdisc", "add", "dev", srvDev, "root", "handle", "1:", "htb", "default", "2")
			run(t, "tc", "-n", srvNS, "class", "add", "dev", srvDev, "parent", "1:", "classid", "1:2", "htb",
				"rate", "100gbit", "burst", "125000000", "cburst", "125000000", "quantum", "200000")
		}
	}
	// skbs counts what a device transmitted: bytes and packets as skbs (a GSO packet
	// is one), unlike HTB's counters, which count GSO segments.
	skbs := func(ns, dev string) (uint64, uint64) {
		h, err := handle(Link{Netns: ns})
		if err != nil {
			return 0, 0
		}
		defer h.Close()
		l, err := h.LinkByName(dev)
		if err != nil || l.Attrs().Statistics == nil {
			return 0, 0
		}
		return l.Attrs().Statistics.TxBytes, l.Attrs().Statistics.TxPackets
	}
	type result struct{ mibps, pkt, skb []float64 }
	res := map[string]*result{}
	rounds := 5
	for round := range rounds {
		for _, a := range arrs {
			d.Remove(ctx, eth0)
			d.Remove(ctx, port)
			gro(a.gro)
			htbDev(a.htbDev)
			if a.link != nil {
				if err := d.Apply(ctx, *a.link, tree); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					feat, _ := exec.Command("ip", "netns", "exec", a.link.Netns, "ethtool", "-k", ifbName(a.link.Dev)).Output()
					t.Logf("%s: IFB offloads: %s", a.name, grepFeatures(string(feat)))
				}
			}
			for _, dir := range []string{"read", "write"} {
				if a.htbDev && dir == "write" {
					continue
				}
				var c0 map[string]Counters
				var b0, p0 uint64
				if a.link != nil {
					c0, _ = d.Counters(ctx, *a.link)
					b0, p0 = skbs(a.link.Netns, ifbName(a.link.Dev))
				} else if dir == "read" {
					b0, p0 = skbs(srvNS, srvDev)
				}
				args := []string{"netns", "exec", cliNS, "iperf3", "-c", "10.99.200.11", "-t", "5", "-J"}
				if dir == "read" {
					args = append(args, "-R")
				}
				out, err := exec.Command("ip", args...).Output()
				if err != nil {
					t.Fatalf("iperf3: %v\n%s", err, out)
				}
				var j struct {
					End struct {
						SumReceived struct {
							BitsPerSecond float64 `json:"bits_per_second"`
						} `json:"sum_received"`
					} `json:"end"`
				}
				if err := json.Unmarshal(out, &j); err != nil {
					t.Fatalf("iperf3 output: %v", err)
				}
				k := a.name + " / " + dir
				if res[k] == nil {
					res[k] = &result{}
				}
				res[k].mibps = append(res[k].mibps, j.End.SumReceived.BitsPerSecond/8/(1<<20))
				var b1, p1 uint64
				if a.link != nil {
					c1, _ := d.Counters(ctx, *a.link)
					b, p := c1["volume/0"].Bytes-c0["volume/0"].Bytes, c1["volume/0"].Packets-c0["volume/0"].Packets
					res[k].pkt = append(res[k].pkt, float64(b)/float64(max(p, 1)))
					b1, p1 = skbs(a.link.Netns, ifbName(a.link.Dev))
				} else if dir == "read" {
					b1, p1 = skbs(srvNS, srvDev)
				}
				if p1 > p0 {
					res[k].skb = append(res[k].skb, float64(b1-b0)/float64(p1-p0))
				}
			}
		}
	}
	for _, a := range arrs {
		for _, dir := range []string{"read", "write"} {
			r := res[a.name+" / "+dir]
			if r == nil {
				continue
			}
			t.Logf("| %s | %s | %.0f (runs %s) | %s | %s |", a.name, dir, median(r.mibps), fmtRuns(r.mibps), fmtPkt(r.pkt), fmtPkt(r.skb))
		}
	}
}

func grepFeatures(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, f := range []string{"tcp-segmentation-offload:", "generic-segmentation-offload:", "generic-receive-offload:", "scatter-gather:"} {
			if strings.HasPrefix(l, f) {
				out = append(out, strings.TrimSpace(l))
			}
		}
	}
	return strings.Join(out, ", ")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fmtRuns(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, "/")
}

func fmtPkt(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f B", median(v))
}
