package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Taking an endpoint address off a sandbox cuts the TCP connections to it:
// a server (Ganesha) can then answer no request it read before, and its
// clients are told. Without the
// cut, a request in flight when a volume is unexported (its release to
// another node, a delete) was answered NFS3ERR_STALE by the export's absence,
// an error a real client hands its application, where a client whose
// connection is gone retransmits to the address's next holder.
func TestAddressCutResetsConnections(t *testing.T) {
	nsA, nsB := vethPair(t, "basin-cut")
	runIP(t, "-n", nsB, "addr", "add", "10.99.252.20/24", "dev", "eth0")

	a, err := openNetlinkAddrs(nsA, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	kept, cut := netip.MustParsePrefix("10.99.252.10/24"), netip.MustParsePrefix("10.99.252.11/24")
	for _, p := range []netip.Prefix{kept, cut} {
		if err := a.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	// One listener on every address, IPv6 and IPv4 (whose connections are
	// IPv6 sockets with IPv4-mapped addresses), as Ganesha's; a connection to
	// each endpoint address.
	var ln net.Listener
	if err := inNetns(nsA, func() (err error) { ln, err = dualStackListener(2049); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func(p netip.Prefix) (client, server net.Conn) {
		t.Helper()
		if err := inNetns(nsB, func() (err error) {
			client, err = net.DialTimeout("tcp4", netip.AddrPortFrom(p.Addr(), 2049).String(), 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return client, server
	}
	_, keptServer := dial(kept)
	cutClient, cutServer := dial(cut)

	if err := a.Cut(cut); err != nil {
		t.Fatal(err)
	}
	// The server's side of the connection to the address taken off fails at
	// once: nothing is read from it or written to it any more.
	cutServer.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = cutServer.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the connection to %s is still open after the address was taken off (read: %v)", cut.Addr(), err)
	}
	// The client is told (a reset): it reconnects at once rather than wait
	// out its call's timeout.
	cutClient.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := cutClient.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the client of %s was not told its connection ended (read: %v)", cut.Addr(), err)
	}
	// The other address's connection is untouched.
	keptServer.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := keptServer.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the connection to %s, whose address stays, broke: %v", kept.Addr(), err)
	}
	if _, err := keptServer.Write([]byte("x")); err != nil {
		t.Fatalf("write to the connection whose address stays: %v", err)
	}
	// Taking an address off twice is still success.
	if err := a.Cut(cut); err != nil {
		t.Fatal(err)
	}
	// Del, as a revert or a remount does, keeps the clients' connections:
	// the address comes back.
	if err := a.Del(kept); err != nil {
		t.Fatal(err)
	}
	keptServer.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := keptServer.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Del broke the connection to %s: %v", kept.Addr(), err)
	}
}

// dualStackListener listens on [::]:port for IPv6 and IPv4 alike, as Ganesha
// does (Go's own listener may pick IPv4 alone).
func dualStackListener(port int) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: port}); err != nil {
		return nil, err
	}
	if err := unix.Listen(fd, 16); err != nil {
		return nil, err
	}
	return net.FileListener(f)
}
