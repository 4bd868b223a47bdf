package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/runner"
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
	_, keptServer := connect(t, nsB, ln, kept.Addr(), 2049)
	cutClient, cutServer := connect(t, nsB, ln, cut.Addr(), 2049)
	if err := a.Cut(cut); err != nil {
		t.Fatal(err)
	}
	checkCut(t, cut.Addr(), cutClient, cutServer, keptServer)
	var ne net.Error
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

// The same for connections the sandbox translated on their way in (SMB: an
// endpoint's port 445 sent to its instance's smbd on a loopback address,
// smbnat.go): their sockets' local address is the loopback one, and Cut
// finds them through their conntrack entries. Another endpoint translated to
// the same listener keeps its connection.
func TestAddressCutResetsTranslatedConnections(t *testing.T) {
	nsA, nsB := vethPair(t, "basin-natcut")
	runIP(t, "-n", nsB, "addr", "add", "10.99.254.20/24", "dev", "eth0")
	runIP(t, "-n", nsA, "link", "set", "lo", "up")
	runIP(t, "-n", nsA, "addr", "add", smbLoopback("s1").String()+"/32", "dev", "lo") // instance s1's
	a, err := openNetlinkAddrs(nsA, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	kept, cut := netip.MustParsePrefix("10.99.254.10/24"), netip.MustParsePrefix("10.99.254.11/24")
	for _, p := range []netip.Prefix{kept, cut} {
		if err := a.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	sb := &sandbox{dir: t.TempDir(), ns: nsA, run: runner.Exec{}, log: slog.New(slog.DiscardHandler)}
	os.MkdirAll(filepath.Join(sb.dir, "smb", "s1"), 0o700)
	if err := writeJSON(filepath.Join(sb.dir, "smb", "s1", "addrs.json"), map[string]netip.Addr{"k": kept.Addr(), "c": cut.Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := sb.applySMBNAT(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := inNetns(nsA, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(smbLoopback("s1"), 445).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, keptServer := connect(t, nsB, ln, kept.Addr(), 445)
	cutClient, cutServer := connect(t, nsB, ln, cut.Addr(), 445)
	if err := a.Cut(cut); err != nil {
		t.Fatal(err)
	}
	checkCut(t, cut.Addr(), cutClient, cutServer, keptServer)
}

// connect dials addr:port from namespace ns and accepts the connection on
// ln; both ends are closed at cleanup.
func connect(t *testing.T, ns string, ln net.Listener, addr netip.Addr, port uint16) (client, server net.Conn) {
	t.Helper()
	if err := inNetns(ns, func() (err error) {
		client, err = net.DialTimeout("tcp4", netip.AddrPortFrom(addr, port).String(), 5*time.Second)
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

// checkCut checks a Cut of addr: the server's side of the connection to it
// fails at once (nothing is read from it or written to it any more), its
// client is told (a reset: it reconnects at once rather than wait out its
// call's timeout), and another address's connection (kept, the server's
// side) is untouched.
func checkCut(t *testing.T, addr netip.Addr, cutClient, cutServer, kept net.Conn) {
	t.Helper()
	var ne net.Error
	cutServer.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := cutServer.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the connection to %s is still open after the address was taken off (read: %v)", addr, err)
	}
	cutClient.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := cutClient.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the client of %s was not told its connection ended (read: %v)", addr, err)
	}
	kept.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := kept.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("another address's connection broke: %v", err)
	}
}

// A connection that ended between Cut's listing and its destroy must not take
// the listener down with it: the kernel, asked to destroy a socket by its
// addresses alone, falls back to the listener of its local address and port
// when the connection is gone (the race that left Ganesha listening on no
// 2049 in a sandbox, every NFS client of the network refused). destroy names
// the socket by its cookie too: it answers ESTALE and the listener serves on.
// The control: the same destroy without the cookie (netlink's SocketDestroy)
// closes the listener.
func TestDestroyOfAConnectionGoneSparesTheListener(t *testing.T) {
	nsA, nsB := vethPair(t, "basin-stale")
	runIP(t, "-n", nsA, "addr", "add", "10.99.255.10/24", "dev", "eth0")
	runIP(t, "-n", nsB, "addr", "add", "10.99.255.20/24", "dev", "eth0")
	a, err := openNetlinkAddrs(nsA, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var ln net.Listener
	if err := inNetns(nsA, func() (err error) { ln, err = dualStackListener(2049); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := netip.MustParseAddr("10.99.255.10")
	// The listed connection, then its end.
	client, conn := connect(t, nsB, ln, server, 2049)
	var id netlink.SocketID
	socks, err := a.h.SocketDiagTCP(unix.AF_INET6)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		if s.State != tcpListen && s.ID.Source.Equal(net.IP(server.AsSlice())) && s.ID.SourcePort == 2049 {
			id = s.ID
		}
	}
	if id.SourcePort == 0 {
		t.Fatal("the connection is not listed")
	}
	client.Close()
	conn.Close()
	time.Sleep(100 * time.Millisecond) // both sides closed (the server's in LAST_ACK or gone)
	if err := a.destroy([]sockDestroy{{family: unix.AF_INET6, id: id}})[0]; err == nil {
		t.Log("destroy of the ended connection succeeded (it was still there, closing)")
	}
	if c, _ := connect(t, nsB, ln, server, 2049); c == nil {
		t.Fatal("no connection after the destroy")
	}
	// The control.
	c2, s2 := connect(t, nsB, ln, server, 2049)
	local, remote := s2.LocalAddr().(*net.TCPAddr), s2.RemoteAddr().(*net.TCPAddr)
	c2.Close()
	s2.Close()
	time.Sleep(100 * time.Millisecond)
	if err := a.h.SocketDestroy(&net.TCPAddr{IP: local.IP, Port: local.Port}, &net.TCPAddr{IP: remote.IP, Port: remote.Port}); err != nil {
		t.Logf("the control's destroy: %v", err)
	}
	err = inNetns(nsB, func() error {
		c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(server, 2049).String(), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil {
		t.Fatal("the control: a destroy by addresses alone of an ended connection left the listener serving; the check above proves nothing")
	}
}
