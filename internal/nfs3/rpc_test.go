package nfs3

import (
	"bytes"
	"encoding/binary"
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
	got, err := readRecord(bytes.NewReader(record([]byte("abcd"), []byte("ef"), []byte("gh"))))
	if err != nil || string(got) != "abcdefgh" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := readRecord(bytes.NewReader(record([]byte("abcd"))[:6])); err == nil {
		t.Fatal("truncated record read without error")
	}
	huge := binary.BigEndian.AppendUint32(nil, 0x80000000|100<<20)
	if _, err := readRecord(bytes.NewReader(huge)); err == nil || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("100 MiB record: %v", err)
	}
}

func replyHeader(xid, replyStat, acceptStat uint32) *enc {
	var e enc
	e.u32(xid)
	e.u32(1) // REPLY
	e.u32(replyStat)
	if replyStat != 0 {
		e.u32(1) // AUTH_ERROR
		return &e
	}
	e.u32(0) // verifier AUTH_NONE
	e.opaque([]byte{1, 2, 3})
	e.u32(acceptStat)
	return &e
}

func TestParseReply(t *testing.T) {
	e := replyHeader(7, 0, 0)
	e.u32(42)
	res, err := parseReply(e.b)
	if err != nil || len(res) != 4 || binary.BigEndian.Uint32(res) != 42 {
		t.Fatalf("accepted reply: %v %v", res, err)
	}
	for _, c := range []struct {
		msg  []byte
		want string
	}{
		{replyHeader(1, 1, 0).b, "denied"},
		{replyHeader(1, 0, 1).b, "program unavailable"},
		{replyHeader(1, 0, 3).b, "procedure unavailable"},
		{replyHeader(1, 0, 4).b, "garbage arguments"},
		{[]byte{0, 0, 0, 1, 0, 0, 0, 0}, "not a reply"},
		{[]byte{0, 0, 0, 1, 0, 0, 0, 1, 0}, "short"},
	} {
		if _, err := parseReply(c.msg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: %v, want %q", c.msg, err, c.want)
		}
	}
}

// Garbage never panics the decoder.
func FuzzParseReply(f *testing.F) {
	e := replyHeader(7, 0, 0)
	e.opaque([]byte("data"))
	f.Add(e.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := parseReply(b)
		if err == nil {
			d := dec{b: res}
			d.postOpSize()
			d.wcc()
			d.opaque()
		}
	})
}

func TestStatusNames(t *testing.T) {
	if Status(69).Error() != "NFS3ERR_DQUOT" || Status(9999).Error() != "NFS3 status 9999" {
		t.Fatal(Status(69).Error(), Status(9999).Error())
	}
}
