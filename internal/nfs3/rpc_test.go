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
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// call is a request as a fake server sees it.
type call struct {
	xid, proc uint32
	args      []byte
}

// fakeServer accepts one connection on loopback and hands every call to
// handle, which answers with reply (or not at all). It stands in for Ganesha
// where a test needs to choose the replies: their order, their sizes, their
// fragments, a dropped connection.
type fakeServer struct {
	conn net.Conn
	wmu  sync.Mutex
	w    *bufio.Writer
}

// newRawServer connects a client to a server on loopback, and returns the
// server's side of the connection, for a test to play the server itself.
func newRawServer(t *testing.T) (net.Conn, *conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cn, err := dial(context.Background(), ln.Addr().String(), Auth{UID: 1, GID: 1, Machine: "test"}, "")
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	sc := <-accepted
	t.Cleanup(func() {
		cn.close()
		ln.Close()
		if sc != nil {
			sc.Close()
		}
	})
	if sc == nil {
		t.Fatal("accept failed")
	}
	return sc, cn
}

// A call's arguments are its own unless reuse is set: then the server reads
// every call into the same buffer and allocates nothing.
func newFakeServer(t *testing.T, reuse bool, handle func(s *fakeServer, c call)) (*fakeServer, *conn) {
	t.Helper()
	sc, cn := newRawServer(t)
	s := &fakeServer{conn: sc, w: bufio.NewWriterSize(sc, 1<<20)}
	go func() {
		r := bufio.NewReader(sc)
		var buf []byte
		mark := make([]byte, 4)
		for {
			var msg []byte
			var err error
			if reuse { // one fragment per call, as nfs3 sends
				if _, err := io.ReadFull(r, mark); err != nil {
					return
				}
				n := int(binary.BigEndian.Uint32(mark) &^ 0x80000000)
				if cap(buf) < n {
					buf = make([]byte, n)
				}
				msg = buf[:n]
				_, err = io.ReadFull(r, msg)
			} else {
				msg, err = oncrpc.ReadRecord(r)
			}
			if err != nil {
				return
			}
			c, err := parseCall(msg)
			if err != nil {
				t.Errorf("call header: %v", err)
				return
			}
			handle(s, c)
		}
	}()
	return s, cn
}

// parseCall decodes a call's header.
func parseCall(msg []byte) (call, error) {
	d := oncrpc.NewDecoder(msg)
	xid := d.U32()
	for range 4 { // CALL, RPC version, program, version
		d.U32()
	}
	proc := d.U32()
	d.U32()
	d.Opaque() // credential
	d.U32()
	d.Opaque() // verifier
	return call{xid: xid, proc: proc, args: d.Rest()}, d.Err()
}

// reply sends an accepted reply with results, split into fragments of at most
// frag bytes if frag > 0.
func (s *fakeServer) reply(xid uint32, results []byte, frag int) { s.replyStat(xid, 0, results, frag) }

// replyStat is reply with an accept_stat.
func (s *fakeServer) replyStat(xid, stat uint32, results []byte, frag int) {
	s.send(record(xid, stat, results, frag))
}

// send writes b as it is, in one write.
func (s *fakeServer) send(b []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.w.Write(b)
	s.w.Flush()
}

// record is a reply as the server sends it: record marks and all.
func record(xid, stat uint32, results []byte, frag int) []byte {
	var e oncrpc.Encoder
	e.U32(xid)
	e.U32(1) // REPLY
	e.U32(0) // accepted
	e.U32(0) // verifier AUTH_NONE
	e.U32(0)
	e.U32(stat)
	msg := append(e.Bytes(), results...)
	if frag <= 0 {
		frag = len(msg)
	}
	var b []byte
	for len(msg) > 0 {
		k := min(frag, len(msg))
		mark := uint32(k)
		if k == len(msg) {
			mark |= 0x80000000
		}
		b = binary.BigEndian.AppendUint32(b, mark)
		b = append(b, msg[:k]...)
		msg = msg[k:]
	}
	return b
}

// readArgs decodes READ's arguments.
func readArgs(c call) (fh []byte, off uint64, count uint32) {
	d := oncrpc.NewDecoder(c.args)
	fh = d.Opaque()
	off = d.U64()
	count = d.U32()
	return fh, off, count
}

