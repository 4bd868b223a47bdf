package dataplane

import (
	"context"
	"errors"
	"log/slog"
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
		`iifname "eth0" ip saddr 127.0.0.0/8 drop` + "\n\t\t" + `iifname "eth0" tcp dport 445 return` + "\n\t\t" +
			`iifname "eth0" meta l4proto icmp return` + "\n\t\tnotrack",
		`oifname "eth0" tcp sport 445 return` + "\n\t\t" + `oifname "eth0" meta l4proto icmp return` + "\n\t\tnotrack",
		`iifname "eth0" tcp dport 445 dnat to ip daddr map @endpoints`,
		`iifname "eth0" tcp dport 445 ct state invalid drop` + "\n\t\t" + `iifname "eth0" ip daddr 127.0.0.0/8 ct status dnat accept` +
			"\n\t\t" + `iifname "eth0" ip daddr 127.0.0.0/8 drop`,
		"hook postrouting priority 200; policy accept;\n\t\t" + `oifname "eth0" ip saddr 127.0.0.0/8 drop`,
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

// nftRunner records the nft scripts it is asked to apply, failing while fail
// is set.
type nftRunner struct {
	applied []string
	fail    bool
}

func (r *nftRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if r.fail {
		return []byte("nft: no"), errors.New("exit status 1")
	}
	if cmd := strings.Join(args, " "); !strings.Contains(cmd, `nft -f "$0" && echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet`) {
		return nil, errors.New("not the table first, then route_localnet: " + cmd)
	}
	script, err := os.ReadFile(args[len(args)-1])
	if err != nil {
		return nil, err
	}
	r.applied = append(r.applied, string(script))
	return nil, nil
}

// applySMBNAT maps every joined instance's endpoints (not a ValidateDomain's
// namespace's, nor an unreadable list's), applies a changed table once, and
// after a failure applies it again at the next call; the table goes in before
// route_localnet is turned on.
func TestApplySMBNAT(t *testing.T) {
	dir := t.TempDir()
	r := &nftRunner{}
	sb := &sandbox{dir: dir, ns: "basin-x", run: r, log: slog.New(slog.DiscardHandler)}
	write := func(id string, addrs map[string]netip.Addr) {
		t.Helper()
		os.MkdirAll(filepath.Join(dir, "smb", id), 0o700)
		if err := writeJSON(filepath.Join(dir, "smb", id, "addrs.json"), addrs); err != nil {
			t.Fatal(err)
		}
	}
	a, b := netip.MustParseAddr("10.99.0.10"), netip.MustParseAddr("10.99.0.11")
	write("s1", map[string]netip.Addr{"one": a})
	write("s2", map[string]netip.Addr{"two": b})
	write("v9", map[string]netip.Addr{"probe": netip.MustParseAddr("10.99.0.12")})
	// An instance whose list is unreadable is left out, not the others; an
	// address another instance lists first stays that one's.
	os.MkdirAll(filepath.Join(dir, "smb", "s0"), 0o700)
	os.WriteFile(filepath.Join(dir, "smb", "s0", "addrs.json"), []byte("{not json"), 0o600)
	write("s3", map[string]netip.Addr{"dup": a})
	ctx := context.Background()
	for range 2 {
		if err := sb.applySMBNAT(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := renderSMBNAT(map[netip.Addr]netip.Addr{a: smbLoopback("s1"), b: smbLoopback("s2")})
	if len(r.applied) != 1 || r.applied[0] != want {
		t.Fatalf("applied %d scripts, want this one once:\n%s\ngot:\n%v", len(r.applied), want, r.applied)
	}
	write("s2", map[string]netip.Addr{})
	r.fail = true
	if err := sb.applySMBNAT(ctx); err == nil {
		t.Fatal("a failed nft was not reported")
	}
	r.fail = false
	if err := sb.applySMBNAT(ctx); err != nil {
		t.Fatal(err)
	}
	want = renderSMBNAT(map[netip.Addr]netip.Addr{a: smbLoopback("s1")})
	if len(r.applied) != 2 || r.applied[1] != want {
		t.Fatalf("after the failure: %d scripts, the last:\n%s\nwant:\n%s", len(r.applied), r.applied[len(r.applied)-1], want)
	}
}
