package metrics

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// Two clients on one endpoint (one of them twice, once over a v4-mapped tcp6
// socket), one on another; listeners, other ports and closing connections do not
// count.
func TestNetnsClients(t *testing.T) {
	proc := t.TempDir()
	dir := filepath.Join(proc, "42", "net")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tcp := tcpHeader +
		"   0: 0A00630A:0801 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n" + // listening
		"   1: 0A00630A:0801 0100630A:03FF 01 00000000:00000000 00:00000000 00000000 0 0 2 1\n" + // 10.99.0.1 → .10:2049
		"   2: 0A00630A:0801 0200630A:0400 01 00000000:00000000 00:00000000 00000000 0 0 3 1\n" + // 10.99.0.2 → .10:2049
		"   3: 0B00630A:01BD 0200630A:0401 01 00000000:00000000 00:00000000 00000000 0 0 4 1\n" + // 10.99.0.2 → .11:445
		"   4: 0B00630A:0016 0300630A:0402 01 00000000:00000000 00:00000000 00000000 0 0 5 1\n" + // ssh: not a client
		"   5: 0B00630A:0801 0400630A:0403 06 00000000:00000000 00:00000000 00000000 0 0 6 1\n" // TIME_WAIT
	tcp6 := strings.Replace(tcpHeader, "local_address", "local_address                        ", 1) +
		"   0: 0000000000000000FFFF00000A00630A:0801 0000000000000000FFFF00000100630A:0500 01 00000000:00000000 00:00000000 00000000 0 0 7 1\n"
	for name, body := range map[string]string{"tcp": tcp, "tcp6": tcp6} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := NetnsClients{Proc: proc, PID: func(network string) int {
		if network == "n" {
			return 42
		}
		return 0
	}}
	got, err := src.Clients(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]int{netip.MustParseAddr("10.99.0.10"): 2, netip.MustParseAddr("10.99.0.11"): 1}
	if len(got) != len(want) {
		t.Fatalf("clients %v, want %v", got, want)
	}
	for a, n := range want {
		if got[a] != n {
			t.Fatalf("clients %v, want %v", got, want)
		}
	}
	if _, err := src.Clients(context.Background(), "other"); err == nil {
		t.Fatal("a network without a sandbox answered")
	}
	for _, bad := range []string{"x\n 0: 0A00630A 0100630A:03FF 01\n", "x\n 0: ZZ00630A:0801 0100630A:03FF 01\n", "x\n 0: 0A00630A:0801\n"} {
		if err := parseTCPTable(strings.NewReader(bad), ServicePorts, map[netip.Addr]map[netip.Addr]bool{}); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

// The kernel's own table reads back a connection this test makes (byte order).
func TestParseTCPTableKernel(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	port, _ := strconv.Atoi(strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:"))
	f, err := os.Open("/proc/self/net/tcp")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	remotes := map[netip.Addr]map[netip.Addr]bool{}
	if err := parseTCPTable(f, []uint16{uint16(port)}, remotes); err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	if len(remotes[lo]) != 1 || !remotes[lo][lo] {
		t.Fatalf("connections to 127.0.0.1:%d read as %v", port, remotes)
	}
}

func FuzzParseTCPTable(f *testing.F) {
	f.Add("h\n   1: 0A00630A:0801 0100630A:03FF 01 0\n")
	f.Add("h\n   0: 0000000000000000FFFF00000A00630A:0801 0000000000000000FFFF00000100630A:0500 01\n")
	f.Fuzz(func(t *testing.T, s string) {
		parseTCPTable(strings.NewReader(s), ServicePorts, map[netip.Addr]map[netip.Addr]bool{})
	})
}
