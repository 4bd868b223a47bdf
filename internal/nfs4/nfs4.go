// Package nfs4 is a small NFSv4.1 client for load generation (basin bench
// --nfs-version 4.1): a client ID (EXCHANGE_ID), one session of many slots
// (CREATE_SESSION) so that that many calls are in flight at once,
// RECLAIM_COMPLETE, the export's handle from the pseudo-root (PUTROOTFH,
// LOOKUP), and OPEN (create), READ, WRITE, COMMIT and CLOSE; DESTROY_SESSION
// and DESTROY_CLIENTID when done. Calls go with AUTH_SYS or with what
// Options.Sec sets up on each connection, such as an RPCSEC_GSS context with
// Kerberos (Krb5: krb5, krb5i, krb5p). Connections (nconnect) share the
// session; each has a security context of its own.
//
// The wire format comes from internal/oncrpc, RPCSEC_GSS from
// internal/oncrpc/rpcsecgss and the Kerberos GSS-API mechanism from
// internal/krb5gss.
package nfs4

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	krb5client "github.com/jcmturner/gokrb5/v8/client"

	"github.com/basin-nas/basin/internal/krb5gss"
	"github.com/basin-nas/basin/internal/oncrpc"
	"github.com/basin-nas/basin/internal/oncrpc/rpcsecgss"
)

// Options shape a Client.
type Options struct {
	// Conns is how many TCP connections (nconnect); default 1.
	Conns int
	// Slots is how many calls may be in flight at once (the session's
	// slots, as the server grants them, and no more than an RPCSEC_GSS
	// context's sequence window); default 64.
	Slots int
	// Port is the server's; default 2049.
	Port int
	// UID, GID and Machine are the AUTH_SYS identity, used unless Sec is set.
	UID, GID uint32
	Machine  string
	// Sec, if set, replaces AUTH_SYS: called on each new connection before
	// any other call, it returns the Auth of the connection's calls (Krb5).
	Sec func(ctx context.Context, c rpcsecgss.Caller) (oncrpc.Auth, error)
}

// Krb5 is an Options.Sec that establishes an RPCSEC_GSS context with the NFS
// service principal spn (such as "nfs/server.example.com") as cl's principal
// (cl has logged in), and calls with service svc: rpcsecgss.None (krb5),
// Integrity (krb5i) or Privacy (krb5p).
func Krb5(cl *krb5client.Client, spn string, svc rpcsecgss.Service) func(context.Context, rpcsecgss.Caller) (oncrpc.Auth, error) {
	return func(ctx context.Context, c rpcsecgss.Caller) (oncrpc.Auth, error) {
		in, err := krb5gss.NewInitiator(cl, spn)
		if err != nil {
			return nil, err
		}
		s, err := rpcsecgss.Init(ctx, c, progNFS, 4, in.Token(), func(reply []byte) ([]byte, rpcsecgss.Context, error) {
			k, err := in.Step(reply)
			if err != nil {
				return nil, nil, err
			}
			return nil, k, nil
		})
		if err != nil {
			return nil, err
		}
		return windowed{s.Auth(svc), s.Window()}, nil
	}
}

// windowed is an Auth whose server drops calls more than window sequence
// numbers behind the newest it has seen (RPCSEC_GSS): no more calls than that
// may be in flight on its connection.
type windowed struct {
	oncrpc.Auth
	window uint32
}

// MaxIO is the most a READ or WRITE of this client moves: larger ones are
// split (Read and Write return short counts).
const MaxIO = 1 << 20

// Client is an NFSv4.1 client with one session.
type Client struct {
	conns    []*conn
	next     atomic.Uint32
	clientID uint64
	session  [16]byte
	owner    []byte // open owner
	// slots holds the free slots; seqs[i] is slot i's next sequence id,
	// touched only by whoever holds the slot.
	slots chan uint32
	seqs  []uint32
	maxIO int
	// broken is the error of a call that failed its connection.
	broken atomic.Pointer[error]
	// Root is the handle of the directory Dial looked up.
	Root []byte
}

// Dial connects to host, sets up a client ID and a session, and looks up dir
// (the export's path, from the pseudo-root) into Root.
func Dial(ctx context.Context, host, dir string, o Options) (*Client, error) {
	if o.Conns < 1 {
		o.Conns = 1
	}
	if o.Slots < 1 {
		o.Slots = 64
	}
	if o.Port == 0 {
		o.Port = 2049
	}
	if o.Machine == "" {
		o.Machine, _ = os.Hostname()
	}
	addr := net.JoinHostPort(host, strconv.Itoa(o.Port))
	cn, err := dialConn(ctx, addr, &o)
	if err != nil {
		return nil, err
	}
	c := &Client{conns: []*conn{cn}}
	if w, ok := cn.auth.(windowed); ok && int(w.window) < o.Slots {
		o.Slots = int(w.window)
	}
	if err := c.establish(ctx, o.Slots); err != nil {
		cn.close()
		return nil, err
	}
	for len(c.conns) < o.Conns {
		cn, err := dialConn(ctx, addr, &o)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, cn)
	}
	if c.Root, err = c.lookupPath(ctx, dir); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// establish makes the client ID and the session, and says there is nothing
