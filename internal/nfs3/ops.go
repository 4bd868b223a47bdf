package nfs3

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// NFSv3 procedure numbers (RFC 1813).
const (
	procGetAttr     = 1
	procSetAttr     = 2
	procLookup      = 3
	procRead        = 6
	procWrite       = 7
	procCreate      = 8
	procMkdir       = 9
	procSymlink     = 10
	procMknod       = 11
	procRemove      = 12
	procRmdir       = 13
	procRename      = 14
	procLink        = 15
	procReadDir     = 16
	procReadDirPlus = 17
	procFSStat      = 18
)

// Named nfsstat3 values, for comparing with errors.Is.
const (
	ErrPerm        Status = 1
	ErrNoEnt       Status = 2
	ErrAcces       Status = 13
	ErrExist       Status = 17
	ErrXDev        Status = 18
	ErrNotDir      Status = 20
	ErrIsDir       Status = 21
	ErrInval       Status = 22
	ErrROFS        Status = 30
	ErrNameTooLong Status = 63
	ErrNotEmpty    Status = 66
	ErrStale       Status = 70
	ErrBadHandle   Status = 10001
	ErrNotSupp     Status = 10004
	ErrServerFault Status = 10006
	ErrBadType     Status = 10007
	ErrJukebox     Status = 10008
)

func init() {
	statusNames[18] = "NFS3ERR_XDEV"
	statusNames[31] = "NFS3ERR_MLINK"
	statusNames[66] = "NFS3ERR_NOTEMPTY"
	statusNames[10002] = "NFS3ERR_NOT_SYNC"
	statusNames[10003] = "NFS3ERR_BAD_COOKIE"
	statusNames[10005] = "NFS3ERR_TOOSMALL"
	statusNames[10007] = "NFS3ERR_BADTYPE"
}

// StatusOf returns the nfsstat3 an error carries, if it carries one.
func StatusOf(err error) (Status, bool) {
	var s Status
	if errors.As(err, &s) {
		return s, true
	}
	return 0, false
}

// MountStatus is a failed MOUNT MNT call's mountstat3.
type MountStatus uint32

func (s MountStatus) Error() string {
	switch s {
	case 1:
		return "MNT3ERR_PERM"
	case 2:
		return "MNT3ERR_NOENT"
	case 13:
		return "MNT3ERR_ACCES"
	case 20:
		return "MNT3ERR_NOTDIR"
	}
	return "MNT3 status " + strconv.Itoa(int(s))
}

// FileType is an NFSv3 ftype3.
type FileType uint32

// File types.
const (
	TypeReg  FileType = 1
	TypeDir  FileType = 2
	TypeBlk  FileType = 3
	TypeChr  FileType = 4
	TypeLnk  FileType = 5
	TypeSock FileType = 6
	TypeFIFO FileType = 7
)

// Attr is an NFSv3 fattr3.
type Attr struct {
	Type                FileType
	Mode                uint32
	Nlink               uint32
	UID, GID            uint32
	Size, Used          uint64
	RdevMajor           uint32
	RdevMinor           uint32
	FSID                uint64
	FileID              uint64
	Atime, Mtime, Ctime time.Time
}

func (d *dec) time() time.Time {
	s, ns := d.U32(), d.U32()
	return time.Unix(int64(s), int64(ns))
}

func (d *dec) fattr() Attr {
	var a Attr
	a.Type = FileType(d.U32())
	a.Mode = d.U32()
	a.Nlink = d.U32()
	a.UID = d.U32()
	a.GID = d.U32()
	a.Size = d.U64()
	a.Used = d.U64()
	a.RdevMajor = d.U32()
	a.RdevMinor = d.U32()
	a.FSID = d.U64()
	a.FileID = d.U64()
	a.Atime, a.Mtime, a.Ctime = d.time(), d.time(), d.time()
	return a
}

// postOpAttr decodes a post_op_attr.
func (d *dec) postOpAttr() (Attr, bool) {
	if d.U32() == 0 {
		return Attr{}, false
	}
	return d.fattr(), d.Err() == nil
}

