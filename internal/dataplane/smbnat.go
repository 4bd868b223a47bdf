package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SMB endpoints reach their instance's smbd through NAT.
//
// smbd opens its listening sockets only as it starts (a reload reads the
// `interfaces` again but binds nothing new), and a Samba instance serves every
// one of its SMB volumes at an endpoint address of its own: had smbd listened
// on the endpoints, each SMB volume created or deleted would restart it,
// cutting every client of the instance's other volumes off with their open
// files. So smbd listens on its instance's loopback address alone
// (smbLoopback), and the sandbox's nftables table basin_smb sends a TCP
// connection to an endpoint's port 445 there (DNAT), the endpoint → loopback
// map rewritten as volumes come and go, in one nft transaction that leaves
// established connections alone. The kernel routes a packet that arrives on
// eth0 to a 127/8 address only with route_localnet, which is on for eth0;
// basin_smb drops every packet from eth0 to 127/8 that is not such a
// connection, so a client that routes 127/8 to the sandbox reaches neither
// smbd's nor samba-dcerpcd's loopback sockets directly. Only port 445 (and
// ICMP, for the errors about it) is tracked; the rest of the sandbox's
// traffic (NFS, and Samba's own connections to the domain) is not, so NFS
// costs no connection tracking and no tenant can fill the conntrack table
// with NFS connections. A release cuts the translated connections too
// (netlinkAddrs.cut finds them through conntrack).
//
// What smbd sees: the server's address of a connection is its loopback
// address. Nothing of the shares depends on it (a share is reached by name at
// any of its instance's addresses, as before), and an SMB3 client's interface
// list (multichannel) names the loopback address alone: channels are bound
// over the endpoint a client connected to.

// smbNATTable names the sandbox's nftables table.
const smbNATTable = "basin_smb"

// renderSMBNAT is the nft script that replaces the basin_smb table with one
// sending each endpoint's port 445 to its instance's loopback address
// (endpoints: endpoint → loopback). An empty map still drops eth0's traffic to
// 127/8.
func renderSMBNAT(endpoints map[netip.Addr]netip.Addr) string {
	var elems []string
	for ep, lo := range endpoints {
		elems = append(elems, ep.String()+" : "+lo.String())
	}
	slices.Sort(elems)
	m := ""
	if len(elems) > 0 {
		m = "\t\telements = { " + strings.Join(elems, ", ") + " }\n"
	}
	// The first two lines make the delete succeed whether the table exists or
	// not: the whole file is one transaction. raw_in drops 127/8 sources
	// from eth0 (route_localnet would take them); ICMP is tracked with port
	// 445, so that an error about a translated connection (fragmentation
	// needed) reaches smbd's socket translated back. filter_in drops a
	// packet to port 445 that conntrack found out of window: untranslated, it
	// would meet no socket at the endpoint and be answered with a reset that
	// ends the client's session. filter_out, after the replies' source is
	// translated back (srcnat, 100), drops anything still leaving eth0 from
	// 127/8.
	return fmt.Sprintf(`table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	map endpoints {
		type ipv4_addr : ipv4_addr
%[2]s	}
	chain raw_in {
		type filter hook prerouting priority raw; policy accept;
		iifname "eth0" ip saddr 127.0.0.0/8 drop
		iifname "eth0" tcp dport 445 return
		iifname "eth0" meta l4proto icmp return
		notrack
	}
	chain raw_out {
		type filter hook output priority raw; policy accept;
		oifname "eth0" tcp sport 445 return
		oifname "eth0" meta l4proto icmp return
		notrack
	}
	chain nat_in {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "eth0" tcp dport 445 dnat to ip daddr map @endpoints
	}
	chain filter_in {
		type filter hook input priority filter; policy accept;
		iifname "eth0" tcp dport 445 ct state invalid drop
		iifname "eth0" ip daddr 127.0.0.0/8 ct status dnat accept
		iifname "eth0" ip daddr 127.0.0.0/8 drop
	}
	chain filter_out {
		type filter hook postrouting priority 200; policy accept;
		oifname "eth0" ip saddr 127.0.0.0/8 drop
	}
}
`, smbNATTable, m)
}

// smbEndpoints reads, from the sandbox's instance directories, every joined
// instance's endpoint addresses mapped to its loopback address. An instance
// whose list cannot be read is left out (and logged), not every instance of
// the network with it; an address two instances list goes to the first by
// name (logged).
func (sb *sandbox) smbEndpoints() (map[netip.Addr]netip.Addr, error) {
	ents, err := os.ReadDir(filepath.Join(sb.dir, "smb"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	out := map[netip.Addr]netip.Addr{}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "v") { // "v…": a ValidateDomain's namespace
			continue
		}
		addrs, err := readAddrs(filepath.Join(sb.dir, "smb", e.Name(), "addrs.json"))
		if err != nil {
			sb.log.Warn("an SMB instance's endpoints left out of the NAT", "smb", e.Name(), "err", err)
			continue
		}
		lo := smbLoopback(e.Name())
		for _, a := range addrs {
			switch prev, ok := out[a]; {
			case !a.Is4():
			case ok && prev != lo:
				sb.log.Warn("two SMB instances list one endpoint; the first keeps it", "addr", a, "smb", e.Name())
			default:
				out[a] = lo
			}
		}
	}
	return out, nil
}

// applySMBNAT makes the sandbox's basin_smb table send each endpoint of its
// instances (as their addrs.json list them) to its instance's smbd; a table
// this sandbox already made so is left alone. The callers hold the instance
// lock of the instance whose addresses changed; smbNATMu orders the passes of
// different instances, each of which reads every instance's list.
func (sb *sandbox) applySMBNAT(ctx context.Context) error {
	sb.smbNATMu.Lock()
	defer sb.smbNATMu.Unlock()
	eps, err := sb.smbEndpoints()
	if err != nil {
		return fmt.Errorf("smb endpoints: %w", err)
	}
	script := renderSMBNAT(eps)
	if script == sb.smbNAT {
		return nil
	}
	sb.smbNAT = ""
	path := filepath.Join(sb.dir, "smb-nat.nft")
	if err := writeFileAtomic(path, []byte(script), 0o600); err != nil {
		return err
	}
	// nsenter --net, not ip netns exec: the latter runs its command in a copy
	// of the host's mounts, which for as long as it runs keeps busy any volume
	// being unmounted meanwhile. /proc/sys/net is the entering process's
	// network namespace's.
	// The table first: route_localnet without its filter would let a client
	// reach the loopback sockets, so a failed nft leaves it off.
	if out, err := sb.run.Run(ctx, "nsenter", "--net=/run/netns/"+sb.ns, "sh", "-c",
		"nft -f \"$0\" && echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet", path); err != nil {
		return fmt.Errorf("smb endpoints' NAT: %s: %w", firstLine(string(out)), err)
	}
	sb.smbNAT = script
	return nil
}
