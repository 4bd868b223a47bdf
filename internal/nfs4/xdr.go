package nfs4

import (
	"errors"
	"fmt"
	"sync"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// The ONC RPC program and the operations this client sends (RFC 8881 §16, §18).
const (
	progNFS = 100003

	opClose           = 4
	opCommit          = 5
	opGetAttr         = 9
	opGetFH           = 10
	opLookup          = 15
	opOpen            = 18
	opPutFH           = 22
	opPutRootFH       = 24
	opRead            = 25
	opWrite           = 38
	opExchangeID      = 42
	opCreateSession   = 43
	opDestroySession  = 44
	opSequence        = 53
	opDestroyClientID = 57
	opReclaimComplete = 58
	opIllegal         = 10044
)

// Status is a failed operation's nfsstat4.
type Status uint32

// Statuses this client acts on.
const (
	ErrDelay    Status = 10008
	ErrGrace    Status = 10013
	ErrWrongSec Status = 10016
)

var statusNames = map[Status]string{1: "NFS4ERR_PERM", 2: "NFS4ERR_NOENT", 5: "NFS4ERR_IO", 13: "NFS4ERR_ACCESS",
	17: "NFS4ERR_EXIST", 20: "NFS4ERR_NOTDIR", 21: "NFS4ERR_ISDIR", 22: "NFS4ERR_INVAL", 28: "NFS4ERR_NOSPC",
	30: "NFS4ERR_ROFS", 69: "NFS4ERR_DQUOT", 70: "NFS4ERR_STALE", 10001: "NFS4ERR_BADHANDLE", 10004: "NFS4ERR_NOTSUPP",
	10006: "NFS4ERR_SERVERFAULT", 10008: "NFS4ERR_DELAY", 10011: "NFS4ERR_EXPIRED", 10013: "NFS4ERR_GRACE",
	10016: "NFS4ERR_WRONGSEC", 10022: "NFS4ERR_STALE_CLIENTID", 10025: "NFS4ERR_BAD_STATEID", 10044: "NFS4ERR_OP_ILLEGAL",
	10052: "NFS4ERR_BADSESSION", 10053: "NFS4ERR_BADSLOT", 10063: "NFS4ERR_SEQ_MISORDERED", 10068: "NFS4ERR_RETRY_UNCACHED_REP", 10071: "NFS4ERR_OP_NOT_IN_SESSION"}

func (s Status) Error() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("NFS4 status %d", uint32(s))
}

// OpError is an operation that failed: which one, and its status.
type OpError struct {
	Op     string
	Status Status
}

func (e *OpError) Error() string { return e.Op + ": " + e.Status.Error() }
func (e *OpError) Unwrap() error { return e.Status }

var opNames = map[uint32]string{opClose: "CLOSE", opCommit: "COMMIT", opGetAttr: "GETATTR", opGetFH: "GETFH",
	opLookup: "LOOKUP", opOpen: "OPEN", opPutFH: "PUTFH", opPutRootFH: "PUTROOTFH", opRead: "READ", opWrite: "WRITE",
	opExchangeID: "EXCHANGE_ID", opCreateSession: "CREATE_SESSION", opDestroySession: "DESTROY_SESSION",
	opSequence: "SEQUENCE", opDestroyClientID: "DESTROY_CLIENTID", opReclaimComplete: "RECLAIM_COMPLETE"}

// compound encodes a COMPOUND's arguments: an empty tag, minor version 1,
// and the operations its caller appends with op.
type compound struct {
	oncrpc.Encoder
	n uint32
}

func newCompound() *compound {
	c := compounds.Get().(*compound)
	c.Reset()
	c.n = 0
	c.U32(0) // tag
	c.U32(1) // minor version
	c.U32(0) // operation count: set by bytes
	return c
}

// compounds are the encoders of calls done (put), for the next ones: a
// WRITE's is as large as its data.
var compounds = sync.Pool{New: func() any { return &compound{Encoder: oncrpc.NewEncoder(make([]byte, 0, 512))} }}

