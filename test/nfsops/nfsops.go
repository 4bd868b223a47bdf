// Package nfsops lists, as raw calls, every NFSv3 procedure and every NFSv4.0
// and NFSv4.1 operation (and the NFSv4.2 ones, sent in an NFSv4.1 COMPOUND)
// that takes a file handle, each aimed at one object, for the attack suites
// (test/ganeshatest against a bare Ganesha, test/e2e through Basin). Aimed at a
// FIFO, a socket or a device, every call must come back promptly, and those that
// would open, read, write, flush, lock or lay out the object's data must be
// refused. Only test code imports it.
package nfsops

import (
	"context"
	"fmt"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/oncrpc"
	"github.com/basin-nas/basin/test/nfsraw"
)

// Target is the object the calls aim at.
type Target struct {
	// Dir is the handle of the directory holding the object, Name its name
	// there (for calls by name: CREATE over it, OPEN by name, LINK beside it).
	Dir  []byte
	Name string
	// FH is the object's own handle (NFSv3 and NFSv4 handles differ in padding:
	// give each list its own).
	FH []byte
}

// V3Call is one NFSv3 call.
type V3Call struct {
	Name string
	// Data is set for calls that would open, read, write or flush the object's
	// data: aimed at a special file they must be refused.
	Data bool
	Proc uint32
	Args []byte
}

// Run sends the call and returns the NFSv3 status (err only when the call
// itself failed: transport, RPC, or ctx ending first).
func (c V3Call) Run(ctx context.Context, cl *nfs3.Client) (nfs3.Status, error) {
	st, _, err := cl.Raw(ctx, c.Proc, c.Args)
	return st, err
}

// NFSv3 procedures (RFC 1813).
const (
	v3GetAttr = iota + 1
	v3SetAttr
	v3Lookup
	v3Access
	v3Readlink
	v3Read
	v3Write
	v3Create
	v3Mkdir
	v3Symlink
	v3Mknod
	v3Remove
	v3Rmdir
	v3Rename
	v3Link
	v3ReadDir
	v3ReadDirPlus
	v3FSStat
	v3FSInfo
	v3PathConf
	v3Commit
)

type enc struct{ oncrpc.Encoder }

func (e *enc) sattr(mode *uint32, size *uint64, times uint32) {
	if mode != nil {
		e.U32(1)
		e.U32(*mode)
	} else {
		e.U32(0)
	}
	e.U32(0) // uid
	e.U32(0) // gid
	if size != nil {
		e.U32(1)
		e.U64(*size)
	} else {
		e.U32(0)
	}
	e.U32(times) // atime: 0 don't change, 1 server time
	e.U32(times) // mtime
}

func build(f func(e *enc)) []byte {
	var e enc
	f(&e)
	return e.Bytes()
}

