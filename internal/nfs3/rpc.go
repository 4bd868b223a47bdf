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
// The XDR and ONC RPC wire format comes from internal/oncrpc; this package keeps
// the pipelining. It imports nothing else of Basin's.
package nfs3

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
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
	cred := oncrpc.AuthSys{Stamp: uint32(time.Now().Unix()), Machine: a.Machine, UID: a.UID, GID: a.GID}.Cred()
	cn := &conn{c: c, auth: cred, pending: map[uint32]chan reply{}}
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
		msg, err = oncrpc.ReadRecord(r)
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

// call sends one call, whose arguments are the concatenation of args, and waits
// for its reply; it returns the procedure's results. The pieces go out in one
// writev, so a WRITE's data is never copied.
func (cn *conn) call(ctx context.Context, prog, vers, proc uint32, args ...[]byte) ([]byte, error) {
	xid := cn.xid.Add(1)
	size := 0
	for _, a := range args {
		size += len(a)
	}
	hdr := oncrpc.CallHeader(xid, prog, vers, proc, cn.auth, size)

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
	bufs := append(net.Buffers{hdr}, args...)
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
		return oncrpc.ParseReply(r.body)
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

// enc and dec are oncrpc's XDR encoder and decoder, to which this package
// adds NFSv3's types.
type (
	enc struct{ oncrpc.Encoder }
	dec struct{ oncrpc.Decoder }
)

func newDec(b []byte) *dec { return &dec{oncrpc.NewDecoder(b)} }
