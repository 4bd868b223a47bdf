package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/basin-nas/basin/internal/runner"
)

// sharedMounts makes a data directory whose mounts directory is shared
// (ShareMounts), as the daemon's is, undone at cleanup once the volumes below it
// are gone.
func sharedMounts(t *testing.T, ctx context.Context) (dataDir, mounts string) {
	t.Helper()
	dataDir = t.TempDir()
	mounts = filepath.Join(dataDir, "mounts")
	if err := ShareMounts(ctx, runner.Exec{}, mounts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := UnshareMounts(context.Background(), runner.Exec{}, mounts); err != nil {
			t.Error(err)
		}
	})
	return dataDir, mounts
}

// tmpfsVolume mounts a tmpfs with opts at mounts/name, a volume to export,
// unmounted at cleanup.
func tmpfsVolume(t *testing.T, mounts, name, opts string) string {
	t.Helper()
	p := filepath.Join(mounts, name)
	os.MkdirAll(p, 0o755)
	if err := syscall.Mount("tmpfs", p, "tmpfs", 0, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(p, syscall.MNT_DETACH) })
	return p
}

// rootManager starts a Manager of network n on a data directory of its own
// (root, Basin's Ganesha: the test is skipped without them), stopped at
// cleanup; mounts is where tmpfsVolume makes its volumes.
func rootManager(t *testing.T, ctx context.Context, n Network) (m *Manager, mounts string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Ganesha)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	dataDir, mounts := sharedMounts(t, ctx)
	m = New(Options{Ganesha: testGanesha(), DataDir: dataDir, Networks: []Network{n},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}) // shown if the test fails
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return m, mounts
}

// testGanesha is the Ganesha build root tests run: BASIN_GANESHA_PREFIX if set
// (a build of a newer patch set beside the installed one), else the default.
func testGanesha() Ganesha { return Ganesha{Prefix: os.Getenv("BASIN_GANESHA_PREFIX")} }

// vethPair makes two network namespaces named prefix-a-PID and prefix-b-PID,
// joined by a veth whose ends are both eth0 and up, deleted at cleanup, and
// returns their names. It skips the test without root.
func vethPair(t *testing.T, prefix string) (nsA, nsB string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	nsA, nsB = fmt.Sprintf("%s-a-%d", prefix, os.Getpid()), fmt.Sprintf("%s-b-%d", prefix, os.Getpid())
	for _, ns := range []string{nsA, nsB} {
		runIP(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	runIP(t, "-n", nsA, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", nsB)
	runIP(t, "-n", nsA, "link", "set", "eth0", "up")
	runIP(t, "-n", nsB, "link", "set", "eth0", "up")
	return nsA, nsB
}

// runIP runs ip with args and fails the test on an error.
func runIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}
