package dataplane

import (
	"context"
	"os"
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

// testGanesha is the Ganesha build root tests run: BASIN_GANESHA_PREFIX if set
// (a build of a newer patch set beside the installed one), else the default.
func testGanesha() Ganesha { return Ganesha{Prefix: os.Getenv("BASIN_GANESHA_PREFIX")} }
