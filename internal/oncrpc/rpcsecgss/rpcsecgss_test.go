package rpcsecgss

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/oncrpc"
)

const prog, vers = 100003, 4

var secret = []byte("ARGS-in-the-clear!!!") // whole XDR words, as arguments are

func fakeInit(t *testing.T, srv *server) (*Session, *loop, error) {
	t.Helper()
	srv.accept = func(tok []byte) ([]byte, Context, error) {
		if string(tok) != "hello" {
			return nil, nil, errors.New("bad initial token")
		}
		return []byte("welcome"), fake{key: "k"}, nil
	}
	l := &loop{srv: srv}
	s, err := Init(context.Background(), l, prog, vers, []byte("hello"), func(reply []byte) ([]byte, Context, error) {
		if string(reply) != "welcome" {
			return nil, nil, errors.New("bad reply token")
		}
		return nil, fake{key: "k", initiator: true}, nil
	})
	return s, l, err
}

func TestServices(t *testing.T) {
	for _, svc := range []Service{None, Integrity, Privacy} {
		t.Run(svc.String(), func(t *testing.T) {
			s, l, err := fakeInit(t, &server{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Window() != 8 || string(s.Handle()) != "handle-0" {
				t.Fatalf("window %d, handle %q", s.Window(), s.Handle())
			}
			for i := range 3 {
				res, err := l.Call(context.Background(), prog, vers, 1, s.Auth(svc), secret)
				if err != nil || !bytes.Equal(res, append(secret, secret...)) {
					t.Fatalf("call %d: %q, %v", i, res, err)
				}
				if got := bytes.Contains(l.sent, secret); got != (svc != Privacy) {
					t.Fatalf("arguments in the clear on the wire: %v", got)
				}
			}
			if err := s.Destroy(context.Background(), l, prog, vers); err != nil {
				t.Fatal(err)
			}
			_, err = l.Call(context.Background(), prog, vers, 1, s.Auth(svc), secret)
			var re *oncrpc.Error
			if !errors.As(err, &re) || re.Auth != oncrpc.GSSCtxProblem {
				t.Fatalf("call after destroy: %v", err)
			}
		})
	}
}

func TestTampering(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  Service
		srv  server
		call func([]byte) // alters the call on the wire
		want string
	}{
		{name: "header altered", svc: None, call: func(m []byte) { m[4+20] ^= 1 }, want: "credential problem"}, // the procedure number
		{name: "args altered under integrity", svc: Integrity, call: func(m []byte) { m[len(m)-20] ^= 1 }, want: "integ_data"},
		{name: "args altered under privacy", svc: Privacy, call: func(m []byte) { m[len(m)-20] ^= 1 }, want: "priv_data"},
		{name: "results altered under integrity", svc: Integrity, srv: server{tamperReply: func(b []byte) { b[10] ^= 1 }}, want: "checksum"},
		{name: "results altered under privacy", svc: Privacy, srv: server{tamperReply: func(b []byte) { b[10] ^= 1 }}, want: "Wrap token"},
		{name: "reply of another call", svc: Integrity, srv: server{seqDelta: 1}, want: "verifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, l, err := fakeInit(t, &tc.srv)
			if err != nil {
				t.Fatal(err)
			}
			l.tamper = tc.call
			_, err = l.Call(context.Background(), prog, vers, 1, s.Auth(tc.svc), secret)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A reply whose verifier is right but whose body is another call's (a server
// that mixed replies up) is refused for the sequence number in the body.
func TestReplyBodyOfAnotherCall(t *testing.T) {
	s, _, err := fakeInit(t, &server{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []Service{Integrity, Privacy} {
		_, o, err := s.Auth(svc).Seal(make([]byte, 24), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		seq := o.(*reply).seq
		c := fake{key: "k"}
		verf, _ := c.GetMIC(u32(seq))
		var e oncrpc.Encoder
		if svc == Integrity {
			body := append(u32(seq+1), 1, 2, 3, 4)
			ck, _ := c.GetMIC(body)
			e.Opaque(body)
			e.Opaque(ck)
		} else {
			tok, _ := c.Wrap(append(u32(seq+1), 1, 2, 3, 4), true)
			e.Opaque(tok)
		}
		if _, err := o.Open(oncrpc.OpaqueAuth{Flavor: oncrpc.RPCSecGSS, Body: verf}, e.Bytes()); err == nil || !strings.Contains(err.Error(), "not of call") {
			t.Errorf("%v: body of call %d accepted for call %d: %v", svc, seq+1, seq, err)
		}
	}
}

func TestInitVerifierChecked(t *testing.T) {
	if _, _, err := fakeInit(t, &server{window: 16}); err == nil || !strings.Contains(err.Error(), "verifier") {
		t.Fatalf("init reply with a verifier over another window: %v", err)
	}
}

func TestSequenceNumbersBounded(t *testing.T) {
	s := &Session{ctx: fake{initiator: true}, handle: []byte("h"), seq: maxSeq - 2}
	if _, _, err := s.Auth(None).Seal(make([]byte, 24), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Auth(None).Seal(make([]byte, 24), 0, nil); err == nil {
		t.Fatal("sequence number 2^31 sent")
	}
}

// Forged calls are what attack tests send: a replay carries the last
// sequence number again (which the server drops), a stolen handle names
// another context while the verifier is still the caller's.
func TestForged(t *testing.T) {
	srv := &server{}
	s, l, err := fakeInit(t, srv)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := fakeInit(t, srv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Call(context.Background(), prog, vers, 1, s.Auth(Integrity), secret); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Call(context.Background(), prog, vers, 1, s.Forged(Integrity, true, nil), secret); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("replayed call: %v", err)
	}
	// The replay took no new number: the next call goes on from it.
	if _, err := l.Call(context.Background(), prog, vers, 1, s.Auth(Integrity), secret); err != nil {
		t.Fatalf("call after the replay: %v", err)
	}
	l.Call(context.Background(), prog, vers, 1, s.Forged(None, false, other), secret) //nolint:errcheck // the wire is what is checked
	if !bytes.Contains(l.sent, other.Handle()) || bytes.Contains(l.sent, s.Handle()) {
		t.Fatalf("a stolen handle's call names %q", l.sent)
	}
}
