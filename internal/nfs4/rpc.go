package nfs4

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

// conn is one TCP connection carrying pipelined calls: any number of
// goroutines call at once, one reader goroutine hands each reply to its
// caller by XID, and the caller opens it (checks its verifier, unwraps it),
// so the replies of krb5i and krb5p are checked on as many cores as there
// are callers.
type conn struct {
	c    net.Conn
	auth oncrpc.Auth // the connection's calls' (Options.Sec's, else AUTH_SYS)

	// wmu orders sealing and sending: RPCSEC_GSS sequence numbers go out in
	// the order they were given, so a server's window never sees a gap
	// wider than the calls in flight.
	wmu sync.Mutex
	xid uint32
	out []byte // the last call's encoding, reused

	mu      sync.Mutex
	pending map[uint32]chan rpcReply
	err     error // why the connection failed; set once

	// resend, if not 0, is how long a call waits for its reply before it is
	// sent again (Call); resent counts those.
	resend time.Duration
	resent atomic.Int64
}

// resendGSS is how long an RPCSEC_GSS call waits for its reply before it is
// sent again.
const resendGSS = 5 * time.Second

type rpcReply struct {
	xid uint32
	msg []byte
	err error
}

// dialConn connects to addr and sets up the connection's Auth.
func dialConn(ctx context.Context, addr string, o *Options) (*conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cn := &conn{c: c, pending: map[uint32]chan rpcReply{}, xid: uint32(time.Now().UnixNano()),
		auth: oncrpc.AuthSys{Stamp: uint32(time.Now().Unix()), Machine: o.Machine, UID: o.UID, GID: o.GID}}
	go cn.read()
	if o.Sec != nil {
		// The context's set-up is not sent again: a second AP-REQ would be
		// a replay to the acceptor.
		if cn.auth, err = o.Sec(ctx, cn); err != nil {
			c.Close()
			return nil, err
		}
		cn.resend = resendGSS
	}
	return cn, nil
}

// read hands replies to their callers until the connection fails.
func (cn *conn) read() {
	br := bufio.NewReaderSize(cn.c, 256<<10)
	for {
		msg, err := oncrpc.ReadRecord(br)
		if err != nil {
			cn.fail(fmt.Errorf("rpc: receive: %w", err))
			return
		}
		if len(msg) < 4 {
			continue
		}
		xid := binary.BigEndian.Uint32(msg)
		cn.mu.Lock()
		ch := cn.pending[xid]
		delete(cn.pending, xid)
		cn.mu.Unlock()
		if ch != nil { // else a reply to a call given up
			ch <- rpcReply{xid: xid, msg: msg}
		}
	}
}

// fail fails every call waiting and every call after; the first error stays.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.err == nil {
		cn.err = err
		cn.c.Close()
	}
	for xid, ch := range cn.pending {
		ch <- rpcReply{err: cn.err}
		delete(cn.pending, xid)
	}
}

func (cn *conn) close() error {
	cn.fail(errors.New("rpc: connection closed"))
	return nil
}

// call makes a call with the connection's Auth.
func (cn *conn) call(ctx context.Context, proc uint32, args []byte) ([]byte, error) {
	return cn.Call(ctx, progNFS, 4, proc, cn.auth, args)
}

// Call sends one call with auth and returns its results as auth opens them
// (rpcsecgss.Caller). On a connection with a resend interval, a call without
// a reply after it is sent again, under a new XID (and so, with RPCSEC_GSS,
// a new sequence number), up to maxSends times in all: an RPCSEC_GSS server
// drops calls it judges replays or outside its window without a word
// (RFC 2203 §5.3.3.1), and Ganesha was seen dropping some under load (why is
// not known). The first reply to any of the sends is the call's: a slow
// server's answer to the first is not lost to the second's (which, on the
// same NFSv4.1 slot and sequence id, may be NFS4ERR_RETRY_UNCACHED_REP).
func (cn *conn) Call(ctx context.Context, prog, vers, proc uint32, auth oncrpc.Auth, args []byte) ([]byte, error) {
	const maxSends = 4
	ch := make(chan rpcReply, maxSends) // a reply or a failure per send at most
	openers := make(map[uint32]oncrpc.Opener, 1)
	defer func() {
		for xid := range openers {
			cn.forget(xid)
		}
	}()
	var resend <-chan time.Time
	for {
		if len(openers) < maxSends {
			xid, o, err := cn.send(ch, prog, vers, proc, auth, args)
			if err != nil {
				return nil, err
			}
			openers[xid] = o
			if cn.resend > 0 && len(openers) < maxSends {
				t := time.NewTimer(cn.resend)
				defer t.Stop()
				resend = t.C
			} else {
				resend = nil
			}
		}
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			return oncrpc.OpenReply(r.msg, openers[r.xid])
		case <-resend:
			cn.resent.Add(1)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// send seals and sends one call whose reply goes to ch.
func (cn *conn) send(ch chan rpcReply, prog, vers, proc uint32, auth oncrpc.Auth, args []byte) (uint32, oncrpc.Opener, error) {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	cn.xid++
	xid := cn.xid
	msg, o, err := oncrpc.AppendCall(cn.out[:0], xid, prog, vers, proc, auth, args)
	if err != nil {
		return 0, nil, err
	}
	cn.mu.Lock()
	if cn.err != nil {
		err = cn.err
		cn.mu.Unlock()
		return 0, nil, err
	}
	cn.pending[xid] = ch
	cn.mu.Unlock()
	cn.c.SetWriteDeadline(time.Now().Add(time.Minute))
	_, err = cn.c.Write(msg)
	if cap(msg) <= 4<<20 {
		cn.out = msg
	}
	if err != nil {
		// This fails ch too: the caller gets the error from it.
		cn.fail(fmt.Errorf("rpc: send: %w", err))
	}
	return xid, o, nil
}

// forget drops a call given up; its reply, if it comes, is skipped.
func (cn *conn) forget(xid uint32) {
	cn.mu.Lock()
	delete(cn.pending, xid)
	cn.mu.Unlock()
}
