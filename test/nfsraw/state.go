package nfsraw

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Open state and byte-range locks (RFC 8881 §9, §18.16, §18.10–18.12): what a
// client holds, and reclaims after a server restart while the server is in
// grace (OPEN with CLAIM_PREVIOUS, LOCK with reclaim set), before its
// RECLAIM_COMPLETE.

// StateID is a stateid4: a sequence id (big-endian, the first 4 bytes) and 12
// bytes the server chose. The zero value is the anonymous stateid.
type StateID [16]byte

// Seq is the stateid's sequence id.
func (s StateID) Seq() uint32 { return binary.BigEndian.Uint32(s[:4]) }

func (s StateID) String() string { return fmt.Sprintf("%d:%x", s.Seq(), s[4:]) }

func (e *xdrEnc) stateID(s StateID) { e.Fixed(s[:]) }

func (d *xdrDec) stateID() StateID {
	var s StateID
	copy(s[:], d.Take(16))
	return s
}

// OPEN's share access and deny (OPEN4_SHARE_ACCESS_*, OPEN4_SHARE_DENY_*).
const (
	ShareAccessRead  = 1
	ShareAccessWrite = 2
	ShareAccessBoth  = 3
	ShareDenyNone    = 0
	ShareDenyRead    = 1
	ShareDenyWrite   = 2
	ShareDenyBoth    = 3
	// ShareWantNoDeleg (OPEN4_SHARE_ACCESS_WANT_NO_DELEG, NFSv4.1 only) asks
	// for no delegation, as this client has no callback channel to return one.
	ShareWantNoDeleg = 0x0400
)

// OPEN's claims (open_claim_type4) this client makes.
const (
	ClaimNull     = 0 // Name in the current directory
	ClaimPrevious = 1 // the current file, reclaimed after a server restart
	ClaimFH       = 4 // the current file (NFSv4.1)
)

// Delegation types (open_delegation_type4).
const (
	DelegNone    = 0
	DelegRead    = 1
	DelegWrite   = 2
	DelegNoneExt = 3 // NFSv4.1: none, with a reason
)

// OPEN results' flags (OPEN4_RESULT_*).
const (
	OpenResultConfirm       = 0x2 // NFSv4.0: OPEN_CONFIRM before using the stateid
	OpenResultLockTypePosix = 0x4
)

// Open is OPEN: with ClaimNull it opens Name in the current directory (made
// with Mode first if Create and missing: UNCHECKED4), which becomes the current
// filehandle; with ClaimPrevious or ClaimFH the current file. Access and Deny
// are the share reservation (ShareAccess*, ShareDeny*); the open owner is
// ClientID (NFSv4.0: the client ID; NFSv4.1: ignored, the session's counts) and
// Owner. SeqID is the owner's sequence id in NFSv4.0, 0 in NFSv4.1. Results:
// StateID, RFlags and any delegation the server gave.
type Open struct {
	SeqID         uint32
	Access, Deny  uint32
	ClientID      uint64
	Owner         []byte
	Create        bool
	Mode          uint32
	Claim         uint32
	Name          string // ClaimNull
	PrevDelegType uint32 // ClaimPrevious: the delegation the client held (DelegNone)

	StateID      StateID
	RFlags       uint32
	Deleg        uint32  // the delegation type given (DelegNone…)
	DelegStateID StateID // with DelegRead or DelegWrite
}

