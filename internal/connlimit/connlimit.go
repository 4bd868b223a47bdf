// Package connlimit bounds the connections an HTTP server holds, in total and per
// source (an IPv4 address, an IPv6 /64), without ever making a new connection
// wait for a slot. When a cap is reached, the connection that has waited longest
// without a request in progress is closed to make room: one that never sent a
// byte before one idle between requests, before one still sending its headers. A
// new connection is refused only when every connection counting against the cap
// is busy with a request. A connection closed to make room, or refused, stops
// counting at once but keeps its socket open for a second (Options.Linger) before
// it is closed: a client that reconnects as soon as it is closed then reconnects
// once a second per connection instead of as fast as the server can accept.
//
// Why not golang.org/x/net/netutil.LimitListener: it stops accepting at its cap,
// so connections that send nothing hold every slot until the server's header
// timeout cuts them, and everyone else waits in the kernel's accept queue — an
// unauthenticated client could stall the API that way without sending a request.
//
// A Listener wraps the server's net.Listener, and its ConnState method must be
// the http.Server's ConnState hook: that is how it learns which connections are
// busy. Imported by the daemon package.
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Options are a Listener's caps.
type Options struct {
	// Max is how many connections may be open at once (at least 1).
	Max int
	// PerSource is how many of them one source may hold (at least 1): an IPv4
	// address, or an IPv6 /64 (a host's addresses in one IPv6 subnet are its
	// to choose).
	PerSource int
	// Linger is how long a connection closed to make room, or refused, keeps
	// its socket before it is closed (default 1 s). At most Max linger at once;
	// beyond that they are closed at once.
	Linger time.Duration
}

// Stats counts what a Listener did.
type Stats struct {
	Open int // connections open now
	// EvictedSource and EvictedTotal count connections closed to make room for a
	// new one: at its source's cap, and at the total cap.
	EvictedSource, EvictedTotal uint64
	// Refused counts new connections never served: every connection counting
	// against the cap was busy with a request.
	Refused uint64
	// Lingering is how many sockets of connections that no longer count are
	// still open (Options.Linger).
	Lingering int
}

// class is what a connection is doing; the first three may be closed to make
// room, in that order.
type class int

const (
	fresh   class = iota // accepted, no byte of a request yet
	idle                 // between requests, no byte of the next one yet
	reading              // a request's first bytes came, its headers are not all read
	busy                 // a request is being served, or the connection was hijacked
)

// group is a set of connections (all of them, or one source's), with the ones
// that may be closed in a list per class, oldest first.
type group struct {
	n     int
	lists [busy]list.List // of *conn
}

// oldestWaiting returns the connection to close to make room in g: the oldest
// fresh one, else the longest idle, else the oldest still reading; nil if every
// connection of g is busy.
func (g *group) oldestWaiting() *conn {
	for cl := fresh; cl < busy; cl++ {
		if e := g.lists[cl].Front(); e != nil {
			return e.Value.(*conn)
		}
	}
	return nil
}

// Listener is a net.Listener whose connections are capped (see the package
// documentation).
type Listener struct {
	net.Listener
	opts Options

	mu      sync.Mutex
	all     group
	sources map[netip.Prefix]*group
	stats   Stats
}

// New wraps inner. Caps below 1 are taken as 1.
func New(inner net.Listener, opts Options) *Listener {
	opts.Max = max(opts.Max, 1)
	opts.PerSource = max(opts.PerSource, 1)
	if opts.Linger <= 0 {
		opts.Linger = time.Second
	}
	return &Listener{Listener: inner, opts: opts, sources: map[netip.Prefix]*group{}}
}

// Accept returns the next connection, making room for it if a cap is reached.
// Connections it refuses are never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, victim := l.admit(nc)
		if victim != nil {
			// The server's read on it fails now, and its Close leaves the
			// socket to linger.
			victim.Conn.SetReadDeadline(time.Unix(1, 0))
			l.linger(victim.Conn)
		}
		if c != nil {
			return c, nil
		}
		l.linger(nc)
	}
}

