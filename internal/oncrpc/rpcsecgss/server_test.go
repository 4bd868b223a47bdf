package rpcsecgss

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// server is the server's side of RPCSEC_GSS, as RFC 2203 and ntirpc have it,
// in the test: accept is the GSS-API acceptor of a context (a fake one, or
// MIT's). Procedure 1 echoes its arguments twice.
type server struct {
	accept  func(token []byte) (reply []byte, c Context, err error)
	ctxs    map[string]Context
	lastSeq uint32

	// What a test does to a reply: alter its results' bytes, or answer
	// with another sequence number.
	tamperReply func([]byte)
	seqDelta    uint32
	window      uint32
}

// loop is a Caller whose calls the server answers in-process, on the wire
// format: each call is encoded, handed to the server as bytes, and its reply
// decoded. sent keeps the last call's bytes; tamper alters them.
type loop struct {
	srv    *server
	sent   []byte
	tamper func([]byte)
}

func (l *loop) Call(_ context.Context, prog, vers, proc uint32, a oncrpc.Auth, args []byte) ([]byte, error) {
	msg, o, err := oncrpc.AppendCall(nil, 1, prog, vers, proc, a, args)
	if err != nil {
		return nil, err
	}
	if l.tamper != nil {
		l.tamper(msg)
	}
	l.sent = msg
	rep, err := l.srv.serve(msg[4:])
	if err != nil {
		return nil, err
	}
	return oncrpc.OpenReply(rep, o)
}

func denied(authStat uint32) []byte {
	var e oncrpc.Encoder
	for _, w := range []uint32{1, 1, 1, 1, authStat} { // xid REPLY MSG_DENIED AUTH_ERROR stat
		e.U32(w)
	}
	return e.Bytes()
}

func accepted(verf []byte, results []byte) []byte {
	var e oncrpc.Encoder
	for _, w := range []uint32{1, 1, 0, oncrpc.RPCSecGSS} {
		e.U32(w)
	}
	e.Opaque(verf)
	e.U32(0)
	e.Fixed(results)
	return e.Bytes()
}

