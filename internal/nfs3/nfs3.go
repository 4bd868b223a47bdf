package nfs3

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/basin-nas/basin/internal/oncrpc"
)

const (
	progPortmap = 100000
	progNFS     = 100003
	progMount   = 100005
)

// Status is a failed NFSv3 procedure's nfsstat3.
type Status uint32

var statusNames = map[Status]string{
	1: "NFS3ERR_PERM", 2: "NFS3ERR_NOENT", 5: "NFS3ERR_IO", 6: "NFS3ERR_NXIO", 13: "NFS3ERR_ACCES",
	17: "NFS3ERR_EXIST", 20: "NFS3ERR_NOTDIR", 21: "NFS3ERR_ISDIR", 22: "NFS3ERR_INVAL", 27: "NFS3ERR_FBIG",
	28: "NFS3ERR_NOSPC", 30: "NFS3ERR_ROFS", 63: "NFS3ERR_NAMETOOLONG", 69: "NFS3ERR_DQUOT",
	70: "NFS3ERR_STALE", 10001: "NFS3ERR_BADHANDLE", 10004: "NFS3ERR_NOTSUPP", 10006: "NFS3ERR_SERVERFAULT",
	10008: "NFS3ERR_JUKEBOX",
}

func (s Status) Error() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "NFS3 status " + strconv.Itoa(int(s))
}

// Options configures Mount.
type Options struct {
	Auth Auth
	// Conns is the number of TCP connections (nconnect); calls are spread over them.
	Conns int
	// PortmapPort is where the portmapper listens; default 111.
	PortmapPort int
	// NFSPort and MountPort, when both are set, are used as they are and the
	// portmapper is not asked.
	NFSPort, MountPort int
	// LocalIP, if set, is the source address of every connection (a test
	// client can pose as one of several hosts on a loopback network).
	LocalIP string
}

func (o Options) withDefaults() Options {
	if o.Conns <= 0 {
		o.Conns = 1
	}
	if o.PortmapPort == 0 {
		o.PortmapPort = 111
	}
	if o.Auth.Machine == "" {
		o.Auth.Machine = "basin-bench"
	}
	return o
}

// ports returns the MOUNT and NFS ports: as given, or from the portmapper.
func ports(ctx context.Context, host string, o Options) (mountPort, nfsPort int, err error) {
	if o.NFSPort != 0 && o.MountPort != 0 {
		return o.MountPort, o.NFSPort, nil
	}
	pm, err := dial(ctx, net.JoinHostPort(host, strconv.Itoa(o.PortmapPort)), Auth{Machine: o.Auth.Machine}, o.LocalIP)
	if err != nil {
		return 0, 0, fmt.Errorf("portmapper: %w", err)
	}
	mountPort, err1 := getPort(ctx, pm, progMount, 3)
	nfsPort, err2 := getPort(ctx, pm, progNFS, 3)
	pm.close()
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("portmapper: %w", err)
	}
	return mountPort, nfsPort, nil
}

// Client is a mounted NFSv3 export.
type Client struct {
	conns []*conn
	next  atomic.Uint32
	// Root is the file handle of the directory the URL named.
	Root []byte
}

// Mount mounts host:dir (dir may lie below the exported path) and opens the
// connections to the NFS server.
func Mount(ctx context.Context, host, dir string, o Options) (*Client, error) {
	o = o.withDefaults()
	mc, nfsPort, err := dialMount(ctx, host, o)
	if err != nil {
		return nil, err
	}
	defer mc.close()
	// Mount the longest exported prefix of dir, then look the rest up.
	dir = path.Clean("/" + dir)
	var root []byte
	rest := ""
	for p := dir; ; p = path.Dir(p) {
		root, err = mnt(ctx, mc, p)
		if err == nil {
			rest = strings.TrimPrefix(strings.TrimPrefix(dir, p), "/")
			break
		}
		if p == "/" {
			return nil, fmt.Errorf("mount %s:%s: %w", host, dir, err)
		}
	}
	c := &Client{}
	if err := c.open(ctx, host, nfsPort, o); err != nil {
		return nil, err
	}
	for _, name := range strings.Split(rest, "/") {
		if name == "" {
			continue
		}
		if root, _, err = c.Lookup(ctx, root, name); err != nil {
			c.Close()
			return nil, fmt.Errorf("lookup %s in %s:%s: %w", name, host, dir, err)
		}
	}
	c.Root = root
	return c, nil
}

// Attach connects to host's NFS service without mounting, with root, a
// handle a mount gave earlier: what a client does when it reconnects to a
// server (after a restart, or at an address that moved to another node) with
// the handles it holds. The server decides whether they are still good.
func Attach(ctx context.Context, host string, root []byte, o Options) (*Client, error) {
	o = o.withDefaults()
	_, nfsPort, err := ports(ctx, host, o)
	if err != nil {
		return nil, err
	}
	c := &Client{Root: root}
	if err := c.open(ctx, host, nfsPort, o); err != nil {
		return nil, err
	}
	return c, nil
}

