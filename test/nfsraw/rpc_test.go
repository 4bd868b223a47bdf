package nfsraw

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
	"github.com/basin-nas/basin/internal/oncrpc/rpcsecgss"
)

// Auth.Sec runs on the new connection before any other call, may call through
// it with an Auth of its own (as RPCSEC_GSS_INIT does), and the Auth it
// returns carries the connection's calls.
func TestSecSetsTheConnectionsAuth(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	uids := make(chan uint32, 4)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		for {
			msg, err := oncrpc.ReadRecord(r)
			if err != nil {
				return
			}
			d := oncrpc.NewDecoder(msg)
			for range 7 { // xid CALL rpcvers prog vers proc flavor
				d.U32()
			}
			cred := oncrpc.NewDecoder(d.Opaque())
			cred.U32()
			cred.Opaque()
			uids <- cred.U32()
			var e oncrpc.Encoder
			e.Fixed(msg[:4])                                     // xid
			for _, w := range []uint32{1, 0, 0, 0, 0, 0, 0, 0} { // REPLY accepted, AUTH_NONE, SUCCESS; COMPOUND4res: NFS4_OK, empty tag, no results
				e.U32(w)
			}
			rec := append([]byte{0x80, 0, 0, byte(len(e.Bytes()))}, e.Bytes()...)
			if _, err := c.Write(rec); err != nil {
				return
			}
		}
	}()
	addr := l.Addr().(*net.TCPAddr)
	a := Auth{UID: 1, Sec: func(ctx context.Context, c rpcsecgss.Caller) (oncrpc.Auth, error) {
		if _, err := c.Call(ctx, 100003, 4, 0, oncrpc.AuthSys{UID: 2}, nil); err != nil {
			return nil, err
		}
		return oncrpc.AuthSys{UID: 3}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, "127.0.0.1", addr.Port, a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Compound(ctx); err != nil {
		t.Fatal(err)
	}
	if got := []uint32{<-uids, <-uids}; got[0] != 2 || got[1] != 3 {
		t.Fatalf("calls with uids %v, want Sec's own call (2) then the Auth it returned (3)", got)
	}
}