// V3 lists every NFSv3 procedure that takes a handle, aimed at t: the object as
// itself (GETATTR … COMMIT), as a directory (LOOKUP, CREATE … READDIRPLUS in it)
// and by its name (CREATE over it in each mode, LINK to it).
func V3(t Target) []V3Call {
	fh, dir, name := t.FH, t.Dir, t.Name
	mode, zero := uint32(0o644), uint64(0)
	on := func(f func(e *enc)) []byte {
		return build(func(e *enc) { e.Opaque(fh); f(e) })
	}
	in := func(f func(e *enc)) []byte { // diropargs naming "x" in the object
		return build(func(e *enc) { e.Opaque(fh); e.Str("x"); f(e) })
	}
	none := func(*enc) {}
	return []V3Call{
		{"GETATTR", false, v3GetAttr, on(none)},
		{"SETATTR mode", false, v3SetAttr, on(func(e *enc) { e.sattr(&mode, nil, 0); e.U32(0) })},
		{"SETATTR times", false, v3SetAttr, on(func(e *enc) { e.sattr(nil, nil, 1); e.U32(0) })},
		{"SETATTR size 0", true, v3SetAttr, on(func(e *enc) { e.sattr(nil, &zero, 0); e.U32(0) })},
		{"LOOKUP in it", false, v3Lookup, in(none)},
		{"ACCESS", false, v3Access, on(func(e *enc) { e.U32(0x3f) })},
		{"READLINK", false, v3Readlink, on(none)},
		{"READ", true, v3Read, on(func(e *enc) { e.U64(0); e.U32(64) })},
		{"WRITE UNSTABLE", true, v3Write, on(func(e *enc) { e.U64(0); e.U32(5); e.U32(0); e.Str("PWNED") })},
		{"WRITE FILE_SYNC", true, v3Write, on(func(e *enc) { e.U64(0); e.U32(5); e.U32(2); e.Str("PWNED") })},
		{"CREATE in it", false, v3Create, in(func(e *enc) { e.U32(0); e.sattr(&mode, nil, 0) })},
		{"MKDIR in it", false, v3Mkdir, in(func(e *enc) { e.sattr(&mode, nil, 0) })},
		{"SYMLINK in it", false, v3Symlink, in(func(e *enc) { e.sattr(nil, nil, 0); e.Str("target") })},
		{"MKNOD in it", false, v3Mknod, in(func(e *enc) { e.U32(uint32(nfs3.TypeFIFO)); e.sattr(&mode, nil, 0) })},
		{"REMOVE in it", false, v3Remove, in(none)},
		{"RMDIR in it", false, v3Rmdir, in(none)},
		{"RENAME in it", false, v3Rename, in(func(e *enc) { e.Opaque(fh); e.Str("y") })},
		{"LINK into it", false, v3Link, build(func(e *enc) { e.Opaque(fh); e.Opaque(fh); e.Str("x") })},
		{"READDIR", false, v3ReadDir, on(func(e *enc) { e.U64(0); e.Fixed(make([]byte, 8)); e.U32(4096) })},
		{"READDIRPLUS", false, v3ReadDirPlus, on(func(e *enc) { e.U64(0); e.Fixed(make([]byte, 8)); e.U32(4096); e.U32(8192) })},
		{"FSSTAT", false, v3FSStat, on(none)},
		{"FSINFO", false, v3FSInfo, on(none)},
		{"PATHCONF", false, v3PathConf, on(none)},
		{"COMMIT", true, v3Commit, on(func(e *enc) { e.U64(0); e.U32(0) })},
		{"COMMIT of a range", true, v3Commit, on(func(e *enc) { e.U64(4096); e.U32(4096) })},
		// By name: CREATE over the object opens it (UNCHECKED) or finds it.
		{"CREATE UNCHECKED over it", true, v3Create, build(func(e *enc) { e.Opaque(dir); e.Str(name); e.U32(0); e.sattr(nil, nil, 0) })},
		{"CREATE UNCHECKED size 0 over it", true, v3Create, build(func(e *enc) { e.Opaque(dir); e.Str(name); e.U32(0); e.sattr(nil, &zero, 0) })},
		{"CREATE GUARDED over it", true, v3Create, build(func(e *enc) { e.Opaque(dir); e.Str(name); e.U32(1); e.sattr(nil, nil, 0) })},
		{"CREATE EXCLUSIVE over it", true, v3Create, build(func(e *enc) { e.Opaque(dir); e.Str(name); e.U32(2); e.Fixed(make([]byte, 8)) })},
		{"LINK to it", false, v3Link, build(func(e *enc) { e.Opaque(fh); e.Opaque(dir); e.Str(name + "-link3") })},
	}
}

