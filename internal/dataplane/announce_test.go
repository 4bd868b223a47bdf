package dataplane

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestGratuitousARPPacket(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0xba, 0x51, 0x00, 0x00, 0x01}
	got := gratuitousARP(mac, netip.MustParseAddr("10.99.1.10"))
	want := []byte{0, 1, 8, 0, 6, 4, 0, 1, 0x02, 0xba, 0x51, 0, 0, 1, 10, 99, 1, 10, 0, 0, 0, 0, 0, 0, 10, 99, 1, 10}
	if !bytes.Equal(got, want) {
		t.Fatalf("gratuitous ARP\n got % x\nwant % x", got, want)
	}
}

// An endpoint address added to a sandbox's interface is announced: a host on
// the other end of the link sees three gratuitous ARPs naming the address at
// the interface's MAC, within the announcement schedule; adding an address
// that is already there announces nothing.
func TestEndpointAnnounced(t *testing.T) {
	nsA, nsB := vethPair(t, "basin-garp")
	var fd int
	if err := inNetns(nsB, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return err
		}
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}); err != nil {
		t.Fatal(err)
	}

	a, err := openNetlinkAddrs(nsA, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mac := a.link.Attrs().HardwareAddr
	addr := netip.MustParseAddr("10.99.251.10")
	want := gratuitousARP(mac, addr)
	// announcements counts the gratuitous ARPs for addr seen within d.
	announcements := func(d time.Duration) int {
		n := 0
		buf := make([]byte, 128)
		for end := time.Now().Add(d); time.Now().Before(end); {
			m, _, err := unix.Recvfrom(fd, buf, 0)
			if err == nil && bytes.Equal(buf[:m], want) {
				n++
			}
		}
		return n
	}
	p := netip.PrefixFrom(addr, 24)
	if err := a.Add(p); err != nil {
		t.Fatal(err)
	}
	if n := announcements(2 * time.Second); n != len(announceAt) {
		t.Fatalf("%d gratuitous ARPs for %s at %s after it came up, want %d", n, addr, mac, len(announceAt))
	}
	if err := a.Add(p); err != nil {
		t.Fatal(err)
	}
	if n := announcements(1500 * time.Millisecond); n != 0 {
		t.Fatalf("an address already there was announced again (%d times)", n)
	}
}