// open dials o.Conns connections to the NFS service; on an error none stays.
func (c *Client) open(ctx context.Context, host string, nfsPort int, o Options) error {
	for range o.Conns {
		cn, err := dial(ctx, net.JoinHostPort(host, strconv.Itoa(nfsPort)), o.Auth, o.LocalIP)
		if err != nil {
			c.Close()
			return fmt.Errorf("nfs: %w", err)
		}
		c.conns = append(c.conns, cn)
	}
	return nil
}

// dialMount finds the MOUNT and NFS services' ports and connects to MOUNT.
func dialMount(ctx context.Context, host string, o Options) (mc *conn, nfsPort int, err error) {
	mountPort, nfsPort, err := ports(ctx, host, o)
	if err != nil {
		return nil, 0, err
	}
	mc, err = dial(ctx, net.JoinHostPort(host, strconv.Itoa(mountPort)), o.Auth, o.LocalIP)
	if err != nil {
		return nil, 0, fmt.Errorf("mount: %w", err)
	}
	return mc, nfsPort, nil
}

func getPort(ctx context.Context, pm *conn, prog, vers uint32) (int, error) {
	var e enc
	e.U32(prog)
	e.U32(vers)
	e.U32(6) // TCP
	e.U32(0)
	res, err := pm.call(ctx, progPortmap, 2, 3, e.Bytes())
	if err != nil {
		return 0, err
	}
	d := newDec(res)
	port := d.U32()
	if d.Err() != nil || port == 0 {
		return 0, fmt.Errorf("program %d version %d is not registered", prog, vers)
	}
	return int(port), nil
}

func mnt(ctx context.Context, mc *conn, dir string) ([]byte, error) {
	var e enc
	e.Str(dir)
	res, err := mc.call(ctx, progMount, 3, 1, e.Bytes())
	if err != nil {
		return nil, err
	}
	d := newDec(res)
	if st := d.U32(); st != 0 {
		return nil, fmt.Errorf("MNT: %w", MountStatus(st))
	}
	fh := d.Opaque()
	return fh, d.Err()
}

// Close closes every connection.
func (c *Client) Close() error {
	var errs []error
	for _, cn := range c.conns {
		errs = append(errs, cn.close())
	}
	return errors.Join(errs...)
}

// MaxInFlight is the largest number of calls that were on the wire at once (sent,
// reply not yet read) on any one connection since Mount.
func (c *Client) MaxInFlight() int64 {
	var m int64
	for _, cn := range c.conns {
		m = max(m, cn.maxSeen.Load())
	}
	return m
}

// conn picks the connection for the next call: each in turn.
func (c *Client) conn() *conn { return c.conns[int(c.next.Add(1))%len(c.conns)] }

func (c *Client) call(ctx context.Context, proc uint32, args ...[]byte) (*dec, error) {
	res, err := c.conn().call(ctx, progNFS, 3, proc, args...)
	if err != nil {
		return nil, err
	}
	d := newDec(res)
	if st := Status(d.U32()); st != 0 {
		return nil, st
	}
	return d, d.Err()
}

// fattr3 is 84 bytes; size is the sixth field.
func (d *dec) postOpSize() (size int64, ok bool) {
	if d.U32() == 0 {
		return 0, false
	}
	a := d.Take(84)
	if a == nil {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(a[20:28])), true
}

func (d *dec) wcc() {
	if d.U32() != 0 {
		d.Take(24)
	}
	d.postOpSize()
}

// Lookup returns the handle and size of name in dir.
func (c *Client) Lookup(ctx context.Context, dir []byte, name string) ([]byte, int64, error) {
	var e enc
	e.Opaque(dir)
	e.Str(name)
	d, err := c.call(ctx, 3, e.Bytes())
	if err != nil {
		return nil, 0, err
	}
	fh := d.Opaque()
	size, _ := d.postOpSize()
	return fh, size, d.Err()
}

// Create creates name in dir with mode (or opens it, if it exists) and returns its
// handle.
func (c *Client) Create(ctx context.Context, dir []byte, name string, mode uint32) ([]byte, error) {
	var e enc
	e.Opaque(dir)
	e.Str(name)
	e.U32(0) // UNCHECKED
	e.U32(1) // set mode
	e.U32(mode)
	for range 5 { // uid, gid, size, atime, mtime: don't set
		e.U32(0)
	}
	d, err := c.call(ctx, 8, e.Bytes())
	if err != nil {
		return nil, err
	}
	if d.U32() == 0 {
		fh, _, err := c.Lookup(ctx, dir, name)
		return fh, err
	}
	fh := d.Opaque()
	return fh, d.Err()
}

// Read reads up to len(p) bytes at off into p and returns how many it read.
// The data goes from the socket straight into p.
//
// If ctx ends before the reply, Read returns ctx.Err() (once its request has
// left the send queue), and a late reply is skipped. If it ends while the reply
// is coming into p, only failing the connection stops it: Read fails the
// connection (its other calls fail with it), waits until the reader has
// stopped, and returns ctx.Err(). Either way, nothing writes p once Read has
// returned; what p holds after an error is undefined.
func (c *Client) Read(ctx context.Context, fh []byte, p []byte, off int64) (int, bool, error) {
	r := readRequest(fh, p, off)
	defer putRequest(r)
	if err := c.conn().do(ctx, r, progNFS, 3, procRead, r.args.Bytes()); err != nil {
		return 0, false, err
	}
	return readResult(r)
}

