// Package nfs3 is a small NFSv3 client for load generation and for protocol
// tests: ONC RPC over TCP with record marking, AUTH_SYS, portmapper GETPORT
// (or fixed ports), MOUNT MNT and EXPORT, and the NFSv3 procedures a benchmark
// needs (LOOKUP, CREATE, READ, WRITE, COMMIT) plus those an attack suite needs
// (GETATTR, SETATTR, READDIR, READDIRPLUS, MKDIR, SYMLINK, MKNOD, REMOVE,
// RMDIR, RENAME, LINK, CREATE in all three modes, and Raw calls). Every call
// takes any handle and any name bytes as given, and a failed procedure returns
// its nfsstat3 as a Status error.
//
// Calls on one connection are pipelined: any number of goroutines may call at
// once, and one reader goroutine per connection completes calls by XID. So N
// goroutines on a connection keep N requests in flight, which is what a queue
// depth means to the server. ReadAsync and WriteAsync start a call without a
// goroutine waiting for it: the reader runs the caller's function when the
// reply comes, and that function may start the next call at once, as an event
// loop like libnfs's does. A call completes only once it has been sent, even
// if its reply comes first (a server may answer a call it has not read whole):
// then the goroutine that finishes sending it completes it.
//
// A call whose context ends before its reply begins to come returns once its
// request has left the send queue, and the reply is skipped when it comes;
// once the reply has begun, the reader is reading it (maybe into the caller's
// buffer), and the call fails the connection to stop it.
//
// READ and WRITE, the calls of a load generator, cost no allocation and no copy
// of their data on the client's side: a call's state (its encoded header, the
// signal that its reply came, the buffer its results land in) is pooled; a
// WRITE's data goes to the socket from the caller's buffer, in the same writev
// as its header; and the reader reads a READ reply's data from the socket
// straight into the caller's buffer. Requests go out in batches: while the
// reader is completing replies it has already read, the calls started meanwhile
// queue, and the reader writes them in one writev before it waits for more;
// otherwise the caller that finds nobody writing writes the queue.
//
// The XDR and ONC RPC wire format comes from internal/oncrpc; this package keeps
// the pipelining. It imports nothing else of Basin's.
package nfs3

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// Auth is an AUTH_SYS identity.
type Auth struct {
	UID, GID uint32
	Machine  string
}

// conn is one TCP connection carrying pipelined calls.
type conn struct {
	c    net.Conn
	auth []byte // encoded opaque_auth (flavor + body)

	// Sending (see send): requests queue in out, and whoever writes takes
	// the queue until it is empty.
	wmu     sync.Mutex
	out     net.Buffers
	spare   net.Buffers
	wbuf    net.Buffers // what WriteTo writes: a field, so that it is not allocated per write
	writing bool        // someone is writing the queue
	busy    bool        // the reader is completing replies it holds, and writes the queue after
	queued  uint64
	// Requests 1 to written (in queue order) have been written, or never
	// will be: no writer reads them any more. Stored under wmu; the reader
	// loads it without (complete).
	written  atomic.Uint64
	wrote    *sync.Cond // on wmu: broadcast when written grows, a writer stops, the connection fails
	writeErr error      // set once nothing will write any more
	// Requests whose replies came before they were written (complete): the
	// writer that writes them completes them (release). ready is release's.
	early, ready []*request
	// The reader's writes never wait for the socket (tryWrite): raw is the
	// socket (nil if the connection has none), try* tryWrite's state.
	raw      syscall.RawConn
	tryIOV   [][]byte
	tryN     int
	tryErr   error
	tryWrite func(fd uintptr) bool

	mu      sync.Mutex
	pending map[uint32]*request
	why     error // why abort failed the connection

	xid      atomic.Uint32
	inFlight atomic.Int64
	maxSeen  atomic.Int64
}