// put gives the compound back once its call is done (the call copied it).
func (c *compound) put() {
	if cap(c.Bytes()) <= 2*MaxIO {
		compounds.Put(c)
	}
}

// op starts operation code; its arguments follow.
func (c *compound) op(code uint32) {
	c.n++
	c.U32(code)
}

// bytes returns the encoded arguments with the operation count filled in.
func (c *compound) bytes() []byte {
	b := c.Bytes()
	b[8], b[9], b[10], b[11] = byte(c.n>>24), byte(c.n>>16), byte(c.n>>8), byte(c.n)
	return b
}

func (c *compound) bool(v bool) {
	if v {
		c.U32(1)
	} else {
		c.U32(0)
	}
}

// results reads a COMPOUND's results operation by operation.
type results struct {
	oncrpc.Decoder
	status Status
	left   int
}

func newResults(res []byte) (*results, error) {
	r := &results{Decoder: oncrpc.NewDecoder(res)}
	r.status = Status(r.U32())
	r.Opaque() // tag
	r.left = int(r.U32())
	return r, r.Err()
}

// op reads the head of the next operation's results, which must be of
// operation code; a failed operation is an *OpError.
func (r *results) op(code uint32) error {
	if r.left == 0 {
		if r.status != 0 {
			return &OpError{Op: opNames[code], Status: r.status}
		}
		return fmt.Errorf("nfs4: no results for %s", opNames[code])
	}
	r.left--
	got, st := r.U32(), Status(r.U32())
	if err := r.Err(); err != nil {
		return fmt.Errorf("nfs4: %s results: %w", opNames[code], err)
	}
	if got == opIllegal {
		return &OpError{Op: opNames[code], Status: st}
	}
	if got != code {
		return fmt.Errorf("nfs4: results of operation %d where %s's belong", got, opNames[code])
	}
	if st != 0 {
		return &OpError{Op: opNames[code], Status: st}
	}
	return nil
}

// done checks the results read so far were whole.
func (r *results) done(code uint32) error {
	if err := r.Err(); err != nil {
		return fmt.Errorf("nfs4: %s results: %w", opNames[code], err)
	}
	return nil
}

// bitmap skips a bitmap4.
func (r *results) bitmap() []uint32 {
	n := r.U32()
	if n > 8 {
		r.Fail(errors.New("xdr: bitmap too long"))
		return nil
	}
	w := make([]uint32, n)
	for i := range w {
		w[i] = r.U32()
	}
	return w
}

// StateID is a stateid4.
type StateID [16]byte

func (c *compound) stateID(s StateID) { c.Fixed(s[:]) }

func (r *results) stateID() StateID {
	var s StateID
	copy(s[:], r.Take(16))
	return s
}

// Session parameters asked for in CREATE_SESSION (channel_attrs4) and
// granted.
type channelAttrs struct {
	maxReq, maxResp, maxRespCached, maxOps, maxReqs uint32
}

func (c *compound) channelAttrs(a channelAttrs) {
	c.U32(0) // header pad
	c.U32(a.maxReq)
	c.U32(a.maxResp)
	c.U32(a.maxRespCached)
	c.U32(a.maxOps)
	c.U32(a.maxReqs)
	c.U32(0) // no RDMA ird
}

func (r *results) channelAttrs() channelAttrs {
	r.U32() // header pad
	a := channelAttrs{maxReq: r.U32(), maxResp: r.U32(), maxRespCached: r.U32(), maxOps: r.U32(), maxReqs: r.U32()}
	if n := r.U32(); n > 1 {
		r.Fail(errors.New("xdr: channel attributes: rdma ird"))
	} else if n == 1 {
		r.U32()
	}
	return a
}

// exchangeIDArgs appends EXCHANGE_ID: the client owner, non-pNFS, no state
// protection (SP4_NONE: any connection binds to the session on first use).
func (c *compound) exchangeID(verifier [8]byte, owner string) {
	c.op(opExchangeID)
	c.Fixed(verifier[:])
	c.Str(owner)
	c.U32(0x00010000) // EXCHGID4_FLAG_USE_NON_PNFS
	c.U32(0)          // SP4_NONE
	c.U32(0)          // no implementation id
}

