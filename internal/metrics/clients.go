package metrics

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ServicePorts are the ports whose connections count as clients: NFS and SMB.
var ServicePorts = []uint16{2049, 445}

// NetnsClients counts connected clients from a network namespace's TCP tables
// (/proc/<pid>/net/tcp and tcp6 of a process inside it): per local address, the
// distinct remote addresses with an established connection to a service port.
// Volumes have an endpoint address of their own, so that is per volume.
type NetnsClients struct {
	// PID returns a process in the network's namespace (its Ganesha); 0 = none.
	PID func(network string) int
	// Proc is the proc filesystem's mount point; "" = /proc.
	Proc string
}

var _ ClientSource = NetnsClients{}

// Clients implements ClientSource.
func (n NetnsClients) Clients(_ context.Context, network string) (map[netip.Addr]int, error) {
	pid := n.PID(network)
	if pid <= 0 {
		return nil, fmt.Errorf("network %q has no running sandbox", network)
	}
	proc := n.Proc
	if proc == "" {
		proc = "/proc"
	}
	remotes := map[netip.Addr]map[netip.Addr]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		file, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "net", f))
		if err != nil {
			return nil, err
		}
		err = parseTCPTable(file, ServicePorts, remotes)
		file.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	out := make(map[netip.Addr]int, len(remotes))
	for local, r := range remotes {
		out[local] = len(r)
	}
	return out, nil
}

// tcpEstablished is the state column of an established connection.
const tcpEstablished = "01"

// parseTCPTable reads a /proc/net/tcp or tcp6 table and adds to remotes, per
// local address, the remote address of each established connection to one of
// ports. IPv4-mapped IPv6 addresses count as IPv4.
func parseTCPTable(r io.Reader, ports []uint16, remotes map[netip.Addr]map[netip.Addr]bool) error {
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			return fmt.Errorf("short line %q", sc.Text())
		}
		if f[3] != tcpEstablished {
			continue
		}
		local, lport, err := parseHexAddrPort(f[1])
		if err != nil {
			return err
		}
		remote, _, err := parseHexAddrPort(f[2])
		if err != nil {
			return err
		}
		service := false
		for _, p := range ports {
			service = service || lport == p
		}
		if !service {
			continue
		}
		if remotes[local] == nil {
			remotes[local] = map[netip.Addr]bool{}
		}
		remotes[local][remote] = true
	}
	return sc.Err()
}

// parseHexAddrPort reads the kernel's ADDR:PORT: the address as 32-bit words in
// host byte order (little endian here), the port in big-endian hex.
func parseHexAddrPort(s string) (netip.Addr, uint16, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || (len(a) != 8 && len(a) != 32) || len(p) != 4 {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(raw); i += 4 { // each word back to network order
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("port %q", s)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return addr.Unmap(), uint16(port), nil
}
