// Package nfs3 is a small NFSv3 client for load generation and for protocol
// tests: ONC RPC over TCP with record marking, AUTH_SYS, portmapper GETPORT
// (or fixed ports), MOUNT MNT and EXPORT, and the NFSv3 procedures a benchmark
// needs (LOOKUP, CREATE, READ, WRITE, COMMIT) plus those an attack suite needs
// (GETATTR, SETATTR, READDIR, READDIRPLUS, MKDIR, SYMLINK, MKNOD, REMOVE,
// RMDIR, RENAME, LINK, CREATE in all three modes, and Raw calls). Every call
// takes any handle and any name bytes as given, and a failed procedure returns
// its nfsstat3 as a Status error.
//
// Calls on one connection are pipelined: any number of goroutines may call at
// once, each request goes out as soon as it is encoded, and one reader goroutine
// per connection hands replies back by XID. So N goroutines on a connection keep
// N requests in flight, which is what a queue depth means to the server.
//
// It imports nothing of Basin's.
package nfs3

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Auth is an AUTH_SYS identity.
type Auth struct {
	UID, GID uint32
	Machine  string
}

// conn is one TCP connection carrying pipelined calls.
type conn struct {
	c    net.Conn
	auth []byte // encoded opaque_auth (flavor + body)

	wmu sync.Mutex

	mu      sync.Mutex
	pending map[uint32]chan reply
	err     error // set once the reader stops

	xid      atomic.Uint32
	inFlight atomic.Int64
	maxSeen  atomic.Int64
}

type reply struct {
	body []byte
	err  error
}

func dial(ctx context.Context, addr string, a Auth, localIP string) (*conn, error) {
	var d net.Dialer
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	var e enc
	e.u32(1) // AUTH_SYS
	var body enc
	body.u32(uint32(time.Now().Unix()))
	body.str(a.Machine)
	body.u32(a.UID)
	body.u32(a.GID)
	body.u32(0) // no supplementary groups
	e.opaque(body.b)
	cn := &conn{c: c, auth: e.b, pending: map[uint32]chan reply{}}
	cn.xid.Store(uint32(time.Now().UnixNano()))
	go cn.read()
	return cn, nil
}

// read demultiplexes replies until the connection fails.
func (cn *conn) read() {
	r := bufio.NewReaderSize(cn.c, 1<<20)
	var err error
	for {
		var msg []byte
		msg, err = readRecord(r)
		if err != nil {
			break
		}
		if len(msg) < 4 {
			err = errors.New("rpc: short reply")
			break
		}
		xid := binary.BigEndian.Uint32(msg)
		cn.mu.Lock()
		ch := cn.pending[xid]
		delete(cn.pending, xid)
		cn.mu.Unlock()
		if ch != nil {
			cn.inFlight.Add(-1)
			ch <- reply{body: msg}
		}
	}
	cn.mu.Lock()
	cn.err = fmt.Errorf("rpc: connection lost: %w", err)
	for xid, ch := range cn.pending {
		ch <- reply{err: cn.err}
		delete(cn.pending, xid)
	}
	cn.mu.Unlock()
}

// readRecord reads one record-marked message (possibly several fragments).
func readRecord(r io.Reader) ([]byte, error) {
	var msg []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h & 0x7fffffff)
		if n > 64<<20 || len(msg)+n > 64<<20 {
			return nil, errors.New("rpc: record larger than 64 MiB")
		}
		start := len(msg)
		msg = slices.Grow(msg, n)[:start+n]
		if _, err := io.ReadFull(r, msg[start:]); err != nil {
			return nil, err
		}
		if h&0x80000000 != 0 {
			return msg, nil
		}
	}
}

// call sends one call, whose arguments are the concatenation of args, and waits
// for its reply; it returns the procedure's results. The pieces go out in one
// writev, so a WRITE's data is never copied.
func (cn *conn) call(ctx context.Context, prog, vers, proc uint32, args ...[]byte) ([]byte, error) {
	xid := cn.xid.Add(1)
	var e enc
	e.u32(0) // record mark, filled below
	e.u32(xid)
	e.u32(0) // CALL
	e.u32(2) // RPC version
	e.u32(prog)
	e.u32(vers)
	e.u32(proc)
	e.b = append(e.b, cn.auth...)
	e.u32(0) // verifier AUTH_NONE
	e.u32(0)
	size := len(e.b) - 4
	for _, a := range args {
		size += len(a)
	}
	binary.BigEndian.PutUint32(e.b, 0x80000000|uint32(size))

	ch := make(chan reply, 1)
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return nil, cn.err
	}
	cn.pending[xid] = ch
	cn.mu.Unlock()
	cn.wmu.Lock()
	// In flight: written to the socket, reply not yet read (the reader decrements).
	n := cn.inFlight.Add(1)
	for {
		m := cn.maxSeen.Load()
		if n <= m || cn.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	bufs := append(net.Buffers{e.b}, args...)
	_, err := bufs.WriteTo(cn.c)
	cn.wmu.Unlock()
	if err != nil {
		cn.forget(xid)
		return nil, fmt.Errorf("rpc: send: %w", err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return parseReply(r.body)
	case <-ctx.Done():
		cn.forget(xid)
		return nil, ctx.Err()
	}
}

func (cn *conn) forget(xid uint32) {
	cn.mu.Lock()
	if _, ok := cn.pending[xid]; ok {
		delete(cn.pending, xid)
		cn.inFlight.Add(-1)
	}
	cn.mu.Unlock()
}

func (cn *conn) close() error { return cn.c.Close() }

// parseReply checks an RPC reply header and returns the results that follow it.
func parseReply(msg []byte) ([]byte, error) {
	d := dec{b: msg}
	d.u32() // xid
	if d.u32() != 1 {
		return nil, errors.New("rpc: not a reply")
	}
	if st := d.u32(); st != 0 {
		return nil, fmt.Errorf("rpc: call denied (reject status %d)", d.u32())
	}
	d.u32()    // verifier flavor
	d.opaque() // verifier body
	switch st := d.u32(); st {
	case 0:
	case 1:
		return nil, errors.New("rpc: program unavailable")
	case 2:
		return nil, errors.New("rpc: program version mismatch")
	case 3:
		return nil, errors.New("rpc: procedure unavailable")
	case 4:
		return nil, errors.New("rpc: garbage arguments")
	default:
		return nil, fmt.Errorf("rpc: accept status %d", st)
	}
	if d.err != nil {
		return nil, d.err
	}
	return d.b[d.off:], nil
}

// enc is an XDR encoder.
type enc struct{ b []byte }

func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) opaque(p []byte) {
	e.u32(uint32(len(p)))
	e.b = append(e.b, p...)
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}
func (e *enc) str(s string) { e.opaque([]byte(s)) }

// dec is an XDR decoder; the first error sticks and later reads return zeros.
type dec struct {
	b   []byte
	off int
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || d.off+n > len(d.b) {
		d.err = errors.New("xdr: reply too short")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *dec) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *dec) opaque() []byte {
	n := int(d.u32())
	if n > len(d.b) {
		d.err = errors.New("xdr: bad length")
		return nil
	}
	p := d.take(n)
	d.take((4 - n%4) % 4)
	return p
}
