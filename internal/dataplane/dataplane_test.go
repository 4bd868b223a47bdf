package dataplane

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/runner"
)

type failRunner struct{ calls int }

func (f *failRunner) Run(context.Context, string, ...string) ([]byte, error) {
	f.calls++
	return nil, errors.New(`Cannot find device`)
}

// A link that disappears on its own (its namespace was deleted) is deleted; a link
// still present after a failed delete is an error.
func TestDeleteLink(t *testing.T) {
	ctx := context.Background()
	r := &failRunner{}
	if err := deleteLink(ctx, r, "bsbnotthere0"); err != nil || r.calls != 0 {
		t.Fatalf("absent link: err %v, %d commands run", err, r.calls)
	}
	if !linkExists("lo") {
		t.Skip("no /sys/class/net/lo")
	}
	if err := deleteLink(ctx, r, "lo"); err == nil || r.calls != 1 {
		t.Fatalf("failed delete of a present link: err %v, %d commands run", err, r.calls)
	}
}

// vanishRunner deletes the link for real and then reports failure, as `ip link
// delete` does when the kernel removed the link in between.
type vanishRunner struct{}

func (vanishRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if _, err := (runner.Exec{}).Run(ctx, name, args...); err != nil {
		return nil, err
	}
	return nil, errors.New(`Cannot find device`)
}

func TestDeleteLinkThatVanishes(t *testing.T) {
	ctx := context.Background()
	const name = "bsxtestdl0"
	if _, err := (runner.Exec{}).Run(ctx, "ip", "link", "add", name, "type", "bridge"); err != nil {
		t.Skipf("cannot create a bridge link (needs root): %v", err)
	}
	t.Cleanup(func() { (runner.Exec{}).Run(ctx, "ip", "link", "delete", name) }) //nolint:errcheck
	if err := deleteLink(ctx, vanishRunner{}, name); err != nil {
		t.Fatalf("link gone after a failed delete: %v", err)
	}
	if linkExists(name) {
		t.Fatal("link still present")
	}
}

func TestMtabEscape(t *testing.T) {
	for in, want := range map[string]string{
		"/d/mounts/v1": "/d/mounts/v1",
		"/a b/m":       `/a\040b/m`,
		"/a\tb\nc\\d":  `/a\011b\012c\134d`,
	} {
		if got := mtabEscape(in); got != want {
			t.Errorf("mtabEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// A teardown that fails to remove a network's sandbox or bridge keeps the
// sandbox's record (state.json), so that the teardown run again still finds
// what to remove. The bridge is "lo", recorded as made by Basin, whose delete
// the runner refuses: nothing on the host is touched.
func TestTeardownKeepsRecordWhenRemovalFails(t *testing.T) {
	if !linkExists("lo") {
		t.Skip("no /sys/class/net/lo")
	}
	n := Network{Name: "bsk", Bridge: "lo", Prefix: netip.MustParsePrefix("10.99.78.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.78.10"), LastEndpoint: netip.MustParseAddr("10.99.78.127")}
	r := &failRunner{}
	m := New(Options{DataDir: t.TempDir(), LockDir: t.TempDir(), Networks: []Network{n}, Runner: r})
	if err := os.MkdirAll(m.sandboxDir(n.Name), 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(m.sandboxDir(n.Name), "state.json")
	if err := writeJSON(state, sandboxState{Version: stateVersion, Network: n.Name, Bridge: n.Bridge,
		Prefix: n.Prefix.String(), Netns: nsName(n), Veth: vethName(n)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.marker(n, "bridge-created"), []byte("lo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Teardown(context.Background()); err == nil || r.calls == 0 {
		t.Fatalf("teardown with a bridge delete refused: err %v, %d commands", err, r.calls)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("the sandbox's record is gone after a failed teardown: %v", err)
	}
}

// TestSandboxHost: a sandbox's host name is one DNS label, its bridge's (and
// node's) own: the NFSv4.1 server owner and FSAL_CEPH's session names come
// from it.
func TestSandboxHost(t *testing.T) {
	long := strings.Repeat("n", 80)
	cases := []struct {
		bridge, node, want string
	}{
		{"br0", "", "basin-br0"},
		{"br0", "node-1", "basin-br0-node-1"},
		{"bte1234_x", "Node.A", "basin-bte1234-x-node-a"},
	}
	for _, c := range cases {
		if got := sandboxHost(Network{Bridge: c.bridge}, c.node); got != c.want {
			t.Errorf("sandboxHost(%q, %q) = %q, want %q", c.bridge, c.node, got, c.want)
		}
	}
	seen := map[string]string{}
	for _, n := range []string{"", "a", "b", long, long + "x"} {
		h := sandboxHost(Network{Bridge: "br0"}, n)
		if len(h) > 63 || strings.Trim(h, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Errorf("node %q: host name %q is not one DNS label", n, h)
		}
		if other, ok := seen[h]; ok {
			t.Errorf("nodes %q and %q share the host name %q", other, n, h)
		}
		seen[h] = n
	}
}
