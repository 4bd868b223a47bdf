package smb

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
)

// A real record: Samba 4.17's smbd after smbclient put and got a 20 MiB file in
// three 8 MiB requests each way (the child's record absorbed into the parent's,
// pid 21787); `smbstatus -P` printed the counts checked here.
func TestParseProfileDumpSamba417(t *testing.T) {
	out, err := os.ReadFile("testdata/smbprofile-4.17.tdbdump")
	if err != nil {
		t.Fatal(err)
	}
	procs, err := ParseProfileDump(out)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := procs[21787]
	if len(procs) != 1 || !ok {
		t.Fatalf("records %v, want pid 21787 only", procs)
	}
	want := ProcessIO{Connects: 1, Reads: 3, ReadMsgBytes: 20971760, ReadTimeUs: 9071, Writes: 3, WriteMsgBytes: 20971856, WriteTimeUs: 42575}
	got := p
	got.Other, got.OtherTimeUs = 0, 0
	if got != want {
		t.Errorf("parsed %+v\nwant   %+v", got, want)
	}
	if p.Other == 0 || p.OtherTimeUs == 0 {
		t.Errorf("no other requests (creates, closes, listings) in %+v", p)
	}
	var s ShareIO
	s.add(p)
	if s.ReadBytes != 20<<20 || s.WriteBytes != 20<<20 {
		t.Errorf("payload read %d, written %d; want 20 MiB each", s.ReadBytes, s.WriteBytes)
	}
}

// record is tdbdump's text of one profile record for pid.
func record(pid int, p ProcessIO) string {
	b := make([]byte, profileSize)
	copy(b, profileMagic[:])
	put := func(i int, v uint64) { binary.LittleEndian.PutUint64(b[8+8*i:], v) }
	put(connectValue, p.Connects)
	cmd := func(c, field int, v uint64) { put(smb2First+5*c+field, v) }
	cmd(smb2Read, 0, p.Reads)
	cmd(smb2Read, 1, p.ReadTimeUs)
	cmd(smb2Read, 4, p.ReadMsgBytes)
	cmd(smb2Write, 0, p.Writes)
	cmd(smb2Write, 1, p.WriteTimeUs)
	cmd(smb2Write, 3, p.WriteMsgBytes)
	cmd(smb2Getinfo, 0, p.Other)
	cmd(smb2Getinfo, 1, p.OtherTimeUs)
	cmd(smb2Negprot, 0, 5) // not counted: the session's own
	var k [4]byte
	binary.LittleEndian.PutUint32(k[:], uint32(pid))
	return fmt.Sprintf("{\nkey(4) = \"%s\"\ndata(%d) = \"%s\"\n}\n", escape(k[:]), len(b), escape(b))
}

// escape is tdbdump's escaping.
func escape(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			s.WriteByte(c)
		} else {
			fmt.Fprintf(&s, "\\%02X", c)
		}
	}
	return s.String()
}

