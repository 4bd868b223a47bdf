// Package rpcsecgss is RPCSEC_GSS (RFC 2203) on the client's side, for
// Basin's test clients: Init establishes a context with a server
// (RPCSEC_GSS_INIT, and CONTINUE_INIT while the mechanism needs more legs),
// and checks the reply's verifier over the sequence window; the Session's
// Auth then authenticates calls with the service asked for: none (krb5: the
// header signed), integrity (krb5i: rpc_gss_integ_data, the arguments and the
// sequence number under a MIC) or privacy (krb5p: rpc_gss_priv_data, both in
// a sealed Wrap token). Each reply's verifier (a MIC of the call's sequence
// number) is checked, and its results are checked or unwrapped and must carry
// the call's sequence number. Destroy ends the context (RPCSEC_GSS_DESTROY).
//
// The GSS-API mechanism is the caller's: a Context, such as an established
// internal/krb5gss context. This package imports internal/oncrpc only.
package rpcsecgss

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// Service is the protection of a call's arguments and results.
type Service uint32

// Services (rpc_gss_service_t).
const (
	None      Service = 1 // header authenticated only (krb5)
	Integrity Service = 2 // arguments and results under a MIC (krb5i)
	Privacy   Service = 3 // arguments and results encrypted (krb5p)
)

func (s Service) String() string {
	switch s {
	case None:
		return "none"
	case Integrity:
		return "integrity"
	case Privacy:
		return "privacy"
	}
	return fmt.Sprintf("service %d", uint32(s))
}

// Control procedures (rpc_gss_proc_t).
const (
	procData         = 0
	procInit         = 1
	procContinueInit = 2
	procDestroy      = 3
)

// maxSeq is the bound of sequence numbers (RFC 2203 §5.3.3.1): a context
// that reaches it must be destroyed.
const maxSeq = 0x80000000

// GSS major status codes of an INIT reply.
const (
	gssComplete       = 0
	gssContinueNeeded = 1
)

// Context is an established GSS-API security context's per-message calls.
type Context interface {
	GetMIC(msg []byte) ([]byte, error)
	VerifyMIC(msg, mic []byte) error
	Wrap(msg []byte, conf bool) ([]byte, error)
	Unwrap(tok []byte) (msg []byte, conf bool, err error)
}

// Step is a GSS-API mechanism's initiator between two legs: given the token
// the server returned, it returns the next token to send, or the established
// Context.
type Step func(reply []byte) (next []byte, established Context, err error)

// Caller makes one ONC RPC call with an Auth and returns the procedure's
// results (as the Auth's Opener returns them).
type Caller interface {
	Call(ctx context.Context, prog, vers, proc uint32, auth oncrpc.Auth, args []byte) ([]byte, error)
}

// Session is an established RPCSEC_GSS context.
type Session struct {
	ctx    Context
	handle []byte
	window uint32

	mu  sync.Mutex
	seq uint32 // the last sequence number sent
}

