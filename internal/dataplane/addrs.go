package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// addrTable manages the endpoint addresses on a sandbox's eth0.
type addrTable interface {
	// Add puts p on the interface; already there is success.
	Add(p netip.Prefix) error
	// Del takes p off; already gone is success.
	Del(p netip.Prefix) error
	// Cut takes p off as Del does, and resets its clients' TCP connections.
	Cut(p netip.Prefix) error
	// List returns the interface's IPv4 addresses with their prefix lengths.
	List() ([]netip.Prefix, error)
	Close()
}

// netlinkAddrs is addrTable over rtnetlink, in the sandbox's network namespace:
// no process per address. (`ip -n` copied the whole mount table to remount /sys
// in a namespace of its own: ~10 ms per address at 1,000 volumes, against 30 µs.)
type netlinkAddrs struct {
	h    *netlink.Handle
	link netlink.Link
	ns   string // the namespace's name, to announce addresses from (announce.go)
}

func openNetlinkAddrs(nsName, dev string) (*netlinkAddrs, error) {
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", nsName, err)
	}
	defer ns.Close()
	// rtnetlink for the addresses, sock_diag for the connections to them,
	// netfilter's for the connections translated to them (conntrack).
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE, unix.NETLINK_INET_DIAG, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", nsName, err)
	}
	link, err := h.LinkByName(dev)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("%s in %s: %w", dev, nsName, err)
	}
	return &netlinkAddrs{h: h, link: link, ns: nsName}, nil
}

func nlAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
}

// Add puts p on the interface and, if it was not there, announces it with
// gratuitous ARP (announce.go).
func (a *netlinkAddrs) Add(p netip.Prefix) error {
	err := a.h.AddrAdd(a.link, nlAddr(p))
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("add %s: %w", p, err)
	}
	link := a.link
	if l, err := a.h.LinkByIndex(link.Attrs().Index); err == nil {
		link = l // its MAC as it is now
	}
	announce(a.ns, link.Attrs().Index, link.Attrs().HardwareAddr, p.Addr())
	return nil
}

// Cut destroys (SOCK_DESTROY) the TCP connections clients made to p's
// address, takes p off the interface, and destroys those made in between: the
// sockets a server accepted on it fail at once, so it answers nothing it read
// before. Why: a volume is unexported after its address goes
// (Manager.Release), and a request Ganesha had read but not yet looked up
// would otherwise be answered for a missing export (NFS3ERR_STALE, which a
// client hands its application). The first pass runs while the address is
// still there, so the resets reach the clients: they reconnect at once, to
// whoever holds the address next, rather than wait out a call's timeout (the
// second pass's resets, from an address gone, are not sent). Connections to
// other addresses, the listeners, and the sandbox's own connections out (to
// a DC, from the first address as their source) stay. The cut is best
// effort: when only it failed, the address is off and Cut returns a
// *cutError. (Del keeps the connections: a volume reverted or remounted
// keeps its address, and its clients their connections.)
func (a *netlinkAddrs) Cut(p netip.Prefix) error {
	first := a.cut(p.Addr())
	if err := a.Del(p); err != nil {
		return err
	}
	if err := errors.Join(first, a.cut(p.Addr())); err != nil {
		return &cutError{fmt.Errorf("cut the connections to %s: %w", p.Addr(), err)}
	}
	return nil
}

// cutError is Cut's error when the address went but not every connection
// to it could be cut.
type cutError struct{ error }

func (e *cutError) Unwrap() error { return e.error }

