package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseNetwork(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		spec        string
		first, last string
	}{
		{"default=basin0,10.99.0.0/24", "10.99.0.10", "10.99.0.127"},
		{"n=br1,10.99.0.0/24,10.99.0.200-10.99.0.250", "10.99.0.200", "10.99.0.250"},
		{"n=br1,10.99.0.0/24,10.99.0.2-10.99.0.2", "10.99.0.2", "10.99.0.2"},
		{"n=br1,10.98.0.0/16", "10.98.0.10", "10.98.127.255"},
		{"n=br1,10.99.7.0/27", "10.99.7.10", "10.99.7.15"},
		{"n=br1,10.99.7.0/28", "10.99.7.2", "10.99.7.7"},
		{"n=br1,10.99.7.5/28", "10.99.7.2", "10.99.7.7"}, // the subnet is masked
	} {
		n, err := ParseNetwork(tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if n.FirstEndpoint != a(tc.first) || n.LastEndpoint != a(tc.last) {
			t.Errorf("%s: endpoints %s-%s, want %s-%s", tc.spec, n.FirstEndpoint, n.LastEndpoint, tc.first, tc.last)
		}
	}
	for _, tc := range []struct{ spec, want string }{
		{"n=br1,10.99.0.0/24,10.99.1.10-10.99.1.20", "inside"},
		{"n=br1,10.99.0.0/24,10.99.0.0-10.99.0.20", "network"},
		{"n=br1,10.99.0.0/24,10.99.0.1-10.99.0.20", "host"},
		{"n=br1,10.99.0.0/24,10.99.0.10-10.99.0.255", "broadcast"},
		{"n=br1,10.99.0.0/24,10.99.0.20-10.99.0.10", "FIRST-LAST"},
		{"n=br1,10.99.0.0/24,10.99.0.20", "FIRST-LAST"},
		{"n=br1,10.99.0.0/24,x-y", "FIRST-LAST"},
		{"n=br1,10.99.0.0/24,::1-::2", "FIRST-LAST"},
		{"n=br1,10.99.0.0/24,10.99.0.10-10.99.0.20,extra", "FIRST-LAST"},
		{"n=br1", "NAME=BRIDGE,CIDR"},
		{"n=br1,10.99.0.0/29", "16 addresses"},
	} {
		if _, err := ParseNetwork(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.spec, err, tc.want)
		}
	}
	if d := DefaultNetwork; d.FirstEndpoint != a("10.99.0.10") || d.LastEndpoint != a("10.99.0.127") {
		t.Errorf("DefaultNetwork endpoints %s-%s", d.FirstEndpoint, d.LastEndpoint)
	}
}

// --ganesha-prefix's default: the package's Ganesha when it is installed, else
// the one scripts/ganesha/build.sh installs.
func TestGaneshaPrefixFor(t *testing.T) {
	for _, tc := range []struct {
		present []string
		want    string
	}{
		{nil, DefaultGaneshaPrefix},
		{[]string{"/usr/local/lib/basin/ganesha/BASIN-PATCHES"}, DefaultGaneshaPrefix},
		{[]string{"/usr/lib/basin/ganesha"}, DefaultGaneshaPrefix}, // a directory without a build
		{[]string{"/usr/lib/basin/ganesha/BASIN-PATCHES"}, PackagedGaneshaPrefix},
		{[]string{"/usr/lib/basin/ganesha/BASIN-PATCHES", "/usr/local/lib/basin/ganesha/BASIN-PATCHES"}, PackagedGaneshaPrefix},
	} {
		got := GaneshaPrefixFor(func(p string) bool { return slices.Contains(tc.present, p) })
		if got != tc.want {
			t.Errorf("with %v: %s, want %s", tc.present, got, tc.want)
		}
	}
}
