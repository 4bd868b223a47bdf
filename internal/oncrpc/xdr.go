// Package oncrpc is the wire format shared by Basin's own NFS clients: XDR
// encoding and decoding (RFC 4506) and ONC RPC over TCP (RFC 5531) — record
// marking, the CALL header with an AUTH_SYS credential, and the checks on a
// reply. A call may instead carry any Auth (AppendCall, OpenReply), which
// writes its credential and verifier, may wrap its arguments, and checks its
// reply: AuthSys, or RPCSEC_GSS (internal/oncrpc/rpcsecgss). internal/nfs3 (the pipelined NFSv3 client of basin bench and of the
// attack tests) and test/nfsraw (the test-only NFSv4.0 COMPOUND client)
// import it; each keeps its own connection handling and procedures.
//
// It imports nothing of Basin's.
package oncrpc

import (
	"encoding/binary"
	"errors"
)

var zeros [3]byte

// Padding returns the zero bytes that round n bytes of opaque data up to a
// multiple of 4, for a caller that writes the data itself.
func Padding(n int) []byte { return zeros[:(4-n%4)%4] }

// Encoder appends XDR to a byte slice; its zero value is empty and ready.
type Encoder struct{ b []byte }

// NewEncoder returns an Encoder that appends to b.
func NewEncoder(b []byte) Encoder { return Encoder{b: b} }

// Reset empties the Encoder and keeps its buffer for reuse.
func (e *Encoder) Reset() { e.b = e.b[:0] }

// Bytes returns what has been encoded.
func (e *Encoder) Bytes() []byte { return e.b }

// U32 appends an unsigned int.
func (e *Encoder) U32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }

// U64 appends an unsigned hyper.
func (e *Encoder) U64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

// Opaque appends variable-length opaque data: its length, the bytes, padding.
func (e *Encoder) Opaque(p []byte) {
	e.U32(uint32(len(p)))
	e.Fixed(p)
}

// Fixed appends fixed-length opaque data: the bytes and padding.
func (e *Encoder) Fixed(p []byte) {
	e.b = append(e.b, p...)
	e.b = append(e.b, Padding(len(p))...)
}

// Str appends a string.
func (e *Encoder) Str(s string) { e.Opaque([]byte(s)) }

// Decoder reads XDR from a byte slice. The first error sticks: later reads
// return zeros and nil, and Err reports it.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder returns a Decoder reading b.
func NewDecoder(b []byte) Decoder { return Decoder{b: b} }

// Err returns the first error the Decoder met, if any.
func (d *Decoder) Err() error { return d.err }

// Fail records err unless an error is already recorded; Fail(nil) does nothing.
func (d *Decoder) Fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// Rest returns the bytes not yet read.
func (d *Decoder) Rest() []byte { return d.b[d.off:] }

// Take returns the next n bytes, without copying.
func (d *Decoder) Take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || d.off+n > len(d.b) {
		d.err = errors.New("xdr: reply too short")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

// U32 reads an unsigned int.
func (d *Decoder) U32() uint32 {
	if p := d.Take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

// U64 reads an unsigned hyper.
func (d *Decoder) U64() uint64 {
	if p := d.Take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// Opaque reads variable-length opaque data (or a string) and skips its
// padding; the result shares the Decoder's bytes.
func (d *Decoder) Opaque() []byte {
	n := int(d.U32())
	if n > len(d.b) {
		d.err = errors.New("xdr: bad length")
		return nil
	}
	p := d.Take(n)
	d.Take((4 - n%4) % 4)
	return p
}
