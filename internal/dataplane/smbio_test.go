package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/smb"
)

// testInstance is an instance with a directory of its own and nothing
// running, logging into logs (nil: nowhere).
func testInstance(t testing.TB, id string, logs *bytes.Buffer) *smbInstance {
	in := &smbInstance{id: id, dir: t.TempDir()}
	if logs != nil {
		in.log = slog.New(slog.NewTextHandler(logs, nil))
	}
	return in
}

// readInstance is what instanceIO does with one read of an instance's profile.
func (s *smbAccounts) readInstance(network string, in *smbInstance, parent int, procs map[int]smb.ProcessIO, tcons map[int][]string, shares ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.account(network, in)
	a.acc.Update(parent, procs, tcons, shares)
	a.read = time.Now()
	a.save(in.logger())
}

// An instance not serving keeps its last counters (nothing was served since);
// one never read has none; the accounts of instances gone are forgotten, with
// their saved state, and only on their own network.
func TestSMBAccountsLastAndPrune(t *testing.T) {
	var s smbAccounts
	a, b, other := testInstance(t, "a", nil), testInstance(t, "b", nil), testInstance(t, "a", nil)
	if _, ok := s.last("n1", a); ok {
		t.Fatal("an instance never read has counters")
	}
	s.readInstance("n1", a, 100, map[int]smb.ProcessIO{100: {}, 201: {Connects: 1, Reads: 3, ReadMsgBytes: 3 * 200}},
		map[int][]string{201: {"docs"}}, "docs")
	s.readInstance("n1", b, 100, map[int]smb.ProcessIO{100: {}}, nil, "vol2")
	s.readInstance("n2", other, 100, map[int]smb.ProcessIO{100: {}}, nil, "vol3")
	if io, ok := s.last("n1", a); !ok || io["docs"].Reads != 3 {
		t.Fatalf("last = %v, %v; want docs with 3 reads", io, ok)
	}
	s.prune("n1", map[string]bool{"a": true})
	if len(s.accs) != 2 || s.accs["n1/a"] == nil || s.accs["n2/a"] == nil {
		t.Fatalf("after pruning n1 to a: %v", s.accs)
	}
	for in, want := range map[*smbInstance]bool{a: true, b: false, other: true} {
		if _, err := os.Stat(in.ioFile()); (err == nil) != want {
			t.Errorf("instance %s: saved state there %v, want %v", in.dir, err == nil, want)
		}
	}
}

// A Basin that stops while smbd serves on, and a new one that reads the same
// instance: the new one takes up the saved Accountant, so the shares' counters
// go on from where they were (same Since), what smbd counted in between
// included, as the Accountant that never stopped counts them.
func TestSMBAccountsRestore(t *testing.T) {
	var logs bytes.Buffer
	in := testInstance(t, "a", &logs)
	child := func(n uint64) smb.ProcessIO { return smb.ProcessIO{Connects: 1, Reads: n, ReadMsgBytes: n * 4176} }
	tcons := map[int][]string{201: {"docs"}}
	// whole never stops: an instance of its own, whose saved state nobody reads.
	alone := testInstance(t, "a", nil)
	var first, whole smbAccounts
	for _, r := range []struct {
		s  *smbAccounts
		in *smbInstance
	}{{&first, in}, {&whole, alone}} {
		r.s.readInstance("n", r.in, 100, map[int]smb.ProcessIO{100: {}, 201: child(10)}, tcons, "docs", "idle")
		r.s.readInstance("n", r.in, 100, map[int]smb.ProcessIO{100: {}, 201: child(25)}, tcons, "docs", "idle")
	}
	before, _ := first.last("n", in)

	// The next Basin: the instance not serving yet, then serving on.
	var next smbAccounts
	io, ok := next.last("n", in)
	if !ok || !sameIO(io["docs"], before["docs"]) || io["docs"].Reads != 25 {
		t.Fatalf("before its first read: %+v, %v; want the saved %+v", io, ok, before)
	}
	if !strings.Contains(logs.String(), "smb i/o state taken up") {
		t.Errorf("logged %q", logs.String())
	}
	next.readInstance("n", in, 100, map[int]smb.ProcessIO{100: {}, 201: child(40)}, tcons, "docs", "idle")
	next.readInstance("n", in, 100, map[int]smb.ProcessIO{100: child(45)}, nil, "docs", "idle")
	whole.readInstance("n", alone, 100, map[int]smb.ProcessIO{100: {}, 201: child(40)}, tcons, "docs", "idle")
	whole.readInstance("n", alone, 100, map[int]smb.ProcessIO{100: child(45)}, nil, "docs", "idle")
	got, _ := next.last("n", in)
	want, _ := whole.last("n", alone)
	if !got["docs"].Since.Equal(before["docs"].Since) {
		t.Errorf("since %v after the restart, want %v", got["docs"].Since, before["docs"].Since)
	}
	for _, name := range []string{"docs", "idle"} {
		g, w := got[name], want[name]
		g.Since, w.Since = time.Time{}, time.Time{}
		if g != w {
			t.Errorf("%s after the restart: %+v\nwithout one: %+v", name, g, w)
		}
	}
	if got["docs"].Reads != 45 {
		t.Errorf("docs: %d reads, want 45", got["docs"].Reads)
	}
}

