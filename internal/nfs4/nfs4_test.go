package nfs4

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// fakeServer is an NFSv4.1 server of one export, /vol, holding files in
// memory: enough of RFC 8881 to check what this client sends (each
// operation's arguments as the RFC lays them out, each slot's sequence ids)
// and to answer calls out of order.
type fakeServer struct {
	t        *testing.T
	ln       net.Listener
	slots    uint32 // granted
	maxReq   uint32
	mu       sync.Mutex
	files    map[string][]byte
	seqs     map[uint32]uint32 // slot: last sequence id seen
	inFlight int
	maxSeen  int
	destroy  []string // DESTROY_* seen
	errs     []string
	calls    atomic.Int32
	drop     int32 // the call (counting from 1) left unanswered, as an RPCSEC_GSS server drops one
	// late is a call answered lateBy after it came; the calls after it up
	// to dropTo are left unanswered.
	late, dropTo int32
	lateBy       time.Duration
}

func newFakeServer(t *testing.T, slots, maxReq uint32) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{t: t, ln: ln, slots: slots, maxReq: maxReq, files: map[string][]byte{}, seqs: map[uint32]uint32{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *fakeServer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *fakeServer) fail(format string) {
	s.mu.Lock()
	s.errs = append(s.errs, format)
	s.mu.Unlock()
}

func (s *fakeServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	var wmu sync.Mutex
	for {
		msg, err := oncrpc.ReadRecord(br)
		if err != nil {
			return
		}
		n := s.calls.Add(1)
		if n == s.drop || (s.late > 0 && n > s.late && n <= s.dropTo) {
			continue
		}
		delay := time.Duration(0)
		if n == s.late {
			delay = s.lateBy
		}
		s.mu.Lock()
		s.inFlight++
		s.maxSeen = max(s.maxSeen, s.inFlight)
		s.mu.Unlock()
		go func() {
			time.Sleep(delay + time.Duration(rand.IntN(500))*time.Microsecond) // replies out of order
			out := s.call(msg)
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
			wmu.Lock()
			defer wmu.Unlock()
			c.Write(out)
		}()
	}
}

// call answers one call (AUTH_SYS, COMPOUND) with its whole record.
func (s *fakeServer) call(msg []byte) []byte {
	d := oncrpc.NewDecoder(msg)
	xid := d.U32()
	d.U32() // CALL
	d.U32() // RPC version
	prog, vers, proc := d.U32(), d.U32(), d.U32()
	if flavor := d.U32(); flavor != oncrpc.AuthSysFlv {
		s.fail("credential flavor")
	}
	d.Opaque()
	d.U32()
	d.Opaque()
	if prog != progNFS || vers != 4 || proc != 1 {
		s.fail("not a COMPOUND")
	}
	var e oncrpc.Encoder
	e.U32(0) // record mark
	e.U32(xid)
	e.U32(1) // REPLY
	e.U32(0) // accepted
	e.U32(0) // verifier AUTH_NONE
	e.U32(0)
	e.U32(0) // SUCCESS
	e.Bytes()
	res := s.compound(&d)
	out := append(e.Bytes(), res...)
	binary.BigEndian.PutUint32(out, 0x80000000|uint32(len(out)-4))
	return out
}

func (s *fakeServer) compound(d *oncrpc.Decoder) []byte {
	d.Opaque() // tag
	if d.U32() != 1 {
		s.fail("minor version")
	}
	n := d.U32()
	var r oncrpc.Encoder
	var status uint32
	var count uint32
	var body oncrpc.Encoder
	var cur string
	var slot uint32
	for i := uint32(0); i < n && status == 0; i++ {
		op := d.U32()
		count++
		body.U32(op)
		st := uint32(0)
		var res oncrpc.Encoder
		switch op {
		case opExchangeID:
			d.Take(8)
			d.Opaque()
			d.U32()
			if d.U32() != 0 || d.U32() != 0 {
				s.fail("EXCHANGE_ID arguments")
			}
			res.U64(7)
			res.U32(1)
			res.U32(0)
			res.U32(0) // SP4_NONE
			res.U64(0)
			res.Str("fake")
			res.Str("fake")
			res.U32(0)
		case opCreateSession:
			if d.U64() != 7 || d.U32() != 1 {
				s.fail("CREATE_SESSION client id")
			}
			d.U32()
			var fore [7]uint32
			for k := range fore {
				fore[k] = d.U32()
			}
			for range 7 {
				d.U32()
			}
			d.U32() // callback program
			for range d.U32() {
				if d.U32() != 0 {
					s.fail("callback security")
				}
			}
			res.Fixed([]byte("sessionsession!!"))
			res.U32(1)
			res.U32(0)
			for _, v := range []uint32{0, min(fore[1], s.maxReq), min(fore[2], s.maxReq), fore[3], fore[4], min(fore[5], s.slots), 0} {
				res.U32(v)
			}
			for _, v := range []uint32{0, 4096, 4096, 0, 2, 1, 0} {
				res.U32(v)
			}
		case opSequence:
			if i != 0 {
				s.fail("SEQUENCE not first")
			}
			id := d.Take(16)
			seq, sl, highest := d.U32(), d.U32(), d.U32()
			d.U32()
			slot = sl
			s.mu.Lock()
			switch {
			case string(id) != "sessionsession!!" || sl >= s.slots || highest != s.slots-1:
				st = 10052 // BADSESSION
			case seq != s.seqs[sl]+1:
				st = 10063 // SEQ_MISORDERED
			default:
				s.seqs[sl] = seq
			}
			s.mu.Unlock()
			res.Fixed(id)
			res.U32(seq)
			res.U32(slot)
			res.U32(s.slots - 1)
			res.U32(s.slots - 1)
			res.U32(0)
		case opReclaimComplete:
			d.U32()
		case opPutRootFH:
			cur = "root"
		case opLookup:
			if name := string(d.Opaque()); cur == "root" && name == "vol" {
				cur = "vol"
			} else {
				st = 2
			}
		case opGetFH:
			res.Str(cur)
		case opPutFH:
			cur = string(d.Opaque())
		case opOpen:
			d.U32()
			if d.U32() != shareAccessBoth|shareWantNoDeleg || d.U32() != 0 || d.U64() != 7 {
				s.fail("OPEN share or client id")
			}
			d.Opaque()
			if d.U32() != 1 || d.U32() != 0 {
				s.fail("OPEN how")
			}
			words, mask0, mask1 := d.U32(), d.U32(), d.U32()
			vals := d.Opaque()
			if d.U32() != 0 || words != 2 || mask0 != 0 || mask1 != 2 || len(vals) != 4 {
				s.fail("OPEN attributes or claim")
			}
			name := string(d.Opaque())
			if cur != "vol" {
				st = 20
				break
			}
			cur = "f:" + name
			s.mu.Lock()
			if _, ok := s.files[name]; !ok {
				s.files[name] = nil
			}
			s.mu.Unlock()
			res.Fixed([]byte("stateid-" + strings.Repeat("x", 8)))
			res.U32(1)
			res.U64(1)
			res.U64(2)
			res.U32(4)
			res.U32(1)
			res.U32(2)
			res.U32(3) // OPEN_DELEGATE_NONE_EXT
			res.U32(1) // WND4_CONTENTION
			res.U32(0)
		case opGetAttr:
			d.U32()
			d.U32()
			res.U32(1)
			res.U32(1 << 4)
			s.mu.Lock()
			size := len(s.files[strings.TrimPrefix(cur, "f:")])
			s.mu.Unlock()
			res.U32(8)
			res.U64(uint64(size))
		case opRead, opWrite:
			if string(d.Take(16)) != "stateid-xxxxxxxx" {
				st = 10025
				break
			}
			off := int(d.U64())
			name := strings.TrimPrefix(cur, "f:")
			s.mu.Lock()
			f := s.files[name]
			if op == opRead {
				n := int(d.U32())
				end := min(off+n, len(f))
				res.U32(map[bool]uint32{true: 1}[end == len(f)])
				res.Opaque(f[min(off, end):end])
			} else {
				d.U32()
				data := d.Opaque()
				if len(f) < off+len(data) {
					f = append(f, make([]byte, off+len(data)-len(f))...)
				}
				copy(f[off:], data)
				s.files[name] = f
				res.U32(uint32(len(data)))
				res.U32(0)
				res.Fixed(make([]byte, 8))
			}
			s.mu.Unlock()
		case opCommit:
			d.U64()
			d.U32()
			res.Fixed(make([]byte, 8))
		case opClose:
			d.U32()
			res.Fixed(d.Take(16))
		case opDestroySession:
			d.Take(16)
			s.mu.Lock()
			s.destroy = append(s.destroy, "session")
			s.mu.Unlock()
		case opDestroyClientID:
			d.U64()
			s.mu.Lock()
			s.destroy = append(s.destroy, "clientid")
			s.mu.Unlock()
		default:
			s.fail("operation")
			st = 10044
		}
		if d.Err() != nil {
			s.fail("arguments of an operation: " + d.Err().Error())
		}
		body.U32(st)
		if st == 0 {
			body.Fixed(res.Bytes())
		}
		status = st
	}
	r.U32(status)
	r.U32(0) // tag
	r.U32(count)
	return append(r.Bytes(), body.Bytes()...)
}

// The client against the fake server: a session of the slots granted, a
// lookup of the export, a file created, written and read back by many calls
// at once (more than the slots: they wait for one), WRITEs split at the
// session's size, and the session and client ID destroyed at the end.
func TestClientAgainstFakeServer(t *testing.T) {
	s := newFakeServer(t, 4, 128<<10+4096)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, "127.0.0.1", "/vol", Options{Port: s.port(), Slots: 16, Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c.Slots() != 4 || c.MaxIOSize() != 128<<10 || string(c.Root) != "vol" {
		t.Fatalf("slots %d, max I/O %d, root %q", c.Slots(), c.MaxIOSize(), c.Root)
	}
	f, err := c.Create(ctx, c.Root, "data", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 64 << 10
	want := make([]byte, 16*chunk)
	for i := range want {
		want[i] = byte(rand.IntN(256))
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := f.Write(ctx, want[i*chunk:(i+1)*chunk], int64(i*chunk), Unstable)
			if err == nil && n != chunk {
				err = errors.New("short write")
			}
			if err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Write(ctx, make([]byte, 1<<20), int64(len(want)), FileSync); err != nil || n != 128<<10 {
		t.Fatalf("1 MiB write: %d, %v; want it cut at the session's 128 KiB", n, err)
	}
	got := make([]byte, len(want))
	for off := 0; off < len(got); {
		n, _, err := f.Read(ctx, got[off:], int64(off))
		if err != nil || n == 0 {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
		off += n
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read back other bytes than written")
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f2, err := c.Create(ctx, c.Root, "data", 0o644)
	if err != nil || f2.Size != int64(len(want))+128<<10 {
		t.Fatalf("reopened: size %d, %v", f2.Size, err)
	}
	if _, err := c.lookupPath(ctx, "/nothere"); !errors.Is(err, Status(2)) {
		t.Fatalf("lookup of a missing export: %v, want NFS4ERR_NOENT", err)
	}
	c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		t.Fatalf("the server found: %q", s.errs)
	}
	if s.maxSeen < 2 || s.maxSeen > 4 {
		t.Fatalf("%d calls were in flight at most, want 2-4 (the slots)", s.maxSeen)
	}
	if strings.Join(s.destroy, ",") != "session,clientid" {
		t.Fatalf("destroyed %v", s.destroy)
	}
}

// A call the server drops is sent again after the connection's resend
// interval, on the same slot and sequence id, and done.
func TestResendUnanswered(t *testing.T) {
	s := newFakeServer(t, 4, 1<<20+64<<10)
	s.drop = 6 // EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE, LOOKUP, OPEN: the first WRITE
	if got := writeResending(t, s); got != 1 {
		t.Fatalf("%d calls resent, want 1", got)
	}
}

// A call's first reply is the call's even when it comes after the call was
// sent again: a slow server's answer is not lost to a resend it drops.
func TestLateReplyToAResentCall(t *testing.T) {
	s := newFakeServer(t, 4, 1<<20+64<<10)
	s.late, s.lateBy, s.dropTo = 6, 500*time.Millisecond, 9 // the first WRITE; its three resends dropped
	if got := writeResending(t, s); got != 3 {
		t.Fatalf("%d sends again, want 3 (four sends at most)", got)
	}
}

// writeResending creates a file on s with a 100 ms resend interval, writes
// it once (FILE_SYNC) and closes it, and returns how many calls were sent
// again.
func writeResending(t *testing.T, s *fakeServer) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, "127.0.0.1", "/vol", Options{Port: s.port()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.conns[0].resend = 100 * time.Millisecond
	f, err := c.Create(ctx, c.Root, "f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.Write(ctx, []byte("hello"), 0, FileSync); err != nil || n != 5 {
		t.Fatalf("write: %d, %v", n, err)
	}
	resent := c.Resent()
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(s.errs) > 0 {
		t.Fatal(s.errs)
	}
	return resent
}

// The encoding of a COMPOUND with its SEQUENCE: the header with the count
// filled in, the SEQUENCE's arguments set in place (and set again for a
// retry), the operations after it.
func TestCompoundEncoding(t *testing.T) {
	cp := newSeqCompound()
	cp.putFH([]byte{0xaa, 0xbb, 0xcc})
	cp.read(StateID{1}, 1<<32, 4096)
	id := [16]byte{9, 8, 7}
	cp.setSequence(id, 1, 2, 3)
	cp.setSequence(id, 5, 6, 7)
	var w oncrpc.Encoder
	w.U32(0) // tag
	w.U32(1) // minor version
	w.U32(3)
	w.U32(opSequence)
	w.Fixed(id[:])
	for _, v := range []uint32{5, 6, 7, 0} {
		w.U32(v)
	}
	w.U32(opPutFH)
	w.Opaque([]byte{0xaa, 0xbb, 0xcc})
	w.U32(opRead)
	w.Fixed(append([]byte{1}, make([]byte, 15)...))
	w.U64(1 << 32)
	w.U32(4096)
	if !bytes.Equal(cp.bytes(), w.Bytes()) {
		t.Fatalf("compound\n%x\nwant\n%x", cp.bytes(), w.Bytes())
	}
}

// Results: a failed operation names itself and its status; results of the
// wrong operation, and cut short, are errors; OPEN's delegations are taken
// apart.
func TestResultsDecoding(t *testing.T) {
	enc := func(fn func(e *oncrpc.Encoder)) *results {
		var e oncrpc.Encoder
		fn(&e)
		r, err := newResults(e.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := enc(func(e *oncrpc.Encoder) {
		e.U32(10016)
		e.U32(0)
		e.U32(2)
		e.U32(opPutRootFH)
		e.U32(0)
		e.U32(opLookup)
		e.U32(10016)
	})
	if err := r.skip(opPutRootFH); err != nil {
		t.Fatal(err)
	}
	var oe *OpError
	if err := r.skip(opLookup); !errors.As(err, &oe) || oe.Op != "LOOKUP" || !errors.Is(err, ErrWrongSec) || err.Error() != "LOOKUP: NFS4ERR_WRONGSEC" {
		t.Fatalf("LOOKUP: %v", err)
	}
	r = enc(func(e *oncrpc.Encoder) {
		e.U32(0)
		e.U32(0)
		e.U32(1)
		e.U32(opWrite)
		e.U32(0)
	})
	if err := r.skip(opRead); err == nil || !strings.Contains(err.Error(), "READ") {
		t.Fatalf("WRITE's results for READ: %v", err)
	}
	r = enc(func(e *oncrpc.Encoder) {
		e.U32(0)
		e.U32(0)
		e.U32(1)
		e.U32(opRead)
		e.U32(0)
		e.U32(1)
		e.U32(100) // 100 bytes said, 2 there
		e.U32(0)
	})
	if _, _, err := r.readInto(make([]byte, 200)); err == nil {
		t.Fatal("a READ cut short decoded")
	}
	// OPEN with a write delegation (given though not wanted).
	r = enc(func(e *oncrpc.Encoder) {
		e.U32(0)
		e.U32(0)
		e.U32(2)
		e.U32(opOpen)
		e.U32(0)
		e.Fixed(bytes.Repeat([]byte{5}, 16))
		e.U32(1)
		e.U64(1)
		e.U64(2)
		e.U32(4)
		e.U32(0) // empty attrset
		e.U32(2) // OPEN_DELEGATE_WRITE
		e.Fixed(make([]byte, 16))
		e.U32(0) // recall
		e.U32(1) // NFS_LIMIT_SIZE
		e.U64(1 << 30)
		e.U32(0)
		e.U32(0)
		e.U32(0)
		e.Str("OWNER@")
		e.U32(opGetFH)
		e.U32(0)
		e.Opaque([]byte("fh"))
	})
	sid, err := r.open()
	if err != nil || sid[0] != 5 {
		t.Fatalf("OPEN: %v %v", sid, err)
	}
	if fh, err := r.getFH(); err != nil || string(fh) != "fh" {
		t.Fatalf("GETFH after OPEN: %q %v", fh, err)
	}
}

// No call goes while one sent window or more calls before it is unanswered,
// however few are in flight; a wait ends with its context.
func TestSeqSpan(t *testing.T) {
	s := newSeqSpan(4)
	for want := uint64(0); want < 4; want++ {
		if i, ok := s.take(); !ok || i != want {
			t.Fatalf("take %d: %d, %v", want, i, ok)
		}
	}
	if _, ok := s.take(); ok {
		t.Fatal("a fifth call went with the first unanswered")
	}
	s.done(1)
	s.done(2)
	s.done(3)
	if _, ok := s.take(); ok {
		t.Fatal("a call went 4 numbers after an unanswered one, with one in flight")
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- s.wait(ctx) }()
	s.done(0)
	if err := <-waited; err != nil {
		t.Fatalf("wait after the oldest was answered: %v", err)
	}
	if i, ok := s.take(); !ok || i != 4 {
		t.Fatalf("take after the oldest was answered: %d, %v", i, ok)
	}
	for range 3 {
		s.take()
	}
	go func() { waited <- s.wait(ctx) }()
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with its context ended: %v", err)
	}
}
