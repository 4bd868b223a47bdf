package oncrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// MaxRecord is the largest record ReadRecord accepts: room for a 1 MiB READ
// reply many times over, and a bound on what a broken server can make us hold.
const MaxRecord = 64 << 20

const lastFragment = 0x80000000

// ReadRecord reads one record-marked message, joining its fragments.
func ReadRecord(r io.Reader) ([]byte, error) {
	var msg []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h &^ lastFragment)
		if len(msg)+n > MaxRecord {
			return nil, errors.New("rpc: record larger than 64 MiB")
		}
		start := len(msg)
		msg = slices.Grow(msg, n)[:start+n]
		if _, err := io.ReadFull(r, msg[start:]); err != nil {
			return nil, err
		}
		if h&lastFragment != 0 {
			return msg, nil
		}
	}
}

// AuthSys is an AUTH_SYS credential.
type AuthSys struct {
	Stamp    uint32
	Machine  string
	UID, GID uint32
	GIDs     []uint32 // supplementary groups
}

// Cred returns the credential as an encoded opaque_auth (flavor and body),
// for CallHeader.
func (a AuthSys) Cred() []byte {
	var body Encoder
	body.U32(a.Stamp)
	body.Str(a.Machine)
	body.U32(a.UID)
	body.U32(a.GID)
	body.U32(uint32(len(a.GIDs)))
	for _, g := range a.GIDs {
		body.U32(g)
	}
	var e Encoder
	e.U32(1) // AUTH_SYS
	e.Opaque(body.b)
	return e.b
}

// OpaqueAuth is a credential or a verifier: its flavor and its body.
type OpaqueAuth struct {
	Flavor uint32
	Body   []byte
}

// Auth flavors (RFC 5531 §8.2; RFC 2203 §5).
const (
	AuthNone   = 0
	AuthSysFlv = 1
	RPCSecGSS  = 6
)

// Auth authenticates calls: AuthSys, or an RPCSEC_GSS context's.
type Auth interface {
	// Seal appends one call's credential, verifier and arguments (as they
	// go on the wire: a flavor may wrap them) to b, where b[head:] is the
	// call's header from the xid through the procedure number; and returns
	// what checks the call's reply.
	Seal(b []byte, head int, args []byte) ([]byte, Opener, error)
}

// Opener checks one call's reply: its verifier, and its results (as they came
// on the wire), from which it returns the procedure's.
type Opener interface {
	Open(verf OpaqueAuth, results []byte) ([]byte, error)
}

// Seal appends the AUTH_SYS credential, an AUTH_NONE verifier and args; the
// reply's verifier is not checked.
func (a AuthSys) Seal(b []byte, _ int, args []byte) ([]byte, Opener, error) {
	b = append(b, a.Cred()...)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	return append(b, args...), plain{}, nil
}

type plain struct{}

func (plain) Open(_ OpaqueAuth, res []byte) ([]byte, error) { return res, nil }

// AppendCall appends a whole call to b: the record mark, the header with a's
// credential and verifier, and the arguments as a seals them; and returns the
// Opener of its reply.
func AppendCall(b []byte, xid, prog, vers, proc uint32, a Auth, args []byte) ([]byte, Opener, error) {
	start := len(b)
	out, o, err := a.Seal(appendHeader(b, xid, prog, vers, proc), start+4, args)
	if err != nil {
		return b, nil, err
	}
	binary.BigEndian.PutUint32(out[start:], lastFragment|uint32(len(out)-start-4))
	return out, o, nil
}

// OpenReply checks a whole reply message and returns its results as o opens
// them. A denied or unaccepted call is an *Error.
func OpenReply(msg []byte, o Opener) ([]byte, error) {
	verf, n, err := parseReplyHeader(msg)
	if err != nil {
		return nil, err
	}
	return o.Open(verf, msg[n:])
}

// CallHeader returns the record mark and the CALL header (RPC version 2, the
// encoded credential cred, an AUTH_NONE verifier) of a call whose arguments,
// argLen bytes, follow in the same one-fragment record. The caller sends the
// arguments after it, appended or in the same writev.
func CallHeader(xid, prog, vers, proc uint32, cred []byte, argLen int) []byte {
	return AppendCallHeader(nil, xid, prog, vers, proc, cred, argLen)
}

