package nfsraw

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Auth is the AUTH_SYS identity a Client calls with.
type Auth struct {
	UID, GID uint32
	GIDs     []uint32
	Machine  string
	// LocalIP, if set, is the connection's source address.
	LocalIP string
}

// rpcConn is one TCP connection carrying one ONC RPC call at a time.
type rpcConn struct {
	mu   sync.Mutex
	c    net.Conn
	r    *bufio.Reader
	auth []byte
	xid  uint32
}

func dialRPC(ctx context.Context, addr string, a Auth) (*rpcConn, error) {
	var d net.Dialer
	if a.LocalIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(a.LocalIP)}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if a.Machine == "" {
		a.Machine = "nfsraw"
	}
	var body xdrEnc
	body.u32(uint32(time.Now().Unix()))
	body.str(a.Machine)
	body.u32(a.UID)
	body.u32(a.GID)
	body.u32(uint32(len(a.GIDs)))
	for _, g := range a.GIDs {
		body.u32(g)
	}
	var e xdrEnc
	e.u32(1) // AUTH_SYS
	e.opaque(body.b)
	return &rpcConn{c: c, r: bufio.NewReader(c), auth: e.b, xid: uint32(time.Now().UnixNano())}, nil
}

func (rc *rpcConn) close() error { return rc.c.Close() }

// call sends one call and returns the results after the accepted-reply header.
func (rc *rpcConn) call(ctx context.Context, prog, vers, proc uint32, args []byte) ([]byte, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.xid++
	xid := rc.xid
	var e xdrEnc
	e.u32(0)
	e.u32(xid)
	e.u32(0) // CALL
	e.u32(2)
	e.u32(prog)
	e.u32(vers)
	e.u32(proc)
	e.b = append(e.b, rc.auth...)
	e.u32(0)
	e.u32(0)
	e.b = append(e.b, args...)
	binary.BigEndian.PutUint32(e.b, 0x80000000|uint32(len(e.b)-4))
	if dl, ok := ctx.Deadline(); ok {
		rc.c.SetDeadline(dl)
	} else {
		rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if _, err := rc.c.Write(e.b); err != nil {
		return nil, fmt.Errorf("rpc: send: %w", err)
	}
	for {
		msg, err := readRecord(rc.r)
		if err != nil {
			return nil, fmt.Errorf("rpc: receive: %w", err)
		}
		if len(msg) >= 4 && binary.BigEndian.Uint32(msg) != xid {
			continue // a late reply to an abandoned call
		}
		return parseReply(msg)
	}
}

func readRecord(r io.Reader) ([]byte, error) {
	var msg []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h & 0x7fffffff)
		if len(msg)+n > 16<<20 {
			return nil, errors.New("rpc: record larger than 16 MiB")
		}
		start := len(msg)
		msg = append(msg, make([]byte, n)...)
		if _, err := io.ReadFull(r, msg[start:]); err != nil {
			return nil, err
		}
		if h&0x80000000 != 0 {
			return msg, nil
		}
	}
}

// RPCError is an RPC-level failure: the call was denied or not accepted.
type RPCError struct {
	Denied bool
	Stat   uint32 // reject_stat or accept_stat
}

func (e *RPCError) Error() string {
	if e.Denied {
		return fmt.Sprintf("rpc: call denied (reject status %d)", e.Stat)
	}
	names := map[uint32]string{1: "program unavailable", 2: "program version mismatch", 3: "procedure unavailable", 4: "garbage arguments", 5: "system error"}
	if n, ok := names[e.Stat]; ok {
		return "rpc: " + n
	}
	return fmt.Sprintf("rpc: accept status %d", e.Stat)
}

func parseReply(msg []byte) ([]byte, error) {
	d := xdrDec{b: msg}
	d.u32()
	if d.u32() != 1 {
		return nil, errors.New("rpc: not a reply")
	}
	if st := d.u32(); st != 0 {
		return nil, &RPCError{Denied: true, Stat: d.u32()}
	}
	d.u32()
	d.opaque()
	if st := d.u32(); st != 0 {
		return nil, &RPCError{Stat: st}
	}
	if d.err != nil {
		return nil, d.err
	}
	return d.b[d.off:], nil
}

type xdrEnc struct{ b []byte }

func (e *xdrEnc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *xdrEnc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *xdrEnc) opaque(p []byte) {
	e.u32(uint32(len(p)))
	e.fixed(p)
}
func (e *xdrEnc) fixed(p []byte) {
	e.b = append(e.b, p...)
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}
func (e *xdrEnc) str(s string) { e.opaque([]byte(s)) }

type xdrDec struct {
	b   []byte
	off int
	err error
}

func (d *xdrDec) take(n int) []byte {
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

func (d *xdrDec) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *xdrDec) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *xdrDec) opaque() []byte {
	n := int(d.u32())
	if n > len(d.b) {
		d.err = errors.New("xdr: bad length")
		return nil
	}
	p := d.take(n)
	d.take((4 - n%4) % 4)
	return p
}