// request is one call's state, from its encoding to its results. Requests are
// pooled (getRequest, putRequest): once warm, a call allocates nothing.
type request struct {
	xid  uint32
	seq  uint64 // its place in the connection's send queue
	hdr  []byte // record mark and CALL header
	args enc    // arguments, for callers that encode them here
	iov  [4][]byte

	// Completing the request (finish) calls onDone if it is set, else
	// signals done. A request completes once its reply has been read (or
	// the connection has failed) and it has been written, whichever is last.
	done   chan struct{}
	onDone func(*request)

	res []byte // the procedure's results, after the reply header
	err error
	// dst, if not nil, receives the data of a reply whose results end in
	// opaque data (READ's): dataAt returns where that opaque's length word
	// is in the results, or -1 (an error status, say) to have the whole
	// results in res instead. n is how many bytes went to dst, -1 if none
	// did; res then ends with the opaque's length word.
	dst    []byte
	dataAt func(res []byte) int
	n      int

	// What ReadAsync and WriteAsync call back.
	readDone  func(n int, eof bool, err error)
	writeDone func(n int, err error)
}

var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

func getRequest() *request {
	r := requests.Get().(*request)
	r.args.Reset()
	r.res, r.err, r.n = r.res[:0], nil, -1
	return r
}

// putRequest returns r to the pool, once nothing refers to it: conn.do has
// returned, or its onDone runs (neither happens before it has been written).
func putRequest(r *request) {
	if cap(r.res) > 1<<20 {
		r.res = nil // an unusually large reply: don't keep its buffer
	}
	r.dst, r.dataAt, r.iov, r.onDone, r.readDone, r.writeDone = nil, nil, [4][]byte{}, nil, nil, nil
	requests.Put(r)
}

func (r *request) finish() {
	if r.onDone != nil {
		r.onDone(r)
		return
	}
	r.done <- struct{}{}
}

func dial(ctx context.Context, addr string, a Auth, localIP string) (*conn, error) {
	var d net.Dialer
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cred := oncrpc.AuthSys{Stamp: uint32(time.Now().Unix()), Machine: a.Machine, UID: a.UID, GID: a.GID}.Cred()
	cn := &conn{c: c, auth: cred, pending: map[uint32]*request{}}
	cn.wrote = sync.NewCond(&cn.wmu)
	if sc, ok := c.(syscall.Conn); ok {
		cn.raw, _ = sc.SyscallConn()
	}
	cn.tryWrite = cn.writevOnce
	cn.xid.Store(uint32(time.Now().UnixNano()))
	go cn.read()
	return cn, nil
}

// readBufferSize is the reader's buffer: many small replies per system call,
// and little of a large READ reply copied through it (the rest of the data is
// read from the socket into the caller's buffer).
const readBufferSize = 64 << 10

// read completes calls with their replies until the connection fails.
func (cn *conn) read() {
	br := bufio.NewReaderSize(cn.c, readBufferSize)
	busy := false
	var err error
	var failed *request
	for {
		// While the reader completes calls (and completes the replies it
		// holds whole, without a system call), the calls that callers and
		// completions start queue; the queue goes out before the reader may
		// wait for the socket.
		if busy && !replyBuffered(br) {
			busy = false
			cn.wmu.Lock()
			cn.busy = false
			if len(cn.out) > 0 && !cn.writing {
				cn.flush(false) // unlocks
			} else {
				cn.wmu.Unlock()
			}
		}
		var r *request
		r, err = cn.readReply(br)
		if err != nil {
			failed = r
			break
		}
		if r == nil {
			continue
		}
		if !busy {
			busy = true
			cn.wmu.Lock()
			cn.busy = true
			cn.wmu.Unlock()
		}
		cn.complete(r)
	}
	// Nothing may write any more, and no write may still be reading a
	// request's buffers when its call fails and its caller reuses them.
	cn.c.Close()
	lost := cn.lost(err)
	cn.wmu.Lock()
	for cn.writing {
		cn.wrote.Wait()
	}
	if cn.writeErr == nil {
		cn.writeErr = lost
	}
	clear(cn.out)
	cn.out, cn.busy = nil, false
	cn.written.Store(cn.queued)
	early := cn.early
	cn.early = nil
	cn.wrote.Broadcast() // the calls that wait for a request queued here (waitWritten)
	cn.wmu.Unlock()
	for _, r := range early {
		r.finish()
	}

	cn.mu.Lock()
	all := make([]*request, 0, len(cn.pending)+1)
	for xid, r := range cn.pending {
		delete(cn.pending, xid)
		all = append(all, r)
	}
	cn.mu.Unlock()
	if failed != nil {
		all = append(all, failed)
	}
	for _, r := range all {
		r.err = lost
		r.finish() // not under mu: a callback may start another call
	}
}