// V3Device is MKNOD of a character (chr) or block device name in dir.
func V3Device(dir []byte, name string, chr bool) V3Call {
	typ := nfs3.TypeBlk
	if chr {
		typ = nfs3.TypeChr
	}
	mode := uint32(0o666)
	return V3Call{Name: fmt.Sprintf("MKNOD %s", map[bool]string{true: "NF3CHR", false: "NF3BLK"}[chr]), Proc: v3Mknod,
		Args: build(func(e *enc) {
			e.Opaque(dir)
			e.Str(name)
			e.U32(uint32(typ))
			e.sattr(&mode, nil, 0)
			e.U32(1) // major 1, minor 3: /dev/null's numbers
			e.U32(3)
		})}
}

// V4Call is one NFSv4 COMPOUND (without the NFSv4.1 SEQUENCE, which the client
// adds).
type V4Call struct {
	Name string
	// Data: as V3Call's.
	Data bool
	Ops  []nfsraw.Op
}

// NFSv4 operation codes (RFC 7530, RFC 8881, RFC 7862, RFC 8276).
const (
	opAccess          = 3
	opClose           = 4
	opCommit          = 5
	opCreate          = 6
	opDelegPurge      = 7
	opDelegReturn     = 8
	opLink            = 11
	opLock            = 12
	opLockT           = 13
	opLockU           = 14
	opNVerify         = 17
	opOpen            = 18
	opOpenAttr        = 19
	opOpenConfirm     = 20
	opOpenDowngrade   = 21
	opRead            = 25
	opReadlink        = 27
	opSecInfo         = 33
	opSetAttr         = 34
	opVerify          = 37
	opWrite           = 38
	opFreeStateID     = 45
	opGetDirDeleg     = 46
	opLayoutCommit    = 49
	opLayoutGet       = 50
	opLayoutReturn    = 51
	opSecInfoNoName   = 52
	opTestStateID     = 55
	opWantDelegation  = 56
	opAllocate        = 59
	opCopy            = 60
	opCopyNotify      = 61
	opDeallocate      = 62
	opIOAdvise        = 63
	opReadPlus        = 68
	opSeek            = 69
	opWriteSame       = 70
	opClone           = 71
	opGetXattr        = 72
	opSetXattr        = 73
	opListXattrs      = 74
	opRemoveXattr     = 75
	nf4Dir            = 2
	nf4Blk            = 3
	nf4Chr            = 4
	shareAccessRead   = 1
	shareAccessWrite  = 2
	shareAccessBoth   = 3
	claimNull         = 0
	claimFH           = 4
	layoutNFSv41Files = 1
	iomodeRW          = 2
)

func raw(code uint32, f func(e *enc)) *nfsraw.Raw {
	return &nfsraw.Raw{Code: code, Args: build(f)}
}

func (e *enc) stateid(s [16]byte) { e.Fixed(s[:]) }

// fattr4 with the type attribute only (for VERIFY and NVERIFY): NF4REG.
func (e *enc) typeAttr() {
	e.U32(1)
	e.U32(1 << 1)
	e.U32(4)
	e.U32(1)
}

// emptyAttrs is a fattr4 setting nothing.
func (e *enc) emptyAttrs() { e.U32(0); e.U32(0) }

