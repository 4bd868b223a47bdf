package dataplane

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// An endpoint address that comes up on a sandbox's interface is announced
// with gratuitous ARP: clients that knew the address at another MAC (a
// volume's endpoint moved from another node's sandbox, or a sandbox made
// anew) update their neighbour entry at once instead of sending to the old
// one until it goes stale. The kernel's arp_notify announces addresses only
// when the link comes up or its MAC changes, not when an address is added to
// a link that is up, so Basin sends them: an ARP request whose sender and
// target are the address (RFC 5227's announcement), to the broadcast address,
// three times (at once, after 0.2 s and after 1 s: a receiver ignores a
// change within its neighbour locktime, 1 s by default).

// announceAt are the delays of the announcements after an address comes up.
var announceAt = []time.Duration{0, 200 * time.Millisecond, time.Second}

// announce sends addr's gratuitous ARPs from the interface with index
// ifindex and MAC mac in network namespace ns, in the background.
func announce(ns string, ifindex int, mac net.HardwareAddr, addr netip.Addr) {
	if !addr.Is4() || len(mac) != 6 {
		return // IPv6 endpoints would need unsolicited neighbour advertisements
	}
	go func() {
		start := time.Now()
		for _, at := range announceAt {
			time.Sleep(time.Until(start.Add(at)))
			// Best effort: a lost announcement costs what no announcement
			// did, a client waiting for its neighbour entry to go stale.
			_ = sendGratuitousARP(ns, ifindex, mac, addr)
		}
	}()
}

// gratuitousARP is the ARP request announcing addr at mac.
func gratuitousARP(mac net.HardwareAddr, addr netip.Addr) []byte {
	p := make([]byte, 28)
	binary.BigEndian.PutUint16(p[0:], 1)      // hardware: Ethernet
	binary.BigEndian.PutUint16(p[2:], 0x0800) // protocol: IPv4
	p[4], p[5] = 6, 4
	binary.BigEndian.PutUint16(p[6:], 1) // request
	copy(p[8:14], mac)
	ip := addr.As4()
	copy(p[14:18], ip[:]) // sender: the address
	// target hardware address: zero (p[18:24])
	copy(p[24:28], ip[:]) // target: the address too
	return p
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// sendGratuitousARP sends one announcement of addr, broadcast, from the
// interface ifindex of namespace ns.
func sendGratuitousARP(ns string, ifindex int, mac net.HardwareAddr, addr netip.Addr) error {
	var fd int
	if err := inNetns(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		return err
	}); err != nil {
		return fmt.Errorf("packet socket in %s: %w", ns, err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifindex, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	return unix.Sendto(fd, gratuitousARP(mac, addr), 0, to)
}
