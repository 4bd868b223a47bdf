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
// SEQUENCE in front of every COMPOUND after that; and what it does when the
// server restarted (§8.4.2): the same EXCHANGE_ID again, a new session, its
// opens and locks reclaimed, then RECLAIM_COMPLETE.

// session is an NFSv4.1 client's session: one slot, used by one call at a time
// (rpcConn serialises calls).
type session struct {
	clientID uint64
	id       [16]byte
	seq      uint32 // the slot's next sequence id
	status   uint32 // the status flags of the last SEQUENCE that succeeded
}

// Options41 shape an NFSv4.1 client (Dial41With).
type Options41 struct {
	// Owner and Verifier are the client owner (co_ownerid) and its boot
	// verifier (co_verifier); "" and all zeros: random ones. The server knows
	// a client by both: after a server restart, a client that comes back from
	// the same address with the same Owner may reclaim its state (Ganesha's
	// recovery records name it by address and owner), and the same Verifier
	// says it did not restart itself.
	Owner    string
	Verifier [8]byte
	// NoReclaimComplete leaves RECLAIM_COMPLETE to the caller (ReclaimComplete):
	// a client that reclaims state sends it once its reclaims are done.
	NoReclaimComplete bool
}

// Dial41 connects to an NFSv4.1 server at host:port and sets up a session: a
// client ID of its own (EXCHANGE_ID with a random owner), a session of one slot
// (CREATE_SESSION) and RECLAIM_COMPLETE. Every Compound then goes out as minor
// version 1 with a SEQUENCE first; Close destroys the session and the client ID.
func Dial41(ctx context.Context, host string, port int, a Auth) (*Client, error) {
	return Dial41With(ctx, host, port, a, Options41{})
}

// Dial41With is Dial41 with a client owner, a verifier and RECLAIM_COMPLETE as
// the caller chooses.
func Dial41With(ctx context.Context, host string, port int, a Auth, o Options41) (*Client, error) {
	if o.Verifier == ([8]byte{}) {
		if _, err := rand.Read(o.Verifier[:]); err != nil {
			return nil, err
		}
	}
	if o.Owner == "" {
		o.Owner = fmt.Sprintf("nfsraw-%x", o.Verifier)
	}
	c := &Client{minor: 1, addr: net.JoinHostPort(host, strconv.Itoa(port)), auth: a, opts41: o}
	if _, err := c.establish(ctx); err != nil {
		return nil, err
	}
	if !o.NoReclaimComplete {
		if err := c.Run(ctx, &ReclaimComplete{}); err != nil {
			c.Close()
			return nil, fmt.Errorf("RECLAIM_COMPLETE: %w", err)
		}
	}
	return c, nil
}

// Reestablished is what Reestablish found.
type Reestablished struct {
	ClientID uint64
	// Confirmed: the server still held the client ID (EXCHGID4_FLAG_CONFIRMED_R),
	// so it did not restart and the client's opens and locks are still there.
	// Otherwise the client is new to it and reclaims (while the server is in
	// grace), then sends RECLAIM_COMPLETE.
	Confirmed bool
}

// Reestablish connects again and sets up a new session for the same client
// owner and verifier: what a client does when its session or client ID is
// gone (NeedsReestablish), typically after a server restart. It sends no
// RECLAIM_COMPLETE. It fails, leaving the client without a connection, while
// the server does not answer; call it again.
func (c *Client) Reestablish(ctx context.Context) (Reestablished, error) {
	if c.minor != 1 {
		return Reestablished{}, errors.New("reestablish: not an NFSv4.1 client")
	}
	c.sess = nil
	if c.rc != nil {
		c.rc.close()
		c.rc = nil
	}
	return c.establish(ctx)
}