// writeArgs decodes WRITE's arguments, which must be whole.
func writeArgs(c call) (off uint64, count uint32, data []byte, err error) {
	d := oncrpc.NewDecoder(c.args)
	d.Opaque() // fh
	off = d.U64()
	count = d.U32()
	d.U32() // stable
	data = d.Opaque()
	if d.Err() != nil || len(d.Rest()) != 0 || int(count) != len(data) {
		err = fmt.Errorf("WRITE at %d: %v, %d bytes left, count %d, data %d", off, d.Err(), len(d.Rest()), count, len(data))
	}
	return off, count, data, err
}

// pattern is the data the fake file holds at off.
func pattern(off uint64, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte((off + uint64(i)) * 7 >> 3)
	}
	return p
}

// readResults encodes READ3resok with attributes (or not) and data.
func readResults(attrs bool, data []byte, eof bool) []byte {
	var e enc
	e.U32(0) // NFS3_OK
	if attrs {
		e.U32(1)
		encFattr(&e, Attr{Type: TypeReg, Size: 1 << 40})
	} else {
		e.U32(0)
	}
	e.U32(uint32(len(data)))
	if eof {
		e.U32(1)
	} else {
		e.U32(0)
	}
	e.Opaque(data)
	return e.Bytes()
}

// writeResults encodes WRITE3resok: count bytes written, unstable.
func writeResults(count uint32) []byte {
	var e enc
	e.U32(0) // NFS3_OK
	e.U32(0) // wcc: no pre-op attributes
	e.U32(0) // no post-op attributes
	e.U32(count)
	e.U32(0)                 // UNSTABLE
	e.Fixed(make([]byte, 8)) // verifier
	return e.Bytes()
}

// serveReads answers every READ with the pattern at its offset, attributes on
// every other one.
func serveReads(s *fakeServer, c call) {
	_, off, count := readArgs(c)
	s.reply(c.xid, readResults(off%2 == 0, pattern(off, int(count)), false), 0)
}

// Concurrent READs of many sizes, small and larger than the reader's buffer,
// each get their own data in their own buffer, with attributes or without.
func TestReadPipelined(t *testing.T) {
	_, cn := newFakeServer(t, false, serveReads)
	c := &Client{conns: []*conn{cn}}
	sizes := []int{1, 3, 4096, 65536, 65537, readBufferSize - 100, 1 << 20, 3<<20 + 5}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				n := sizes[(g+i)%len(sizes)]
				off := uint64(g*1000003 + i*7919)
				p := make([]byte, n)
				got, eof, err := c.Read(context.Background(), []byte("fh"), p, int64(off))
				if err != nil || got != n || eof {
					t.Errorf("read %d at %d: %d, %v, %v", n, off, got, eof, err)
					return
				}
				if !bytes.Equal(p, pattern(off, n)) {
					t.Errorf("read %d at %d: wrong data", n, off)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m := c.MaxInFlight(); m < 2 {
		t.Errorf("at most %d calls in flight from 16 goroutines", m)
	}
}

// Replies come in any order: the server answers each batch of 8 READs last
// first.
func TestReadOutOfOrder(t *testing.T) {
	var mu sync.Mutex
	var held []call
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		mu.Lock()
		held = append(held, c)
		batch := held
		if len(held) == 8 {
			held = nil
		}
		mu.Unlock()
		if len(batch) == 8 {
			for i := len(batch) - 1; i >= 0; i-- {
				serveReads(s, batch[i])
			}
		}
	})
	c := &Client{conns: []*conn{cn}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(g) << 20
			p := make([]byte, 100000)
			if n, _, err := c.Read(context.Background(), nil, p, int64(off)); err != nil || n != len(p) || !bytes.Equal(p, pattern(off, len(p))) {
				t.Errorf("read at %d: %d %v", off, n, err)
			}
		}()
	}
	wg.Wait()
}

