package nfsraw

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func sampleHandle(v3 bool) []byte {
	k := binary.LittleEndian.AppendUint64(nil, 257)
	k = binary.LittleEndian.AppendUint64(k, 256)
	k = binary.LittleEndian.AppendUint32(k, 9)
	vfs := append([]byte{HandleType8 | FSIDTwoUint32}, 1, 0, 0, 0, 2, 0, 0, 0, btrfsNoParent)
	vfs = append(vfs, k...)
	b := append([]byte{GaneshaFHVersion, 0x40, 0, 7, byte(len(vfs))}, vfs...)
	for v3 && len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestHandleRoundTrip(t *testing.T) {
	for _, v3 := range []bool{false, true} {
		raw := sampleHandle(v3)
		h, err := ParseHandle(raw, v3)
		if err != nil {
			t.Fatal(err)
		}
		if h.ExportID != 7 || h.FSIDType() != FSIDTwoUint32 || h.KernelType != btrfsNoParent {
			t.Fatalf("%+v", h)
		}
		if ma, mi, ok := h.FSIDTwoUint32(); !ok || ma != 1 || mi != 2 {
			t.Fatalf("fsid %d %d", ma, mi)
		}
		b, ok := h.Btrfs()
		if !ok || b.ObjectID != 257 || b.RootObjectID != 256 || b.Generation != 9 {
			t.Fatalf("btrfs %+v", b)
		}
		if got := h.Encode(); !bytes.Equal(got, raw) {
			t.Fatalf("v3=%v: encode\n%x\nwant\n%x", v3, got, raw)
		}
		f := h.Clone()
		b.RootObjectID = BtrfsTopLevelID
		f.SetBtrfs(b)
		g, _ := ParseHandle(f.Encode(), v3)
		if gb, _ := g.Btrfs(); gb.RootObjectID != 5 || gb.ObjectID != 257 {
			t.Fatalf("forged %+v", gb)
		}
		if hb, _ := h.Btrfs(); hb.RootObjectID != 256 {
			t.Fatal("Clone shares the kernel handle")
		}
	}
	if _, err := ParseHandle([]byte{0x43, 0x40, 0, 1, 40, 1}, true); err == nil {
		t.Fatal("short handle parsed")
	}
}

func TestDecodeCompound(t *testing.T) {
	var e xdrEnc
	e.U32(uint32(ErrStale))
	e.Str("t")
	e.U32(2)
	e.U32(22) // PUTFH OK
	e.U32(0)
	e.U32(34) // SETATTR fails, with attrsset
	e.U32(uint32(ErrStale))
	e.bitmap([]uint32{0, 0})
	sa := &SetAttr{}
	st, failed, err := decodeCompound(e.Bytes(), []Op{&PutFH{}, sa, &GetAttr{}})
	if err != nil || st != ErrStale || failed != 1 || len(sa.AttrsSet) != 2 {
		t.Fatalf("%v %d %v %v", st, failed, err, sa.AttrsSet)
	}
	if _, _, err := decodeCompound(e.Bytes()[:12], []Op{&PutFH{}}); err == nil {
		t.Fatal("truncated reply decoded")
	}
}

func FuzzDecodeCompound(f *testing.F) {
	f.Add(sampleHandle(true))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeCompound(b, []Op{&GetAttr{}, &ReadDir{}, &Read{}, &GetFH{}, &SetAttr{}})
		decodeCompound(b, []Op{&sequence{sess: &session{}}, &exchangeID{}, &createSession{}, &GetSpace{}})
		decodeCompound(b, []Op{&Open{}, &Lock{}, &LockT{}, &LockU{}, &Close{}, &OpenConfirm{}, &ReclaimComplete{}})
		ParseHandle(b, true)
		ParseHandle(b, false)
	})
}