// Del takes p off the interface; already gone is success.
func (a *netlinkAddrs) Del(p netip.Prefix) error {
	if err := a.h.AddrDel(a.link, nlAddr(p)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}

// cut destroys the TCP connections to a listening port whose local address
// is addr. Sockets the kernel cannot destroy (EOPNOTSUPP: a kernel without
// CONFIG_INET_DIAG_DESTROY, or one socket's state) are left to end as they
// would have before, when the client next sends.
func (a *netlinkAddrs) cut(addr netip.Addr) error {
	// Ganesha listens on [::]: its IPv4 connections are IPv6 sockets with
	// IPv4-mapped addresses, listed with IPv6's; each socket is destroyed
	// as its family lists it.
	type listed struct {
		family uint8
		*netlink.Socket
	}
	var socks []listed
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		s, err := a.h.SocketDiagTCP(fam)
		for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 3; try++ {
			s, err = a.h.SocketDiagTCP(fam) // changed while listed: again, whole
		}
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return fmt.Errorf("list the connections to %s: %w", addr, err)
		}
		for _, x := range s {
			socks = append(socks, listed{fam, x})
		}
	}
	// Connections clients made are to a port something listens on; the
	// sandbox's own, out to a DC or a client's callback service, are from
	// a port of their own.
	listening := map[uint16]bool{}
	for _, s := range socks {
		if s.State == tcpListen {
			listening[s.ID.SourcePort] = true
		}
	}
	ip := net.IP(addr.AsSlice())
	// Connections translated on their way in (SMB: the sandbox's NAT sends an
	// endpoint's port 445 to its instance's smbd on a loopback address,
	// smbnat.go) have the translated address as their local one: their
	// conntrack entries name the endpoint they were made to, and the socket's
	// own ends.
	natted, err := a.translatedTo(ip)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	var doomed []sockDestroy
	for _, s := range socks {
		switch {
		case s.State == tcpListen || s.State == tcpTimeWait || s.State == tcpClose:
			continue // nothing to answer on
		case natted[sockEnds{s.ID.Source.String(), s.ID.SourcePort, s.ID.Destination.String(), s.ID.DestinationPort}]:
		case !s.ID.Source.Equal(ip) || !listening[s.ID.SourcePort]: // Equal: IPv4-mapped too
			continue
		}
		doomed = append(doomed, sockDestroy{family: s.family, id: s.ID})
	}
	for _, err := range a.destroy(doomed) {
		switch {
		case err == nil, errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESTALE): // gone meanwhile
		case errors.Is(err, unix.EOPNOTSUPP):
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// destroy ends the TCP sockets socks (each of the family sock_diag listed
// it in) with SOCK_DESTROY, in one pass in the sandbox's namespace, naming
// each by its cookie too; it returns each one's error. Without the cookie
// the kernel looks a socket up by its addresses alone
// (inet_diag_find_one_icsk), and when the connection has ended since it was
// listed, the lookup falls back to the listener of its local address and
// port: the destroy then closed Ganesha's listening socket, and the whole
// network's NFS with it. netlink.Handle.SocketDestroy sends no cookie; so
// the requests are made here. ESTALE: the cookie's socket is gone.
func (a *netlinkAddrs) destroy(socks []sockDestroy) []error {
	errs := make([]error, len(socks))
	if len(socks) == 0 {
		return errs
	}
	if err := inNetns(a.ns, func() error {
		for i := range socks {
			req := nl.NewNetlinkRequest(nl.SOCK_DESTROY, unix.NLM_F_ACK)
			req.AddData(&socks[i])
			_, errs[i] = req.Execute(unix.NETLINK_INET_DIAG, 0)
		}
		return nil
	}); err != nil {
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// sockDestroy is SOCK_DESTROY's struct inet_diag_req_v2
// (include/uapi/linux/inet_diag.h): family, protocol, extensions, padding,
// states, and the socket's inet_diag_sockid: ports in network order, the
// addresses in 16 bytes each (an IPv4 one in the first 4), interface, cookie.
type sockDestroy struct {
	family uint8
	id     netlink.SocketID
}

func (r *sockDestroy) Len() int { return 56 }

func (r *sockDestroy) Serialize() []byte {
	b := make([]byte, r.Len())
	b[0], b[1] = r.family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:], ^uint32(0))
	binary.BigEndian.PutUint16(b[8:], r.id.SourcePort)
	binary.BigEndian.PutUint16(b[10:], r.id.DestinationPort)
	put := func(off int, ip net.IP) {
		if r.family == unix.AF_INET {
			copy(b[off:off+4], ip.To4())
		} else {
			copy(b[off:off+16], ip.To16())
		}
	}
	put(12, r.id.Source)
	put(28, r.id.Destination)
	binary.NativeEndian.PutUint32(b[44:], r.id.Interface)
	binary.NativeEndian.PutUint32(b[48:], r.id.Cookie[0])
	binary.NativeEndian.PutUint32(b[52:], r.id.Cookie[1])
	return b
}

// sockEnds is a TCP socket's local and remote address and port.
type sockEnds struct {
	local     string
	localPort uint16
	remote    string
	rPort     uint16
}

// translatedTo lists the sockets of the connections made to ip whose
// destination the sandbox translated (DNAT): from each conntrack entry to
// ip, the reply direction's ends, which are the socket's. A kernel or
// namespace without connection tracking has none.
func (a *netlinkAddrs) translatedTo(ip net.IP) (map[sockEnds]bool, error) {
	flows, err := a.h.ConntrackTableList(netlink.ConntrackTable, netlink.InetFamily(unix.AF_INET))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the translated connections to %s: %w", ip, err)
	}
	out := map[sockEnds]bool{}
	for _, f := range flows {
		if f.Forward.Protocol != unix.IPPROTO_TCP || !f.Forward.DstIP.Equal(ip) || f.Reverse.SrcIP.Equal(ip) {
			continue // not to ip, or not translated
		}
		out[sockEnds{f.Reverse.SrcIP.String(), f.Reverse.SrcPort, f.Reverse.DstIP.String(), f.Reverse.DstPort}] = true
	}
	return out, nil
}

// TCP states as sock_diag gives them (include/net/tcp_states.h).
const (
	tcpTimeWait = 6
	tcpClose    = 7
	tcpListen   = 10
)

func (a *netlinkAddrs) List() ([]netip.Prefix, error) {
	as, err := a.h.AddrList(a.link, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(as))
	for _, x := range as {
		ip, ok := netip.AddrFromSlice(x.IP.To4())
		if !ok {
			continue
		}
		bits, _ := x.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits))
	}
	return out, nil
}

func (a *netlinkAddrs) Close() { a.h.Close() }
