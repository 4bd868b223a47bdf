package ceph

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The host's Ceph directories: what they hold must not change.
func hashHostDirs() [32]byte {
	var names []string
	for _, dir := range []string{"/etc/ceph", "/var/lib/ceph", "/var/log/ceph", "/run/ceph"} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, _ error) error { //nolint:errcheck // missing is a state too
			names = append(names, p)
			if d != nil && !d.IsDir() {
				if b, err := os.ReadFile(p); err == nil {
					names = append(names, string(b))
				}
			}
			return nil
		})
	}
	return sha256.Sum256([]byte(strings.Join(names, "\n")))
}

// A start that fails half-way (no such bridge, after the namespace and veth
// were made) leaves nothing behind.
func TestStartFailsCleanly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := Check(); err != nil {
		t.Skip(err)
	}
	_, err := Start(context.Background(), Options{Name: "cbad", Dir: t.TempDir(), Bridge: "bcephnone0", Addr: "10.99.75.9/24"})
	if err == nil {
		t.Fatal("start on a missing bridge succeeded")
	}
	if _, err := os.Stat("/run/netns/cbad-ceph"); err == nil {
		t.Error("the namespace is left behind")
	}
	if err := exec.Command("ip", "link", "show", "vcbad-cp").Run(); err == nil {
		t.Error("the veth is left behind")
	}
}

// The cluster comes up in its namespace, serves CephFS to a client on the host
// (through the bridge), and goes without a trace; nothing of the host's Ceph
// directories changes.
func TestCluster(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := Check(); err != nil {
		t.Skip(err)
	}
	before := hashHostDirs()
	MakeBridge(t, "bceph0", "10.99.75.1/24")
	dir := t.TempDir()
	c, err := Start(context.Background(), Options{Name: "ctest", Dir: dir, Bridge: "bceph0", Addr: "10.99.75.2/24"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %s", c.Startup.Round(time.Millisecond))
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// From the host, with the cluster's conf: a subvolume with a quota.
	host := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, "ceph", append([]string{"-c", c.Conf, "--connect-timeout", "15"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("ceph %v: %v %s", args, err, stderr)
		}
		return out
	}
	host("fs", "subvolume", "create", FSName, "v1", "--size", "1073741824", "--namespace-isolated")
	var info struct {
		BytesQuota    int64  `json:"bytes_quota"`
		PoolNamespace string `json:"pool_namespace"`
	}
	if err := json.Unmarshal(host("fs", "subvolume", "info", FSName, "v1", "-f", "json"), &info); err != nil {
		t.Fatal(err)
	}
	if info.BytesQuota != 1<<30 || info.PoolNamespace != "fsvolumens_v1" {
		t.Errorf("subvolume info: %+v", info)
	}
	var health struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(host("health", "-f", "json"), &health); err != nil {
		t.Fatal(err)
	}
	if health.Status != "HEALTH_OK" {
		t.Errorf("health %s: %s", health.Status, host("health", "detail"))
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat("/run/netns/ctest-ceph"); err == nil {
		t.Error("the namespace is left behind")
	}
	if err := exec.Command("ip", "link", "show", "vctest-cp").Run(); err == nil {
		t.Error("the veth is left behind")
	}
	if hashHostDirs() != before {
		t.Error("the host's /etc/ceph, /var/lib/ceph, /var/log/ceph or /run/ceph changed")
	}
}
