package connlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// server runs an http.Server behind a Listener with opts on a loopback port. Its
// header timeout is a minute: no test here passes by waiting for it. Sockets
// linger 20 ms unless opts say otherwise.
func server(t *testing.T, opts Options, h http.Handler) (*Listener, string) {
	t.Helper()
	if opts.Linger == 0 {
		opts.Linger = 20 * time.Millisecond
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, opts)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute, ConnState: l.ConnState}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, inner.Addr().String()
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.RemoteAddr) })

// dial opens a connection to addr from the loopback address from.
func dial(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// open reports whether the server still holds c open: a closed one reads EOF at
// once; an open one has nothing to read.
func open(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitClosed waits until the server has closed c.
func waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("%s: still open (%v)", what, err)
	}
}

// get sends a request on c and returns the answer's body.
func get(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	c.SetDeadline(time.Time{})
	return string(b)
}

// waitStats polls until cond holds of the listener's counts.
func waitStats(t *testing.T, l *Listener, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := l.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Silent connections from many sources fill the total cap: a new connection is
// served at once, and the oldest silent one makes room for it.
func TestSilentConnectionsMakeRoom(t *testing.T) {
	l, addr := server(t, Options{Max: 4, PerSource: 100}, ok)
	var silent []net.Conn
	for i := 2; i <= 5; i++ {
		silent = append(silent, dial(t, addr, fmt.Sprintf("127.0.0.%d", i)))
		waitStats(t, l, func(s Stats) bool { return s.Open == i-1 })
	}
	c := dial(t, addr, "127.0.0.1")
	if body := get(t, c); !strings.HasPrefix(body, "127.0.0.1:") {
		t.Fatalf("answer %q", body)
	}
	waitClosed(t, silent[0], "the oldest silent connection")
	for _, s := range silent[1:] {
		if !open(s) {
			t.Fatal("a newer silent connection was closed")
		}
	}
	if s := l.Stats(); s.EvictedTotal != 1 || s.Open != 4 || s.Refused != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// One source's connections count against its own cap: at it, its own oldest
// silent connection makes room, and other sources are not touched.
func TestPerSourceCap(t *testing.T) {
	l, addr := server(t, Options{Max: 100, PerSource: 2}, ok)
	other := dial(t, addr, "127.0.0.3")
	a1 := dial(t, addr, "127.0.0.2")
	a2 := dial(t, addr, "127.0.0.2")
	waitStats(t, l, func(s Stats) bool { return s.Open == 3 })
	a3 := dial(t, addr, "127.0.0.2")
	waitClosed(t, a1, "the source's oldest connection")
	if !open(a2) || !open(other) {
		t.Fatal("another connection was closed")
	}
	get(t, a3)
	if s := waitStats(t, l, func(s Stats) bool { return s.Open == 3 }); s.EvictedSource != 1 || s.EvictedTotal != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A client's kept-alive connection outlives silent connections of its own source
// made after it: they are closed first, and it serves the next request.
func TestKeptAliveConnectionSurvivesSilentOnes(t *testing.T) {
	l, addr := server(t, Options{Max: 100, PerSource: 3}, ok)
	kept := dial(t, addr, "127.0.0.2")
	first := get(t, kept)
	var silent []net.Conn
	for range 10 {
		silent = append(silent, dial(t, addr, "127.0.0.2"))
	}
	s := waitStats(t, l, func(s Stats) bool { return s.EvictedSource == 8 })
	if s.Open != 3 {
		t.Fatalf("stats %+v", s)
	}
	for _, c := range silent[:8] {
		waitClosed(t, c, "a silent connection")
	}
	if again := get(t, kept); again != first {
		t.Fatalf("the kept-alive connection was replaced: %q then %q", first, again)
	}
}

// A connection idle between requests goes before one halfway through its headers,
// and every one of them before a request being served, which is never closed: with
// all busy, a new connection is refused.
func TestOrderAndBusyConnections(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		fmt.Fprint(w, "done")
	})
	l, addr := server(t, Options{Max: 3, PerSource: 100}, h)
	defer close(release)
	// A busy connection, one halfway through its headers, one idle.
	busyC := dial(t, addr, "127.0.0.2")
	fmt.Fprint(busyC, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	partial := dial(t, addr, "127.0.0.3")
	fmt.Fprint(partial, "GET / HTTP/1.1\r\n")
	waitStats(t, l, func(Stats) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.all.lists[reading].Len() == 1
	})
	idleC := dial(t, addr, "127.0.0.4")
	get(t, idleC)
	waitStats(t, l, func(Stats) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.all.lists[idle].Len() == 1
	})
	// The idle one makes room first, then the partial one.
	n1 := dial(t, addr, "127.0.0.5")
	waitClosed(t, idleC, "the idle connection")
	if !open(partial) {
		t.Fatal("the connection sending its headers went before the idle one")
	}
	n1.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
	<-started
	n2 := dial(t, addr, "127.0.0.6")
	waitClosed(t, partial, "the connection sending its headers")
	n2.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
	<-started
	// All three busy: a fourth is refused, and nothing busy is touched.
	refused := dial(t, addr, "127.0.0.7")
	waitClosed(t, refused, "a connection over the cap with every slot busy")
	if s := l.Stats(); s.Refused != 1 || s.EvictedTotal != 2 || s.Open != 3 {
		t.Fatalf("stats %+v", s)
	}
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	for _, c := range []net.Conn{busyC, n1, n2} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a busy request was cut: %v", err)
		}
		res.Body.Close()
	}
}