// A reply the reader cannot read into the caller's buffer as it streams in —
// in several fragments, or with more data than asked for — is still read
// whole, and copied.
func TestReadUnusualReplies(t *testing.T) {
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		_, off, count := readArgs(c)
		switch off {
		case 1: // fragments of 1000 bytes
			s.reply(c.xid, readResults(true, pattern(off, int(count)), true), 1000)
		case 2: // 10 bytes more than asked for
			s.reply(c.xid, readResults(false, pattern(off, int(count)+10), false), 0)
		case 3: // NFS3ERR_IO, with attributes
			var e enc
			e.U32(5)
			e.U32(0)
			s.reply(c.xid, e.Bytes(), 0)
		case 4: // a short read at the end of the file
			s.reply(c.xid, readResults(true, pattern(off, 10), true), 0)
		case 5: // not run: procedure unavailable
			s.replyStat(c.xid, 3, nil, 0)
		}
	})
	c := &Client{conns: []*conn{cn}}
	ctx := context.Background()
	p := make([]byte, 200000)
	if n, eof, err := c.Read(ctx, nil, p, 1); err != nil || n != len(p) || !eof || !bytes.Equal(p, pattern(1, len(p))) {
		t.Errorf("fragmented reply: %d %v %v", n, eof, err)
	}
	for _, size := range []int{5000, readBufferSize + 5000} {
		p = make([]byte, size)
		if n, _, err := c.Read(ctx, nil, p, 2); err != nil || n != len(p) || !bytes.Equal(p, pattern(2, len(p))) {
			t.Errorf("more data than asked for (%d): %d %v", size, n, err)
		}
	}
	p = make([]byte, 5000)
	if n, _, err := c.Read(ctx, nil, p, 3); !errors.Is(err, Status(5)) || n != 0 || !bytes.Equal(p, make([]byte, 5000)) {
		t.Errorf("NFS3ERR_IO: %d %v (buffer touched: %v)", n, err, !bytes.Equal(p, make([]byte, 5000)))
	}
	if n, eof, err := c.Read(ctx, nil, p, 4); err != nil || n != 10 || !eof || !bytes.Equal(p[:10], pattern(4, 10)) {
		t.Errorf("short read: %d %v %v", n, eof, err)
	}
	var re *oncrpc.Error
	if _, _, err := c.Read(ctx, nil, p, 5); !errors.As(err, &re) || re.Stat != 3 {
		t.Errorf("procedure unavailable: %v", err)
	}
	// The connection goes on after all of these.
	if n, _, err := c.Read(ctx, nil, p, 4); err != nil || n != 10 {
		t.Errorf("read after: %d %v", n, err)
	}
}

// Calls other than READ and WRITE get their results whole, theirs to keep.
func TestCallResults(t *testing.T) {
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		d := oncrpc.NewDecoder(c.args)
		d.Opaque() // directory
		var e enc
		e.U32(0)
		e.Opaque(append([]byte("handle of "), d.Opaque()...))
		e.U32(0) // no attributes
		e.U32(0) // no directory attributes
		s.reply(c.xid, e.Bytes(), 0)
	})
	c := &Client{conns: []*conn{cn}}
	var handles [][]byte
	for _, name := range []string{"a", "bb"} {
		fh, _, err := c.Lookup(context.Background(), []byte{}, name)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, fh)
	}
	if string(handles[0]) != "handle of a" || string(handles[1]) != "handle of bb" {
		t.Errorf("handles %q", handles)
	}
}

// WRITEs from many goroutines, and their data, reach the server intact and
// each in one piece of the stream (the writes are batched, never interleaved).
func TestWritePipelined(t *testing.T) {
	var mu sync.Mutex
	got := map[uint64][]byte{}
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		off, count, data, err := writeArgs(c)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		got[off] = bytes.Clone(data)
		mu.Unlock()
		s.reply(c.xid, writeResults(count), 0)
	})
	c := &Client{conns: []*conn{cn}}
	sizes := []int{1, 2, 3, 4, 4097, 1 << 20}
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				off := uint64(g*100 + i)
				p := pattern(off, sizes[(g+i)%len(sizes)])
				if n, err := c.Write(context.Background(), []byte("fh"), p, int64(off), Unstable); err != nil || n != len(p) {
					t.Errorf("write at %d: %d %v", off, n, err)
				}
			}
		}()
	}
	wg.Wait()
	for off, data := range got {
		if !bytes.Equal(data, pattern(off, len(data))) {
			t.Errorf("server got wrong data at %d", off)
		}
	}
	if len(got) != 120 {
		t.Errorf("server got %d writes, want 120", len(got))
	}
}

