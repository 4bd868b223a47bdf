package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/basin-nas/basin/internal/storage/localfs"
)

// The snapshot directory (NFS clients' .snapshot, docs/architecture.md; package
// snapdir): Basin writes it through DataDir/fs/<key>@.snapshot, which no sandbox
// sees; it is shown on DataDir/mounts/<key>@.snapshot, where Ganesha exports it.

const snapDirSuffix = "@.snapshot"

// SnapshotDirPath implements storage.Backend.
func (b *Backend) SnapshotDirPath(key string) string {
	return filepath.Join(b.mounts, key+snapDirSuffix)
}

func (b *Backend) snapDir(key string) localfs.SnapDir {
	return localfs.SnapDir{RW: filepath.Join(b.fsDir, key+snapDirSuffix), RO: b.SnapshotDirPath(key)}
}

// MountSnapshotDir implements storage.Backend. A directory left mounted by an
// earlier run is kept and its entries brought up to date.
func (b *Backend) MountSnapshotDir(ctx context.Context, key string) error {
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	var mounted []string
	snaps, err := os.ReadDir(filepath.Join(b.fsPath(key), "snapshots"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, s := range snaps {
		shows, err := showsSubvolume(b.SnapshotMountPath(key, s.Name()), b.snapPath(key, s.Name()))
		if err != nil {
			return err
		}
		if shows {
			mounted = append(mounted, s.Name())
		}
	}
	return b.snapDir(key).Mount(mounted, func(p string) error { return b.unmountPath(ctx, p) })
}

// listInSnapDir adds (or removes) snap's entry if the volume's snapshot
// directory is mounted.
func (b *Backend) listInSnapDir(key, snap string, listed bool) error {
	return b.snapDir(key).List(snap, listed)
}

// UnmountSnapshotDir implements storage.Backend.
func (b *Backend) UnmountSnapshotDir(ctx context.Context, key string) error {
	return b.snapDir(key).Unmount(func(p string) error { return b.unmountPath(ctx, p) })
}
