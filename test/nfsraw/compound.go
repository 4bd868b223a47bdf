package nfsraw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// Status is an nfsstat4.
type Status uint32

// Statuses the tests look for.
const (
	OK            Status = 0
	ErrPerm       Status = 1
	ErrNoEnt      Status = 2
	ErrIO         Status = 5
	ErrAccess     Status = 13
	ErrExist      Status = 17
	ErrXDev       Status = 18
	ErrNotDir     Status = 20
	ErrIsDir      Status = 21
	ErrInval      Status = 22
	ErrROFS       Status = 30
	ErrStale      Status = 70
	ErrBadHandle  Status = 10001
	ErrNotSupp    Status = 10004
	ErrServerFail Status = 10006
	ErrDelay      Status = 10008
	ErrBadType    Status = 10007
	ErrNoFileHdl  Status = 10020
	ErrWrongSec   Status = 10016
	ErrBadChar    Status = 10040
	ErrBadName    Status = 10041
	ErrSymlink    Status = 10029
	ErrBadStateID Status = 10025
	ErrOpenMode   Status = 10038
	ErrOpIllegal  Status = 10044

	// State and recovery (RFC 8881 §15.1).
	ErrDenied          Status = 10010
	ErrExpired         Status = 10011
	ErrLocked          Status = 10012
	ErrGrace           Status = 10013
	ErrShareDenied     Status = 10015
	ErrStaleClientID   Status = 10022
	ErrStaleStateID    Status = 10023
	ErrOldStateID      Status = 10024
	ErrBadSeqID        Status = 10026
	ErrLockRange       Status = 10028
	ErrNoGrace         Status = 10033
	ErrReclaimBad      Status = 10034
	ErrReclaimConflict Status = 10035
	ErrBadSession      Status = 10052
	ErrCompleteAlready Status = 10054
	ErrConnNotBound    Status = 10055
	ErrSeqMisordered   Status = 10063
	ErrDeadSession     Status = 10078
)

var statusNames = map[Status]string{
	0: "NFS4_OK", 1: "NFS4ERR_PERM", 2: "NFS4ERR_NOENT", 5: "NFS4ERR_IO", 13: "NFS4ERR_ACCESS", 17: "NFS4ERR_EXIST",
	18: "NFS4ERR_XDEV", 20: "NFS4ERR_NOTDIR", 21: "NFS4ERR_ISDIR", 22: "NFS4ERR_INVAL", 30: "NFS4ERR_ROFS",
	63: "NFS4ERR_NAMETOOLONG", 66: "NFS4ERR_NOTEMPTY", 70: "NFS4ERR_STALE", 10001: "NFS4ERR_BADHANDLE",
	10004: "NFS4ERR_NOTSUPP", 10006: "NFS4ERR_SERVERFAULT", 10007: "NFS4ERR_BADTYPE", 10008: "NFS4ERR_DELAY", 10016: "NFS4ERR_WRONGSEC",
	10020: "NFS4ERR_NOFILEHANDLE", 10025: "NFS4ERR_BAD_STATEID", 10029: "NFS4ERR_SYMLINK", 10038: "NFS4ERR_OPENMODE",
	10040: "NFS4ERR_BADCHAR", 10041: "NFS4ERR_BADNAME",
	10022: "NFS4ERR_STALE_CLIENTID", 10027: "NFS4ERR_NOT_SAME", 10044: "NFS4ERR_OP_ILLEGAL", 10059: "NFS4ERR_LAYOUTUNAVAILABLE", 10071: "NFS4ERR_OP_NOT_IN_SESSION", 10083: "NFS4ERR_WRONG_TYPE",
	10010: "NFS4ERR_DENIED", 10011: "NFS4ERR_EXPIRED", 10012: "NFS4ERR_LOCKED", 10013: "NFS4ERR_GRACE", 10015: "NFS4ERR_SHARE_DENIED",
	10023: "NFS4ERR_STALE_STATEID", 10024: "NFS4ERR_OLD_STATEID", 10026: "NFS4ERR_BAD_SEQID", 10028: "NFS4ERR_LOCK_RANGE",
	10033: "NFS4ERR_NO_GRACE", 10034: "NFS4ERR_RECLAIM_BAD", 10035: "NFS4ERR_RECLAIM_CONFLICT", 10052: "NFS4ERR_BADSESSION",
	10054: "NFS4ERR_COMPLETE_ALREADY", 10055: "NFS4ERR_CONN_NOT_BOUND_TO_SESSION", 10063: "NFS4ERR_SEQ_MISORDERED", 10078: "NFS4ERR_DEADSESSION",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "NFS4 status " + strconv.Itoa(int(s))
}

