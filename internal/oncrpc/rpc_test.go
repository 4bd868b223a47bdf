package oncrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func record(frags ...[]byte) []byte {
	var b []byte
	for i, f := range frags {
		h := uint32(len(f))
		if i == len(frags)-1 {
			h |= 0x80000000
		}
		b = binary.BigEndian.AppendUint32(b, h)
		b = append(b, f...)
	}
	return b
}

func TestReadRecordJoinsFragments(t *testing.T) {
	got, err := ReadRecord(bytes.NewReader(record([]byte("abcd"), []byte("ef"), []byte("gh"))))
	if err != nil || string(got) != "abcdefgh" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := ReadRecord(bytes.NewReader(record([]byte("abcd"))[:6])); err == nil {
		t.Fatal("truncated record read without error")
	}
	huge := binary.BigEndian.AppendUint32(nil, 0x80000000|100<<20)
	if _, err := ReadRecord(bytes.NewReader(huge)); err == nil || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("100 MiB record: %v", err)
	}
	// Fragments that add up past the cap are refused too.
	frag := binary.BigEndian.AppendUint32(nil, 40<<20)
	if _, err := ReadRecord(bytes.NewReader(append(append(frag, make([]byte, 40<<20)...), frag...))); err == nil || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("two 40 MiB fragments: %v", err)
	}
}

func TestCallHeader(t *testing.T) {
	cred := AuthSys{Stamp: 9, Machine: "m", UID: 1000, GID: 100, GIDs: []uint32{4, 5}}.Cred()
	args := []byte{0, 0, 0, 42}
	msg := append(CallHeader(7, 100003, 3, 1, cred, len(args)), args...)
	rec, err := ReadRecord(bytes.NewReader(msg))
	if err != nil || len(rec) != len(msg)-4 {
		t.Fatalf("record %d bytes, %v", len(rec), err)
	}
	d := NewDecoder(rec)
	for _, want := range []uint32{7, 0, 2, 100003, 3, 1, 1} { // xid CALL rpcvers prog vers proc AUTH_SYS
		if got := d.U32(); got != want {
			t.Fatalf("header word %d, want %d", got, want)
		}
	}
	body := NewDecoder(d.Opaque())
	if body.U32() != 9 || string(body.Opaque()) != "m" || body.U32() != 1000 || body.U32() != 100 ||
		body.U32() != 2 || body.U32() != 4 || body.U32() != 5 || len(body.Rest()) != 0 || body.Err() != nil {
		t.Fatalf("credential body %x", cred)
	}
	if d.U32() != 0 || d.U32() != 0 || d.U32() != 42 || len(d.Rest()) != 0 || d.Err() != nil {
		t.Fatal("verifier or arguments")
	}
	// Appended to a buffer that holds something already (a reused one), the
	// header and its record mark are the same.
	prefix := []byte("old call")
	if got := AppendCallHeader(prefix, 7, 100003, 3, 1, cred, len(args)); !bytes.Equal(got[len(prefix):], msg[:len(msg)-len(args)]) {
		t.Fatalf("appended header %x, want %x", got[len(prefix):], msg[:len(msg)-len(args)])
	}
	if last, n := LastFragment(binary.BigEndian.Uint32(msg)); !last || n != len(msg)-4 {
		t.Fatalf("LastFragment: %v %d", last, n)
	}
	if last, n := LastFragment(1000); last || n != 1000 {
		t.Fatalf("LastFragment of a first fragment: %v %d", last, n)
	}
}

func replyHeader(xid, replyStat, acceptStat uint32) *Encoder {
	var e Encoder
	e.U32(xid)
	e.U32(1) // REPLY
	e.U32(replyStat)
	if replyStat != 0 {
		e.U32(1)          // AUTH_ERROR
		e.U32(acceptStat) // its auth_stat
		return &e
	}
	e.U32(0) // verifier AUTH_NONE
	e.Opaque([]byte{1, 2, 3})
	e.U32(acceptStat)
	return &e
}

