package nfsraw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

func xdr(f func(e *xdrEnc)) []byte {
	var e xdrEnc
	f(&e)
	return e.Bytes()
}

func encoded(op Op) []byte {
	var e xdrEnc
	op.encode(&e)
	return e.Bytes()
}

func sid(seq uint32, b byte) StateID {
	var s StateID
	s[0], s[1], s[2], s[3] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	for i := 4; i < 16; i++ {
		s[i] = b
	}
	return s
}

// The arguments go out as RFC 8881's XDR lays them: OPEN4args, LOCK4args with
// either locker, LOCKT4args, LOCKU4args, CLOSE4args, RECLAIM_COMPLETE4args,
// and READ/WRITE with the stateid given.
func TestEncodeStateOps(t *testing.T) {
	owner := []byte("open-owner-1")
	s1 := sid(1, 0xab)
	cases := []struct {
		name string
		op   Op
		code uint32
		want []byte
	}{
		{"OPEN CLAIM_NULL create", &Open{Access: ShareAccessBoth | ShareWantNoDeleg, Deny: ShareDenyWrite, ClientID: 0x1122, Owner: owner,
			Create: true, Mode: 0o640, Claim: ClaimNull, Name: "f"}, 18, xdr(func(e *xdrEnc) {
			e.U32(0)        // seqid
			e.U32(0x0403)   // access both, want no delegation
			e.U32(2)        // deny write
			e.U64(0x1122)   // owner: client ID
			e.Opaque(owner) // owner
			e.U32(1)        // OPEN4_CREATE
			e.U32(0)        // UNCHECKED4
			e.bitmap([]uint32{0, 1 << 1})
			e.Opaque(xdr(func(v *xdrEnc) { v.U32(0o640) }))
			e.U32(0) // CLAIM_NULL
			e.Str("f")
		})},
		{"OPEN CLAIM_PREVIOUS", &Open{Access: ShareAccessWrite, Deny: ShareDenyNone, Owner: owner, Claim: ClaimPrevious}, 18, xdr(func(e *xdrEnc) {
			e.U32(0)
			e.U32(2)
			e.U32(0)
			e.U64(0)
			e.Opaque(owner)
			e.U32(0) // OPEN4_NOCREATE
			e.U32(1) // CLAIM_PREVIOUS
			e.U32(0) // delegate_type: none
		})},
		{"OPEN CLAIM_FH", &Open{Access: ShareAccessRead, Owner: owner, Claim: ClaimFH}, 18, xdr(func(e *xdrEnc) {
			e.U32(0)
			e.U32(1)
			e.U32(0)
			e.U64(0)
			e.Opaque(owner)
			e.U32(0)
			e.U32(4)
		})},
		{"LOCK new owner, reclaim", &Lock{Type: WriteLock, Reclaim: true, Offset: 100, Length: 50, NewOwner: true, OpenSeqID: 3,
			OpenStateID: s1, LockSeqID: 4, Owner: LockOwner{ClientID: 7, Owner: []byte("lo")}}, 12, xdr(func(e *xdrEnc) {
			e.U32(2)
			e.U32(1)
			e.U64(100)
			e.U64(50)
			e.U32(1) // new_lock_owner
			e.U32(3)
			e.Fixed(s1[:])
			e.U32(4)
			e.U64(7)
			e.Str("lo")
		})},
		{"LOCK existing owner", &Lock{Type: ReadLock, Offset: 0, Length: LockAll, LockStateID: s1, LockSeqID: 9}, 12, xdr(func(e *xdrEnc) {
			e.U32(1)
			e.U32(0)
			e.U64(0)
			e.U64(^uint64(0))
			e.U32(0) // existing lock owner
			e.Fixed(s1[:])
			e.U32(9)
		})},
		{"LOCKT", &LockT{Type: WriteLock, Offset: 10, Length: 20, Owner: LockOwner{ClientID: 5, Owner: []byte("other")}}, 13, xdr(func(e *xdrEnc) {
			e.U32(2)
			e.U64(10)
			e.U64(20)
			e.U64(5)
			e.Str("other")
		})},
		{"LOCKU", &LockU{Type: WriteLock, SeqID: 2, StateID: s1, Offset: 10, Length: 20}, 14, xdr(func(e *xdrEnc) {
			e.U32(2)
			e.U32(2)
			e.Fixed(s1[:])
			e.U64(10)
			e.U64(20)
		})},
		{"CLOSE", &Close{SeqID: 1, StateID: s1}, 4, xdr(func(e *xdrEnc) { e.U32(1); e.Fixed(s1[:]) })},
		{"OPEN_CONFIRM", &OpenConfirm{StateID: s1, SeqID: 6}, 20, xdr(func(e *xdrEnc) { e.Fixed(s1[:]); e.U32(6) })},
		{"RECLAIM_COMPLETE", &ReclaimComplete{}, 58, xdr(func(e *xdrEnc) { e.U32(0) })},
		{"RECLAIM_COMPLETE one fs", &ReclaimComplete{OneFS: true}, 58, xdr(func(e *xdrEnc) { e.U32(1) })},
		{"READ with a stateid", &Read{StateID: s1, Offset: 8, Count: 16}, 25, xdr(func(e *xdrEnc) { e.Fixed(s1[:]); e.U64(8); e.U32(16) })},
		{"WRITE anonymous", &Write{Offset: 8, Data: []byte("abc")}, 38, xdr(func(e *xdrEnc) {
			e.Fixed(make([]byte, 16))
			e.U64(8)
			e.U32(2) // FILE_SYNC4
			e.Str("abc")
		})},
	}
	for _, c := range cases {
		if c.op.code() != c.code {
			t.Errorf("%s: op code %d, want %d", c.name, c.op.code(), c.code)
		}
		if got := encoded(c.op); !bytes.Equal(got, c.want) {
			t.Errorf("%s:\n got %x\nwant %x", c.name, got, c.want)
		}
	}
	if s := sid(7, 1); s.Seq() != 7 || s.String() != "7:010101010101010101010101" {
		t.Errorf("stateid %v", s)
	}
}

