package nfsraw

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"

	"github.com/basin-nas/basin/internal/krb5gss"
	"github.com/basin-nas/basin/internal/oncrpc"
	"github.com/basin-nas/basin/internal/oncrpc/rpcsecgss"
)

// Auth is the identity a Client calls with: AUTH_SYS, or what Sec sets up.
type Auth struct {
	UID, GID uint32
	GIDs     []uint32
	Machine  string
	// LocalIP, if set, is the connection's source address.
	LocalIP string
	// Sec, if set, replaces AUTH_SYS: called on each new connection
	// before any other call, it returns the Auth of the connection's calls
	// (Krb5 sets up an RPCSEC_GSS context).
	Sec func(ctx context.Context, c rpcsecgss.Caller) (oncrpc.Auth, error)
}

// Krb5 is an Auth.Sec that establishes an RPCSEC_GSS context with the NFS
// service spn (such as "nfs/server.example.com") as cl's principal (cl has
// logged in), and calls with service svc: krb5 (None), krb5i (Integrity) or
// krb5p (Privacy).
func Krb5(cl *client.Client, spn string, svc rpcsecgss.Service) func(context.Context, rpcsecgss.Caller) (oncrpc.Auth, error) {
	return func(ctx context.Context, c rpcsecgss.Caller) (oncrpc.Auth, error) {
		s, err := Krb5Session(ctx, c, cl, spn)
		if err != nil {
			return nil, err
		}
		return s.Auth(svc), nil
	}
}

// Krb5Session establishes Krb5's RPCSEC_GSS context over c and returns it:
// for an Auth.Sec that keeps the session (attack tests forge calls with it,
// rpcsecgss.Session.Forged).
func Krb5Session(ctx context.Context, c rpcsecgss.Caller, cl *client.Client, spn string) (*rpcsecgss.Session, error) {
	in, err := krb5gss.NewInitiator(cl, spn)
	if err != nil {
		return nil, err
	}
	return krb5Init(ctx, c, in)
}

// Krb5Ticket is an Auth.Sec like Krb5 that offers tkt, a service ticket cname
// of realm holds (key: its session key), on each new connection, as it is:
// also after it expired.
func Krb5Ticket(realm string, cname types.PrincipalName, tkt messages.Ticket, key types.EncryptionKey,
	svc rpcsecgss.Service) func(context.Context, rpcsecgss.Caller) (oncrpc.Auth, error) {
	return func(ctx context.Context, c rpcsecgss.Caller) (oncrpc.Auth, error) {
		in, err := krb5gss.NewInitiatorTicket(realm, cname, tkt, key)
		if err != nil {
			return nil, err
		}
		s, err := krb5Init(ctx, c, in)
		if err != nil {
			return nil, err
		}
		return s.Auth(svc), nil
	}
}

func krb5Init(ctx context.Context, c rpcsecgss.Caller, in *krb5gss.Initiator) (*rpcsecgss.Session, error) {
	return rpcsecgss.Init(ctx, c, 100003, 4, in.Token(), func(reply []byte) ([]byte, rpcsecgss.Context, error) {
		k, err := in.Step(reply)
		if err != nil {
			return nil, nil, err
		}
		return nil, k, nil
	})
}

// rpcConn is one TCP connection carrying one ONC RPC call at a time.
type rpcConn struct {
	mu   sync.Mutex
	c    net.Conn
	r    *bufio.Reader
	auth oncrpc.Auth
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
	rc := &rpcConn{c: c, r: bufio.NewReader(c), xid: uint32(time.Now().UnixNano()),
		auth: oncrpc.AuthSys{Stamp: uint32(time.Now().Unix()), Machine: a.Machine, UID: a.UID, GID: a.GID, GIDs: a.GIDs}}
	if a.Sec != nil {
		if rc.auth, err = a.Sec(ctx, rc); err != nil {
			c.Close()
			return nil, err
		}
	}
	return rc, nil
}

func (rc *rpcConn) close() error { return rc.c.Close() }

// call sends one call with the connection's Auth and returns its results.
func (rc *rpcConn) call(ctx context.Context, prog, vers, proc uint32, args []byte) ([]byte, error) {
	return rc.Call(ctx, prog, vers, proc, rc.auth, args)
}

// Call sends one call with auth and returns its results, as auth opens them.
func (rc *rpcConn) Call(ctx context.Context, prog, vers, proc uint32, auth oncrpc.Auth, args []byte) ([]byte, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.xid++
	xid := rc.xid
	msg, o, err := oncrpc.AppendCall(nil, xid, prog, vers, proc, auth, args)
	if err != nil {
		return nil, err
	}
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
		return oncrpc.OpenReply(msg, o)
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