// sameIO compares counters and their start (the same instant in any zone).
func sameIO(a, b smb.ShareIO) bool {
	since := a.Since.Equal(b.Since)
	a.Since, b.Since = time.Time{}, time.Time{}
	return since && a == b
}

// A saved state that cannot be read, or of another version, is logged and
// replaced: the counters start again with a new Since.
func TestSMBAccountsRestoreRefused(t *testing.T) {
	for name, data := range map[string]string{
		"corrupt":         `{"version":1,"parent":`,
		"another version": fmt.Sprintf(`{"version":%d}`, smb.AccountantStateVersion+1),
		"not a state":     `{"version":1,"parent":-4}`,
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			in := testInstance(t, "a", &logs)
			if err := os.WriteFile(in.ioFile(), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			var s smbAccounts
			if _, ok := s.last("n", in); ok {
				t.Error("counters from a state refused")
			}
			if !strings.Contains(logs.String(), "smb i/o state ignored") {
				t.Errorf("logged %q", logs.String())
			}
			s.readInstance("n", in, 100, map[int]smb.ProcessIO{100: {}}, nil, "docs")
			b, err := os.ReadFile(in.ioFile())
			var st smb.AccountantState
			if err == nil {
				err = json.Unmarshal(b, &st)
			}
			if err != nil || st.Version != smb.AccountantStateVersion || st.Since.IsZero() {
				t.Errorf("saved after the first read: %s, %v", b, err)
			}
		})
	}
}

// The state is written when a read changed it, not when nothing happened; a
// write that fails removes the file (an older state would count twice) and
// is logged once.
func TestSMBAccountsSave(t *testing.T) {
	var logs bytes.Buffer
	in := testInstance(t, "a", &logs)
	var s smbAccounts
	idle := map[int]smb.ProcessIO{100: {}}
	s.readInstance("n", in, 100, idle, nil, "docs")
	fi, err := os.Stat(in.ioFile())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(in.ioFile(), old, old)
	s.readInstance("n", in, 100, idle, nil, "docs")
	if fi, _ := os.Stat(in.ioFile()); !fi.ModTime().Equal(old) {
		t.Error("rewritten although nothing changed")
	}
	s.readInstance("n", in, 100, map[int]smb.ProcessIO{100: {}, 201: {Connects: 1}}, map[int][]string{201: {"docs"}}, "docs")
	if fi, _ := os.Stat(in.ioFile()); fi.ModTime().Equal(old) {
		t.Error("not rewritten after a change")
	}
	// The directory made unwritable: the write fails (a directory where the
	// temporary file goes), the stale file goes.
	tmp := filepath.Join(in.dir, "."+smbIOFile+".new")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for n := range 2 {
		s.readInstance("n", in, 100, map[int]smb.ProcessIO{100: {}, 201: {Connects: 1, Reads: uint64(n + 1)}}, map[int][]string{201: {"docs"}}, "docs")
	}
	if _, err := os.Stat(in.ioFile()); err == nil {
		t.Error("an older state left after a failed write")
	}
	if n := strings.Count(logs.String(), "not saved"); n != 1 {
		t.Errorf("the failure logged %d times: %q", n, logs.String())
	}
	os.RemoveAll(tmp)
	s.readInstance("n", in, 100, map[int]smb.ProcessIO{100: {}, 201: {Connects: 1, Reads: 5}}, map[int][]string{201: {"docs"}}, "docs")
	if _, err := os.Stat(in.ioFile()); err != nil || !strings.Contains(logs.String(), "saved again") {
		t.Errorf("after the failure: %v, logged %q", err, logs.String())
	}
}

// What saving costs per read of an instance with many shares: busy, each share
// used by a connection that grows between reads (the state changes, and is
// written, every time), or idle (encoded and found unchanged: not written).
func BenchmarkSMBAccountSave(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, busy := range []bool{true, false} {
			name := fmt.Sprintf("shares=%d/idle", n)
			if busy {
				name = fmt.Sprintf("shares=%d/busy", n)
			}
			b.Run(name, func(b *testing.B) {
				in := testInstance(b, "a", nil)
				var s smbAccounts
				shares := make([]string, n)
				procs := map[int]smb.ProcessIO{100: {}}
				tcons := map[int][]string{}
				for i := range n {
					shares[i] = fmt.Sprintf("share%04d", i)
					if busy {
						tcons[1000+i] = []string{shares[i]}
					}
				}
				grow := func(k uint64) {
					for i := range n {
						if busy {
							procs[1000+i] = smb.ProcessIO{Connects: 1, Reads: k, ReadMsgBytes: k * 4176, ReadTimeUs: k * 90, Other: k / 3}
						}
					}
				}
				grow(1)
				s.readInstance("n", in, 100, procs, tcons, shares...)
				a := s.accs["n/a"]
				size := len(a.saved)
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					grow(uint64(i + 2))
					a.acc.Update(100, procs, tcons, shares)
					b.StartTimer()
					a.save(in.logger())
				}
				b.ReportMetric(float64(size), "bytes/file")
			})
		}
	}
}
