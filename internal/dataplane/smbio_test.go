package dataplane

import (
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/smb"
)

// An instance not serving keeps its last counters (nothing was served since);
// one never read has none; the accounts of instances gone are forgotten, and
// only on their own network.
func TestSMBAccountsLastAndPrune(t *testing.T) {
	var s smbAccounts
	if _, ok := s.last("n1", "a"); ok {
		t.Fatal("an instance never read has counters")
	}
	s.mu.Lock()
	a := s.account("n1", "a")
	a.acc.Update(100, map[int]smb.ProcessIO{100: {}, 201: {Connects: 1, Reads: 3, ReadMsgBytes: 3 * 200}},
		map[int][]string{201: {"docs"}}, []string{"docs"})
	a.read = time.Now()
	s.account("n1", "b")
	s.account("n2", "a")
	s.mu.Unlock()
	if io, ok := s.last("n1", "a"); !ok || io["docs"].Reads != 3 {
		t.Fatalf("last = %v, %v; want docs with 3 reads", io, ok)
	}
	s.prune("n1", map[string]bool{"a": true})
	if len(s.accs) != 2 || s.accs["n1/a"] == nil || s.accs["n2/a"] == nil {
		t.Fatalf("after pruning n1 to a: %v", s.accs)
	}
}