// linger closes nc after opts.Linger, or at once if Max sockets linger already.
func (l *Listener) linger(nc net.Conn) {
	l.mu.Lock()
	if l.stats.Lingering >= l.opts.Max {
		l.mu.Unlock()
		nc.Close()
		return
	}
	l.stats.Lingering++
	l.mu.Unlock()
	time.AfterFunc(l.opts.Linger, func() {
		nc.Close()
		l.mu.Lock()
		l.stats.Lingering--
		l.mu.Unlock()
	})
}

// admit registers nc, choosing the connection to close for it (victim), or
// refuses it (c == nil).
func (l *Listener) admit(nc net.Conn) (c, victim *conn) {
	src := sourceOf(nc.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.sources[src]
	switch {
	case g != nil && g.n >= l.opts.PerSource:
		// The source makes room among its own; the total stays the same.
		if victim = g.oldestWaiting(); victim == nil {
			l.stats.Refused++
			return nil, nil
		}
		l.remove(victim)
		victim.evicted.Store(true)
		l.stats.EvictedSource++
	case l.all.n >= l.opts.Max:
		if victim = l.all.oldestWaiting(); victim == nil {
			l.stats.Refused++
			return nil, nil
		}
		l.remove(victim)
		victim.evicted.Store(true)
		l.stats.EvictedTotal++
	}
	if g = l.sources[src]; g == nil {
		g = &group{}
		l.sources[src] = g
	}
	c = &conn{Conn: nc, l: l, src: src, class: busy}
	g.n++
	l.all.n++
	l.stats.Open++
	l.setClass(c, fresh)
	return c, victim
}

// setClass moves c to class cl. l.mu is held.
func (l *Listener) setClass(c *conn, cl class) {
	if c.gone || c.class == cl {
		return
	}
	if c.class != busy {
		l.all.lists[c.class].Remove(c.e)
		l.sources[c.src].lists[c.class].Remove(c.se)
		c.e, c.se = nil, nil
	}
	c.class = cl
	if cl != busy {
		c.e = l.all.lists[cl].PushBack(c)
		c.se = l.sources[c.src].lists[cl].PushBack(c)
	}
	c.waiting.Store(cl == fresh || cl == idle)
}

// remove forgets c: it no longer counts against any cap. l.mu is held.
func (l *Listener) remove(c *conn) {
	if c.gone {
		return
	}
	l.setClass(c, busy)
	c.gone = true
	c.waiting.Store(false)
	g := l.sources[c.src]
	if g.n--; g.n == 0 {
		delete(l.sources, c.src)
	}
	l.all.n--
	l.stats.Open--
}

// ConnState is the http.Server's ConnState hook.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok { // a *tls.Conn
		nc = u.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateActive, http.StateHijacked:
		l.setClass(c, busy)
	case http.StateIdle:
		l.setClass(c, idle)
	case http.StateClosed:
		l.remove(c)
	}
}

// Stats returns the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// conn is an accepted connection.
type conn struct {
	net.Conn
	l   *Listener
	src netip.Prefix
	// waiting is set while the connection is fresh or idle: the first byte read
	// then moves it to reading, without taking the lock on every read.
	waiting atomic.Bool
	// evicted is set once the connection was chosen to make room: its socket
	// lingers, and Close leaves it to the Listener.
	evicted atomic.Bool

	// Guarded by l.mu.
	class class
	gone  bool          // removed: closed, or chosen to be
	e, se *list.Element // in l.all's list of its class, and in its source's
}

// Read notes the first bytes of a request.
func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.waiting.Load() {
		c.l.mu.Lock()
		if c.class == fresh || c.class == idle {
			c.l.setClass(c, reading)
		}
		c.l.mu.Unlock()
	}
	return n, err
}

// Close closes the connection; it no longer counts against the caps.
func (c *conn) Close() error {
	if c.evicted.Load() {
		return nil
	}
	c.l.mu.Lock()
	c.l.remove(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// sourceOf is the source a remote address counts against: an IPv4 address, or
// the /64 of an IPv6 one. Anything else (a Unix socket) is one source.
func sourceOf(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip := ta.AddrPort().Addr().Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.Prefix(64)
	return p
}