// ReadAsync's callback may start the next READ at once, on the reader
// goroutine, as an event loop does: chains of READs complete, in order, with
// their data.
func TestReadAsyncChains(t *testing.T) {
	_, cn := newFakeServer(t, false, serveReads)
	c := &Client{conns: []*conn{cn}}
	const chains, steps = 16, 200
	var wg sync.WaitGroup
	for k := range chains {
		wg.Add(1)
		p := make([]byte, 4096+k*1000)
		step := 0
		var done func(n int, eof bool, err error)
		next := func() {
			if err := c.ReadAsync(nil, p, int64(k*steps+step), done); err != nil {
				t.Errorf("chain %d: %v", k, err)
				wg.Done()
			}
		}
		done = func(n int, eof bool, err error) {
			off := uint64(k*steps + step)
			if err != nil || n != len(p) || !bytes.Equal(p, pattern(off, len(p))) {
				t.Errorf("chain %d step %d: %d %v", k, step, n, err)
				wg.Done()
				return
			}
			if step++; step == steps {
				wg.Done()
				return
			}
			next()
		}
		next()
	}
	wg.Wait()
}

// A call whose context ends stops waiting; its reply, when it comes, is
// skipped, and the connection goes on.
func TestCallContext(t *testing.T) {
	var held atomic.Uint32 // the XID of the call answered late
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		if _, off, _ := readArgs(c); off == 1 {
			held.Store(c.xid)
			return
		}
		if xid := held.Load(); xid != 0 {
			s.reply(xid, readResults(false, pattern(1, 100), false), 0)
		}
		serveReads(s, c)
	})
	c := &Client{conns: []*conn{cn}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	p := make([]byte, 100)
	if _, _, err := c.Read(ctx, nil, p, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered call: %v", err)
	}
	if !bytes.Equal(p, make([]byte, 100)) {
		t.Error("a call that gave up had its buffer written")
	}
	q := make([]byte, 100)
	if n, _, err := c.Read(context.Background(), nil, q, 2); err != nil || n != 100 || !bytes.Equal(q, pattern(2, 100)) {
		t.Fatalf("next call: %d %v", n, err)
	}
	if !bytes.Equal(p, make([]byte, 100)) {
		t.Error("the late reply was read into the buffer of a call that gave up")
	}
}

// When the connection drops, every call waiting on it fails (the waiting
// ones and the asynchronous ones alike), and so does every later one.
func TestConnectionLost(t *testing.T) {
	var n atomic.Int32
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		if n.Add(1) == 4 {
			s.conn.Close()
		}
	})
	c := &Client{conns: []*conn{cn}}
	errs := make(chan error, 4)
	for range 2 {
		go func() {
			_, _, err := c.Read(context.Background(), nil, make([]byte, 10), 0)
			errs <- err
		}()
		if err := c.WriteAsync(nil, []byte("x"), 0, Unstable, func(_ int, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		select {
		case err := <-errs:
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte("connection lost")) {
				t.Errorf("call on a dropped connection: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("calls still waiting a minute after the connection dropped")
		}
	}
	if _, _, err := c.Read(context.Background(), nil, make([]byte, 10), 0); err == nil {
		t.Error("a call after the connection dropped succeeded")
	}
	if err := c.ReadAsync(nil, make([]byte, 10), 0, func(int, bool, error) { t.Error("callback of a call that did not start") }); err == nil {
		t.Error("ReadAsync after the connection dropped started")
	}
}

// The reader never waits to write. Here the server reads a request only once
// it has written its reply to the one before, and its replies (1 MiB READs)
// fill the socket: a reader that waited to write the WRITEs the completions
// started would never read the reply the server waits to write.
func TestReaderNeverWaitsToWrite(t *testing.T) {
	s, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		if c.proc == procRead {
			serveReads(s, c)
			return
		}
		s.reply(c.xid, writeResults(1<<20), 0)
	})
	tc := s.conn.(*net.TCPConn)
	tc.SetReadBuffer(64 << 10)
	tc.SetWriteBuffer(64 << 10)
	cn.c.(*net.TCPConn).SetReadBuffer(64 << 10)
	cn.c.(*net.TCPConn).SetWriteBuffer(64 << 10)
	c := &Client{conns: []*conn{cn}}
	const chains, steps = 8, 16
	var wg sync.WaitGroup
	fail := make(chan error, chains)
	for k := range chains {
		wg.Add(1)
		buf := make([]byte, 1<<20)
		step := 0
		var read func(int, bool, error)
		var wrote func(int, error)
		end := func(err error) {
			if err != nil {
				fail <- err
			}
			wg.Done()
		}
		read = func(_ int, _ bool, err error) {
			if err != nil {
				end(err)
				return
			}
			if err := c.WriteAsync(nil, buf, 0, Unstable, wrote); err != nil {
				end(err)
			}
		}
		wrote = func(_ int, err error) {
			if step++; err != nil || step == steps {
				end(err)
				return
			}
			if err := c.ReadAsync(nil, buf, int64(k), read); err != nil {
				end(err)
			}
		}
		if err := c.ReadAsync(nil, buf, int64(k), read); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("deadlock: the READ/WRITE chains did not finish in a minute")
	}
	close(fail)
	for err := range fail {
		t.Error(err)
	}
}