// Init establishes a context on the server of program prog, version vers:
// it sends the mechanism's initial token, and each next one step returns,
// until step returns the established Context.
func Init(ctx context.Context, c Caller, prog, vers uint32, token []byte, step Step) (*Session, error) {
	var handle []byte
	for legs := 0; ; legs++ {
		if legs == 10 {
			return nil, errors.New("rpcsecgss: context not established after 10 legs")
		}
		ca := &control{proc: procInit, handle: handle}
		if handle != nil {
			ca.proc = procContinueInit
		}
		var e oncrpc.Encoder
		e.Opaque(token)
		res, err := c.Call(ctx, prog, vers, 0, ca, e.Bytes())
		if err != nil {
			return nil, fmt.Errorf("rpcsecgss: init: %w", err)
		}
		d := oncrpc.NewDecoder(res)
		handle = append([]byte(nil), d.Opaque()...)
		major, minor, window := d.U32(), d.U32(), d.U32()
		reply := d.Opaque()
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("rpcsecgss: init reply: %w", err)
		}
		if major != gssComplete && major != gssContinueNeeded {
			return nil, fmt.Errorf("rpcsecgss: the server's GSS-API failed: major %#x, minor %d", major, minor)
		}
		next, est, err := step(reply)
		if err != nil {
			return nil, fmt.Errorf("rpcsecgss: %w", err)
		}
		if est == nil {
			if major == gssComplete {
				return nil, errors.New("rpcsecgss: the server completed the context, the mechanism did not")
			}
			token = next
			continue
		}
		if major != gssComplete {
			return nil, errors.New("rpcsecgss: the mechanism completed the context, the server did not")
		}
		// The server proves it holds the context: its verifier is a MIC
		// of the sequence window.
		if ca.verf.Flavor != oncrpc.RPCSecGSS {
			return nil, fmt.Errorf("rpcsecgss: init reply's verifier of flavor %d", ca.verf.Flavor)
		}
		if err := est.VerifyMIC(u32(window), ca.verf.Body); err != nil {
			return nil, fmt.Errorf("rpcsecgss: init reply's verifier: %w", err)
		}
		if len(handle) == 0 || window == 0 {
			return nil, fmt.Errorf("rpcsecgss: init reply with handle %x, window %d", handle, window)
		}
		return &Session{ctx: est, handle: handle, window: window}, nil
	}
}

// Window is the server's sequence window: how many calls may be in flight.
func (s *Session) Window() uint32 { return s.window }

// Handle is the server's handle of the context.
func (s *Session) Handle() []byte { return s.handle }

// Auth returns the Auth of data calls with service svc. One session may call
// with several services.
func (s *Session) Auth(svc Service) oncrpc.Auth { return &data{s: s, svc: svc, proc: procData} }

// Forged returns the Auth of data calls with service svc as an attacker
// would send them, for attack tests: with replay, under the last sequence
// number already sent (each call sends it again); with other set, naming
// other's context handle while the verifier and the wrapping still come from
// s's context (a handle seen on the wire, without its keys). A server must
// serve none of them.
func (s *Session) Forged(svc Service, replay bool, other *Session) oncrpc.Auth {
	a := &data{s: s, svc: svc, proc: procData, replay: replay}
	if other != nil {
		a.handle = other.handle
	}
	return a
}

// Destroy asks the server to forget the context. Its arguments and results
// are not wrapped (as Linux sends it), so it goes with service none.
func (s *Session) Destroy(ctx context.Context, c Caller, prog, vers uint32) error {
	_, err := c.Call(ctx, prog, vers, 0, &data{s: s, svc: None, proc: procDestroy}, nil)
	if err != nil {
		return fmt.Errorf("rpcsecgss: destroy: %w", err)
	}
	return nil
}

func (s *Session) nextSeq() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq+1 >= maxSeq {
		return 0, errors.New("rpcsecgss: sequence numbers exhausted: destroy the context")
	}
	s.seq++
	return s.seq, nil
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// cred appends an RPCSEC_GSS credential (rpc_gss_cred_vers_1_t).
func cred(e *oncrpc.Encoder, proc, seq uint32, svc Service, handle []byte) {
	var body oncrpc.Encoder
	body.U32(1) // RPCSEC_GSS_VERS_1
	body.U32(proc)
	body.U32(seq)
	body.U32(uint32(svc))
	body.Opaque(handle)
	e.U32(oncrpc.RPCSecGSS)
	e.Opaque(body.Bytes())
}

// control is the Auth of INIT and CONTINUE_INIT calls: an RPCSEC_GSS
// credential with an AUTH_NONE verifier. Its Opener keeps the reply's
// verifier, for Init to check once the context is established.
type control struct {
	proc   uint32
	handle []byte
	verf   oncrpc.OpaqueAuth
}

func (c *control) Seal(b []byte, _ int, args []byte) ([]byte, oncrpc.Opener, error) {
	e := encoderOn(b)
	cred(e, c.proc, 0, None, c.handle)
	e.U32(oncrpc.AuthNone)
	e.U32(0)
	return append(e.Bytes(), args...), c, nil
}

