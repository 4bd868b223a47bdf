package smb

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// read is one Update's arguments.
type read struct {
	parent int
	procs  map[int]ProcessIO
	tcons  map[int][]string
}

// plus is the sum of counters.
func plus(ps ...ProcessIO) ProcessIO {
	var s ProcessIO
	for _, p := range ps {
		s.add(p)
	}
	return s
}

// accountantReads is a run of reads through every case Update handles: first
// reads, growth, exits absorbed at once, later or never, a child with several
// shares, children known by their tree connects only, a crashed child's
// stale tree connect, a pid reused, no smbd, and smbd restarted with its old
// records still listed, then cleared.
func accountantReads() []read {
	docs, vol2, both := []string{"DOCS"}, []string{"vol2"}, []string{"docs", "vol2"}
	w := ProcessIO{Connects: 1, Writes: 2, WriteMsgBytes: 2 * (1<<20 + writeRequestOverhead), WriteTimeUs: 40, Other: 9, OtherTimeUs: 7}
	p1 := plus(reads(30))
	p2 := plus(p1, reads(7))
	p3 := plus(p2, reads(10), reads(5), reads(2))
	p4 := plus(p3, reads(2))
	p5 := plus(p4, reads(4), w)
	p6 := plus(p5, reads(1))
	return []read{
		{100, map[int]ProcessIO{100: {}}, nil},
		{100, map[int]ProcessIO{100: {}, 201: reads(10)}, map[int][]string{201: docs}},
		{100, map[int]ProcessIO{100: {}, 201: reads(25), 209: w}, map[int][]string{201: docs, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p1, 209: w}, map[int][]string{209: {"idle"}}},
		{100, map[int]ProcessIO{100: p1, 202: reads(4), 209: w}, map[int][]string{202: vol2, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p1, 209: w}, map[int][]string{209: {"idle"}}}, // 202 gone, not absorbed yet
		{100, map[int]ProcessIO{100: p2, 209: w}, map[int][]string{209: {"idle"}}},
		{100, map[int]ProcessIO{100: p2, 203: reads(6), 209: w}, map[int][]string{203: both, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p2, 203: reads(8), 209: w}, map[int][]string{203: docs, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p2, 203: reads(9), 204: {Connects: 1}, 209: w}, map[int][]string{203: docs, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p2, 203: reads(9), 204: reads(3), 209: w}, map[int][]string{203: docs, 204: vol2, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p3, 209: w}, map[int][]string{209: {"idle"}}}, // an unseen child among the exits
		{100, map[int]ProcessIO{100: p3, 205: reads(50), 209: w}, map[int][]string{205: docs, 209: {"idle"}}},
		{100, map[int]ProcessIO{100: p3, 205: reads(2), 209: w}, map[int][]string{205: docs, 209: {"idle"}}}, // pid reused
		{100, map[int]ProcessIO{100: p4, 209: w}, map[int][]string{206: vol2, 209: {"idle"}}},                // early, no record
		{100, map[int]ProcessIO{100: p4, 209: w}, map[int][]string{209: {"idle"}, 210: both}},                // 206 gone; 210 early with two
		{100, map[int]ProcessIO{100: p5}, nil},                                                               // 209 and 210 absorbed
		{100, map[int]ProcessIO{100: p5, 207: reads(1)}, map[int][]string{207: vol2}},
		{100, map[int]ProcessIO{100: p5}, map[int][]string{207: vol2}}, // crashed: its tree connect stays
		{100, map[int]ProcessIO{100: p6}, map[int][]string{207: vol2}},
		{100, map[int]ProcessIO{100: p6, 208: reads(2)}, map[int][]string{207: vol2, 208: vol2}},
		{100, map[int]ProcessIO{100: p6, 208: reads(3)}, map[int][]string{207: vol2, 208: vol2}},
		{100, map[int]ProcessIO{100: p6}, nil}, // 208 gone: waits
		{100, map[int]ProcessIO{100: p6}, nil},
		{100, map[int]ProcessIO{100: p6}, nil},
		{100, map[int]ProcessIO{100: p6, 211: reads(100)}, map[int][]string{211: docs}}, // given up
		{0, map[int]ProcessIO{100: p6, 211: reads(110)}, map[int][]string{211: docs}},   // smbd killed
		{300, map[int]ProcessIO{100: p6, 211: reads(110)}, map[int][]string{211: docs}}, // a new one, old records
		{300, map[int]ProcessIO{100: p6, 211: reads(110), 300: {}}, map[int][]string{211: docs}},
		{300, map[int]ProcessIO{300: {}, 301: reads(5)}, map[int][]string{301: docs}}, // cleared
		{300, map[int]ProcessIO{300: reads(7)}, nil},
	}
}

