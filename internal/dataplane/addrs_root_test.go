package dataplane

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// Taking an endpoint address off a sandbox cuts the TCP connections to it:
// a server (Ganesha) can then answer no request it read before. Without the
// cut, a request in flight when a volume is unexported (its release to
// another node, a delete) was answered NFS3ERR_STALE by the export's absence,
// an error a real client hands its application, where a client whose
// connection is gone retransmits to the address's next holder.
func TestAddressDelCutsConnections(t *testing.T) {
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
	// One listener on every address, as Ganesha's; a connection to each
	// endpoint address.
	var ln net.Listener
	if err := inNetns(nsA, func() (err error) { ln, err = net.Listen("tcp4", "0.0.0.0:2049"); return err }); err != nil {
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
	_, cutServer := dial(cut)

	if err := a.Del(cut); err != nil {
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
	// The other address's connection is untouched.
	keptServer.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := keptServer.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the connection to %s, whose address stays, broke: %v", kept.Addr(), err)
	}
	if _, err := keptServer.Write([]byte("x")); err != nil {
		t.Fatalf("write to the connection whose address stays: %v", err)
	}
	// Taking an address off twice is still success.
	if err := a.Del(cut); err != nil {
		t.Fatal(err)
	}
}