// AppendCallHeader appends what CallHeader returns to b, so that a caller can
// reuse one buffer for every call.
func AppendCallHeader(b []byte, xid, prog, vers, proc uint32, cred []byte, argLen int) []byte {
	start := len(b)
	e := Encoder{b: appendHeader(b, xid, prog, vers, proc)}
	e.b = append(e.b, cred...)
	e.U32(0) // verifier AUTH_NONE
	e.U32(0)
	binary.BigEndian.PutUint32(e.b[start:], lastFragment|uint32(len(e.b)-start-4+argLen))
	return e.b
}

// appendHeader appends a zero record mark (its caller sets it) and a call's
// header from the xid through the procedure number.
func appendHeader(b []byte, xid, prog, vers, proc uint32) []byte {
	e := Encoder{b: b}
	e.U32(0)
	e.U32(xid)
	e.U32(0) // CALL
	e.U32(2) // RPC version
	e.U32(prog)
	e.U32(vers)
	e.U32(proc)
	return e.b
}

// Error is a call the server denied (reply_stat MSG_DENIED, with its
// reject_stat, and for AUTH_ERROR its auth_stat) or accepted but did not run
// (a non-zero accept_stat).
type Error struct {
	Denied bool
	Stat   uint32 // reject_stat or accept_stat
	Auth   uint32 // auth_stat of a call denied with AUTH_ERROR (Stat 1)
}

// auth_stat values (RFC 5531 §9; RFC 2203 §5.3.3.3).
const (
	AuthBadCred      = 1
	AuthRejectedCred = 2
	AuthBadVerf      = 3
	AuthRejectedVerf = 4
	AuthTooWeak      = 5
	GSSCredProblem   = 13
	GSSCtxProblem    = 14
)

var authStats = map[uint32]string{AuthBadCred: "bad credential", AuthRejectedCred: "credential rejected",
	AuthBadVerf: "bad verifier", AuthRejectedVerf: "verifier rejected", AuthTooWeak: "too weak",
	GSSCredProblem: "RPCSEC_GSS credential problem", GSSCtxProblem: "RPCSEC_GSS context problem"}

var acceptStats = map[uint32]string{1: "program unavailable", 2: "program version mismatch", 3: "procedure unavailable", 4: "garbage arguments", 5: "system error"}

func (e *Error) Error() string {
	if e.Denied && e.Stat == 1 {
		if n, ok := authStats[e.Auth]; ok {
			return "rpc: call denied: " + n
		}
		return fmt.Sprintf("rpc: call denied (auth status %d)", e.Auth)
	}
	if e.Denied {
		return fmt.Sprintf("rpc: call denied (reject status %d)", e.Stat)
	}
	if n, ok := acceptStats[e.Stat]; ok {
		return "rpc: " + n
	}
	return fmt.Sprintf("rpc: accept status %d", e.Stat)
}

// ParseReply checks a reply message's header and returns the procedure's
// results that follow it. A denied or unaccepted call is an *Error.
func ParseReply(msg []byte) ([]byte, error) {
	n, err := ParseReplyHeader(msg)
	if err != nil {
		return nil, err
	}
	return msg[n:], nil
}

// ParseReplyHeader checks the reply header at the start of msg and returns its
// length: the procedure's results start at msg[n:]. msg may end anywhere after
// the header, so a client can check the header of a large reply before it has
// read the rest. A denied or unaccepted call is an *Error.
func ParseReplyHeader(msg []byte) (n int, err error) {
	_, n, err = parseReplyHeader(msg)
	return n, err
}

func parseReplyHeader(msg []byte) (verf OpaqueAuth, n int, err error) {
	d := NewDecoder(msg)
	d.U32() // xid
	if d.U32() != 1 {
		if d.err != nil {
			return verf, 0, d.err
		}
		return verf, 0, errors.New("rpc: not a reply")
	}
	if st := d.U32(); st != 0 {
		e := &Error{Denied: true, Stat: d.U32()}
		if e.Stat == 1 {
			e.Auth = d.U32()
		}
		return verf, 0, e
	}
	verf.Flavor = d.U32()
	verf.Body = d.Opaque()
	if st := d.U32(); st != 0 {
		return verf, 0, &Error{Stat: st}
	}
	if d.err != nil {
		return verf, 0, d.err
	}
	return verf, d.off, nil
}

// LastFragment reports whether a record mark ends its record, and the length of
// the fragment it starts.
func LastFragment(mark uint32) (last bool, n int) {
	return mark&lastFragment != 0, int(mark &^ lastFragment)
}