func (c *control) Open(v oncrpc.OpaqueAuth, res []byte) ([]byte, error) {
	c.verf = oncrpc.OpaqueAuth{Flavor: v.Flavor, Body: append([]byte(nil), v.Body...)}
	return res, nil
}

// data is the Auth of data (and DESTROY) calls; replay and handle forge them
// (Forged).
type data struct {
	s      *Session
	svc    Service
	proc   uint32
	replay bool
	handle []byte
}

func (a *data) Seal(b []byte, head int, args []byte) ([]byte, oncrpc.Opener, error) {
	var seq uint32
	var err error
	if a.replay {
		a.s.mu.Lock()
		seq = a.s.seq
		a.s.mu.Unlock()
	} else if seq, err = a.s.nextSeq(); err != nil {
		return nil, nil, err
	}
	handle := a.s.handle
	if a.handle != nil {
		handle = a.handle
	}
	e := encoderOn(b)
	cred(e, a.proc, seq, a.svc, handle)
	// The verifier is a MIC of the header, from the xid through the
	// credential.
	mic, err := a.s.ctx.GetMIC(e.Bytes()[head:])
	if err != nil {
		return nil, nil, fmt.Errorf("rpcsecgss: verifier: %w", err)
	}
	e.U32(oncrpc.RPCSecGSS)
	e.Opaque(mic)
	o := &reply{ctx: a.s.ctx, seq: seq, svc: a.svc}
	if a.proc != procData {
		o.svc = None
		return append(e.Bytes(), args...), o, nil
	}
	switch a.svc {
	case None:
		return append(e.Bytes(), args...), o, nil
	case Integrity:
		body := append(u32(seq), args...)
		ck, err := a.s.ctx.GetMIC(body)
		if err != nil {
			return nil, nil, fmt.Errorf("rpcsecgss: integrity: %w", err)
		}
		e.Opaque(body)
		e.Opaque(ck)
	case Privacy:
		tok, err := a.s.ctx.Wrap(append(u32(seq), args...), true)
		if err != nil {
			return nil, nil, fmt.Errorf("rpcsecgss: privacy: %w", err)
		}
		e.Opaque(tok)
	default:
		return nil, nil, fmt.Errorf("rpcsecgss: unknown %v", a.svc)
	}
	return e.Bytes(), o, nil
}

func encoderOn(b []byte) *oncrpc.Encoder {
	e := oncrpc.NewEncoder(b)
	return &e
}

// reply checks a data call's reply.
type reply struct {
	ctx Context
	seq uint32
	svc Service
}

func (r *reply) Open(v oncrpc.OpaqueAuth, res []byte) ([]byte, error) {
	if v.Flavor != oncrpc.RPCSecGSS {
		return nil, fmt.Errorf("rpcsecgss: reply's verifier of flavor %d", v.Flavor)
	}
	if err := r.ctx.VerifyMIC(u32(r.seq), v.Body); err != nil {
		return nil, fmt.Errorf("rpcsecgss: reply's verifier: %w", err)
	}
	var body []byte
	d := oncrpc.NewDecoder(res)
	switch r.svc {
	case None:
		return res, nil
	case Integrity:
		body = d.Opaque()
		ck := d.Opaque()
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("rpcsecgss: reply's rpc_gss_integ_data: %w", err)
		}
		if err := r.ctx.VerifyMIC(body, ck); err != nil {
			return nil, fmt.Errorf("rpcsecgss: reply's checksum: %w", err)
		}
	case Privacy:
		tok := d.Opaque()
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("rpcsecgss: reply's rpc_gss_priv_data: %w", err)
		}
		msg, conf, err := r.ctx.Unwrap(tok)
		if err != nil {
			return nil, fmt.Errorf("rpcsecgss: reply's Wrap token: %w", err)
		}
		if !conf {
			return nil, errors.New("rpcsecgss: reply under privacy not encrypted")
		}
		body = msg
	}
	if len(body) < 4 || binary.BigEndian.Uint32(body) != r.seq {
		return nil, fmt.Errorf("rpcsecgss: reply's body is not of call %d", r.seq)
	}
	return body[4:], nil
}
