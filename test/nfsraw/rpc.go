package nfsraw

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
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
	cred := oncrpc.AuthSys{Stamp: uint32(time.Now().Unix()), Machine: a.Machine, UID: a.UID, GID: a.GID, GIDs: a.GIDs}.Cred()
	return &rpcConn{c: c, r: bufio.NewReader(c), auth: cred, xid: uint32(time.Now().UnixNano())}, nil
}

func (rc *rpcConn) close() error { return rc.c.Close() }

// call sends one call and returns the results after the accepted-reply header.
func (rc *rpcConn) call(ctx context.Context, prog, vers, proc uint32, args []byte) ([]byte, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.xid++
	xid := rc.xid
	msg := append(oncrpc.CallHeader(xid, prog, vers, proc, rc.auth, len(args)), args...)
	if dl, ok := ctx.Deadline(); ok {
		rc.c.SetDeadline(dl)
	} else {
		rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if _, err := rc.c.Write(msg); err != nil {
		return nil, fmt.Errorf("rpc: send: %w", err)
	}
	for {
		msg, err := oncrpc.ReadRecord(rc.r)
		if err != nil {
			return nil, fmt.Errorf("rpc: receive: %w", err)
		}
		if len(msg) >= 4 && binary.BigEndian.Uint32(msg) != xid {
			continue // a late reply to an abandoned call
		}
		return oncrpc.ParseReply(msg)
	}
}

// RPCError is an RPC-level failure: the call was denied or not accepted.
type RPCError = oncrpc.Error

// xdrEnc and xdrDec are oncrpc's XDR encoder and decoder, to which this
// package adds NFSv4's bitmaps, attributes and change_info.
type (
	xdrEnc struct{ oncrpc.Encoder }
	xdrDec struct{ oncrpc.Decoder }
)