// shares are the shares the instance serves in accountantReads.
var accountantShares = []string{"docs", "vol2", "idle"}

// comparable is st without its start time (two Accountants' differ), through
// a JSON round trip so that empty and absent compare equal.
func comparable(t *testing.T, st AccountantState) AccountantState {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var out AccountantState
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	out.Since = time.Time{}
	return out
}

// roundTrip saves a's state as JSON and restores it.
func roundTrip(t *testing.T, a *Accountant) *Accountant {
	t.Helper()
	b, err := json.Marshal(a.State())
	if err != nil {
		t.Fatal(err)
	}
	var st AccountantState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	r, err := RestoreAccountant(st)
	if err != nil {
		t.Fatalf("restore %s: %v", b, err)
	}
	if !r.since.Equal(a.since) {
		t.Fatalf("restored since %v, want %v", r.since, a.since)
	}
	return r
}

// An Accountant saved (State, JSON) and restored between any two reads, or
// before the first, goes on exactly as the one never interrupted: the same
// state after every later read, so the same sums.
func TestAccountantStateSplit(t *testing.T) {
	reads := accountantReads()
	var whole Accountant
	want := make([]AccountantState, len(reads))
	held := map[string]bool{}
	for i, r := range reads {
		whole.Update(r.parent, r.procs, r.tcons, accountantShares)
		want[i] = comparable(t, whole.State())
		st := want[i]
		for name, ok := range map[string]bool{"seen": len(st.Seen) > 0, "early": len(st.Early) > 0, "finished": len(st.Finished) > 0,
			"former": len(st.Former) > 0, "exited": len(st.Exited) > 0, "waited": st.Waited > 0} {
			held[name] = held[name] || ok
		}
	}
	if len(held) != 6 || slices.Contains(slices.Collect(maps.Values(held)), false) {
		t.Fatalf("the run leaves some of the state always empty: %v", held)
	}
	if s := whole.Shares(); s["docs"].Reads == 0 || s["vol2"].Reads == 0 || s["idle"].Writes == 0 || whole.Unattributed.Reads == 0 {
		t.Fatalf("the run counts too little to tell: %+v, unattributed %+v", s, whole.Unattributed)
	}
	for split := 0; split <= len(reads); split++ {
		a := &Accountant{}
		for i, r := range reads {
			if i == split {
				a = roundTrip(t, a)
			}
			a.Update(r.parent, r.procs, r.tcons, accountantShares)
			if got := comparable(t, a.State()); !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("split before read %d: after read %d\n got %+v\nwant %+v", split, i, got, want[i])
			}
		}
		if split == len(reads) {
			a = roundTrip(t, a)
		}
		got, w := a.Shares(), whole.Shares()
		for name, io := range w {
			io.Since = time.Time{}
			g := got[name]
			if g.Since.IsZero() || !g.Since.Equal(a.since) {
				t.Fatalf("split before read %d: %s since %v", split, name, g.Since)
			}
			g.Since = time.Time{}
			if g != io {
				t.Fatalf("split before read %d: %s %+v, want %+v", split, name, g, io)
			}
		}
	}
}

// Since is the first Update's time, kept by a restore, and in every share.
func TestAccountantSince(t *testing.T) {
	var a Accountant
	if st := a.State(); !st.Since.IsZero() {
		t.Fatalf("since %v before the first Update", st.Since)
	}
	before := time.Now()
	a.Update(0, nil, nil, []string{"docs"})
	since := a.Shares()["docs"].Since
	if since.Before(before) || since.After(time.Now()) {
		t.Fatalf("since %v, not the first Update's time", since)
	}
	a.Update(100, map[int]ProcessIO{100: {}}, nil, []string{"docs"})
	r := roundTrip(t, &a)
	r.Update(100, map[int]ProcessIO{100: {}}, nil, []string{"docs"})
	if got := r.Shares()["docs"].Since; !got.Equal(since) {
		t.Errorf("since %v after a restore, want %v", got, since)
	}
}

