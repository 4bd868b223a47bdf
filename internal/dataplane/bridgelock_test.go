package dataplane

import (
	"net/netip"
	"strings"
	"testing"
)

// A bridge is one Manager's from Start to Stop: another asking for it is refused
// with the holder named, takes none of its other bridges, and gets it once let go.
func TestBridgeLock(t *testing.T) {
	dir := t.TempDir()
	net := func(name, bridge string) Network {
		return Network{Name: name, Bridge: bridge, Prefix: netip.MustParsePrefix("10.99.90.0/24")}
	}
	m1 := New(Options{DataDir: "/data/one", LockDir: dir, Networks: []Network{net("a", "blk0")}})
	m2 := New(Options{DataDir: "/data/two", LockDir: dir, Networks: []Network{net("b", "blk1"), net("a", "blk0")}})
	m3 := New(Options{DataDir: "/data/three", LockDir: dir, Networks: []Network{net("b", "blk1")}})
	if err := m1.lockBridges(); err != nil {
		t.Fatal(err)
	}
	err := m2.lockBridges()
	if err == nil || !strings.Contains(err.Error(), "bridge blk0 is in use by another Basin") || !strings.Contains(err.Error(), "/data/one") {
		t.Fatalf("a second Manager on blk0: %v", err)
	}
	if err := m3.lockBridges(); err != nil {
		t.Fatalf("blk1, left by the refused Manager: %v", err)
	}
	m3.unlockBridges()
	m1.unlockBridges()
	if err := m2.lockBridges(); err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	m2.unlockBridges()
}