// postOpFH decodes a post_op_fh3.
func (d *dec) postOpFH() []byte {
	if d.U32() == 0 {
		return nil
	}
	return d.Opaque()
}

// SetAttrs says which attributes SetAttr (and the creating calls) set; nil
// fields are left alone.
type SetAttrs struct {
	Mode     *uint32
	UID, GID *uint32
	Size     *uint64
}

func (e *enc) sattr(s SetAttrs) {
	opt32 := func(v *uint32) {
		if v == nil {
			e.U32(0)
			return
		}
		e.U32(1)
		e.U32(*v)
	}
	opt32(s.Mode)
	opt32(s.UID)
	opt32(s.GID)
	if s.Size == nil {
		e.U32(0)
	} else {
		e.U32(1)
		e.U64(*s.Size)
	}
	e.U32(0) // atime: don't change
	e.U32(0) // mtime: don't change
}

// Mode returns a pointer to m, for SetAttrs.
func Mode(m uint32) *uint32 { return &m }

// Size returns a pointer to n, for SetAttrs.
func Size(n uint64) *uint64 { return &n }

func diropargs(dir []byte, name string) *enc {
	var e enc
	e.Opaque(dir)
	e.Str(name)
	return &e
}

// GetAttr returns fh's attributes.
func (c *Client) GetAttr(ctx context.Context, fh []byte) (Attr, error) {
	var e enc
	e.Opaque(fh)
	d, err := c.call(ctx, procGetAttr, e.Bytes())
	if err != nil {
		return Attr{}, err
	}
	a := d.fattr()
	return a, d.Err()
}

// FSStat is a filesystem's size and free space as the server reports them (what a
// client's df shows).
type FSStat struct {
	TotalBytes, FreeBytes, AvailBytes uint64
	TotalFiles, FreeFiles, AvailFiles uint64
}

// FSStat asks for the size and free space of the filesystem holding fh.
func (c *Client) FSStat(ctx context.Context, fh []byte) (FSStat, error) {
	var e enc
	e.Opaque(fh)
	d, err := c.call(ctx, procFSStat, e.Bytes())
	if err != nil {
		return FSStat{}, err
	}
	d.postOpAttr()
	st := FSStat{TotalBytes: d.U64(), FreeBytes: d.U64(), AvailBytes: d.U64(), TotalFiles: d.U64(), FreeFiles: d.U64(), AvailFiles: d.U64()}
	d.U32() // invarsec
	return st, d.Err()
}

// SetAttr sets fh's attributes (no guard).
func (c *Client) SetAttr(ctx context.Context, fh []byte, s SetAttrs) error {
	var e enc
	e.Opaque(fh)
	e.sattr(s)
	e.U32(0) // no ctime guard
	_, err := c.call(ctx, procSetAttr, e.Bytes())
	return err
}

// LookupAttr is Lookup that also returns the object's attributes.
func (c *Client) LookupAttr(ctx context.Context, dir []byte, name string) ([]byte, Attr, error) {
	d, err := c.call(ctx, procLookup, diropargs(dir, name).Bytes())
	if err != nil {
		return nil, Attr{}, err
	}
	fh := d.Opaque()
	a, _ := d.postOpAttr()
	return fh, a, d.Err()
}

// CreateHow is CREATE's mode.
type CreateHow uint32

// Create modes.
const (
	Unchecked CreateHow = 0
	Guarded   CreateHow = 1
	Exclusive CreateHow = 2
)

// CreateArgs are CREATE's arguments beyond the directory and name.
type CreateArgs struct {
	How CreateHow
	// Attrs are set on an UNCHECKED or GUARDED create.
	Attrs SetAttrs
	// Verf is the EXCLUSIVE create's verifier.
	Verf [8]byte
}