// reply builds a COMPOUND reply: status, tag, then each op's code, status and
// results.
func reply(st Status, results ...[]byte) []byte {
	return xdr(func(e *xdrEnc) {
		e.U32(uint32(st))
		e.Str("t")
		e.U32(uint32(len(results)))
		for _, r := range results {
			e.Fixed(r)
		}
	})
}

func result(code uint32, st Status, body func(e *xdrEnc)) []byte {
	return xdr(func(e *xdrEnc) {
		e.U32(code)
		e.U32(uint32(st))
		if body != nil {
			body(e)
		}
	})
}

func openResult(s StateID, deleg func(e *xdrEnc)) func(e *xdrEnc) {
	return func(e *xdrEnc) {
		e.Fixed(s[:])
		e.U32(1) // cinfo: atomic
		e.U64(1) // before
		e.U64(2) // after
		e.U32(OpenResultLockTypePosix)
		e.bitmap([]uint32{0, 0})
		deleg(e)
	}
}

// OPEN's results are read whatever delegation the server answers with, and a
// denied LOCK or LOCKT gives the lock in the way.
func TestDecodeStateResults(t *testing.T) {
	s1, s2 := sid(1, 0x11), sid(2, 0x22)
	delegs := map[string]struct {
		enc  func(e *xdrEnc)
		kind uint32
	}{
		"none": {func(e *xdrEnc) { e.U32(DelegNone) }, DelegNone},
		"read": {func(e *xdrEnc) {
			e.U32(DelegRead)
			e.Fixed(s2[:])
			e.U32(0)
			e.U32(0)
			e.U32(0)
			e.U32(1)
			e.Str("EVERYONE@")
		}, DelegRead},
		"write": {func(e *xdrEnc) {
			e.U32(DelegWrite)
			e.Fixed(s2[:])
			e.U32(0)
			e.U32(1) // NFS_LIMIT_SIZE
			e.U64(1 << 30)
			e.U32(0)
			e.U32(0)
			e.U32(1)
			e.Str("EVERYONE@")
		}, DelegWrite},
		"none_ext contention": {func(e *xdrEnc) { e.U32(DelegNoneExt); e.U32(1); e.U32(0) }, DelegNoneExt},
		"none_ext not wanted": {func(e *xdrEnc) { e.U32(DelegNoneExt); e.U32(0) }, DelegNoneExt},
	}
	for name, dl := range delegs {
		op, g := &Open{}, &GetFH{}
		res := reply(OK, result(22, OK, nil), result(18, OK, openResult(s1, dl.enc)), result(10, OK, func(e *xdrEnc) { e.Opaque([]byte{1, 2, 3}) }))
		st, failed, err := decodeCompound(res, []Op{&PutFH{}, op, g})
		if err != nil || st != OK || failed != -1 {
			t.Fatalf("%s: %v %d %v", name, st, failed, err)
		}
		if op.StateID != s1 || op.Deleg != dl.kind || op.RFlags != OpenResultLockTypePosix || !bytes.Equal(g.FH, []byte{1, 2, 3}) {
			t.Errorf("%s: %+v fh %x", name, op, g.FH)
		}
		if (dl.kind == DelegRead || dl.kind == DelegWrite) && op.DelegStateID != s2 {
			t.Errorf("%s: delegation stateid %v", name, op.DelegStateID)
		}
	}

	denied := func(e *xdrEnc) {
		e.U64(100)
		e.U64(50)
		e.U32(WriteLock)
		e.U64(0xc1)
		e.Str("holder")
	}
	for _, op := range []Op{&Lock{}, &LockT{}} {
		res := reply(ErrDenied, result(22, OK, nil), result(op.code(), ErrDenied, denied))
		st, failed, err := decodeCompound(res, []Op{&PutFH{}, op})
		if err != nil || st != ErrDenied || failed != 1 {
			t.Fatalf("op %d: %v %d %v", op.code(), st, failed, err)
		}
		var d *LockDenied
		switch op := op.(type) {
		case *Lock:
			d = op.Denied
		case *LockT:
			d = op.Denied
		}
		if d == nil || d.Offset != 100 || d.Length != 50 || d.Type != WriteLock || d.Owner.ClientID != 0xc1 || string(d.Owner.Owner) != "holder" {
			t.Errorf("op %d: denied %+v", op.code(), d)
		}
	}
	// Other failures carry nothing.
	lk := &Lock{}
	if st, _, err := decodeCompound(reply(ErrGrace, result(12, ErrGrace, nil)), []Op{lk}); err != nil || st != ErrGrace || lk.Denied != nil {
		t.Errorf("grace: %v %v %+v", st, err, lk)
	}
	lk = &Lock{}
	if st, _, err := decodeCompound(reply(OK, result(12, OK, func(e *xdrEnc) { e.Fixed(s2[:]) })), []Op{lk}); err != nil || st != OK || lk.StateID != s2 {
		t.Errorf("lock: %v %v %+v", st, err, lk)
	}
	lu := &LockU{}
	if st, _, err := decodeCompound(reply(OK, result(14, OK, func(e *xdrEnc) { e.Fixed(s1[:]) })), []Op{lu}); err != nil || st != OK || lu.StateID != s1 {
		t.Errorf("locku: %v %v %+v", st, err, lu)
	}
}