// establish dials and runs EXCHANGE_ID and CREATE_SESSION with the client's
// owner and verifier.
func (c *Client) establish(ctx context.Context) (Reestablished, error) {
	rc, err := dialRPC(ctx, c.addr, c.auth)
	if err != nil {
		return Reestablished{}, err
	}
	c.rc = rc
	ex := &exchangeID{verifier: c.opts41.Verifier, owner: c.opts41.Owner}
	if err := c.runRaw(ctx, ex); err != nil {
		rc.close()
		c.rc = nil
		return Reestablished{}, fmt.Errorf("EXCHANGE_ID: %w", err)
	}
	cs := &createSession{clientID: ex.clientID, seq: ex.seq}
	if err := c.runRaw(ctx, cs); err != nil {
		rc.close()
		c.rc = nil
		return Reestablished{}, fmt.Errorf("CREATE_SESSION: %w", err)
	}
	c.sess = &session{clientID: ex.clientID, id: cs.id, seq: 1}
	c.owner = ex.server
	return Reestablished{ClientID: ex.clientID, Confirmed: ex.flags&exchgidConfirmedR != 0}, nil
}

// NeedsReestablish reports whether err, from a call of an NFSv4.1 client, says
// its session or client ID is gone, as after a server restart: the connection
// failed, or NFS4ERR_BADSESSION, NFS4ERR_DEADSESSION, NFS4ERR_STALE_CLIENTID,
// NFS4ERR_EXPIRED or NFS4ERR_CONN_NOT_BOUND_TO_SESSION. A context's end and an
// RPC-level refusal are not.
func NeedsReestablish(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if st, ok := StatusOf(err); ok {
		switch st {
		case ErrBadSession, ErrDeadSession, ErrStaleClientID, ErrExpired, ErrConnNotBound:
			return true
		}
		return false
	}
	var re *RPCError
	return !errors.As(err, &re)
}

// SequenceStatus is the status flags (SEQ4_STATUS_*) of the last SEQUENCE that
// succeeded; 0 for NFSv4.0.
func (c *Client) SequenceStatus() uint32 {
	if c.sess == nil {
		return 0
	}
	return c.sess.status
}

// ServerOwner is who an NFSv4.1 server says it is in EXCHANGE_ID
// (eir_server_owner, eir_server_scope): two addresses answering with the same
// major ID and scope are one server to a client, which may then use them as
// trunks of one client ID (RFC 8881 §2.10.5).
type ServerOwner struct {
	Minor uint64
	Major string
	Scope string
}

// ServerOwner returns what the server answered to the client's EXCHANGE_ID;
// zero for NFSv4.0.
func (c *Client) ServerOwner() ServerOwner { return c.owner }

// Owner is an NFSv4.1 client's owner (co_ownerid); "" for NFSv4.0.
func (c *Client) Owner() string { return c.opts41.Owner }

// Drop closes the connection and nothing else, as a client that crashed or
// was cut off: the server keeps its session, client ID and state until its
// lease runs out.
func (c *Client) Drop() error {
	c.sess = nil
	if c.rc == nil {
		return nil
	}
	err := c.rc.close()
	c.rc = nil
	return err
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
	sess   *session
	status uint32 // SEQ4_STATUS_* of the reply
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
	d.Take(16)         // session
	d.U32()            // sequence id
	d.U32()            // slot
	d.U32()            // highest slot
	d.U32()            // target highest slot
	o.status = d.U32() // status flags
}

// exchangeID is EXCHANGE_ID: a client owner, no state protection.
type exchangeID struct {
	verifier [8]byte
	owner    string
	clientID uint64
	seq      uint32
	flags    uint32
	server   ServerOwner
}

// exchgidConfirmedR is EXCHGID4_FLAG_CONFIRMED_R: the server holds the client
// ID confirmed already.
const exchgidConfirmedR = 0x80000000

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
	o.flags = d.U32()
	if how := d.U32(); how != 0 {
		d.Fail(fmt.Errorf("exchange_id: state protection %d", how))
		return
	}
	o.server.Minor = d.U64()
	o.server.Major = string(d.Opaque())
	o.server.Scope = string(d.Opaque())
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

// ReclaimComplete is RECLAIM_COMPLETE (NFSv4.1): the client reclaimed all it
// will (for the current filesystem only, with OneFS). A client sends it once
// per client ID, after its reclaims; Dial41 sends it at once.
type ReclaimComplete struct {
	noResult
	OneFS bool
}

func (*ReclaimComplete) code() uint32       { return 58 }
func (o *ReclaimComplete) encode(e *xdrEnc) { e.bool(o.OneFS) }

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