func (r *results) exchangeID() (clientID uint64, seq uint32, err error) {
	if err := r.op(opExchangeID); err != nil {
		return 0, 0, err
	}
	clientID, seq = r.U64(), r.U32()
	r.U32() // flags
	if how := r.U32(); how != 0 {
		return 0, 0, fmt.Errorf("nfs4: EXCHANGE_ID: the server chose state protection %d", how)
	}
	r.U64()    // server owner: minor id
	r.Opaque() // major id
	r.Opaque() // scope
	if n := r.U32(); n > 1 {
		r.Fail(errors.New("xdr: more than one implementation id"))
	} else if n == 1 {
		r.Opaque() // domain
		r.Opaque() // name
		r.U64()    // date
		r.U32()
	}
	return clientID, seq, r.done(opExchangeID)
}

func (c *compound) createSession(clientID uint64, seq uint32, fore channelAttrs) {
	c.op(opCreateSession)
	c.U64(clientID)
	c.U32(seq)
	c.U32(0) // flags: not persistent, no back channel on this connection
	c.channelAttrs(fore)
	c.channelAttrs(channelAttrs{maxReq: 4096, maxResp: 4096, maxOps: 2, maxReqs: 1})
	c.U32(0x40000000) // callback program
	c.U32(1)          // one callback security parameter:
	c.U32(0)          // AUTH_NONE
}

func (r *results) createSession() (id [16]byte, fore channelAttrs, err error) {
	if err := r.op(opCreateSession); err != nil {
		return id, fore, err
	}
	copy(id[:], r.Take(16))
	r.U32() // sequence id
	r.U32() // flags
	fore = r.channelAttrs()
	r.channelAttrs()
	return id, fore, r.done(opCreateSession)
}

// newSeqCompound starts a COMPOUND with a SEQUENCE whose arguments
// setSequence fills in when a slot is free.
func newSeqCompound() *compound {
	c := newCompound()
	c.op(opSequence)
	c.Fixed(make([]byte, seqArgsLen))
	return c
}

// seqArgsLen is the length of SEQUENCE's arguments: the session, the
// sequence id, the slot, the highest slot and cachethis.
const seqArgsLen = 16 + 4*4

// setSequence sets the arguments of the SEQUENCE of a COMPOUND from
// newSeqCompound.
func (c *compound) setSequence(id [16]byte, seq, slot, highest uint32) {
	e := oncrpc.NewEncoder(c.Bytes()[16:16])
	e.Fixed(id[:])
	e.U32(seq)
	e.U32(slot)
	e.U32(highest)
	e.U32(0) // cachethis: false
}

func (r *results) sequence() error {
	if err := r.op(opSequence); err != nil {
		return err
	}
	r.Take(16) // session
	r.U32()    // sequence id
	r.U32()    // slot
	r.U32()    // highest slot
	r.U32()    // target highest slot
	r.U32()    // status flags
	return r.done(opSequence)
}

func (c *compound) putFH(fh []byte) {
	c.op(opPutFH)
	c.Opaque(fh)
}

func (c *compound) lookup(name string) {
	c.op(opLookup)
	c.Str(name)
}

func (r *results) getFH() ([]byte, error) {
	if err := r.op(opGetFH); err != nil {
		return nil, err
	}
	fh := append([]byte(nil), r.Opaque()...)
	return fh, r.done(opGetFH)
}

// Share access and the want flag of OPEN (OPEN4_SHARE_ACCESS_*).
const (
	shareAccessBoth  = 3
	shareWantNoDeleg = 0x0400 // this client has no callback channel to return one
)

// open appends OPEN of name in the current directory for reading and
// writing, made with mode if missing (UNCHECKED4), asking for no delegation.
func (c *compound) open(clientID uint64, owner []byte, name string, mode uint32) {
	c.op(opOpen)
	c.U32(0) // seqid: 0 in NFSv4.1
	c.U32(shareAccessBoth | shareWantNoDeleg)
	c.U32(0) // deny none
	c.U64(clientID)
	c.Opaque(owner)
	c.U32(1) // OPEN4_CREATE
	c.U32(0) // UNCHECKED4
	// fattr4 with mode (attribute 33) only.
	c.U32(2)
	c.U32(0)
	c.U32(1 << (33 - 32))
	c.U32(4)
	c.U32(mode)
	c.U32(0) // CLAIM_NULL
	c.Str(name)
}

