package nfsraw

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// NFSv4.1 sessions (RFC 8881): what a kernel client does before its first
// LOOKUP — EXCHANGE_ID, CREATE_SESSION with one slot, RECLAIM_COMPLETE — and a
// SEQUENCE in front of every COMPOUND after that.

// session is an NFSv4.1 client's session: one slot, used by one call at a time
// (rpcConn serialises calls).
type session struct {
	clientID uint64
	id       [16]byte
	seq      uint32 // the slot's next sequence id
}

// Dial41 connects to an NFSv4.1 server at host:port and sets up a session: a
// client ID of its own (EXCHANGE_ID), a session of one slot (CREATE_SESSION) and
// RECLAIM_COMPLETE. Every Compound then goes out as minor version 1 with a
// SEQUENCE first; Close destroys the session and the client ID.
func Dial41(ctx context.Context, host string, port int, a Auth) (*Client, error) {
	rc, err := dialRPC(ctx, net.JoinHostPort(host, strconv.Itoa(port)), a)
	if err != nil {
		return nil, err
	}
	c := &Client{rc: rc, minor: 1}
	ex := &exchangeID{}
	if _, err := rand.Read(ex.verifier[:]); err != nil {
		rc.close()
		return nil, err
	}
	ex.owner = fmt.Sprintf("nfsraw-%x", ex.verifier)
	if err := c.runRaw(ctx, ex); err != nil {
		rc.close()
		return nil, fmt.Errorf("EXCHANGE_ID: %w", err)
	}
	cs := &createSession{clientID: ex.clientID, seq: ex.seq}
	if err := c.runRaw(ctx, cs); err != nil {
		rc.close()
		return nil, fmt.Errorf("CREATE_SESSION: %w", err)
	}
	c.sess = &session{clientID: ex.clientID, id: cs.id, seq: 1}
	if err := c.Run(ctx, &reclaimComplete{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("RECLAIM_COMPLETE: %w", err)
	}
	return c, nil
}

// runRaw sends ops as one minor-version-1 COMPOUND without a SEQUENCE (for
// EXCHANGE_ID and CREATE_SESSION, which come before any session).
func (c *Client) runRaw(ctx context.Context, ops ...Op) error {
	st, _, err := c.compound(ctx, ops)
	if err != nil {
		return err
	}
	if st != OK {
		return st
	}
	return nil
}

// closeSession destroys the session and the client ID, best effort.
func (c *Client) closeSession(ctx context.Context) {
	s := c.sess
	c.sess = nil
	c.runRaw(ctx, &sequence{sess: s}, &destroySession{id: s.id}) //nolint:errcheck // closing anyway
	c.runRaw(ctx, &destroyClientID{id: s.clientID})              //nolint:errcheck // closing anyway
}

// sequence is SEQUENCE on the session's one slot.
type sequence struct {
	noResult
	sess *session
}

func (*sequence) code() uint32 { return 53 }
func (o *sequence) encode(e *xdrEnc) {
	e.Fixed(o.sess.id[:])
	e.U32(o.sess.seq)
	e.U32(0) // slot
	e.U32(0) // highest slot
	e.U32(0) // cachethis: false
}
func (o *sequence) decode(d *xdrDec) {
	d.Take(16) // session
	d.U32()    // sequence id
	d.U32()    // slot
	d.U32()    // highest slot
	d.U32()    // target highest slot
	d.U32()    // status flags
}

// exchangeID is EXCHANGE_ID: a client owner, no state protection.
type exchangeID struct {
	verifier [8]byte
	owner    string
	clientID uint64
	seq      uint32
}

func (*exchangeID) code() uint32 { return 42 }
func (o *exchangeID) encode(e *xdrEnc) {
	e.Fixed(o.verifier[:])
	e.Str(o.owner)
	e.U32(0x00010000) // EXCHGID4_FLAG_USE_NON_PNFS
	e.U32(0)          // SP4_NONE
	e.U32(0)          // no implementation id
}
func (o *exchangeID) decode(d *xdrDec) {
	o.clientID = d.U64()
	o.seq = d.U32()
	d.U32() // flags
	if how := d.U32(); how != 0 {
		d.Fail(fmt.Errorf("exchange_id: state protection %d", how))
		return
	}
	d.U64()    // server owner: minor id
	d.Opaque() // major id
	d.Opaque() // scope
	if n := d.U32(); n > 1 {
		d.Fail(errors.New("exchange_id: more than one implementation id"))
	} else if n == 1 {
		d.Opaque() // domain
		d.Opaque() // name
		d.U64()    // date: seconds
		d.U32()    // nanoseconds
	}
}

// createSession is CREATE_SESSION: one slot each way, AUTH_NONE callbacks.
type createSession struct {
	clientID uint64
	seq      uint32
	id       [16]byte
}

func (*createSession) code() uint32 { return 43 }
func (o *createSession) encode(e *xdrEnc) {
	e.U64(o.clientID)
	e.U32(o.seq)
	e.U32(0) // flags: no persistence, no back channel on this connection
	for _, ch := range [][5]uint32{
		{1 << 20, 1 << 20, 4096, 16, 1}, // fore: request, response, cached, operations, slots
		{4096, 4096, 0, 2, 1},           // back
	} {
		e.U32(0) // header padding
		for _, v := range ch {
			e.U32(v)
		}
		e.U32(0) // no RDMA ird
	}
	e.U32(0x40000000) // callback program
	e.U32(1)          // one security parameter:
	e.U32(0)          // AUTH_NONE
}
func (o *createSession) decode(d *xdrDec) {
	copy(o.id[:], d.Take(16))
	d.U32() // sequence id
	d.U32() // flags
	for range 2 {
		for range 6 {
			d.U32()
		}
		if n := d.U32(); n > 1 {
			d.Fail(errors.New("create_session: rdma ird"))
			return
		} else if n == 1 {
			d.U32()
		}
	}
}

// reclaimComplete is RECLAIM_COMPLETE for all filesystems.
type reclaimComplete struct{ noResult }

func (*reclaimComplete) code() uint32     { return 58 }
func (*reclaimComplete) encode(e *xdrEnc) { e.U32(0) }

type destroySession struct {
	noResult
	id [16]byte
}

func (*destroySession) code() uint32       { return 44 }
func (o *destroySession) encode(e *xdrEnc) { e.Fixed(o.id[:]) }

type destroyClientID struct {
	noResult
	id uint64
}

func (*destroyClientID) code() uint32       { return 57 }
func (o *destroyClientID) encode(e *xdrEnc) { e.U64(o.id) }