// to reclaim.
func (c *Client) establish(ctx context.Context, slots int) error {
	var verifier [8]byte
	if _, err := rand.Read(verifier[:]); err != nil {
		return err
	}
	c.owner = []byte(fmt.Sprintf("basin-bench-%x", verifier))
	cp := newCompound()
	cp.exchangeID(verifier, string(c.owner))
	r, err := c.raw(ctx, cp)
	if err != nil {
		return err
	}
	clientID, seq, err := r.exchangeID()
	if err != nil {
		return err
	}
	cp = newCompound()
	cp.createSession(clientID, seq, channelAttrs{maxReq: MaxIO + 64<<10, maxResp: MaxIO + 64<<10, maxRespCached: 4096,
		maxOps: 16, maxReqs: uint32(slots)})
	if r, err = c.raw(ctx, cp); err != nil {
		return err
	}
	id, fore, err := r.createSession()
	if err != nil {
		return err
	}
	if fore.maxReqs == 0 {
		return errors.New("nfs4: CREATE_SESSION granted no slots")
	}
	// Never more than asked for: a server's count sizes the slot table, and
	// slots stays within the RPCSEC_GSS window.
	fore.maxReqs = min(fore.maxReqs, uint32(slots))
	c.clientID, c.session = clientID, id
	c.maxIO = MaxIO
	// Room for the COMPOUND around the data, and for RPCSEC_GSS's wrapping.
	if lim := int(min(fore.maxReq, fore.maxResp)) - 4096; lim < c.maxIO {
		c.maxIO = lim &^ 4095
	}
	if c.maxIO < 4096 {
		return fmt.Errorf("nfs4: the server's session allows requests of %d bytes", fore.maxReq)
	}
	c.seqs = make([]uint32, fore.maxReqs)
	c.slots = make(chan uint32, fore.maxReqs)
	for i := range c.seqs {
		c.seqs[i] = 1
		c.slots <- uint32(i)
	}
	cp = newSeqCompound()
	cp.op(opReclaimComplete)
	cp.bool(false)
	_, err = c.run(ctx, cp, func(r *results) error { return r.skip(opReclaimComplete) })
	return err
}

// MaxIOSize is the most one READ or WRITE moves on this client's session.
func (c *Client) MaxIOSize() int { return c.maxIO }

// Resent is how many calls went again for want of a reply (conn.Call).
func (c *Client) Resent() int64 {
	var n int64
	for _, cn := range c.conns {
		n += cn.resent.Load()
	}
	return n
}

// Slots is how many slots the server granted.
func (c *Client) Slots() int { return len(c.seqs) }

func (c *Client) conn() *conn { return c.conns[int(c.next.Add(1))%len(c.conns)] }

// raw sends a COMPOUND without SEQUENCE (EXCHANGE_ID, CREATE_SESSION,
// DESTROY_*), on the first connection.
func (c *Client) raw(ctx context.Context, cp *compound) (*results, error) {
	res, err := c.conns[0].call(ctx, 1, cp.bytes())
	if err != nil {
		return nil, err
	}
	return newResults(res)
}

