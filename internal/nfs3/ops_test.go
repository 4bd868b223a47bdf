package nfs3

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func encFattr(e *enc, a Attr) {
	e.U32(uint32(a.Type))
	e.U32(a.Mode)
	e.U32(a.Nlink)
	e.U32(a.UID)
	e.U32(a.GID)
	e.U64(a.Size)
	e.U64(a.Used)
	e.U32(a.RdevMajor)
	e.U32(a.RdevMinor)
	e.U64(a.FSID)
	e.U64(a.FileID)
	for _, t := range []time.Time{a.Atime, a.Mtime, a.Ctime} {
		e.U32(uint32(t.Unix()))
		e.U32(uint32(t.Nanosecond()))
	}
}

func TestFattrRoundTrip(t *testing.T) {
	want := Attr{Type: TypeLnk, Mode: 0o777, Nlink: 1, UID: 7, GID: 8, Size: 11, Used: 4096, FSID: 1 << 40,
		FileID: 257, Atime: time.Unix(5, 6), Mtime: time.Unix(7, 8), Ctime: time.Unix(9, 10)}
	var e enc
	encFattr(&e, want)
	if len(e.Bytes()) != 84 {
		t.Fatalf("fattr3 is %d bytes, want 84", len(e.Bytes()))
	}
	d := newDec(e.Bytes())
	got := d.fattr()
	if d.Err() != nil || !got.Atime.Equal(want.Atime) || got.Type != want.Type || got.FileID != want.FileID || got.Size != want.Size {
		t.Fatalf("got %+v, %v", got, d.Err())
	}
	// The size postOpSize reads is the same field.
	var p enc
	p.U32(1)
	p.Fixed(e.Bytes())
	if n, ok := newDec(p.Bytes()).postOpSize(); !ok || n != 11 {
		t.Fatalf("postOpSize %d %v", n, ok)
	}
}

func dirReply(plus bool, eof bool, names ...string) []byte {
	var e enc
	e.U32(0)                                // dir attributes: none
	e.Fixed([]byte{1, 2, 3, 4, 5, 6, 7, 8}) // cookie verifier
	for i, n := range names {
		e.U32(1)
		e.U64(uint64(100 + i))
		e.Str(n)
		e.U64(uint64(i + 1))
		if plus {
			e.U32(1)
			encFattr(&e, Attr{Type: TypeReg, FileID: uint64(100 + i)})
			e.U32(1)
			e.Opaque([]byte{byte(i), 0xfe})
		}
	}
	e.U32(0)
	if eof {
		e.U32(1)
	} else {
		e.U32(0)
	}
	return e.Bytes()
}

func TestParseDirList(t *testing.T) {
	for _, plus := range []bool{false, true} {
		t.Run(fmt.Sprint("plus=", plus), func(t *testing.T) {
			ents, verf, eof, err := parseDirList(newDec(dirReply(plus, true, ".", "..", "a/b")), plus)
			if err != nil || !eof || len(ents) != 3 || verf[7] != 8 {
				t.Fatalf("%+v %v %v %v", ents, verf, eof, err)
			}
			if ents[2].Name != "a/b" || ents[2].Cookie != 3 || ents[2].FileID != 102 {
				t.Fatalf("entry %+v", ents[2])
			}
			if plus && (ents[1].Attr == nil || ents[1].Attr.FileID != 101 || len(ents[1].FH) != 2) {
				t.Fatalf("plus entry %+v", ents[1])
			}
			b := dirReply(plus, true, "x")
			if _, _, _, err := parseDirList(newDec(b[:len(b)-6]), plus); err == nil {
				t.Fatal("truncated reply parsed")
			}
		})
	}
}

func TestParseExports(t *testing.T) {
	var e enc
	for _, x := range []Export{{"/a", []string{"10.0.0.1", "*"}}, {"/b", nil}} {
		e.U32(1)
		e.Str(x.Dir)
		for _, g := range x.Groups {
			e.U32(1)
			e.Str(g)
		}
		e.U32(0)
	}
	e.U32(0)
	got, err := parseExports(e.Bytes())
	if err != nil || len(got) != 2 || got[0].Dir != "/a" || len(got[0].Groups) != 2 || got[0].Groups[1] != "*" || got[1].Dir != "/b" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := parseExports(e.Bytes()[:10]); err == nil {
		t.Fatal("truncated list parsed")
	}
}

func TestStatusOf(t *testing.T) {
	err := fmt.Errorf("lookup: %w", ErrStale)
	if s, ok := StatusOf(err); !ok || s != ErrStale || !errors.Is(err, ErrStale) {
		t.Fatalf("%v %v", s, ok)
	}
	if _, ok := StatusOf(errors.New("x")); ok {
		t.Fatal("plain error has a status")
	}
	if ErrBadType.Error() != "NFS3ERR_BADTYPE" || MountStatus(13).Error() != "MNT3ERR_ACCES" {
		t.Fatal(ErrBadType.Error(), MountStatus(13).Error())
	}
}

func TestSattrEncoding(t *testing.T) {
	var e enc
	e.sattr(SetAttrs{Mode: Mode(0o644), Size: Size(5)})
	// mode (1, 0644), uid (0), gid (0), size (1, 5), atime (0), mtime (0)
	if len(e.Bytes()) != 4*2+4+4+4+8+4+4 {
		t.Fatalf("%d bytes", len(e.Bytes()))
	}
}

// Garbage never panics the reply decoders of GETATTR, LOOKUP, READDIR,
// READDIRPLUS, the creating calls and MOUNT EXPORT.
func FuzzDecodeResults(f *testing.F) {
	f.Add(dirReply(true, true, "a", "b"))
	f.Add(dirReply(false, false, "."))
	var e enc
	encFattr(&e, Attr{Type: TypeDir})
	f.Add(e.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		parseDirList(newDec(b), true)
		parseDirList(newDec(b), false)
		parseExports(b)
		d := newDec(b)
		d.fattr()
		d = newDec(b)
		d.Opaque()
		d.postOpAttr()
		d = newDec(b)
		d.postOpFH()
		d.wcc()
	})
}

func TestStatusNames(t *testing.T) {
	if Status(69).Error() != "NFS3ERR_DQUOT" || Status(9999).Error() != "NFS3 status 9999" {
		t.Fatal(Status(69).Error(), Status(9999).Error())
	}
}