func (r *results) open() (StateID, error) {
	if err := r.op(opOpen); err != nil {
		return StateID{}, err
	}
	sid := r.stateID()
	r.U32() // change_info4: atomic
	r.U64() // before
	r.U64() // after
	r.U32() // result flags
	r.bitmap()
	switch deleg := r.U32(); deleg {
	case 0: // OPEN_DELEGATE_NONE
	case 1, 2: // READ, WRITE: taken apart, never used
		r.stateID()
		r.U32() // recall
		if deleg == 2 {
			switch r.U32() { // space limit
			case 1:
				r.U64()
			case 2:
				r.U32()
				r.U32()
			default:
				r.Fail(errors.New("xdr: open: space limit"))
			}
		}
		r.U32() // ace type, flags, mask, who
		r.U32()
		r.U32()
		r.Opaque()
	case 3: // OPEN_DELEGATE_NONE_EXT
		switch r.U32() {
		case 1, 2: // WND4_CONTENTION, WND4_RESOURCE
			r.U32()
		}
	default:
		r.Fail(fmt.Errorf("xdr: open: delegation type %d", deleg))
	}
	return sid, r.done(opOpen)
}

// getAttrSize appends GETATTR of size (attribute 4).
func (c *compound) getAttrSize() {
	c.op(opGetAttr)
	c.U32(1)
	c.U32(1 << 4)
}

func (r *results) getAttrSize() (int64, error) {
	if err := r.op(opGetAttr); err != nil {
		return 0, err
	}
	mask := r.bitmap()
	vals := r.Opaque()
	if len(mask) == 0 || mask[0]&(1<<4) == 0 || len(vals) < 8 {
		return 0, errors.New("nfs4: GETATTR: no size in the reply")
	}
	d := oncrpc.NewDecoder(vals)
	return int64(d.U64()), r.done(opGetAttr)
}

// Stable is how a WRITE is committed (stable_how4).
type Stable uint32

// Stable levels.
const (
	Unstable Stable = 0
	DataSync Stable = 1
	FileSync Stable = 2
)

func (c *compound) read(sid StateID, off int64, n uint32) {
	c.op(opRead)
	c.stateID(sid)
	c.U64(uint64(off))
	c.U32(n)
}

// readInto copies READ's data to p and returns how much came and whether it
// ends the file.
func (r *results) readInto(p []byte) (int, bool, error) {
	if err := r.op(opRead); err != nil {
		return 0, false, err
	}
	eof := r.U32() != 0
	data := r.Opaque()
	if len(data) > len(p) {
		return 0, false, fmt.Errorf("nfs4: READ returned %d bytes for %d asked", len(data), len(p))
	}
	return copy(p, data), eof, r.done(opRead)
}

func (c *compound) write(sid StateID, off int64, how Stable, p []byte) {
	c.op(opWrite)
	c.stateID(sid)
	c.U64(uint64(off))
	c.U32(uint32(how))
	c.Opaque(p)
}

func (r *results) write() (int, error) {
	if err := r.op(opWrite); err != nil {
		return 0, err
	}
	n := r.U32()
	r.U32()   // committed
	r.Take(8) // verifier
	return int(n), r.done(opWrite)
}

func (c *compound) commit() {
	c.op(opCommit)
	c.U64(0)
	c.U32(0) // to the end of the file
}

func (c *compound) close(sid StateID) {
	c.op(opClose)
	c.U32(0) // seqid: 0 in NFSv4.1
	c.stateID(sid)
}

// skip reads the results of an operation that has none worth keeping.
func (r *results) skip(code uint32) error {
	if err := r.op(code); err != nil {
		return err
	}
	switch code {
	case opCommit:
		r.Take(8) // verifier
	case opClose:
		r.stateID()
	}
	return r.done(code)
}