// Error makes a non-OK Status an error.
func (s Status) Error() string { return s.String() }

// Client is an NFSv4 client that sends COMPOUNDs over one TCP connection with
// AUTH_SYS: NFSv4.0 (Dial), or NFSv4.1 with a session (Dial41), which can also
// hold state (OPEN, LOCK; state.go) and reclaim it after a server restart
// (Reestablish).
type Client struct {
	rc     *rpcConn // nil after Drop or a failed Reestablish
	minor  uint32
	sess   *session // NFSv4.1: every COMPOUND starts with its SEQUENCE
	addr   string   // host:port
	auth   Auth
	opts41 Options41
	owner  ServerOwner // NFSv4.1: what the last EXCHANGE_ID answered
}

// errNotConnected is a call on a Client without a connection.
var errNotConnected = errors.New("nfsraw: not connected")

// Dial connects to an NFSv4 server at host:port.
func Dial(ctx context.Context, host string, port int, a Auth) (*Client, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	rc, err := dialRPC(ctx, addr, a)
	if err != nil {
		return nil, err
	}
	return &Client{rc: rc, addr: addr, auth: a}, nil
}

// Close closes the connection (an NFSv4.1 client first destroys its session
// and client ID).
func (c *Client) Close() error {
	if c.rc == nil {
		return nil
	}
	if c.sess != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.closeSession(ctx)
		cancel()
	}
	err := c.rc.close()
	c.rc = nil
	return err
}

// MinorVersion is the NFSv4 minor version the client speaks (0 or 1).
func (c *Client) MinorVersion() uint32 { return c.minor }

// Op is one operation of a COMPOUND; results are stored in the Op.
type Op interface {
	code() uint32
	encode(e *xdrEnc)
	// decode reads the results after an OK status.
	decode(d *xdrDec)
}

// Compound sends ops as one COMPOUND and returns its status (that of the first
// failing op, or OK) and, when not OK, the index of the op that failed. err is
// set only when the call itself failed (transport, RPC, XDR). An NFSv4.1
// client puts its session's SEQUENCE first; failed counts from ops[0] (-1: the
// SEQUENCE itself failed).
func (c *Client) Compound(ctx context.Context, ops ...Op) (st Status, failed int, err error) {
	if c.sess == nil {
		return c.compound(ctx, ops)
	}
	seq := &sequence{sess: c.sess}
	st, failed, err = c.compound(ctx, append([]Op{seq}, ops...))
	if err == nil && failed != 0 {
		c.sess.seq++ // the slot's sequence id was used
		c.sess.status = seq.status
	}
	if failed >= 0 {
		failed--
	}
	return st, failed, err
}

func (c *Client) compound(ctx context.Context, ops []Op) (st Status, failed int, err error) {
	if c.rc == nil {
		return 0, -1, errNotConnected
	}
	var e xdrEnc
	e.Str("nfsraw")
	e.U32(c.minor)
	e.U32(uint32(len(ops)))
	for _, op := range ops {
		e.U32(op.code())
		op.encode(&e)
	}
	res, err := c.rc.call(ctx, 100003, 4, 1, e.Bytes())
	if err != nil {
		return 0, -1, err
	}
	return decodeCompound(res, ops)
}

func decodeCompound(res []byte, ops []Op) (Status, int, error) {
	d := xdrDec{oncrpc.NewDecoder(res)}
	st := Status(d.U32())
	d.Opaque() // tag
	n := int(d.U32())
	if d.Err() != nil {
		return 0, -1, d.Err()
	}
	if n > len(ops) {
		return 0, -1, fmt.Errorf("compound: %d results for %d ops", n, len(ops))
	}
	for i := 0; i < n; i++ {
		if code := d.U32(); code != ops[i].code() {
			if code == opIllegal { // an operation the server does not know
				return Status(d.U32()), i, d.Err()
			}
			return 0, -1, fmt.Errorf("compound: result %d is op %d, want %d", i, code, ops[i].code())
		}
		ost := Status(d.U32())
		if ost != OK {
			if er, ok := ops[i].(errResult); ok {
				er.decodeErr(ost, &d)
			}
			return ost, i, d.Err()
		}
		ops[i].decode(&d)
		if d.Err() != nil {
			return 0, -1, fmt.Errorf("compound: op %d results: %w", ops[i].code(), d.Err())
		}
	}
	if st != OK {
		return st, n - 1, nil
	}
	return OK, -1, nil
}