func TestParseReply(t *testing.T) {
	e := replyHeader(7, 0, 0)
	e.U32(42)
	res, err := ParseReply(e.Bytes())
	if err != nil || len(res) != 4 || binary.BigEndian.Uint32(res) != 42 {
		t.Fatalf("accepted reply: %v %v", res, err)
	}
	for _, c := range []struct {
		msg  []byte
		want string
	}{
		{replyHeader(1, 1, 0).Bytes(), "rpc: call denied (auth status 0)"},
		{replyHeader(1, 1, 5).Bytes(), "rpc: call denied: too weak"},
		{replyHeader(1, 1, 14).Bytes(), "rpc: call denied: RPCSEC_GSS context problem"},
		{replyHeader(1, 0, 1).Bytes(), "rpc: program unavailable"},
		{replyHeader(1, 0, 2).Bytes(), "rpc: program version mismatch"},
		{replyHeader(1, 0, 3).Bytes(), "rpc: procedure unavailable"},
		{replyHeader(1, 0, 4).Bytes(), "rpc: garbage arguments"},
		{replyHeader(1, 0, 5).Bytes(), "rpc: system error"},
		{replyHeader(1, 0, 9).Bytes(), "rpc: accept status 9"},
		{[]byte{0, 0, 0, 1, 0, 0, 0, 0}, "rpc: not a reply"},
		{[]byte{0, 0, 0, 1, 0, 0, 0, 1, 0}, "short"},
	} {
		if _, err := ParseReply(c.msg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: %v, want %q", c.msg, err, c.want)
		}
	}
	var re *Error
	if _, err := ParseReply(replyHeader(1, 1, 13).Bytes()); !errors.As(err, &re) || !re.Denied || re.Stat != 1 || re.Auth != GSSCredProblem {
		t.Fatalf("denied: %#v", err)
	}
	if _, err := ParseReply(replyHeader(1, 0, 3).Bytes()); !errors.As(err, &re) || re.Denied || re.Stat != 3 {
		t.Fatalf("procedure unavailable: %#v", err)
	}
	// The header of a reply whose results have not all been read yet.
	e = replyHeader(7, 0, 0)
	n := len(e.Bytes())
	e.U32(5)
	if got, err := ParseReplyHeader(e.Bytes()[:n+2]); err != nil || got != n {
		t.Fatalf("header of a partial reply: %d, %v; want %d", got, err, n)
	}
}

// sealed is an Auth that signs the header (as RPCSEC_GSS does) with a fixed
// tag, and whose Opener wants the reply's verifier to echo it.
type sealed struct{ tag string }

func (s sealed) Seal(b []byte, head int, args []byte) ([]byte, Opener, error) {
	e := Encoder{b: b}
	e.U32(RPCSecGSS)
	e.Str(s.tag)
	sig := append([]byte(s.tag), e.b[head:]...) // the verifier signs xid..credential
	e.U32(RPCSecGSS)
	e.Opaque(sig)
	e.Fixed(args)
	return e.b, s, nil
}

func (s sealed) Open(v OpaqueAuth, res []byte) ([]byte, error) {
	if v.Flavor != RPCSecGSS || string(v.Body) != s.tag {
		return nil, errors.New("bad verifier")
	}
	return res, nil
}

func TestAppendCallAndOpenReply(t *testing.T) {
	args := []byte{0, 0, 0, 42}
	msg, o, err := AppendCall([]byte("old"), 7, 100003, 4, 1, sealed{"tag1"}, args)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ReadRecord(bytes.NewReader(msg[3:]))
	if err != nil || len(rec) != len(msg)-7 {
		t.Fatalf("record %d bytes, %v", len(rec), err)
	}
	d := NewDecoder(rec)
	for _, want := range []uint32{7, 0, 2, 100003, 4, 1, RPCSecGSS} {
		if got := d.U32(); got != want {
			t.Fatalf("header word %d, want %d", got, want)
		}
	}
	cred := d.Opaque()
	if d.U32() != RPCSecGSS || !bytes.Equal(d.Opaque(), append([]byte("tag1"), rec[:24+4+8]...)) || string(cred) != "tag1" {
		t.Fatalf("the verifier does not sign the header through the credential: %x", rec)
	}
	if !bytes.Equal(d.Rest(), args) {
		t.Fatalf("arguments %x", d.Rest())
	}
	// AuthSys seals as CallHeader writes.
	sys := AuthSys{Machine: "m", UID: 1}
	got, _, _ := AppendCall(nil, 7, 100003, 3, 1, sys, args)
	if want := append(CallHeader(7, 100003, 3, 1, sys.Cred(), len(args)), args...); !bytes.Equal(got, want) {
		t.Fatalf("AuthSys call %x, want %x", got, want)
	}

	var r Encoder
	r.U32(7)
	r.U32(1)
	r.U32(0)
	r.U32(RPCSecGSS)
	r.Str("tag1")
	r.U32(0)
	r.U32(99)
	res, err := OpenReply(r.Bytes(), o)
	if err != nil || !bytes.Equal(res, []byte{0, 0, 0, 99}) {
		t.Fatalf("OpenReply = %x, %v", res, err)
	}
	if _, err := OpenReply(r.Bytes(), sealed{"other"}); err == nil {
		t.Fatal("a reply with another verifier opened")
	}
	if _, err := OpenReply(replyHeader(7, 1, GSSCtxProblem).Bytes(), o); err == nil {
		t.Fatal("a denied reply opened")
	}
}

// Garbage never panics the reply parser or the decoder reading its results.
func FuzzParseReply(f *testing.F) {
	e := replyHeader(7, 0, 0)
	e.Opaque([]byte("data"))
	e.U64(1)
	f.Add(e.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := ParseReply(b)
		// ParseReplyHeader finds the same header.
		if n, err2 := ParseReplyHeader(b); (err == nil) != (err2 == nil) || err == nil && !bytes.Equal(res, b[n:]) {
			t.Fatalf("ParseReply %d bytes, %v; ParseReplyHeader %d, %v", len(res), err, n, err2)
		}
		if err == nil {
			d := NewDecoder(res)
			d.U32()
			d.Opaque()
			d.U64()
			d.Take(84)
			d.Opaque()
		}
	})
}
