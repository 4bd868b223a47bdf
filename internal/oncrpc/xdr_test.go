package oncrpc

import (
	"bytes"
	"testing"
)

func TestEncoderPads(t *testing.T) {
	var e Encoder
	e.Str("abcde")
	e.Fixed([]byte{1, 2})
	e.Opaque(nil)
	e.U64(1<<32 | 2)
	want := []byte{0, 0, 0, 5, 'a', 'b', 'c', 'd', 'e', 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}
	if !bytes.Equal(e.Bytes(), want) {
		t.Fatalf("got  %x\nwant %x", e.Bytes(), want)
	}
	for n, pad := range map[int]int{0: 0, 1: 3, 2: 2, 3: 1, 4: 0, 1 << 20: 0} {
		if len(Padding(n)) != pad {
			t.Errorf("Padding(%d) is %d bytes, want %d", n, len(Padding(n)), pad)
		}
	}
}

func TestDecoderErrorSticks(t *testing.T) {
	var e Encoder
	e.Str("abcde")
	e.U32(7)
	d := NewDecoder(e.Bytes())
	if string(d.Opaque()) != "abcde" || d.U32() != 7 || d.Err() != nil || len(d.Rest()) != 0 {
		t.Fatal("round trip")
	}
	if d.U64() != 0 || d.Err() == nil {
		t.Fatal("read past the end without error")
	}
	first := d.Err()
	d.Fail(bytes.ErrTooLarge)
	if d.Err() != first || d.Take(0) != nil {
		t.Fatal("the first error did not stick")
	}
	d = NewDecoder([]byte{0xff, 0xff, 0xff, 0xf0, 1})
	if d.Opaque() != nil || d.Err() == nil {
		t.Fatal("huge length read without error")
	}
}
