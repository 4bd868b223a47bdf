package dataplane

import (
	"context"
	"fmt"
	"os"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/runner"
)

// ShareMounts makes dir a shared mount point (a bind mount of itself), so volumes
// mounted below it later also appear inside sandboxes, whose mount namespaces are its
// slaves. A dir that is already a mount point (left by a killed run) is re-marked.
func ShareMounts(ctx context.Context, run runner.Runner, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ok, err := mountinfo.IsMountPoint(dir)
	if err != nil {
		return err
	}
	if !ok {
		if _, err := run.Run(ctx, "mount", "--bind", dir, dir); err != nil {
			return fmt.Errorf("bind %s: %w", dir, err)
		}
	}
	if _, err := run.Run(ctx, "mount", "--make-shared", dir); err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	return nil
}

// UnshareMounts removes the bind mount ShareMounts made, once nothing is mounted
// below it.
func UnshareMounts(ctx context.Context, run runner.Runner, dir string) error {
	for range 4 {
		ok, err := mountinfo.IsMountPoint(dir)
		if err != nil || !ok {
			return err
		}
		if _, err := run.Run(ctx, "umount", dir); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("%s is still mounted", dir)
}