func (*Open) code() uint32 { return 18 }
func (o *Open) encode(e *xdrEnc) {
	e.U32(o.SeqID)
	e.U32(o.Access)
	e.U32(o.Deny)
	e.U64(o.ClientID)
	e.Opaque(o.Owner)
	if o.Create {
		e.U32(1) // OPEN4_CREATE
		e.U32(0) // UNCHECKED4
		m := o.Mode
		modeAttrs(e, &m, nil)
	} else {
		e.U32(0) // OPEN4_NOCREATE
	}
	e.U32(o.Claim)
	switch o.Claim {
	case ClaimNull:
		e.Str(o.Name)
	case ClaimPrevious:
		e.U32(o.PrevDelegType)
	}
}
func (o *Open) decode(d *xdrDec) {
	o.StateID = d.stateID()
	d.changeInfo()
	o.RFlags = d.U32()
	d.bitmap() // attrset
	o.Deleg = d.U32()
	switch o.Deleg {
	case DelegNone:
	case DelegRead, DelegWrite:
		o.DelegStateID = d.stateID()
		d.U32() // recall
		if o.Deleg == DelegWrite {
			switch d.U32() { // space limit
			case 1: // NFS_LIMIT_SIZE
				d.U64()
			case 2: // NFS_LIMIT_BLOCKS
				d.U32()
				d.U32()
			default:
				d.Fail(errors.New("open: space limit"))
			}
		}
		d.U32()    // ace type
		d.U32()    // ace flags
		d.U32()    // ace mask
		d.Opaque() // who
	case DelegNoneExt:
		switch d.U32() { // why
		case 1, 2: // WND4_CONTENTION, WND4_RESOURCE
			d.U32() // will push / will signal
		}
	default:
		d.Fail(fmt.Errorf("open: delegation type %d", o.Deleg))
	}
}

// OpenConfirm is OPEN_CONFIRM (NFSv4.0 only): the open owner's first OPEN is
// confirmed; StateID (the open's) comes back updated.
type OpenConfirm struct {
	StateID StateID
	SeqID   uint32
}

func (*OpenConfirm) code() uint32 { return 20 }
func (o *OpenConfirm) encode(e *xdrEnc) {
	e.stateID(o.StateID)
	e.U32(o.SeqID)
}
func (o *OpenConfirm) decode(d *xdrDec) { o.StateID = d.stateID() }

// Close is CLOSE of the open StateID on the current file; StateID comes back
// as the server answered (in NFSv4.1 a special, invalid one).
type Close struct {
	SeqID   uint32
	StateID StateID
}

func (*Close) code() uint32 { return 4 }
func (o *Close) encode(e *xdrEnc) {
	e.U32(o.SeqID)
	e.stateID(o.StateID)
}
func (o *Close) decode(d *xdrDec) { o.StateID = d.stateID() }

// Lock types (nfs_lock_type4); the W kinds ask the client to be told when a
// denied lock may be free (blocking locks).
const (
	ReadLock      = 1
	WriteLock     = 2
	ReadLockWait  = 3
	WriteLockWait = 4
)

// LockOwner is a lock_owner4: a client ID (NFSv4.1: ignored, the session's
// counts) and the owner's bytes.
type LockOwner struct {
	ClientID uint64
	Owner    []byte
}

// LockDenied is the lock that made a LOCK or LOCKT fail with NFS4ERR_DENIED.
type LockDenied struct {
	Offset, Length uint64
	Type           uint32
	Owner          LockOwner
}

func (d *xdrDec) lockDenied() *LockDenied {
	ld := &LockDenied{Offset: d.U64(), Length: d.U64(), Type: d.U32()}
	ld.Owner.ClientID = d.U64()
	ld.Owner.Owner = append([]byte(nil), d.Opaque()...)
	return ld
}

// LockAll is the length of a lock to the end of the file (and beyond).
const LockAll = ^uint64(0)

// Lock is LOCK of Length bytes at Offset (LockAll: to the end) of the current
// file. A lock owner's first lock names the open it comes from (NewOwner:
// OpenStateID, Owner, and in NFSv4.0 OpenSeqID and LockSeqID); later ones its
// lock stateid (LockStateID, LockSeqID). Reclaim asks for a lock held before a
// server restart, during its grace period. Results: StateID, the lock
// stateid; with NFS4ERR_DENIED, Denied.
type Lock struct {
	Type           uint32
	Reclaim        bool
	Offset, Length uint64

	NewOwner    bool
	OpenSeqID   uint32
	OpenStateID StateID
	Owner       LockOwner
	LockStateID StateID
	LockSeqID   uint32

	StateID StateID
	Denied  *LockDenied
}