func TestParseProfileDump(t *testing.T) {
	a := ProcessIO{Connects: 1, Reads: 10, ReadMsgBytes: 10 * (4096 + readResponseOverhead), ReadTimeUs: 500, Other: 3, OtherTimeUs: 30}
	b := ProcessIO{Connects: 1, Writes: 2, WriteMsgBytes: 2 * (1<<20 + writeRequestOverhead), WriteTimeUs: 9000}
	procs, err := ParseProfileDump([]byte(record(34, a) + record(0x225c, b)))
	if err != nil {
		t.Fatal(err)
	}
	if procs[34] != a || procs[0x225c] != b || len(procs) != 2 {
		t.Errorf("parsed %+v", procs)
	}
	if procs, err := ParseProfileDump(nil); err != nil || len(procs) != 0 {
		t.Errorf("empty database: %v, %v", procs, err)
	}
	bad := map[string]string{
		"another layout": strings.Replace(record(1, a), escape(profileMagic[:]), escape([]byte("12345678")), 1),
		"short record":   strings.Replace(record(1, a), "data(3552)", "data(3551)", 1),
		"cut escape":     "{\nkey(4) = \"\\01\\00\\00\\0\"\n}\n",
		"bad escape":     "{\nkey(4) = \"\\0G\\00\\00\\00\"\n}\n",
		"key not a pid":  strings.Replace(record(1, a), `key(4) = "\01\00\00\00"`, `key(2) = "\01\00"`, 1),
		"data alone":     "{\n" + strings.SplitN(record(1, a), "\n", 4)[2] + "\n}\n",
	}
	for name, in := range bad {
		if _, err := ParseProfileDump([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseTcons(t *testing.T) {
	out, err := os.ReadFile("testdata/smbstatus-shares.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTcons(out)
	if err != nil || len(got) != 1 || strings.Join(got[21813], ",") != "bench2" {
		t.Fatalf("ParseTcons = %v, %v", got, err)
	}
	two := `{"tcons": {"1": {"service": "IPC$", "server_id": {"pid": "7"}}, "2": {"service": "docs", "server_id": {"pid": "7"}},
		"3": {"service": "Docs", "server_id": {"pid": "7"}}, "4": {"service": "vol2", "server_id": {"pid": "7"}}, "5": {"service": "IPC$", "server_id": {"pid": "8"}}}}`
	got, err = ParseTcons([]byte(two))
	if err != nil || len(got) != 1 || len(got[7]) != 2 {
		t.Errorf("ParseTcons = %v, %v; want pid 7 with docs and vol2, IPC$ left out", got, err)
	}
	if _, err := ParseTcons([]byte(`{`)); err == nil {
		t.Errorf("ParseTcons({) accepted")
	}
	// A tree connect whose pid is not a local process's is left out; the
	// others still count (one odd entry must not blind a whole instance).
	odd := `{"tcons": {"1": {"service": "x", "server_id": {"pid": "x"}}, "2": {"service": "y", "server_id": {"pid": "0"}},
		"3": {"service": "docs", "server_id": {"pid": "9"}}}}`
	if got, err := ParseTcons([]byte(odd)); err != nil || len(got) != 1 || strings.Join(got[9], ",") != "docs" {
		t.Errorf("ParseTcons with odd pids = %v, %v; want pid 9 with docs alone", got, err)
	}
	if got, err := ParseTcons([]byte(`{"timestamp": "x"}`)); err != nil || len(got) != 0 {
		t.Errorf("no tree connects: %v, %v", got, err)
	}
}

// reads is a child's counters after n 64 KiB reads (and its connection).
func reads(n uint64) ProcessIO {
	return ProcessIO{Connects: 1, Reads: n, ReadMsgBytes: n * (64<<10 + readResponseOverhead), ReadTimeUs: 100 * n}
}

func TestAccountant(t *testing.T) {
	const parent = 100
	var a Accountant
	shares := []string{"docs", "vol2", "idle"}
	update := func(procs map[int]ProcessIO, tcons map[int][]string) {
		t.Helper()
		a.Update(parent, procs, tcons, shares)
	}
	check := func(what string, docs, vol2, lost uint64) {
		t.Helper()
		s := a.Shares()
		if s["docs"].Reads != docs || s["vol2"].Reads != vol2 || a.Unattributed.Reads != lost {
			t.Fatalf("%s: reads docs %d, vol2 %d, unattributed %d; want %d, %d, %d", what, s["docs"].Reads, s["vol2"].Reads, a.Unattributed.Reads, docs, vol2, lost)
		}
		if _, ok := s["idle"]; !ok {
			t.Fatalf("%s: idle share missing from %v", what, s)
		}
		if r := s["docs"]; r.ReadBytes != r.Reads*64<<10 || r.ReadNs != r.Reads*100_000 {
			t.Fatalf("%s: docs %+v: payload or time not per read", what, r)
		}
	}
	update(map[int]ProcessIO{parent: {}}, nil)
	check("start", 0, 0, 0)
	// A child serving docs: all it did goes to docs, first read included.
	update(map[int]ProcessIO{parent: {}, 201: reads(10)}, map[int][]string{201: {"DOCS"}})
	check("first read of a child", 10, 0, 0)
	update(map[int]ProcessIO{parent: {}, 201: reads(25)}, map[int][]string{201: {"docs"}})
	check("its growth", 25, 0, 0)
	// It exits after 5 more reads; the parent absorbs its final counters.
	update(map[int]ProcessIO{parent: reads(30)}, nil)
	check("its remainder, through the parent", 30, 0, 0)
	// Exited, but not absorbed yet: the remainder waits for the parent.
	update(map[int]ProcessIO{parent: reads(30), 202: reads(4)}, map[int][]string{202: {"vol2"}})
	update(map[int]ProcessIO{parent: reads(30)}, nil)
	check("exit not absorbed yet", 30, 4, 0)
	p := reads(30)
	p.add(reads(7))
	update(map[int]ProcessIO{parent: p}, nil)
	check("absorbed on a later read", 30, 7, 0)
	// A child connected to two shares cannot be split.
	update(map[int]ProcessIO{parent: p, 203: reads(6)}, map[int][]string{203: {"docs", "vol2"}})
	check("two shares", 30, 7, 6)
	// ... nor its growth after it dropped one (the last interval may be either's).
	update(map[int]ProcessIO{parent: p, 203: reads(8)}, map[int][]string{203: {"docs"}})
	check("two shares, then one", 30, 7, 8)
	update(map[int]ProcessIO{parent: p, 203: reads(9)}, map[int][]string{203: {"docs"}})
	check("one share since", 31, 7, 8)
	// A child with no tree connect yet, then one.
	update(map[int]ProcessIO{parent: p, 203: reads(9), 204: {Connects: 1}}, map[int][]string{203: {"docs"}})
	update(map[int]ProcessIO{parent: p, 203: reads(9), 204: reads(3)}, map[int][]string{203: {"docs"}, 204: {"vol2"}})
	check("tree connect after the first read", 31, 10, 8)
	// Both exit, and a child nobody saw came and went (three connections
	// absorbed for two seen): the remainder cannot be placed.
	p.add(reads(10))
	p.add(reads(5))
	p.add(reads(2))
	update(map[int]ProcessIO{parent: p}, nil)
	check("an unseen child among the exits", 31, 10, 8+1+2+2)
	// A pid reused by a new process (its counters went back): a new child.
	update(map[int]ProcessIO{parent: p, 205: reads(50)}, map[int][]string{205: {"docs"}})
	update(map[int]ProcessIO{parent: p, 205: reads(2)}, map[int][]string{205: {"docs"}})
	check("pid reused", 83, 10, 13)
	// A child read with a tree connect and no record yet (its first is a
	// second away), gone before it wrote one: its share is known, so is its
	// whole count (the parent's growth).
	p.add(reads(2)) // 205 exits, absorbed
	update(map[int]ProcessIO{parent: p}, map[int][]string{206: {"vol2"}})
	p.add(reads(4))
	update(map[int]ProcessIO{parent: p}, nil)
	check("a child gone before its first record", 83, 14, 13)
	// One that crashed leaves its tree connect listed: it is not counted twice.
	update(map[int]ProcessIO{parent: p, 207: reads(1)}, map[int][]string{207: {"vol2"}})
	p.add(reads(1))
	update(map[int]ProcessIO{parent: p}, map[int][]string{207: {"vol2"}})
	update(map[int]ProcessIO{parent: p}, map[int][]string{207: {"vol2"}})
	update(map[int]ProcessIO{parent: p, 208: reads(2)}, map[int][]string{207: {"vol2"}, 208: {"vol2"}})
	check("a crashed child's stale tree connect", 83, 17, 13)
	// smbd restarted (a new parent, an empty database): nothing goes back.
	a.Update(300, map[int]ProcessIO{300: {}, 301: reads(1)}, map[int][]string{301: {"vol2"}}, shares)
	check("smbd restarted", 83, 18, 13)
	// Writes and other requests go the same way.
	w := ProcessIO{Connects: 1, Writes: 2, WriteMsgBytes: 2 * (1<<20 + writeRequestOverhead), WriteTimeUs: 40, Other: 9}
	a.Update(300, map[int]ProcessIO{300: {}, 301: reads(1), 302: w}, map[int][]string{301: {"vol2"}, 302: {"Idle"}}, shares)
	if s := a.Shares()["idle"]; s.Writes != 2 || s.WriteBytes != 2<<20 || s.WriteNs != 40_000 || s.Other != 9 {
		t.Errorf("writes: %+v", s)
	}
}

// A restart of smbd kills its children, whose records stay in the database
// (and their tree connects in smbstatus's) until the new smbd clears it: reads
// in between, under the new parent or none yet, must not count them again.
func TestAccountantSMBDRestartLeftovers(t *testing.T) {
	var a Accountant
	shares := []string{"docs"}
	check := func(what string, want uint64) {
		t.Helper()
		if got := a.Shares()["docs"].Reads; got != want || a.Unattributed.Reads != 0 {
			t.Fatalf("%s: docs %d reads, unattributed %d; want %d, 0", what, got, a.Unattributed.Reads, want)
		}
	}
	tcons := map[int][]string{201: {"docs"}}
	old := reads(500) // the old smbd's record: its exited children's, counted before
	a.Update(100, map[int]ProcessIO{100: old, 201: reads(1000)}, tcons, shares)
	check("before", 1000)
	// Killed with 10 more reads done since the last look; no smbd yet.
	a.Update(0, map[int]ProcessIO{100: old, 201: reads(1010)}, tcons, shares)
	check("no smbd", 1000)
	// The new smbd, before it cleared the database: the child's last reads
	// count once, the rest was counted before.
	a.Update(300, map[int]ProcessIO{100: old, 201: reads(1010)}, tcons, shares)
	check("new smbd, old records", 1010)
	a.Update(300, map[int]ProcessIO{100: old, 201: reads(1010)}, tcons, shares)
	check("new smbd, old records read again", 1010)
	// Cleared: the old child is gone without a parent to absorb it; the new
	// smbd's children count from their first record.
	a.Update(300, map[int]ProcessIO{300: {}, 301: reads(5)}, map[int][]string{301: {"docs"}}, shares)
	check("database cleared", 1015)
	p := reads(7)
	a.Update(300, map[int]ProcessIO{300: p}, nil, shares)
	check("the new child's exit, through the new parent", 1017)
}

func FuzzParseProfileDump(f *testing.F) {
	f.Add([]byte(record(34, reads(3))))
	f.Add([]byte("{\nkey(4) = \"\\01\\00\\00\\00\"\ndata(2) = \"ab\"\n}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		procs, err := ParseProfileDump(b)
		if err == nil && procs == nil {
			t.Fatal("nil map without an error")
		}
	})
}

func FuzzParseTcons(f *testing.F) {
	f.Add([]byte(`{"tcons": {"1": {"service": "docs", "server_id": {"pid": "7"}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseTcons(b)
		if err != nil {
			return
		}
		for pid, shares := range m {
			if pid <= 0 || len(shares) == 0 {
				t.Fatalf("pid %d with shares %v", pid, shares)
			}
		}
	})
}
