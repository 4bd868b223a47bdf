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
	e := Encoder{b: b}
	start := len(b)
	e.U32(0) // record mark, set below
	e.U32(xid)
	e.U32(0) // CALL
	e.U32(2) // RPC version
	e.U32(prog)
	e.U32(vers)
	e.U32(proc)
	e.b = append(e.b, cred...)
	e.U32(0) // verifier AUTH_NONE
	e.U32(0)
	binary.BigEndian.PutUint32(e.b[start:], lastFragment|uint32(len(e.b)-start-4+argLen))
	return e.b
}

// Error is a call the server denied (reply_stat MSG_DENIED, with its
// reject_stat) or accepted but did not run (a non-zero accept_stat).
type Error struct {
	Denied bool
	Stat   uint32 // reject_stat or accept_stat
}

var acceptStats = map[uint32]string{1: "program unavailable", 2: "program version mismatch", 3: "procedure unavailable", 4: "garbage arguments", 5: "system error"}

func (e *Error) Error() string {
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
	d := NewDecoder(msg)
	d.U32() // xid
	if d.U32() != 1 {
		if d.err != nil {
			return 0, d.err
		}
		return 0, errors.New("rpc: not a reply")
	}
	if st := d.U32(); st != 0 {
		return 0, &Error{Denied: true, Stat: d.U32()}
	}
	d.U32()    // verifier flavor
	d.Opaque() // verifier body
	if st := d.U32(); st != 0 {
		return 0, &Error{Stat: st}
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.off, nil
}

// LastFragment reports whether a record mark ends its record, and the length of
// the fragment it starts.
func LastFragment(mark uint32) (last bool, n int) {
	return mark&lastFragment != 0, int(mark &^ lastFragment)
}