// run sends cp (from newSeqCompound) with SEQUENCE on a free slot, and
// read reads the results of the operations after it; it retries after
// NFS4ERR_DELAY and NFS4ERR_GRACE for up to a minute.
func (c *Client) run(ctx context.Context, cp *compound, read func(*results) error) (*results, error) {
	defer cp.put()
	give := time.Now().Add(time.Minute)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		r, err := c.runOnce(ctx, cp, read)
		var oe *OpError
		if !errors.As(err, &oe) || (oe.Status != ErrDelay && oe.Status != ErrGrace) || time.Now().After(give) {
			return r, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

func (c *Client) runOnce(ctx context.Context, cp *compound, read func(*results) error) (*results, error) {
	var slot uint32
	select {
	case slot = <-c.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := c.broken.Load(); err != nil {
		c.slots <- slot // for the next caller to fail as well
		return nil, *err
	}
	cp.setSequence(c.session, c.seqs[slot], slot, uint32(len(c.seqs)-1))
	res, err := c.conn().call(ctx, 1, cp.bytes())
	if err != nil {
		// Whether the server saw the call is unknown: the slot's sequence
		// id is too, so the slot is not used again. A call that failed
		// otherwise than by its context's end failed the connection: every
		// call after it fails.
		if ctx.Err() == nil {
			c.broken.CompareAndSwap(nil, &err)
			c.slots <- slot
		}
		return nil, err
	}
	r, err := newResults(res)
	if err == nil {
		// NFS4ERR_RETRY_UNCACHED_REP: a call sent again (conn.Call) that
		// the server had done after all; the slot's sequence id was used.
		if err = r.sequence(); err == nil || errors.Is(err, Status(10068)) {
			c.seqs[slot]++
		}
	}
	c.slots <- slot
	if err != nil {
		return nil, err
	}
	return r, read(r)
}

// lookupPath returns the handle of path from the pseudo-root.
func (c *Client) lookupPath(ctx context.Context, path string) ([]byte, error) {
	cp := newSeqCompound()
	cp.op(opPutRootFH)
	var names []string
	for _, name := range strings.Split(path, "/") {
		if name != "" {
			cp.lookup(name)
			names = append(names, name)
		}
	}
	cp.op(opGetFH)
	var fh []byte
	_, err := c.run(ctx, cp, func(r *results) (err error) {
		if err := r.skip(opPutRootFH); err != nil {
			return err
		}
		for _, name := range names {
			if err := r.skip(opLookup); err != nil {
				return fmt.Errorf("lookup %s: %w", name, err)
			}
		}
		fh, err = r.getFH()
		return err
	})
	return fh, err
}

// File is a file opened for reading and writing.
type File struct {
	c    *Client
	FH   []byte
	sid  StateID
	Size int64 // when opened
}

// Create opens name in dir for reading and writing, made with mode if
// missing.
func (c *Client) Create(ctx context.Context, dir []byte, name string, mode uint32) (*File, error) {
	cp := newSeqCompound()
	cp.putFH(dir)
	cp.open(c.clientID, c.owner, name, mode)
	cp.op(opGetFH)
	cp.getAttrSize()
	f := &File{c: c}
	_, err := c.run(ctx, cp, func(r *results) (err error) {
		if err := r.skip(opPutFH); err != nil {
			return err
		}
		if f.sid, err = r.open(); err != nil {
			return err
		}
		if f.FH, err = r.getFH(); err != nil {
			return err
		}
		f.Size, err = r.getAttrSize()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return f, nil
}

// Read reads at most MaxIOSize bytes into p at off: how many came, and
// whether they end the file.
func (f *File) Read(ctx context.Context, p []byte, off int64) (n int, eof bool, err error) {
	if len(p) > f.c.maxIO {
		p = p[:f.c.maxIO]
	}
	cp := newSeqCompound()
	cp.putFH(f.FH)
	cp.read(f.sid, off, uint32(len(p)))
	_, err = f.c.run(ctx, cp, func(r *results) (err error) {
		if err := r.skip(opPutFH); err != nil {
			return err
		}
		n, eof, err = r.readInto(p)
		return err
	})
	return n, eof, err
}

// Write writes at most MaxIOSize bytes of p at off, and returns how many the
// server took.
func (f *File) Write(ctx context.Context, p []byte, off int64, how Stable) (n int, err error) {
	if len(p) > f.c.maxIO {
		p = p[:f.c.maxIO]
	}
	cp := newSeqCompound()
	cp.putFH(f.FH)
	cp.write(f.sid, off, how, p)
	_, err = f.c.run(ctx, cp, func(r *results) (err error) {
		if err := r.skip(opPutFH); err != nil {
			return err
		}
		n, err = r.write()
		if err == nil && (n < 0 || n > len(p)) {
			n, err = 0, fmt.Errorf("nfs4: WRITE of %d bytes answered %d written", len(p), n)
		}
		return err
	})
	return n, err
}

// Commit commits the file's unstable writes.
func (f *File) Commit(ctx context.Context) error {
	cp := newSeqCompound()
	cp.putFH(f.FH)
	cp.commit()
	_, err := f.c.run(ctx, cp, func(r *results) error {
		if err := r.skip(opPutFH); err != nil {
			return err
		}
		return r.skip(opCommit)
	})
	return err
}

// Close closes the file's open.
func (f *File) Close(ctx context.Context) error {
	cp := newSeqCompound()
	cp.putFH(f.FH)
	cp.close(f.sid)
	_, err := f.c.run(ctx, cp, func(r *results) error {
		if err := r.skip(opPutFH); err != nil {
			return err
		}
		return r.skip(opClose)
	})
	return err
}

// Close destroys the session and the client ID (best effort) and closes the
// connections.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.seqs != nil {
		cp := newCompound()
		cp.op(opDestroySession)
		cp.Fixed(c.session[:])
		c.raw(ctx, cp) //nolint:errcheck // closing anyway
		cp = newCompound()
		cp.op(opDestroyClientID)
		cp.U64(c.clientID)
		c.raw(ctx, cp) //nolint:errcheck // closing anyway
	}
	for _, cn := range c.conns {
		cn.close()
	}
	return nil
}