// CreateWith calls CREATE as given and returns the handle the server
// returned (nil when it returned none).
func (c *Client) CreateWith(ctx context.Context, dir []byte, name string, a CreateArgs) ([]byte, error) {
	e := diropargs(dir, name)
	e.U32(uint32(a.How))
	if a.How == Exclusive {
		e.Fixed(a.Verf[:])
	} else {
		e.sattr(a.Attrs)
	}
	d, err := c.call(ctx, procCreate, e.Bytes())
	if err != nil {
		return nil, err
	}
	fh := d.postOpFH()
	return fh, d.Err()
}

// Mkdir makes directory name in dir and returns its handle.
func (c *Client) Mkdir(ctx context.Context, dir []byte, name string, mode uint32) ([]byte, error) {
	e := diropargs(dir, name)
	e.sattr(SetAttrs{Mode: &mode})
	d, err := c.call(ctx, procMkdir, e.Bytes())
	if err != nil {
		return nil, err
	}
	fh := d.postOpFH()
	return fh, d.Err()
}

// Symlink makes symlink name in dir pointing to target and returns its handle.
func (c *Client) Symlink(ctx context.Context, dir []byte, name, target string) ([]byte, error) {
	e := diropargs(dir, name)
	e.sattr(SetAttrs{})
	e.Str(target)
	d, err := c.call(ctx, procSymlink, e.Bytes())
	if err != nil {
		return nil, err
	}
	fh := d.postOpFH()
	return fh, d.Err()
}

// Mknod makes a special file (TypeChr, TypeBlk, TypeSock or TypeFIFO) and
// returns its handle; major and minor matter for devices only.
func (c *Client) Mknod(ctx context.Context, dir []byte, name string, t FileType, mode, major, minor uint32) ([]byte, error) {
	e := diropargs(dir, name)
	e.U32(uint32(t))
	switch t {
	case TypeChr, TypeBlk:
		e.sattr(SetAttrs{Mode: &mode})
		e.U32(major)
		e.U32(minor)
	case TypeSock, TypeFIFO:
		e.sattr(SetAttrs{Mode: &mode})
	}
	d, err := c.call(ctx, procMknod, e.Bytes())
	if err != nil {
		return nil, err
	}
	fh := d.postOpFH()
	return fh, d.Err()
}

// Remove removes the non-directory name from dir.
func (c *Client) Remove(ctx context.Context, dir []byte, name string) error {
	_, err := c.call(ctx, procRemove, diropargs(dir, name).Bytes())
	return err
}

// Rmdir removes the empty directory name from dir.
func (c *Client) Rmdir(ctx context.Context, dir []byte, name string) error {
	_, err := c.call(ctx, procRmdir, diropargs(dir, name).Bytes())
	return err
}

// Rename renames fromDir/fromName to toDir/toName.
func (c *Client) Rename(ctx context.Context, fromDir []byte, fromName string, toDir []byte, toName string) error {
	e := diropargs(fromDir, fromName)
	e.Opaque(toDir)
	e.Str(toName)
	_, err := c.call(ctx, procRename, e.Bytes())
	return err
}

// Link makes name in dir a hard link to fh.
func (c *Client) Link(ctx context.Context, fh, dir []byte, name string) error {
	var e enc
	e.Opaque(fh)
	e.Opaque(dir)
	e.Str(name)
	_, err := c.call(ctx, procLink, e.Bytes())
	return err
}

// DirEntry is one READDIR or READDIRPLUS entry; Attr and FH are set by
// ReadDirPlus when the server sent them.
type DirEntry struct {
	FileID uint64
	Name   string
	Cookie uint64
	Attr   *Attr
	FH     []byte
}

// maxDirCalls bounds the READDIR calls one listing makes.
const maxDirCalls = 10000

// ReadDir lists dir, "." and ".." included.
func (c *Client) ReadDir(ctx context.Context, dir []byte) ([]DirEntry, error) {
	return c.readDir(ctx, dir, false)
}