// V4 lists every NFSv4 operation that takes the current filehandle, aimed at
// t, with clientID in its open and lock owners (nfsraw.Client.ClientID: 0 with
// NFSv4.0, whose OPEN and LOCK then fail on the client ID). The NFSv4.1 and
// NFSv4.2 operations are in the list whatever the minor version: a server
// refuses those its minor version lacks.
func V4(t Target, clientID uint64) []V4Call {
	put := func() nfsraw.Op { return &nfsraw.PutFH{FH: t.FH} }
	dir := func() nfsraw.Op { return &nfsraw.PutFH{FH: t.Dir} }
	on := func(code uint32, f func(e *enc)) []nfsraw.Op { return []nfsraw.Op{put(), raw(code, f)} }
	none := func(*enc) {}
	owner := func(e *enc, who string) { e.U64(clientID); e.Str(who) }
	anon, bypass := nfsraw.AnonStateID, nfsraw.BypassStateID
	open := func(access uint32, claim func(e *enc)) func(e *enc) {
		return func(e *enc) {
			e.U32(0) // seqid
			e.U32(access)
			e.U32(0) // deny none
			owner(e, "nfsops-open")
			e.U32(0) // OPEN4_NOCREATE
			claim(e)
		}
	}
	calls := []V4Call{
		{"ACCESS", false, on(opAccess, func(e *enc) { e.U32(0x3f) })},
		{"GETATTR", false, []nfsraw.Op{put(), &nfsraw.GetAttr{}}},
		{"GETFH", false, []nfsraw.Op{put(), &nfsraw.GetFH{}}},
		{"VERIFY", false, on(opVerify, func(e *enc) { e.typeAttr() })},
		{"NVERIFY", false, on(opNVerify, func(e *enc) { e.typeAttr() })},
		{"SETATTR mode", false, on(opSetAttr, func(e *enc) {
			e.stateid(anon)
			e.U32(2)
			e.U32(0)
			e.U32(1 << 1)
			e.U32(4)
			e.U32(0o644)
		})},
		{"SETATTR size 0 (anonymous stateid)", true, on(opSetAttr, func(e *enc) {
			e.stateid(anon)
			e.U32(1)
			e.U32(1 << 4)
			e.U32(8)
			e.U64(0)
		})},
		{"READLINK", false, on(opReadlink, none)},
		{"LOOKUP in it", false, []nfsraw.Op{put(), &nfsraw.Lookup{Name: "x"}}},
		{"LOOKUPP", false, []nfsraw.Op{put(), &nfsraw.LookupP{}}},
		{"READDIR", false, []nfsraw.Op{put(), &nfsraw.ReadDir{}}},
		{"CREATE in it", false, on(opCreate, func(e *enc) { e.U32(nf4Dir); e.Str("x"); e.emptyAttrs() })},
		{"REMOVE in it", false, []nfsraw.Op{put(), &nfsraw.Remove{Name: "x"}}},
		{"RENAME in it", false, []nfsraw.Op{put(), &nfsraw.SaveFH{}, put(), &nfsraw.Rename{Old: "x", New: "y"}}},
		{"LINK into it", false, []nfsraw.Op{put(), &nfsraw.SaveFH{}, put(), &nfsraw.Link{Name: "x"}}},
		{"LINK to it", false, []nfsraw.Op{put(), &nfsraw.SaveFH{}, dir(), &nfsraw.Link{Name: t.Name + "-link4"}}},
		{"SECINFO in it", false, on(opSecInfo, func(e *enc) { e.Str("x") })},
		{"OPENATTR", false, on(opOpenAttr, func(e *enc) { e.U32(0) })},
		{"READ (anonymous stateid)", true, on(opRead, func(e *enc) { e.stateid(anon); e.U64(0); e.U32(64) })},
		{"READ (bypass stateid)", true, on(opRead, func(e *enc) { e.stateid(bypass); e.U64(0); e.U32(64) })},
		{"WRITE (anonymous stateid)", true, on(opWrite, func(e *enc) { e.stateid(anon); e.U64(0); e.U32(2); e.Str("PWNED") })},
		{"WRITE UNSTABLE (bypass stateid)", true, on(opWrite, func(e *enc) { e.stateid(bypass); e.U64(0); e.U32(0); e.Str("PWNED") })},
		{"COMMIT", true, on(opCommit, func(e *enc) { e.U64(0); e.U32(0) })},
		{"OPEN by name, read-write", true, []nfsraw.Op{dir(), raw(opOpen, open(shareAccessBoth, func(e *enc) { e.U32(claimNull); e.Str(t.Name) }))}},
		{"OPEN by name, write only", true, []nfsraw.Op{dir(), raw(opOpen, open(shareAccessWrite, func(e *enc) { e.U32(claimNull); e.Str(t.Name) }))}},
		{"OPEN by name, read only", true, []nfsraw.Op{dir(), raw(opOpen, open(shareAccessRead, func(e *enc) { e.U32(claimNull); e.Str(t.Name) }))}},
		{"OPEN CREATE UNCHECKED over it", true, []nfsraw.Op{dir(), raw(opOpen, func(e *enc) {
			e.U32(0)
			e.U32(shareAccessWrite)
			e.U32(0)
			owner(e, "nfsops-open")
			e.U32(1) // OPEN4_CREATE
			e.U32(0) // UNCHECKED4
			e.emptyAttrs()
			e.U32(claimNull)
			e.Str(t.Name)
		})}},
		{"OPEN by handle (CLAIM_FH), read-write", true, on(opOpen, open(shareAccessBoth, func(e *enc) { e.U32(claimFH) }))},
		{"OPEN by handle (CLAIM_FH), write only", true, on(opOpen, open(shareAccessWrite, func(e *enc) { e.U32(claimFH) }))},
		{"OPEN_CONFIRM", true, on(opOpenConfirm, func(e *enc) { e.stateid(anon); e.U32(1) })},
		{"OPEN_DOWNGRADE", true, on(opOpenDowngrade, func(e *enc) { e.stateid(anon); e.U32(1); e.U32(shareAccessRead); e.U32(0) })},
		{"CLOSE", true, on(opClose, func(e *enc) { e.U32(0); e.stateid(anon) })},
		{"LOCK (open stateid: anonymous)", true, on(opLock, func(e *enc) {
			e.U32(2) // WRITE_LT
			e.U32(0) // reclaim
			e.U64(0)
			e.U64(^uint64(0))
			e.U32(1) // new lock owner
			e.U32(0)
			e.stateid(anon)
			e.U32(0)
			owner(e, "nfsops-lock")
		})},
		{"LOCKT", false, on(opLockT, func(e *enc) { e.U32(2); e.U64(0); e.U64(^uint64(0)); owner(e, "nfsops-lock") })},
		{"LOCKU", true, on(opLockU, func(e *enc) { e.U32(2); e.U32(0); e.stateid(anon); e.U64(0); e.U64(^uint64(0)) })},
		{"DELEGRETURN", true, on(opDelegReturn, func(e *enc) { e.stateid(anon) })},
		{"DELEGPURGE", false, on(opDelegPurge, func(e *enc) { e.U64(clientID) })},
		// NFSv4.1.
		{"FREE_STATEID", false, on(opFreeStateID, func(e *enc) { e.stateid(anon) })},
		{"TEST_STATEID", false, on(opTestStateID, func(e *enc) { e.U32(1); e.stateid(anon) })},
		{"SECINFO_NO_NAME", false, on(opSecInfoNoName, func(e *enc) { e.U32(0) })},
		{"GET_DIR_DELEGATION", true, on(opGetDirDeleg, func(e *enc) {
			e.U32(0) // signal_deleg_avail
			e.U32(0) // notification types: an empty bitmap
			e.U64(0) // child attribute delay: seconds, nanoseconds
			e.U32(0)
			e.U64(0) // directory attribute delay
			e.U32(0)
			e.U32(0) // child attributes: an empty bitmap
			e.U32(0) // directory attributes: an empty bitmap
		})},
		{"WANT_DELEGATION", true, on(opWantDelegation, func(e *enc) { e.U32(shareAccessBoth); e.U32(claimFH) })},
		{"LAYOUTGET", true, on(opLayoutGet, func(e *enc) {
			e.U32(0) // signal_layout_avail
			e.U32(layoutNFSv41Files)
			e.U32(iomodeRW)
			e.U64(0)
			e.U64(^uint64(0))
			e.U64(0)
			e.stateid(anon)
			e.U32(4096)
		})},
		{"LAYOUTCOMMIT", true, on(opLayoutCommit, func(e *enc) {
			e.U64(0)
			e.U64(4096)
			e.U32(0) // reclaim
			e.stateid(anon)
			e.U32(0) // no new offset
			e.U32(0) // no new time
			e.U32(layoutNFSv41Files)
			e.Opaque(nil)
		})},
		{"LAYOUTRETURN", true, on(opLayoutReturn, func(e *enc) {
			e.U32(0) // reclaim
			e.U32(layoutNFSv41Files)
			e.U32(iomodeRW)
			e.U32(1) // LAYOUTRETURN4_FILE
			e.U64(0)
			e.U64(^uint64(0))
			e.stateid(anon)
			e.Opaque(nil)
		})},
		// NFSv4.2 (refused in an NFSv4.1 COMPOUND; here so that a server that
		// offers NFSv4.2 is checked too).
		{"ALLOCATE", true, on(opAllocate, func(e *enc) { e.stateid(anon); e.U64(0); e.U64(4096) })},
		{"DEALLOCATE", true, on(opDeallocate, func(e *enc) { e.stateid(anon); e.U64(0); e.U64(4096) })},
		{"SEEK", true, on(opSeek, func(e *enc) { e.stateid(anon); e.U64(0); e.U32(0) })},
		{"READ_PLUS", true, on(opReadPlus, func(e *enc) { e.stateid(anon); e.U64(0); e.U32(64) })},
		{"IO_ADVISE", true, on(opIOAdvise, func(e *enc) { e.stateid(anon); e.U64(0); e.U64(4096); e.U32(0) })},
		{"WRITE_SAME", true, on(opWriteSame, func(e *enc) {
			e.stateid(anon)
			e.U32(2)
			e.U64(0)  // offset
			e.U64(64) // block size
			e.U64(1)  // block count
			e.U64(0)  // reloff block num
			e.U32(0)  // block num
			e.U64(0)  // reloff pattern
			e.Str("PWNED")
		})},
		{"COPY from it", true, []nfsraw.Op{put(), &nfsraw.SaveFH{}, put(), raw(opCopy, func(e *enc) {
			e.stateid(anon)
			e.stateid(anon)
			e.U64(0)
			e.U64(0)
			e.U64(64)
			e.U32(0) // consecutive
			e.U32(1) // synchronous
			e.U32(0) // no source servers
		})}},
		{"COPY_NOTIFY", true, on(opCopyNotify, func(e *enc) { e.stateid(anon); e.U32(1); e.Str("127.0.0.1") })},
		{"CLONE", true, []nfsraw.Op{put(), &nfsraw.SaveFH{}, put(), raw(opClone, func(e *enc) {
			e.stateid(anon)
			e.stateid(anon)
			e.U64(0)
			e.U64(0)
			e.U64(64)
		})}},
		{"GETXATTR", false, on(opGetXattr, func(e *enc) { e.Str("user.x") })},
		{"SETXATTR", false, on(opSetXattr, func(e *enc) { e.U32(0); e.Str("user.x"); e.Str("v") })},
		{"LISTXATTRS", false, on(opListXattrs, func(e *enc) { e.U64(0); e.U32(4096) })},
		{"REMOVEXATTR", false, on(opRemoveXattr, func(e *enc) { e.Str("user.x") })},
	}
	return calls
}

// V4Device is CREATE of a character (chr) or block device name in dir.
func V4Device(dir []byte, name string, chr bool) V4Call {
	typ, what := uint32(nf4Blk), "NF4BLK"
	if chr {
		typ, what = nf4Chr, "NF4CHR"
	}
	return V4Call{Name: "CREATE " + what, Ops: []nfsraw.Op{&nfsraw.PutFH{FH: dir}, raw(opCreate, func(e *enc) {
		e.U32(typ)
		e.U32(1) // specdata: /dev/null's numbers
		e.U32(3)
		e.Str(name)
		e.emptyAttrs()
	})}}
}
