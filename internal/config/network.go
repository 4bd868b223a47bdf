package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/basin-nas/basin/internal/model"
)

// Network is a configured network: a Linux bridge, the subnet on it, and the range
// of the subnet volumes' endpoint addresses are taken from (the rest is left to the
// host and to client machines). The daemon hands it to the data plane as
// dataplane.Network and to the API as model.Network.
type Network struct {
	Name   string
	Bridge string
	Prefix netip.Prefix
	// FirstEndpoint and LastEndpoint bound the endpoint range, both included.
	FirstEndpoint, LastEndpoint netip.Addr
}

// HostAddr is the host's address on the bridge: the subnet's first address.
func (n Network) HostAddr() netip.Addr { return n.Prefix.Masked().Addr().Next() }

// ParseNetwork parses NAME=BRIDGE,CIDR[,FIRST-LAST]. Without FIRST-LAST, endpoints
// run from the subnet's tenth address to the last address of its lower half (e.g.
// 10.99.0.10-10.99.0.127 for a /24), leaving the upper half to client machines; in
// subnets too small for that (/28), from the second address (after the host's).
func ParseNetwork(s string) (Network, error) {
	name, rest, ok := strings.Cut(s, "=")
	parts := strings.Split(rest, ",")
	if !ok || len(parts) < 2 || name == "" || parts[0] == "" {
		return Network{}, fmt.Errorf("network %q: want NAME=BRIDGE,CIDR[,FIRST-LAST]", s)
	}
	bridge, cidr := parts[0], parts[1]
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
		return Network{}, fmt.Errorf("network %q: %q is not an IPv4 subnet of at least 16 addresses", s, cidr)
	}
	if len(bridge) > 15 {
		return Network{}, fmt.Errorf("network %q: bridge name longer than 15 characters", s)
	}
	p = p.Masked()
	n := Network{Name: name, Bridge: bridge, Prefix: p}
	base := p.Addr().As4()
	size := uint64(1) << (32 - p.Bits())
	at := func(off uint64) netip.Addr {
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		v += uint32(off)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	switch len(parts) {
	case 2:
		n.FirstEndpoint, n.LastEndpoint = model.DefaultEndpoints(p)
		return n, nil
	case 3:
	default:
		return Network{}, fmt.Errorf("network %q: want NAME=BRIDGE,CIDR[,FIRST-LAST]", s)
	}
	first, last, ok := strings.Cut(parts[2], "-")
	f, ferr := netip.ParseAddr(first)
	l, lerr := netip.ParseAddr(last)
	if !ok || ferr != nil || lerr != nil || !f.Is4() || !l.Is4() || l.Less(f) {
		return Network{}, fmt.Errorf("network %q: endpoint range %q: want FIRST-LAST, two IPv4 addresses, FIRST not above LAST", s, parts[2])
	}
	for _, a := range []netip.Addr{f, l} {
		switch {
		case !p.Contains(a):
			return Network{}, fmt.Errorf("network %q: endpoint %s is not inside %s", s, a, p)
		case a == at(0):
			return Network{}, fmt.Errorf("network %q: endpoint %s is the subnet's network address", s, a)
		case a == at(1):
			return Network{}, fmt.Errorf("network %q: endpoint %s is the host's address on the bridge", s, a)
		case a == at(size-1):
			return Network{}, fmt.Errorf("network %q: endpoint %s is the subnet's broadcast address", s, a)
		}
	}
	n.FirstEndpoint, n.LastEndpoint = f, l
	return n, nil
}

// DefaultNetwork is used when no network is configured.
var DefaultNetwork = Network{Name: "default", Bridge: "basin0", Prefix: netip.MustParsePrefix("10.99.0.0/24"),
	FirstEndpoint: netip.MustParseAddr("10.99.0.10"), LastEndpoint: netip.MustParseAddr("10.99.0.127")}

// DefaultGaneshaPrefix is where scripts/ganesha/build.sh installs Basin's NFS-Ganesha.
const DefaultGaneshaPrefix = "/usr/local/lib/basin/ganesha"

// PackagedGaneshaPrefix is where the basin-ganesha package installs it (Debian's
// packages install nothing under /usr/local).
const PackagedGaneshaPrefix = "/usr/lib/basin/ganesha"

// GaneshaPrefixFor is --ganesha-prefix's default: the packaged Ganesha's prefix
// when it holds one (its BASIN-PATCHES file, which every build of Basin's
// writes), else scripts/ganesha/build.sh's. exists reports whether a path
// exists; the package's own config file names its prefix anyway.
func GaneshaPrefixFor(exists func(path string) bool) string {
	if exists(PackagedGaneshaPrefix + "/BASIN-PATCHES") {
		return PackagedGaneshaPrefix
	}
	return DefaultGaneshaPrefix
}