// ReadDirPlus lists dir with each entry's attributes and handle.
func (c *Client) ReadDirPlus(ctx context.Context, dir []byte) ([]DirEntry, error) {
	return c.readDir(ctx, dir, true)
}

func (c *Client) readDir(ctx context.Context, dir []byte, plus bool) ([]DirEntry, error) {
	var out []DirEntry
	var cookie uint64
	var verf [8]byte
	for range maxDirCalls {
		var e enc
		e.Opaque(dir)
		e.U64(cookie)
		e.Fixed(verf[:])
		proc := uint32(procReadDir)
		if plus {
			proc = procReadDirPlus
			e.U32(8192)  // dircount
			e.U32(65536) // maxcount
		} else {
			e.U32(65536)
		}
		d, err := c.call(ctx, proc, e.Bytes())
		if err != nil {
			return out, err
		}
		ents, v, eof, err := parseDirList(d, plus)
		out = append(out, ents...)
		if err != nil {
			return out, err
		}
		if eof {
			return out, nil
		}
		if len(ents) == 0 {
			return out, errors.New("readdir: no entries and no EOF")
		}
		cookie, verf = ents[len(ents)-1].Cookie, v
	}
	return out, errors.New("readdir: too many calls")
}

// parseDirList decodes READDIR3resok or READDIRPLUS3resok (after the status).
func parseDirList(d *dec, plus bool) (ents []DirEntry, verf [8]byte, eof bool, err error) {
	d.postOpAttr()
	copy(verf[:], d.Take(8))
	for d.Err() == nil && d.U32() != 0 {
		if len(ents) > 1<<20 {
			return ents, verf, false, errors.New("readdir: too many entries")
		}
		var de DirEntry
		de.FileID = d.U64()
		de.Name = string(d.Opaque())
		de.Cookie = d.U64()
		if plus {
			if a, ok := d.postOpAttr(); ok {
				de.Attr = &a
			}
			de.FH = d.postOpFH()
		}
		if d.Err() == nil {
			ents = append(ents, de)
		}
	}
	eof = d.U32() != 0
	return ents, verf, eof, d.Err()
}

// Raw calls NFSv3 procedure proc with pre-encoded XDR arguments and returns
// the status and the undecoded results after it; err is set only when the
// call itself failed (RPC or transport).
func (c *Client) Raw(ctx context.Context, proc uint32, args []byte) (Status, []byte, error) {
	cn := c.conns[int(c.next.Add(1))%len(c.conns)]
	res, err := cn.call(ctx, progNFS, 3, proc, args)
	if err != nil {
		return 0, nil, err
	}
	d := newDec(res)
	st := Status(d.U32())
	if d.Err() != nil {
		return 0, nil, d.Err()
	}
	return st, res[4:], nil
}

// Export is one entry of the MOUNT EXPORT list (what showmount -e shows).
type Export struct {
	Dir    string
	Groups []string
}

// Exports asks the MOUNT service on host for its export list.
func Exports(ctx context.Context, host string, o Options) ([]Export, error) {
	mc, _, err := dialMount(ctx, host, o.withDefaults())
	if err != nil {
		return nil, err
	}
	defer mc.close()
	res, err := mc.call(ctx, progMount, 3, 5, nil)
	if err != nil {
		return nil, fmt.Errorf("mount EXPORT: %w", err)
	}
	return parseExports(res)
}

// parseExports decodes an exports list (MOUNT EXPORT results).
func parseExports(res []byte) ([]Export, error) {
	d := newDec(res)
	var out []Export
	for d.Err() == nil && d.U32() != 0 {
		if len(out) > 1<<16 {
			return out, errors.New("exports: too many entries")
		}
		x := Export{Dir: string(d.Opaque())}
		for d.Err() == nil && d.U32() != 0 {
			if len(x.Groups) > 1<<16 {
				return out, errors.New("exports: too many groups")
			}
			x.Groups = append(x.Groups, string(d.Opaque()))
		}
		if d.Err() == nil {
			out = append(out, x)
		}
	}
	return out, d.Err()
}