// Closed connections stop counting, whoever closes them.
func TestCountsFollowCloses(t *testing.T) {
	l, addr := server(t, Options{Max: 10, PerSource: 10}, ok)
	var cs []net.Conn
	for range 5 {
		c := dial(t, addr, "127.0.0.2")
		get(t, c)
		cs = append(cs, c)
	}
	waitStats(t, l, func(s Stats) bool { return s.Open == 5 })
	for _, c := range cs {
		c.Close()
	}
	waitStats(t, l, func(s Stats) bool { return s.Open == 0 })
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.sources) != 0 || l.all.n != 0 {
		t.Fatalf("left: %d sources, %d connections", len(l.sources), l.all.n)
	}
	for cl := fresh; cl < busy; cl++ {
		if l.all.lists[cl].Len() != 0 {
			t.Fatalf("class %d still lists %d", cl, l.all.lists[cl].Len())
		}
	}
}

// A connection closed to make room stops counting at once, but its socket stays
// open until Linger is over: a client that reconnects when it is closed cannot
// make the server spin.
func TestEvictedSocketsLinger(t *testing.T) {
	l, addr := server(t, Options{Max: 100, PerSource: 1, Linger: time.Minute}, ok)
	first := dial(t, addr, "127.0.0.2")
	waitStats(t, l, func(s Stats) bool { return s.Open == 1 })
	second := dial(t, addr, "127.0.0.2")
	s := waitStats(t, l, func(s Stats) bool { return s.EvictedSource == 1 })
	if s.Open != 1 || s.Lingering != 1 {
		t.Fatalf("stats %+v", s)
	}
	if !open(first) {
		t.Fatal("the evicted connection was closed before its linger time")
	}
	get(t, second)
	// It is not served meanwhile.
	first.SetDeadline(time.Now().Add(200 * time.Millisecond))
	fmt.Fprint(first, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if n, _ := first.Read(make([]byte, 1)); n > 0 {
		t.Fatal("the evicted connection was served")
	}
}

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.1:80", "192.0.2.1/32"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1/32"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
		{"[::1]:80", "::/64"},
	} {
		ap := netip.MustParseAddrPort(tc.addr)
		if got := sourceOf(net.TCPAddrFromAddrPort(ap)); got.String() != tc.want {
			t.Errorf("sourceOf(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
	if got := sourceOf(&net.UnixAddr{Name: "/x"}); got.IsValid() {
		t.Errorf("a unix address is source %s", got)
	}
}