// replyBuffered says whether the reader holds the next reply whole.
func replyBuffered(br *bufio.Reader) bool {
	if br.Buffered() < 4 {
		return false
	}
	mark, _ := br.Peek(4)
	last, n := oncrpc.LastFragment(binary.BigEndian.Uint32(mark))
	return last && br.Buffered()-4 >= n
}

// complete completes r, whose reply the reader has read, once r has been
// written: a server may answer a call before it has read it all, and until
// then a writer may still be reading r's header and a WRITE's data (the
// caller's, who reuses it once the call completes). Then the writer that
// writes r completes it (release).
func (cn *conn) complete(r *request) {
	if r.seq > cn.written.Load() {
		cn.wmu.Lock()
		if r.seq > cn.written.Load() {
			cn.early = append(cn.early, r)
			cn.wmu.Unlock()
			return
		}
		cn.wmu.Unlock()
	}
	r.finish()
}

// release completes the requests whose replies came early (complete) that
// have now been written. The writer calls it with wmu held, after it has
// written; release unlocks wmu while it completes them.
func (cn *conn) release() {
	if len(cn.early) == 0 {
		return
	}
	written := cn.written.Load()
	ready, early := cn.ready[:0], cn.early[:0]
	for _, r := range cn.early {
		if r.seq <= written {
			ready = append(ready, r)
		} else {
			early = append(early, r)
		}
	}
	clear(cn.early[len(early):])
	cn.early = early
	cn.wmu.Unlock()
	for _, r := range ready {
		r.finish()
	}
	clear(ready)
	cn.wmu.Lock()
	cn.ready = ready[:0]
}

// take removes the request a reply answers from the pending calls.
func (cn *conn) take(xid uint32) *request {
	cn.mu.Lock()
	r := cn.pending[xid]
	delete(cn.pending, xid)
	cn.mu.Unlock()
	if r != nil {
		cn.inFlight.Add(-1)
	}
	return r
}

// readReply reads one reply and returns the request it completes (nil for a
// reply nobody waits for any more). An error ends the connection; the request
// returned with it has not been completed.
func (cn *conn) readReply(br *bufio.Reader) (*request, error) {
	mark, err := br.Peek(4)
	if err != nil {
		return nil, err
	}
	last, n := oncrpc.LastFragment(binary.BigEndian.Uint32(mark))
	if n > oncrpc.MaxRecord {
		return nil, errors.New("rpc: record larger than 64 MiB")
	}
	if !last {
		// A reply in several fragments (Ganesha sends one): join them.
		msg, err := oncrpc.ReadRecord(br)
		if err != nil || len(msg) < 4 {
			return nil, errors.Join(err, errors.New("rpc: short reply"))
		}
		r := cn.take(binary.BigEndian.Uint32(msg))
		if r != nil {
			at, err := oncrpc.ParseReplyHeader(msg)
			r.err = err
			if err == nil {
				r.res = append(r.res, msg[at:]...)
			}
		}
		return r, nil
	}
	br.Discard(4)
	// Look at the start of the reply where it lies in the reader's buffer: a
	// small reply whole, a large one's headers.
	head, err := br.Peek(min(n, readBufferSize))
	if err != nil {
		return nil, err
	}
	if len(head) < 4 {
		return nil, errors.New("rpc: short reply")
	}
	r := cn.take(binary.BigEndian.Uint32(head))
	if r == nil {
		_, err := br.Discard(n) // a late reply to a call that gave up waiting
		return nil, err
	}
	at, err := oncrpc.ParseReplyHeader(head)
	if err != nil {
		r.err = err
		_, err := br.Discard(n)
		return r, err
	}
	results := head[at:]
	if r.dst != nil {
		if p := r.dataAt(results); p >= 0 && p+4 <= len(results) {
			count := int(binary.BigEndian.Uint32(results[p:]))
			pad := len(oncrpc.Padding(count))
			if count <= len(r.dst) && at+p+4+count+pad == n {
				// The data goes from the socket (or what of it the
				// reader holds) straight into the caller's buffer.
				r.res = append(r.res, results[:p+4]...)
				br.Discard(at + p + 4) // buffered: cannot fail
				if _, err := io.ReadFull(br, r.dst[:count]); err != nil {
					return r, err
				}
				r.n = count
				_, err := br.Discard(pad)
				return r, err
			}
		}
	}
	// The whole results, into the request's own buffer.
	r.res = append(r.res, results...)
	br.Discard(len(head))
	// The buffer grows as the bytes come, not as the record mark claims.
	for k := n - at - len(results); k > 0; {
		c := min(k, 1<<20)
		r.res = append(r.res, make([]byte, c)...)
		if _, err := io.ReadFull(br, r.res[len(r.res)-c:]); err != nil {
			return r, err
		}
		k -= c
	}
	return r, nil
}

