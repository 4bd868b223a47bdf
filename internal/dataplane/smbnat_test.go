package dataplane

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The basin_smb table: the map in address order whatever the map's order,
// only port 445 tracked and translated, eth0's other 127/8 traffic dropped;
// and nft takes it (checked without applying, where nft runs).
func TestRenderSMBNAT(t *testing.T) {
	eps := map[netip.Addr]netip.Addr{
		netip.MustParseAddr("10.99.0.21"): netip.MustParseAddr("127.5.6.7"),
		netip.MustParseAddr("10.99.0.10"): netip.MustParseAddr("127.1.2.3"),
	}
	got := renderSMBNAT(eps)
	for _, want := range []string{
		"table ip basin_smb\ndelete table ip basin_smb\n",
		"elements = { 10.99.0.10 : 127.1.2.3, 10.99.0.21 : 127.5.6.7 }",
		"tcp dport 445 return\n\t\tnotrack",
		"tcp sport 445 return\n\t\tnotrack",
		`iifname "eth0" tcp dport 445 dnat to ip daddr map @endpoints`,
		`iifname "eth0" ip daddr 127.0.0.0/8 ct status dnat accept` + "\n\t\t" + `iifname "eth0" ip daddr 127.0.0.0/8 drop`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	for range 5 {
		if again := renderSMBNAT(eps); again != got {
			t.Fatalf("rendered differently:\n%s\n%s", got, again)
		}
	}
	empty := renderSMBNAT(nil)
	if strings.Contains(empty, "elements") || !strings.Contains(empty, "127.0.0.0/8 drop") {
		t.Errorf("no endpoints:\n%s", empty)
	}
	if _, err := exec.LookPath("nft"); err != nil || os.Getuid() != 0 {
		t.Log("nft not run (needs nft and root)")
		return
	}
	for _, script := range []string{got, empty} {
		f := filepath.Join(t.TempDir(), "smb.nft")
		os.WriteFile(f, []byte(script), 0o600)
		if out, err := exec.Command("nft", "-c", "-f", f).CombinedOutput(); err != nil {
			t.Errorf("nft -c: %v\n%s\n%s", err, out, script)
		}
	}
}