// ReadAsync starts what Read does and returns at once. done runs when the
// READ completes, on the connection's reader goroutine (or, if the reply came
// before the call had been sent, on the goroutine that finished sending it):
// it must not block (it may start more calls), and p is the caller's again
// once it runs. If ReadAsync returns an error, the READ did not start and done
// does not run.
func (c *Client) ReadAsync(fh []byte, p []byte, off int64, done func(n int, eof bool, err error)) error {
	r := readRequest(fh, p, off)
	r.onDone, r.readDone = readDone, done
	if err := c.conn().start(r, progNFS, 3, procRead, r.args.Bytes()); err != nil {
		putRequest(r)
		return err
	}
	return nil
}

func readRequest(fh []byte, p []byte, off int64) *request {
	r := getRequest()
	r.args.Opaque(fh)
	r.args.U64(uint64(off))
	r.args.U32(uint32(len(p)))
	r.dst, r.dataAt = p, readDataAt
	return r
}

func readDone(r *request) {
	var n int
	var eof bool
	err := r.err
	if err == nil {
		n, eof, err = readResult(r)
	}
	done := r.readDone
	putRequest(r)
	done(n, eof, err)
}

// readResult decodes a READ's results: the data is in r.dst.
func readResult(r *request) (int, bool, error) {
	d := dec{oncrpc.NewDecoder(r.res)}
	if st := Status(d.U32()); st != 0 {
		return 0, false, st
	}
	d.postOpSize()
	d.U32() // count
	eof := d.U32() != 0
	n := r.n
	if n < 0 {
		// Not read into dst (a reply the reader did not expect: more data
		// than asked for, say): copy what there is.
		n = copy(r.dst, d.Opaque())
	}
	return n, eof, d.Err()
}

// readDataAt finds the data in READ's results: where the opaque's length is,
// after the status, the attributes, count and eof; -1 for a failed READ.
func readDataAt(res []byte) int {
	d := dec{oncrpc.NewDecoder(res)}
	if d.U32() != 0 {
		return -1
	}
	d.postOpSize()
	d.U32() // count
	d.U32() // eof
	if d.Err() != nil {
		return -1
	}
	return len(res) - len(d.Rest())
}

// Stable is how durably a WRITE must land before the reply.
type Stable uint32

const (
	Unstable Stable = 0
	DataSync Stable = 1
	FileSync Stable = 2
)

// Write writes p at off and returns how many bytes the server took. The data
// goes to the socket from p, in the same writev as the call's header, and
// nothing reads p once Write has returned, even if the server answered before
// it read all of p. If ctx ends, Write returns as Read does.
func (c *Client) Write(ctx context.Context, fh []byte, p []byte, off int64, how Stable) (int, error) {
	r := writeRequest(fh, p, off, how)
	defer putRequest(r)
	if err := c.conn().do(ctx, r, progNFS, 3, procWrite, r.args.Bytes(), p, oncrpc.Padding(len(p))); err != nil {
		return 0, err
	}
	return writeResult(r)
}

// WriteAsync starts what Write does and returns at once. done runs when the
// WRITE completes, as ReadAsync's does, and p is the caller's again once it
// runs: nothing reads p any more. If WriteAsync returns an error, the WRITE
// did not start and done does not run.
func (c *Client) WriteAsync(fh []byte, p []byte, off int64, how Stable, done func(n int, err error)) error {
	r := writeRequest(fh, p, off, how)
	r.onDone, r.writeDone = writeDone, done
	if err := c.conn().start(r, progNFS, 3, procWrite, r.args.Bytes(), p, oncrpc.Padding(len(p))); err != nil {
		putRequest(r)
		return err
	}
	return nil
}

func writeRequest(fh []byte, p []byte, off int64, how Stable) *request {
	r := getRequest()
	r.args.Opaque(fh)
	r.args.U64(uint64(off))
	r.args.U32(uint32(len(p)))
	r.args.U32(uint32(how))
	r.args.U32(uint32(len(p)))
	return r
}

func writeDone(r *request) {
	var n int
	err := r.err
	if err == nil {
		n, err = writeResult(r)
	}
	done := r.writeDone
	putRequest(r)
	done(n, err)
}

func writeResult(r *request) (int, error) {
	d := dec{oncrpc.NewDecoder(r.res)}
	if st := Status(d.U32()); st != 0 {
		return 0, st
	}
	d.wcc()
	n := d.U32()
	return int(n), d.Err()
}

// Commit flushes a file's unstable writes to stable storage.
func (c *Client) Commit(ctx context.Context, fh []byte) error {
	var e enc
	e.Opaque(fh)
	e.U64(0)
	e.U32(0)
	_, err := c.call(ctx, 21, e.Bytes())
	return err
}