// start sends r (its header is made here; args are the arguments' pieces,
// sent after it in one writev) and returns without waiting for the reply. On
// an error the call is not pending and will not complete; otherwise it
// completes once its reply has been read (or the connection has failed) and
// it has been written, whichever comes last.
func (cn *conn) start(r *request, prog, vers, proc uint32, args ...[]byte) error {
	xid := cn.xid.Add(1)
	r.xid = xid
	size := 0
	for _, a := range args {
		size += len(a)
	}
	r.hdr = oncrpc.AppendCallHeader(r.hdr[:0], xid, prog, vers, proc, cn.auth, size)
	iov := append(r.iov[:0], r.hdr)
	iov = append(iov, args...)
	if pending, err := cn.send(r, iov); err != nil && (!pending || cn.forget(xid)) {
		return err
	}
	// Queued or written, or failed after the reader took the call: it
	// completes either way (and r may already be another call's: only xid
	// is this one's).
	return nil
}

// do sends r and waits for its reply. When do returns, nothing refers to r any
// longer: neither the send queue nor the reader.
//
// If ctx ends first, do returns ctx.Err(). A reply that has not begun to come
// is skipped when it does; but once the reader has taken the call and reads
// its reply (into r, or into the caller's buffer: r.dst), it can only be
// stopped by failing the connection, and every other call on it fails too;
// do returns once the reader has stopped.
func (cn *conn) do(ctx context.Context, r *request, prog, vers, proc uint32, args ...[]byte) error {
	if err := cn.start(r, prog, vers, proc, args...); err != nil {
		return err
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
	}
	if cn.forget(r.xid) {
		// No reply will be delivered; wait until the request (and a
		// WRITE's data, the caller's) has left the send queue.
		cn.waitWritten(r.seq)
		return ctx.Err()
	}
	select {
	case <-r.done: // it came meanwhile
		return r.err
	default:
	}
	cn.abort(fmt.Errorf("rpc: a call gave up its reply halfway: %w", ctx.Err()))
	<-r.done // the reader has stopped, and completed r
	return ctx.Err()
}

// lost is the error of calls on a connection that failed with err, or that
// abort failed.
func (cn *conn) lost(err error) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.why != nil {
		err = cn.why
	}
	return fmt.Errorf("rpc: connection lost: %w", err)
}

// abort fails the connection because of why: a read or write blocked on it
// fails at once, the reader stops, and every call on the connection fails.
func (cn *conn) abort(why error) {
	cn.mu.Lock()
	if cn.why == nil {
		cn.why = why
	}
	cn.mu.Unlock()
	cn.c.Close()
}