// Once warm, a READ and a WRITE allocate nothing on the client's side: the
// call's state is pooled and the data is neither copied nor buffered.
func TestReadWriteAllocs(t *testing.T) {
	// The server's replies are made once, so that AllocsPerRun (which counts
	// every goroutine's allocations) sees the client's alone.
	pack := func(results []byte) []byte {
		var e oncrpc.Encoder
		e.U32(0x80000000 | uint32(24+len(results)))
		e.U32(0)
		e.U32(1)
		for range 4 {
			e.U32(0)
		}
		return append(e.Bytes(), results...)
	}
	readReply := pack(readResults(true, pattern(0, 64<<10), false))
	writeReply := pack(writeResults(4096))
	_, cn := newFakeServer(t, true, func(s *fakeServer, c call) {
		res := readReply
		if c.proc == procWrite {
			res = writeReply
		}
		s.wmu.Lock()
		binary.BigEndian.PutUint32(res[4:], c.xid)
		s.w.Write(res)
		s.w.Flush()
		s.wmu.Unlock()
	})
	c := &Client{conns: []*conn{cn}}
	p := make([]byte, 64<<10)
	ctx := context.Background()
	read := func() {
		if n, _, err := c.Read(ctx, []byte("fh"), p, 0); err != nil || n != len(p) {
			t.Fatalf("read: %d %v", n, err)
		}
	}
	write := func() {
		if n, err := c.Write(ctx, []byte("fh"), p[:4096], 0, Unstable); err != nil || n != 4096 {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, f := range []func(){read, write} {
		f() // warm the pools
		if a := testing.AllocsPerRun(200, f); a > 0.1 {
			t.Errorf("%.2f allocations per call", a)
		}
	}
	if !bytes.Equal(p, pattern(0, len(p))) {
		t.Error("wrong data")
	}
}

// Whatever the server sends, the reader does not panic, and puts no more into
// a caller's buffer than it holds.
func FuzzReadReply(f *testing.F) {
	f.Add(record(1, 0, readResults(true, []byte("0123456789"), true), 0))
	f.Add(record(1, 0, readResults(false, make([]byte, 40), false), 0)) // more than the buffer holds
	f.Add(record(1, 0, readResults(true, []byte("0123"), false), 30))
	f.Add(append(record(2, 0, []byte{0, 0, 0, 0}, 0), record(1, 0, []byte{0, 0, 0, 5}, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		cn := &conn{pending: map[uint32]*request{}}
		dst := make([]byte, 16)
		for xid := uint32(1); xid <= 2; xid++ {
			r := getRequest()
			r.xid = xid
			if xid == 1 {
				r.dst, r.dataAt = dst, readDataAt
			}
			cn.pending[xid] = r
		}
		br := bufio.NewReaderSize(bytes.NewReader(b), readBufferSize)
		for range 8 {
			r, err := cn.readReply(br)
			if r != nil && r.n > len(r.dst) {
				t.Fatalf("%d bytes read into a buffer of %d", r.n, len(r.dst))
			}
			if r != nil && r.dst != nil && err == nil && r.err == nil {
				readResult(r) // decodes what it was given
			}
			if err != nil {
				return
			}
		}
	})
}

// hang is how long a test waits for what must happen before it calls it a
// hang: far longer than it takes on the slowest machine.
const hang = 20 * time.Second

// waitUntil polls cond until it holds (true) or hang has passed (false).
func waitUntil(cond func() bool) bool {
	for end := time.Now().Add(hang); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// blockedIn says whether a goroutine is blocked with fn on its stack.
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) && bytes.Contains(g, []byte("sync.(*Cond).Wait")) {
			return true
		}
	}
	return false
}

// queued is how many requests have been queued to be sent.
func (cn *conn) queuedCount() uint64 {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	return cn.queued
}

// A call whose context ends while its request waits to be sent (the reader
// is busy completing replies, and sends it after) returns when the
// connection fails instead: here the reader, completing a reply, holds a
// record no reply can be (empty) and fails on it, with the call still queued.
func TestCancelledCallWakesWhenConnectionFails(t *testing.T) {
	_, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
		if _, off, _ := readArgs(c); off == 1 {
			// The reply and the empty record, in one write: the reader
			// holds both when it completes the first.
			s.send(append(record(c.xid, 0, readResults(false, pattern(1, 10), false), 0), 0x80, 0, 0, 0))
		}
	})
	c := &Client{conns: []*conn{cn}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	err := c.ReadAsync(nil, make([]byte, 10), 1, func(int, bool, error) {
		// On the reader, busy: a call started now waits in the queue.
		go func() {
			_, _, err := c.Read(ctx, nil, make([]byte, 10), 2)
			res <- err
		}()
		if !waitUntil(func() bool { return cn.queuedCount() == 2 }) {
			t.Error("the second call was not queued")
			return
		}
		cancel()
		// It gave up the call and waits for its request to leave the
		// queue: only then may the reader go on, and fail.
		if !waitUntil(func() bool { return blockedIn("(*conn).waitWritten") }) {
			t.Error("the cancelled call did not wait for its request to leave the queue")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	wantCanceled(t, res, "after its connection failed")
}

// wantCanceled waits for a cancelled call's error, which must be its
// context's; a call that does not return is a hang, when.
func wantCanceled(t *testing.T, res <-chan error, when string) {
	t.Helper()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call: %v", err)
		}
	case <-time.After(hang):
		t.Fatalf("a cancelled call still waits %v %s", hang, when)
	}
}

// A call whose context ends while its reply is coming — the reader has taken
// it and reads its results, a READ's into the caller's buffer — returns: the
// server here sends half a large reply, then nothing. The connection fails
// (the rest of the reply can go nowhere else), and the caller's buffer is
// not written once the call has returned.
func TestCancelDuringReply(t *testing.T) {
	const size = 1 << 20
	for _, tc := range []struct {
		name    string
		results []byte
		call    func(ctx context.Context, c *Client, p []byte) error
	}{
		{"READ into the caller's buffer", readResults(false, pattern(0, size), false),
			func(ctx context.Context, c *Client, p []byte) error {
				_, _, err := c.Read(ctx, nil, p, 0)
				return err
			}},
		{"LOOKUP's large results", func() []byte {
			var e enc
			e.U32(0)
			e.Opaque(pattern(0, size))
			return e.Bytes()
		}(),
			func(ctx context.Context, c *Client, _ []byte) error {
				_, _, err := c.Lookup(ctx, nil, "x")
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest := make(chan []byte, 1)
			s, cn := newFakeServer(t, false, func(s *fakeServer, c call) {
				b := record(c.xid, 0, tc.results, 0)
				s.send(b[:len(b)/2])
				rest <- b[len(b)/2:]
			})
			c := &Client{conns: []*conn{cn}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := make([]byte, size)
			res := make(chan error, 1)
			go func() { res <- tc.call(ctx, c, p) }()
			var tail []byte
			select {
			case tail = <-rest:
			case <-time.After(hang):
				t.Fatal("no call came")
			}
			if !waitUntil(func() bool { return cn.inFlight.Load() == 0 }) {
				t.Fatal("the reader did not take the reply")
			}
			cancel()
			wantCanceled(t, res, "with its reply stalled halfway")
			was := bytes.Clone(p)
			s.send(tail)
			if _, _, err := c.Read(context.Background(), nil, make([]byte, 10), 0); err == nil || !strings.Contains(err.Error(), "gave up its reply") {
				t.Errorf("the next call, on a connection failed by a call that gave up its reply halfway: %v", err)
			}
			if !bytes.Equal(p, was) {
				t.Error("the buffer of a call that returned was written")
			}
		})
	}
}

// A reply that comes before its call has been sent — from a server that
// answers after reading only a call's XID, or guesses the next call's —
// completes the call only once it has been sent. Callers reuse their data as
// soon as their calls complete, and the pooled request's header goes to the
// next call, yet the server receives both calls intact: a WRITE whose writev
// the server holds up, and one queued behind it.
func TestCompleteOnlyOnceSent(t *testing.T) {
	sc, cn := newRawServer(t)
	sc.(*net.TCPConn).SetReadBuffer(64 << 10)
	cn.c.(*net.TCPConn).SetWriteBuffer(64 << 10)
	c := &Client{conns: []*conn{cn}}
	big, small := pattern(0, 4<<20), pattern(1, 4096)
	completed := make(chan struct{}, 2)
	reuse := func(p []byte, n int, err error) {
		if err != nil || n != len(p) {
			t.Errorf("WRITE of %d: %d %v", len(p), n, err)
		}
		for i := range p {
			p[i] = 0xee
		}
		completed <- struct{}{}
	}
	writing := func() bool {
		cn.wmu.Lock()
		defer cn.wmu.Unlock()
		return cn.writing
	}

	// The first WRITE's caller writes it, and waits for the socket: the
	// server reads no more than its XID.
	go func() {
		if err := c.WriteAsync(nil, big, 0, Unstable, func(n int, err error) { reuse(big, n, err) }); err != nil {
			t.Error(err)
		}
	}()
	if !waitUntil(writing) {
		t.Fatal("nobody writes the first WRITE")
	}
	br := bufio.NewReader(sc)
	head := make([]byte, 8)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatal(err)
	}
	xid := binary.BigEndian.Uint32(head[4:])
	// The second queues behind it.
	go func() {
		n, err := c.Write(context.Background(), nil, small, 1, Unstable)
		reuse(small, n, err)
		c.ReadAsync(nil, make([]byte, 10), 2, func(int, bool, error) {}) // with the pooled request, maybe
	}()
	if !waitUntil(func() bool { return cn.queuedCount() == 2 }) {
		t.Fatal("the second WRITE was not queued")
	}
	sc.Write(append(record(xid, 0, writeResults(uint32(len(big))), 0), record(xid+1, 0, writeResults(uint32(len(small))), 0)...))
	// A client that completes the calls now does so at once; the server
	// gives it time to before it reads on.
	select {
	case <-completed:
		t.Error("a WRITE completed before it was sent")
		completed <- struct{}{}
	case <-time.After(500 * time.Millisecond):
	}
	first := make([]byte, binary.BigEndian.Uint32(head)&^0x80000000)
	copy(first, head[4:])
	if _, err := io.ReadFull(br, first[4:]); err != nil {
		t.Fatal(err)
	}
	second, err := oncrpc.ReadRecord(br)
	if err != nil {
		t.Fatalf("WRITE 2 as the server got it: %v", err)
	}
	for i, msg := range [][]byte{first, second} {
		want := [][]byte{pattern(0, len(big)), pattern(1, len(small))}[i]
		c, err := parseCall(msg)
		if err == nil {
			var data []byte
			_, _, data, err = writeArgs(c)
			if err == nil && (c.xid != xid+uint32(i) || !bytes.Equal(data, want)) {
				err = fmt.Errorf("XID %d (want %d), data intact: %v", c.xid, xid+uint32(i), bytes.Equal(data, want))
			}
		}
		if err != nil {
			t.Errorf("WRITE %d as the server got it: %v", i+1, err)
		}
	}
	for range 2 {
		select {
		case <-completed:
		case <-time.After(hang):
			t.Fatal("the WRITEs did not complete once sent")
		}
	}
}