// Run is Compound for callers that only want the status as an error: nil for
// OK, a Status otherwise.
func (c *Client) Run(ctx context.Context, ops ...Op) error {
	st, _, err := c.Compound(ctx, ops...)
	if err != nil {
		return err
	}
	if st != OK {
		return st
	}
	return nil
}

// StatusOf returns the nfsstat4 an error carries, if it carries one.
func StatusOf(err error) (Status, bool) {
	var s Status
	if errors.As(err, &s) {
		return s, true
	}
	return 0, false
}

// opIllegal is OP_ILLEGAL, the result a server gives for an operation it does
// not know (with NFS4ERR_OP_ILLEGAL).
const opIllegal = 10044

// errResult is an Op whose failure carries results: SETATTR's attrsset,
// LOCK's and LOCKT's conflicting lock.
type errResult interface {
	decodeErr(st Status, d *xdrDec)
}

type noResult struct{}

func (noResult) decode(*xdrDec) {}

func (e *xdrEnc) bool(b bool) {
	if b {
		e.U32(1)
	} else {
		e.U32(0)
	}
}

// PutRootFH makes the pseudo-root the current filehandle.
type PutRootFH struct{ noResult }

func (*PutRootFH) code() uint32     { return 24 }
func (*PutRootFH) encode(e *xdrEnc) {}

// PutFH makes FH the current filehandle.
type PutFH struct {
	noResult
	FH []byte
}

func (*PutFH) code() uint32       { return 22 }
func (o *PutFH) encode(e *xdrEnc) { e.Opaque(o.FH) }

// Lookup looks Name up in the current directory.
type Lookup struct {
	noResult
	Name string
}

func (*Lookup) code() uint32       { return 15 }
func (o *Lookup) encode(e *xdrEnc) { e.Str(o.Name) }

// LookupP makes the current directory's parent current.
type LookupP struct{ noResult }

func (*LookupP) code() uint32     { return 16 }
func (*LookupP) encode(e *xdrEnc) {}

// SaveFH saves the current filehandle.
type SaveFH struct{ noResult }

func (*SaveFH) code() uint32     { return 32 }
func (*SaveFH) encode(e *xdrEnc) {}

// RestoreFH makes the saved filehandle current.
type RestoreFH struct{ noResult }

func (*RestoreFH) code() uint32     { return 31 }
func (*RestoreFH) encode(e *xdrEnc) {}

// GetFH returns the current filehandle.
type GetFH struct{ FH []byte }

func (*GetFH) code() uint32       { return 10 }
func (*GetFH) encode(e *xdrEnc)   {}
func (o *GetFH) decode(d *xdrDec) { o.FH = append([]byte(nil), d.Opaque()...) }

// Attr holds the attributes GetAttr asks for.
type Attr struct {
	Type                 uint32 // nfs_ftype4: 1 regular, 2 directory, 5 symlink, ...
	Size                 uint64
	FSIDMajor, FSIDMinor uint64
	FileID               uint64
	Mode                 uint32
	Owner, OwnerGroup    string
	// The filesystem's space (GetSpace): space_avail, space_free, space_total.
	SpaceAvail, SpaceFree, SpaceTotal uint64
}

// The attributes GetAttr and ReadDir ask for: type(1) size(4) fsid(8)
// fileid(20) in word 0, mode(33) owner(36) owner_group(37) in word 1.
var attrMask = []uint32{1<<1 | 1<<4 | 1<<8 | 1<<20, 1<<1 | 1<<4 | 1<<5}

func (e *xdrEnc) bitmap(words []uint32) {
	e.U32(uint32(len(words)))
	for _, w := range words {
		e.U32(w)
	}
}

func (d *xdrDec) bitmap() []uint32 {
	n := int(d.U32())
	if n > 64 {
		d.Fail(errors.New("xdr: bitmap too long"))
		return nil
	}
	var w []uint32
	for range n {
		w = append(w, d.U32())
	}
	return w
}

func isSet(words []uint32, attr int) bool {
	return attr/32 < len(words) && words[attr/32]&(1<<(attr%32)) != 0
}