// send makes r pending and queues its pieces. Unless somebody is writing the
// queue or the reader is about to, the caller writes it. It returns whether r
// became pending: not if the connection had failed.
func (cn *conn) send(r *request, iov [][]byte) (pending bool, err error) {
	cn.wmu.Lock()
	if cn.writeErr != nil { // set before the reader fails the pending calls
		err := cn.writeErr
		cn.wmu.Unlock()
		return false, err
	}
	cn.queued++
	r.seq = cn.queued
	// Pending only now that its place in the queue is known: the reader
	// reads seq (complete).
	cn.mu.Lock()
	cn.pending[r.xid] = r
	cn.mu.Unlock()
	// In flight: sent (or queued to be), reply not yet read (take decrements).
	n := cn.inFlight.Add(1)
	for {
		m := cn.maxSeen.Load()
		if n <= m || cn.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	cn.out = append(cn.out, iov...)
	if cn.writing || cn.busy {
		cn.wmu.Unlock()
		return true, nil
	}
	return true, cn.flush(true)
}

// flush writes the queue, and whatever is added to it meanwhile, until it is
// empty. It is called with wmu held and nobody writing, and unlocks it.
//
// The reader calls it with wait false: it must not wait for the socket to take
// more (the server may be waiting for the reader to take its replies before it
// reads more requests), so whatever the socket does not take at once goes to
// a goroutine that waits to write it.
func (cn *conn) flush(wait bool) error {
	cn.writing = true
	for len(cn.out) > 0 && cn.writeErr == nil {
		batch, upto := cn.out, cn.queued
		cn.out = cn.spare[:0]
		cn.wmu.Unlock()
		var rest net.Buffers
		var err error
		if wait || cn.raw == nil {
			cn.wbuf = batch // WriteTo consumes the slice it is given
			_, err = cn.wbuf.WriteTo(cn.c)
			cn.wbuf = nil
		} else {
			rest, err = cn.writeNow(batch)
		}
		cn.wmu.Lock()
		if err == nil && len(rest) > 0 {
			// The socket is full. rest is the tail of batch: the queue
			// goes on after it.
			cn.out = append(rest, cn.out...)
			go func() {
				cn.wmu.Lock()
				cn.writing = false
				cn.flush(true)
			}()
			cn.wmu.Unlock()
			return nil
		}
		clear(batch)
		cn.spare = batch[:0]
		if err != nil {
			cn.writeErr = cn.lost(fmt.Errorf("send: %w", err))
			clear(cn.out)
			cn.out = cn.out[:0]
			upto = cn.queued // nothing will write the rest
			cn.c.Close()     // the calls queued behind fail with the connection
		}
		cn.written.Store(upto)
		cn.wrote.Broadcast()
		cn.release()
	}
	cn.writing = false
	cn.wrote.Broadcast()
	err := cn.writeErr
	cn.wmu.Unlock()
	return err
}

// writeNow writes what of bufs the socket takes without waiting, and returns
// the rest.
func (cn *conn) writeNow(bufs net.Buffers) (net.Buffers, error) {
	for len(bufs) > 0 {
		cn.tryIOV = bufs[:min(len(bufs), 1024)] // IOV_MAX
		want := 0
		for _, b := range cn.tryIOV {
			want += len(b)
		}
		if err := cn.raw.Write(cn.tryWrite); err != nil {
			return nil, err
		}
		n, err := cn.tryN, cn.tryErr
		cn.tryIOV = nil
		if err == unix.EAGAIN || err == unix.EINTR {
			n, err = 0, nil
		}
		if err != nil {
			return nil, err
		}
		for left := n; len(bufs) > 0 && (left > 0 || len(bufs[0]) == 0); { // drop what was written
			k := min(left, len(bufs[0]))
			bufs[0], left = bufs[0][k:], left-k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
		if n < want {
			return bufs, nil
		}
	}
	return nil, nil
}

// writevOnce is tryWrite: one writev of tryIOV, whatever it writes.
func (cn *conn) writevOnce(fd uintptr) bool {
	cn.tryN, cn.tryErr = unix.Writev(int(fd), cn.tryIOV)
	return true
}

// waitWritten waits until request number seq has been written (or the
// connection cannot write any more).
func (cn *conn) waitWritten(seq uint64) {
	cn.wmu.Lock()
	for cn.written.Load() < seq && cn.writeErr == nil {
		cn.wrote.Wait()
	}
	cn.wmu.Unlock()
}

// forget removes a call from the pending ones; false if the reader already
// took it.
func (cn *conn) forget(xid uint32) bool {
	cn.mu.Lock()
	_, ok := cn.pending[xid]
	if ok {
		delete(cn.pending, xid)
		cn.inFlight.Add(-1)
	}
	cn.mu.Unlock()
	return ok
}

// call sends one call, whose arguments are the concatenation of args, and waits
// for its reply; it returns the procedure's results (a copy the caller owns).
func (cn *conn) call(ctx context.Context, prog, vers, proc uint32, args ...[]byte) ([]byte, error) {
	r := getRequest()
	defer putRequest(r)
	if err := cn.do(ctx, r, prog, vers, proc, args...); err != nil {
		return nil, err
	}
	return bytes.Clone(r.res), nil
}

func (cn *conn) close() error { return cn.c.Close() }

// enc and dec are oncrpc's XDR encoder and decoder, to which this package
// adds NFSv3's types.
type (
	enc struct{ oncrpc.Encoder }
	dec struct{ oncrpc.Decoder }
)

func newDec(b []byte) *dec { return &dec{oncrpc.NewDecoder(b)} }
