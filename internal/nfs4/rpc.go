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
	// span, with RPCSEC_GSS, keeps the unanswered calls' sequence numbers
	// within the server's window.
	span *seqSpan
}

// seqSpan keeps an RPCSEC_GSS connection's unanswered calls within the
// server's window of sequence numbers. Ganesha 4.3's libntirpc checks each
// call's number against the highest it has checked so far, on whichever
// thread reads it, and drops without a reply a call that window later ones
// overtook before its check (svc_auth_gss.c: gr_win is 32, a call with
// seqlast − seq ≥ 32 is not dispatched; upstream widened what it enforces
// after 4.3). The calls in flight do not bound that: while one waits, others
// finish and new ones go. So no call goes while a call sent window or more
// numbers before it is unanswered. (Seen: 6–13 calls dropped per 30 s of
// 4 KiB I/O with 16 in flight, before this.)
type seqSpan struct {
	mu     sync.Mutex
	cond   sync.Cond
	window uint64
	next   uint64              // the index of the next call sent
	out    map[uint64]struct{} // the indexes of the unanswered calls
}

func newSeqSpan(window uint32) *seqSpan {
	s := &seqSpan{window: uint64(max(window, 1)), out: map[uint64]struct{}{}}
	s.cond.L = &s.mu
	return s
}

func (s *seqSpan) roomLocked() bool {
	for i := range s.out {
		if s.next-i >= s.window {
			return false
		}
	}
	return true
}

// wait returns once the next call may go, or ctx ended.
func (s *seqSpan) wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.roomLocked() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
}

// take gives the next call its index, if it may go now.
func (s *seqSpan) take() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.roomLocked() {
		return 0, false
	}
	i := s.next
	s.next++
	s.out[i] = struct{}{}
	return i, true
}

// done ends the wait for call i (answered, given up, or sent again).
func (s *seqSpan) done(i uint64) {
	s.mu.Lock()
	delete(s.out, i)
	s.cond.Broadcast()
	s.mu.Unlock()
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
		if w, ok := cn.auth.(windowed); ok {
			cn.span = newSeqSpan(w.window)
		}
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

// call makes a call with the connection's Auth, its sequence numbers kept
// within the server's window (seqSpan).
func (cn *conn) call(ctx context.Context, proc uint32, args []byte) ([]byte, error) {
	return cn.callWith(ctx, cn.span, progNFS, 4, proc, cn.auth, args)
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
	return cn.callWith(ctx, nil, prog, vers, proc, auth, args)
}

// callWith is Call, its sends' sequence numbers within span if not nil.
func (cn *conn) callWith(ctx context.Context, span *seqSpan, prog, vers, proc uint32, auth oncrpc.Auth, args []byte) ([]byte, error) {
	const maxSends = 4
	ch := make(chan rpcReply, maxSends) // a reply or a failure per send at most
	openers := make(map[uint32]oncrpc.Opener, 1)
	var spanned []uint64 // span's indexes of the sends, the last one still counted
	defer func() {
		for xid := range openers {
			cn.forget(xid)
		}
		if len(spanned) > 0 {
			span.done(spanned[len(spanned)-1])
		}
	}()
	var resend <-chan time.Time
	for {
		if len(openers) < maxSends {
			if len(spanned) > 0 {
				// Sent again: the server dropped the last send, or will
				// when it comes to it; it no longer holds the window.
				span.done(spanned[len(spanned)-1])
			}
			xid, o, i, err := cn.send(ctx, span, ch, prog, vers, proc, auth, args)
			if err != nil {
				return nil, err
			}
			openers[xid] = o
			if span != nil {
				spanned = append(spanned, i)
			}
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

// send seals and sends one call whose reply goes to ch; with span, once the
// span has room for it, and it returns the call's index in span.
func (cn *conn) send(ctx context.Context, span *seqSpan, ch chan rpcReply, prog, vers, proc uint32, auth oncrpc.Auth, args []byte) (uint32, oncrpc.Opener, uint64, error) {
	var i uint64
	for {
		// Waited for without wmu: the call holding the span back may need
		// it to be sent again.
		if span != nil {
			if err := span.wait(ctx); err != nil {
				return 0, nil, 0, err
			}
		}
		cn.wmu.Lock()
		if span == nil {
			break
		}
		var ok bool
		if i, ok = span.take(); ok {
			break
		}
		cn.wmu.Unlock()
	}
	defer cn.wmu.Unlock()
	cn.xid++
	xid := cn.xid
	msg, o, err := oncrpc.AppendCall(cn.out[:0], xid, prog, vers, proc, auth, args)
	if err == nil {
		cn.mu.Lock()
		if err = cn.err; err != nil {
			cn.mu.Unlock()
		}
	}
	if err != nil {
		if span != nil {
			span.done(i)
		}
		return 0, nil, 0, err
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
	return xid, o, i, nil
}

// forget drops a call given up; its reply, if it comes, is skipped.
func (cn *conn) forget(xid uint32) {
	cn.mu.Lock()
	delete(cn.pending, xid)
	cn.mu.Unlock()
}