// serve answers one call (without its record mark).
func (s *server) serve(msg []byte) ([]byte, error) {
	d := oncrpc.NewDecoder(msg)
	for range 6 { // xid CALL rpcvers prog vers proc
		d.U32()
	}
	proc := binary.BigEndian.Uint32(msg[20:])
	if d.U32() != oncrpc.RPCSecGSS {
		return denied(oncrpc.AuthBadCred), nil
	}
	cd := oncrpc.NewDecoder(d.Opaque())
	hdrEnd := len(msg) - len(d.Rest())
	vflavor, vbody := d.U32(), d.Opaque()
	args := d.Rest()
	vers, gproc, seq, svc, handle := cd.U32(), cd.U32(), cd.U32(), Service(cd.U32()), cd.Opaque()
	if err := errors.Join(d.Err(), cd.Err()); err != nil || vers != 1 {
		return denied(oncrpc.AuthBadCred), nil
	}
	switch gproc {
	case procInit, procContinueInit:
		ad := oncrpc.NewDecoder(args)
		tok := ad.Opaque()
		out, c, err := s.accept(tok)
		if err != nil {
			return nil, fmt.Errorf("test server's acceptor: %w", err)
		}
		h := fmt.Sprintf("handle-%d", len(s.ctxs))
		if s.ctxs == nil {
			s.ctxs = map[string]Context{}
		}
		s.ctxs[h] = c
		window := s.window
		if window == 0 {
			window = 8
		}
		mic, err := c.GetMIC(u32(window))
		if err != nil {
			return nil, err
		}
		var res oncrpc.Encoder
		res.Str(h)
		res.U32(gssComplete)
		res.U32(0)
		res.U32(window)
		res.Opaque(out)
		if s.window != 0 {
			mic, _ = c.GetMIC(u32(8)) // a verifier over another window than the one sent
		}
		return accepted(mic, res.Bytes()), nil
	case procData, procDestroy:
	default:
		return denied(oncrpc.AuthBadCred), nil
	}
	c := s.ctxs[string(handle)]
	if c == nil {
		return denied(oncrpc.GSSCtxProblem), nil
	}
	if vflavor != oncrpc.RPCSecGSS || c.VerifyMIC(msg[:hdrEnd], vbody) != nil {
		return denied(oncrpc.GSSCredProblem), nil
	}
	if seq <= s.lastSeq {
		return nil, errors.New("replayed sequence number (ntirpc drops the call)")
	}
	s.lastSeq = seq
	replySeq := seq + s.seqDelta
	verf, err := c.GetMIC(u32(replySeq))
	if err != nil {
		return nil, err
	}
	if gproc == procDestroy {
		delete(s.ctxs, string(handle))
		return accepted(verf, nil), nil
	}
	ad := oncrpc.NewDecoder(args)
	switch svc {
	case Integrity:
		body, ck := ad.Opaque(), ad.Opaque()
		if ad.Err() != nil || c.VerifyMIC(body, ck) != nil || binary.BigEndian.Uint32(body) != seq {
			return accepted(verf, nil)[:12], errors.New("bad rpc_gss_integ_data") // ntirpc: GARBAGE_ARGS
		}
		args = body[4:]
	case Privacy:
		body, conf, err := c.Unwrap(ad.Opaque())
		if ad.Err() != nil || err != nil || !conf || binary.BigEndian.Uint32(body) != seq {
			return nil, fmt.Errorf("bad rpc_gss_priv_data: %v", err)
		}
		args = body[4:]
	}
	if proc != 1 {
		return nil, fmt.Errorf("procedure %d", proc)
	}
	results := append(append([]byte(nil), args...), args...)
	var re oncrpc.Encoder
	switch svc {
	case None:
		re.Fixed(results)
	case Integrity:
		body := append(u32(replySeq), results...)
		ck, err := c.GetMIC(body)
		if err != nil {
			return nil, err
		}
		re.Opaque(body)
		re.Opaque(ck)
	case Privacy:
		tok, err := c.Wrap(append(u32(replySeq), results...), true)
		if err != nil {
			return nil, err
		}
		re.Opaque(tok)
	}
	rep := accepted(verf, re.Bytes())
	if s.tamperReply != nil {
		s.tamperReply(rep[len(rep)-len(re.Bytes()):])
	}
	return rep, nil
}

// fake is a stand-in GSS-API context: MICs are SHA-256 of a key, the sender's
// side and the message; sealed Wrap tokens are XORed, so a message never
// shows in one.
type fake struct {
	key       string
	initiator bool
}

func (f fake) mic(initiator bool, msg []byte) []byte {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%v/%x", f.key, initiator, msg))
	return h[:12]
}

func (f fake) GetMIC(msg []byte) ([]byte, error) { return f.mic(f.initiator, msg), nil }

func (f fake) VerifyMIC(msg, mic []byte) error {
	if !bytes.Equal(f.mic(!f.initiator, msg), mic) {
		return errors.New("fake: bad MIC")
	}
	return nil
}

func (f fake) Wrap(msg []byte, conf bool) ([]byte, error) {
	tok := []byte{0}
	if conf {
		tok[0] = 1
	}
	for _, b := range msg {
		if conf {
			b ^= 0xa5
		}
		tok = append(tok, b)
	}
	return append(tok, f.mic(f.initiator, msg)...), nil
}

func (f fake) Unwrap(tok []byte) ([]byte, bool, error) {
	if len(tok) < 13 {
		return nil, false, errors.New("fake: short token")
	}
	msg := append([]byte(nil), tok[1:len(tok)-12]...)
	if tok[0] == 1 {
		for i := range msg {
			msg[i] ^= 0xa5
		}
	}
	if err := f.VerifyMIC(msg, tok[len(tok)-12:]); err != nil {
		return nil, false, err
	}
	return msg, tok[0] == 1, nil
}