func (*Lock) code() uint32 { return 12 }
func (o *Lock) encode(e *xdrEnc) {
	e.U32(o.Type)
	e.bool(o.Reclaim)
	e.U64(o.Offset)
	e.U64(o.Length)
	e.bool(o.NewOwner)
	if o.NewOwner {
		e.U32(o.OpenSeqID)
		e.stateID(o.OpenStateID)
		e.U32(o.LockSeqID)
		e.U64(o.Owner.ClientID)
		e.Opaque(o.Owner.Owner)
	} else {
		e.stateID(o.LockStateID)
		e.U32(o.LockSeqID)
	}
}
func (o *Lock) decode(d *xdrDec) { o.StateID = d.stateID() }
func (o *Lock) decodeErr(st Status, d *xdrDec) {
	if st == ErrDenied {
		o.Denied = d.lockDenied()
	}
}

// LockT is LOCKT: would Owner get a lock of Type on Length bytes at Offset of
// the current file? NFS4ERR_DENIED (with Denied) if not.
type LockT struct {
	Type           uint32
	Offset, Length uint64
	Owner          LockOwner

	Denied *LockDenied
}

func (*LockT) code() uint32 { return 13 }
func (o *LockT) encode(e *xdrEnc) {
	e.U32(o.Type)
	e.U64(o.Offset)
	e.U64(o.Length)
	e.U64(o.Owner.ClientID)
	e.Opaque(o.Owner.Owner)
}
func (o *LockT) decode(*xdrDec) {}
func (o *LockT) decodeErr(st Status, d *xdrDec) {
	if st == ErrDenied {
		o.Denied = d.lockDenied()
	}
}

// LockU is LOCKU: unlock Length bytes at Offset of the current file held under
// the lock StateID, which comes back updated.
type LockU struct {
	Type           uint32
	SeqID          uint32
	StateID        StateID
	Offset, Length uint64
}

func (*LockU) code() uint32 { return 14 }
func (o *LockU) encode(e *xdrEnc) {
	e.U32(o.Type)
	e.U32(o.SeqID)
	e.stateID(o.StateID)
	e.U64(o.Offset)
	e.U64(o.Length)
}
func (o *LockU) decode(d *xdrDec) { o.StateID = d.stateID() }

// OpenFile opens name in directory dir (made with mode 0644 if create and
// missing) for owner with the share access and deny given, and returns its
// handle and open stateid. NFSv4.1 only: it asks for no delegation and needs
// no OPEN_CONFIRM.
func (c *Client) OpenFile(ctx context.Context, dir []byte, name string, access, deny uint32, owner []byte, create bool) ([]byte, StateID, error) {
	op := &Open{Access: access | ShareWantNoDeleg, Deny: deny, ClientID: c.ClientID(), Owner: owner,
		Create: create, Mode: 0o644, Claim: ClaimNull, Name: name}
	g := &GetFH{}
	if err := c.Run(ctx, &PutFH{FH: dir}, op, g); err != nil {
		return nil, StateID{}, err
	}
	return g.FH, op.StateID, nil
}

// ReclaimOpen reclaims, after a server restart, owner's open of file fh with
// the share access and deny it had (OPEN, CLAIM_PREVIOUS) and returns the new
// open stateid. NFSv4.1 only.
func (c *Client) ReclaimOpen(ctx context.Context, fh []byte, access, deny uint32, owner []byte) (StateID, error) {
	op := &Open{Access: access | ShareWantNoDeleg, Deny: deny, ClientID: c.ClientID(), Owner: owner, Claim: ClaimPrevious}
	if err := c.Run(ctx, &PutFH{FH: fh}, op); err != nil {
		return StateID{}, err
	}
	return op.StateID, nil
}