// A state of another version, or one no Accountant could have, or JSON that is
// no state, is refused.
func TestRestoreAccountantRefuses(t *testing.T) {
	var a Accountant
	for _, r := range accountantReads()[:12] {
		a.Update(r.parent, r.procs, r.tcons, accountantShares)
	}
	good := a.State()
	if _, err := RestoreAccountant(good); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(st *AccountantState){
		"another version": func(st *AccountantState) { st.Version = AccountantStateVersion + 1 },
		"no version":      func(st *AccountantState) { st.Version = 0 },
		"parent":          func(st *AccountantState) { st.Parent = -1 },
		"waited":          func(st *AccountantState) { st.Waited = maxExitWait + 1 },
		"seen pid":        func(st *AccountantState) { st.Seen = map[int]ProcessState{0: {}} },
		"early share":     func(st *AccountantState) { st.Early = map[int]ProcessState{5: {Share: "Docs"}} },
		"exited":          func(st *AccountantState) { st.Exited = []ProcessState{{Share: "docs", Ambiguous: true}} },
		"finished":        func(st *AccountantState) { st.Finished = []int{-3} },
		"former":          func(st *AccountantState) { st.Former = []int{0} },
		"share name":      func(st *AccountantState) { st.Shares = map[string]ShareIO{"": {}} },
	} {
		st := a.State()
		change(&st)
		if _, err := RestoreAccountant(st); err == nil {
			t.Errorf("%s: restored", name)
		} else if name == "another version" && !strings.Contains(err.Error(), "version 2") {
			t.Errorf("%s: %v", name, err)
		}
	}
	b, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"cut short":  string(b[:len(b)/2]),
		"wrong type": strings.Replace(string(b), `"version":1`, `"version":"1"`, 1),
		"not json":   "\x00\x01",
	} {
		var st AccountantState
		if err := json.Unmarshal([]byte(data), &st); err == nil {
			if _, err := RestoreAccountant(st); err == nil {
				t.Errorf("%s: restored", name)
			}
		}
	}
}

// Basin stops while smbd serves; smbd restarts before Basin is back (a new
// parent pid; the old one's killed children's records still listed, or
// cleared already). The restored Accountant counts each old child's last
// reads once and the new smbd's children from their first record: nothing
// twice, nothing from zero.
func TestRestoredAccountantSMBDRestarted(t *testing.T) {
	shares := []string{"docs"}
	old := reads(500) // the old smbd's record: its exited children's, counted before
	saved := func() *Accountant {
		var a Accountant
		a.Update(100, map[int]ProcessIO{100: old, 201: reads(500)}, map[int][]string{201: {"docs"}}, shares)
		a.Update(100, map[int]ProcessIO{100: old, 201: reads(1000)}, map[int][]string{201: {"docs"}}, shares)
		a.Update(100, map[int]ProcessIO{100: old, 201: reads(1000), 202: {Connects: 1}}, map[int][]string{201: {"docs"}, 202: {"docs"}}, shares)
		if got := a.Shares()["docs"].Reads; got != 1000 {
			t.Fatalf("before the stop: %d reads, want 1000", got)
		}
		return roundTrip(t, &a)
	}
	check := func(what string, a *Accountant, want uint64) {
		t.Helper()
		if got := a.Shares()["docs"].Reads; got != want || a.Unattributed.Reads != 0 {
			t.Errorf("%s: docs %d reads, unattributed %d; want %d, 0", what, got, a.Unattributed.Reads, want)
		}
	}
	// The old records still there: 201's 10 reads since the save count once,
	// whatever the reads that follow.
	a := saved()
	a.Update(300, map[int]ProcessIO{100: old, 201: reads(1010), 300: {}}, map[int][]string{201: {"docs"}}, shares)
	check("new smbd, old records", a, 1010)
	a.Update(300, map[int]ProcessIO{100: old, 201: reads(1010), 300: {}, 301: reads(3)}, map[int][]string{201: {"docs"}, 301: {"docs"}}, shares)
	check("old records read again", a, 1013)
	a.Update(300, map[int]ProcessIO{300: {}, 301: reads(5)}, map[int][]string{301: {"docs"}}, shares)
	check("database cleared", a, 1015)
	a.Update(300, map[int]ProcessIO{300: reads(6)}, nil, shares)
	check("the new child's exit, through the new parent", a, 1016)
	// Cleared before Basin is back: the old children are gone with what they
	// did since the save (no parent absorbs them); the new ones count whole.
	a = saved()
	a.Update(300, map[int]ProcessIO{300: reads(40), 301: reads(5)}, map[int][]string{301: {"docs"}}, shares)
	check("cleared while Basin was down", a, 1005)
	a.Update(300, map[int]ProcessIO{300: plus(reads(40), reads(9))}, nil, shares)
	check("the new child's exit", a, 1009)
	// smbd stopped, not back yet: nothing counted, nothing lost.
	a = saved()
	a.Update(0, map[int]ProcessIO{100: old, 201: reads(1000)}, map[int][]string{201: {"docs"}}, shares)
	check("no smbd", a, 1000)
}
