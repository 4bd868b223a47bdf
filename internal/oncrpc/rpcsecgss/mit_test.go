package rpcsecgss

import (
	"bytes"
	"context"
	"testing"

	"github.com/basin-nas/basin/internal/krb5gss"
	"github.com/basin-nas/basin/internal/krb5gss/mittest"
)

// mitContext is MIT's GSS-API acceptor as the test server's Context.
type mitContext struct{ a *mittest.Acceptor }

func (m mitContext) GetMIC(msg []byte) ([]byte, error) { return m.a.GetMIC(msg) }
func (m mitContext) VerifyMIC(msg, mic []byte) error   { return m.a.VerifyMIC(msg, mic) }
func (m mitContext) Wrap(msg []byte, conf bool) ([]byte, error) {
	return m.a.Wrap(msg, conf)
}
func (m mitContext) Unwrap(tok []byte) ([]byte, bool, error) { return m.a.Unwrap(tok) }

// TestMITEndToEnd runs RPCSEC_GSS between this package with krb5gss (a ticket
// gokrb5 got from an MIT KDC) and a test server whose GSS-API is MIT's: the
// context is established through RPCSEC_GSS_INIT, and calls go with each
// service, their verifiers, checksums and sealed bodies made and checked by
// MIT on the server's side.
func TestMITEndToEnd(t *testing.T) {
	kdc := mittest.Start(t)
	kdc.AddUser(t, "alice", "alice-pw")
	acc := kdc.NewAcceptor(t, kdc.AddService(t, "nfs/server.basin.test"))
	cl := kdc.Client(t, "alice", "alice-pw")
	srv := &server{accept: func(tok []byte) ([]byte, Context, error) {
		reply, _, _, err := acc.Accept(tok)
		return reply, mitContext{acc}, err
	}}
	l := &loop{srv: srv}
	in, err := krb5gss.NewInitiator(cl, "nfs/server.basin.test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Init(context.Background(), l, prog, vers, in.Token(), func(reply []byte) ([]byte, Context, error) {
		c, err := in.Step(reply)
		return nil, c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []Service{None, Integrity, Privacy} {
		for i := range 2 {
			res, err := l.Call(context.Background(), prog, vers, 1, s.Auth(svc), secret)
			if err != nil || !bytes.Equal(res, append(secret, secret...)) {
				t.Fatalf("%v call %d: %q, %v", svc, i, res, err)
			}
			if got := bytes.Contains(l.sent, secret); got != (svc != Privacy) {
				t.Fatalf("%v: arguments in the clear on the wire: %v", svc, got)
			}
		}
	}
	// An altered call is refused by MIT's checks.
	l.tamper = func(m []byte) { m[len(m)-20] ^= 1 }
	if _, err := l.Call(context.Background(), prog, vers, 1, s.Auth(Privacy), secret); err == nil {
		t.Fatal("altered sealed arguments accepted")
	}
	l.tamper = nil
	if err := s.Destroy(context.Background(), l, prog, vers); err != nil {
		t.Fatal(err)
	}
}