// fattr decodes a fattr4 holding (a subset of) attrMask's attributes.
func (d *xdrDec) fattr() Attr {
	var a Attr
	words := d.bitmap()
	vals := oncrpc.NewDecoder(d.Opaque())
	for attr := 0; attr < 64 && vals.Err() == nil; attr++ {
		if !isSet(words, attr) {
			continue
		}
		switch attr {
		case 1:
			a.Type = vals.U32()
		case 4:
			a.Size = vals.U64()
		case 8:
			a.FSIDMajor, a.FSIDMinor = vals.U64(), vals.U64()
		case 20:
			a.FileID = vals.U64()
		case 33:
			a.Mode = vals.U32()
		case 36:
			a.Owner = string(vals.Opaque())
		case 37:
			a.OwnerGroup = string(vals.Opaque())
		case 42:
			a.SpaceAvail = vals.U64()
		case 43:
			a.SpaceFree = vals.U64()
		case 44:
			a.SpaceTotal = vals.U64()
		default:
			return a // an attribute we did not ask for: stop
		}
	}
	d.Fail(vals.Err())
	return a
}

// modeAttrs encodes a fattr4 that sets mode (and size when size is not nil).
func modeAttrs(e *xdrEnc, mode *uint32, size *uint64) {
	var w0, w1 uint32
	var v xdrEnc
	if size != nil {
		w0 |= 1 << 4
		v.U64(*size)
	}
	if mode != nil {
		w1 |= 1 << 1
		v.U32(*mode)
	}
	e.bitmap([]uint32{w0, w1})
	e.Opaque(v.Bytes())
}

// GetAttr reads the current object's type, size, fsid, fileid, mode, owner
// and group.
type GetAttr struct{ Attr Attr }

func (*GetAttr) code() uint32       { return 9 }
func (*GetAttr) encode(e *xdrEnc)   { e.bitmap(attrMask) }
func (o *GetAttr) decode(d *xdrDec) { o.Attr = d.fattr() }

// GetSpace reads the space of the current object's filesystem: space_avail,
// space_free and space_total (what df shows), and its fsid.
type GetSpace struct{ Attr Attr }

var spaceMask = []uint32{1 << 8, 1<<10 | 1<<11 | 1<<12}

func (*GetSpace) code() uint32       { return 9 }
func (*GetSpace) encode(e *xdrEnc)   { e.bitmap(spaceMask) }
func (o *GetSpace) decode(d *xdrDec) { o.Attr = d.fattr() }

// DirEntry is one READDIR entry.
type DirEntry struct {
	Cookie uint64
	Name   string
	Attr   Attr
}

// ReadDir reads one batch of the current directory from Cookie on.
type ReadDir struct {
	Cookie  uint64
	Verf    [8]byte
	Entries []DirEntry
	EOF     bool
}

func (*ReadDir) code() uint32 { return 26 }
func (o *ReadDir) encode(e *xdrEnc) {
	e.U64(o.Cookie)
	e.Fixed(o.Verf[:])
	e.U32(8192)  // dircount
	e.U32(32768) // maxcount
	e.bitmap(attrMask)
}
func (o *ReadDir) decode(d *xdrDec) {
	copy(o.Verf[:], d.Take(8))
	for d.Err() == nil && d.U32() != 0 {
		if len(o.Entries) > 1<<16 {
			d.Fail(errors.New("readdir: too many entries"))
			return
		}
		var de DirEntry
		de.Cookie = d.U64()
		de.Name = string(d.Opaque())
		de.Attr = d.fattr()
		if d.Err() == nil {
			o.Entries = append(o.Entries, de)
		}
	}
	o.EOF = d.U32() != 0
}

// Read reads Count bytes at Offset of the current file, with StateID (the
// zero value is the anonymous stateid).
type Read struct {
	StateID StateID
	Offset  uint64
	Count   uint32
	Data    []byte
	EOF     bool
}

func (*Read) code() uint32 { return 25 }
func (o *Read) encode(e *xdrEnc) {
	e.stateID(o.StateID)
	e.U64(o.Offset)
	e.U32(o.Count)
}
func (o *Read) decode(d *xdrDec) {
	o.EOF = d.U32() != 0
	o.Data = append([]byte(nil), d.Opaque()...)
}

