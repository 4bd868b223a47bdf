package dataplane

import (
	"net/netip"
	"strings"
	"testing"
)

// Two nodes on one host (each its own data directory and address on one
// Ceph bridge) get namespaces and links of their own, with names Linux
// takes, and a restart finds its own again.
func TestMountLinkNames(t *testing.T) {
	a := NewMountLink("/var/lib/basin-a", "bceph0", netip.MustParsePrefix("10.20.0.209/24"), nil)
	b := NewMountLink("/var/lib/basin-b", "bceph0", netip.MustParsePrefix("10.20.0.219/24"), nil)
	// Even with one address (a misconfiguration), not one namespace.
	c := NewMountLink("/var/lib/basin-c", "bceph0", netip.MustParsePrefix("10.20.0.209/24"), nil)
	if a.Name() == b.Name() || a.veth() == b.veth() || a.Name() == c.Name() {
		t.Errorf("two nodes share names: %s %s %s, %s %s", a.Name(), b.Name(), c.Name(), a.veth(), b.veth())
	}
	for _, l := range []*MountLink{a, b} {
		if len(l.veth()) > 15 {
			t.Errorf("veth %q is longer than 15 characters", l.veth())
		}
		if !strings.HasPrefix(l.Path(), "/run/netns/basin-cm-") {
			t.Errorf("path %q", l.Path())
		}
	}
	if again := NewMountLink("/var/lib/basin-a", "bceph0", netip.MustParsePrefix("10.20.0.209/24"), nil); again.Name() != a.Name() {
		t.Error("the names change between starts: a restart would not find the namespace its mounts are in")
	}
}