// EXCHANGE_ID's flags tell a client whether the server still knew it; a
// SEQUENCE's status flags are kept.
func TestDecodeSessionResults(t *testing.T) {
	for _, confirmed := range []bool{false, true} {
		flags := uint32(0x00010000)
		if confirmed {
			flags |= exchgidConfirmedR
		}
		ex := &exchangeID{}
		res := reply(OK, result(42, OK, func(e *xdrEnc) {
			e.U64(0xfeed)
			e.U32(5)
			e.U32(flags)
			e.U32(0)       // SP4_NONE
			e.U64(0)       // server owner minor id
			e.Str("major") // major id
			e.Str("scope") // scope
			e.U32(0)       // no implementation id
		}))
		if st, _, err := decodeCompound(res, []Op{ex}); err != nil || st != OK || ex.clientID != 0xfeed || ex.seq != 5 || (ex.flags&exchgidConfirmedR != 0) != confirmed {
			t.Errorf("confirmed=%v: %v %v %+v", confirmed, st, err, ex)
		}
	}
	seq := &sequence{sess: &session{}}
	res := reply(OK, result(53, OK, func(e *xdrEnc) {
		e.Fixed(make([]byte, 16))
		e.U32(1)
		e.U32(0)
		e.U32(0)
		e.U32(0)
		e.U32(0x100) // SEQ4_STATUS_RESTART_RECLAIM_NEEDED
	}))
	if st, _, err := decodeCompound(res, []Op{seq}); err != nil || st != OK || seq.status != 0x100 {
		t.Errorf("sequence: %v %v %+v", st, err, seq)
	}
}

// What says the session or client ID is gone (a server restart) and what does
// not.
func TestNeedsReestablish(t *testing.T) {
	yes := []error{ErrBadSession, ErrDeadSession, ErrStaleClientID, ErrExpired, ErrConnNotBound,
		fmt.Errorf("rpc: receive: %w", io.EOF), errNotConnected, errors.New("rpc: send: connection reset by peer")}
	no := []error{nil, OK, ErrGrace, ErrNoGrace, ErrDenied, ErrStale, context.Canceled,
		fmt.Errorf("call: %w", context.DeadlineExceeded), &RPCError{}}
	for _, err := range yes {
		if !NeedsReestablish(err) {
			t.Errorf("%v: not taken for a lost session", err)
		}
	}
	for _, err := range no {
		if NeedsReestablish(err) {
			t.Errorf("%v: taken for a lost session", err)
		}
	}
	// A client without a connection says so instead of panicking.
	var c Client
	if err := c.Run(context.Background(), &PutRootFH{}); !errors.Is(err, errNotConnected) {
		t.Errorf("unconnected client: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close unconnected: %v", err)
	}
}