// Write writes Data at Offset of the current file (FILE_SYNC), with StateID
// (the zero value is the anonymous stateid).
type Write struct {
	StateID StateID
	Offset  uint64
	Data    []byte
	Count   uint32
}

func (*Write) code() uint32 { return 38 }
func (o *Write) encode(e *xdrEnc) {
	e.stateID(o.StateID)
	e.U64(o.Offset)
	e.U32(2) // FILE_SYNC4
	e.Opaque(o.Data)
}
func (o *Write) decode(d *xdrDec) {
	o.Count = d.U32()
	d.U32()
	d.Take(8)
}

func (d *xdrDec) changeInfo() {
	d.U32()
	d.U64()
	d.U64()
}

// Create makes directory Name (or, with Target set, a symlink to Target) in
// the current directory, which the new object replaces as current.
type Create struct {
	Name   string
	Target string // symlink target; empty for a directory
	Mode   uint32
}

func (*Create) code() uint32 { return 6 }
func (o *Create) encode(e *xdrEnc) {
	if o.Target != "" {
		e.U32(5) // NF4LNK
		e.Str(o.Target)
	} else {
		e.U32(2) // NF4DIR
	}
	e.Str(o.Name)
	m := o.Mode
	modeAttrs(e, &m, nil)
}
func (o *Create) decode(d *xdrDec) {
	d.changeInfo()
	d.bitmap()
}

// Remove removes Name from the current directory.
type Remove struct{ Name string }

func (*Remove) code() uint32       { return 28 }
func (o *Remove) encode(e *xdrEnc) { e.Str(o.Name) }
func (o *Remove) decode(d *xdrDec) { d.changeInfo() }

// SetAttr sets the current object's mode (and size, if Size is set), with
// StateID (the zero value is the anonymous stateid). AttrsSet is what the
// server says it set, even on error.
type SetAttr struct {
	StateID  StateID
	Mode     *uint32
	Size     *uint64
	AttrsSet []uint32
}

func (*SetAttr) code() uint32 { return 34 }
func (o *SetAttr) encode(e *xdrEnc) {
	e.stateID(o.StateID)
	modeAttrs(e, o.Mode, o.Size)
}
func (o *SetAttr) decode(d *xdrDec)              { o.AttrsSet = d.bitmap() }
func (o *SetAttr) decodeErr(_ Status, d *xdrDec) { o.AttrsSet = d.bitmap() }

// Link makes Name in the current directory a hard link to the saved object.
type Link struct{ Name string }

func (*Link) code() uint32       { return 11 }
func (o *Link) encode(e *xdrEnc) { e.Str(o.Name) }
func (o *Link) decode(d *xdrDec) { d.changeInfo() }

// Rename renames Old in the saved directory to New in the current one.
type Rename struct{ Old, New string }

func (*Rename) code() uint32 { return 29 }
func (o *Rename) encode(e *xdrEnc) {
	e.Str(o.Old)
	e.Str(o.New)
}
func (o *Rename) decode(d *xdrDec) {
	d.changeInfo()
	d.changeInfo()
}

// ReadDirAll lists the directory fh (nil: the pseudo-root), in as many
// READDIR calls as it takes (at most 1000).
func (c *Client) ReadDirAll(ctx context.Context, fh []byte) ([]DirEntry, error) {
	var out []DirEntry
	var cookie uint64
	var verf [8]byte
	for range 1000 {
		rd := &ReadDir{Cookie: cookie, Verf: verf}
		var put Op = &PutRootFH{}
		if fh != nil {
			put = &PutFH{FH: fh}
		}
		if err := c.Run(ctx, put, rd); err != nil {
			return out, err
		}
		out = append(out, rd.Entries...)
		if rd.EOF {
			return out, nil
		}
		if len(rd.Entries) == 0 {
			return out, errors.New("readdir: no entries and no EOF")
		}
		cookie, verf = rd.Entries[len(rd.Entries)-1].Cookie, rd.Verf
	}
	return out, errors.New("readdir: too many calls")
}

// LookupPath returns the handle of a path below the pseudo-root.
func (c *Client) LookupPath(ctx context.Context, names ...string) ([]byte, error) {
	ops := []Op{&PutRootFH{}}
	for _, n := range names {
		ops = append(ops, &Lookup{Name: n})
	}
	g := &GetFH{}
	ops = append(ops, g)
	if err := c.Run(ctx, ops...); err != nil {
		return nil, err
	}
	return g.FH, nil
}
