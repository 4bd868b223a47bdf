package cephfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Revert implements storage.Backend. CephFS has no rollback: the snapshot's tree
// is copied over the live data, in the volume's own mount (so as the volume's
// own user, confined to its subvolume): whatever the snapshot does not hold
// goes, every file it holds is written again whole, and modes, owners and times
// follow it. Nothing is set aside, so there is nothing to recover: a revert cut
// short leaves a mix of the two trees, and asked again it finishes the same
// revert. It costs a read and a write of the snapshot's data (the manager's
// clone costs the same); the live data is unmounted while it runs and after.
func (b *Backend) Revert(ctx context.Context, key, snap string) error {
	if err := b.attach(ctx, key); err != nil {
		return err
	}
	src, err := b.snapEntry(key, snap)
	if err != nil {
		return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
	}
	if err := b.Unmount(ctx, key); err != nil {
		return err
	}
	return syncTree(ctx, src, b.fsPath(key))
}

// syncTree makes directory dst hold what directory src holds. It never
// follows a symbolic link in either tree, and it skips what is neither a
// directory, a regular file nor a symbolic link (Basin's volumes hold no
// device nodes; FIFOs and sockets carry no data).
func syncTree(ctx context.Context, src, dst string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	want, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	keep := map[string]fs.FileMode{}
	for _, e := range want {
		keep[e.Name()] = e.Type()
	}
	have, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	for _, e := range have {
		if t, ok := keep[e.Name()]; !ok || t != e.Type() || !copied(t) {
			if err := os.RemoveAll(filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	}
	for _, e := range want {
		if afterEntry != nil {
			if err := afterEntry(); err != nil {
				return err
			}
		}
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch {
		case e.Type().IsDir():
			if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if err := syncTree(ctx, s, d); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := copyFile(s, d); err != nil {
				return err
			}
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(s)
			if err != nil {
				return err
			}
			if cur, err := os.Readlink(d); err != nil || cur != target {
				os.Remove(d) //nolint:errcheck // absent is fine
				if err := os.Symlink(target, d); err != nil {
					return err
				}
			}
		default:
			continue
		}
		if err := copyAttrs(s, d); err != nil {
			return err
		}
	}
	return copyAttrs(src, dst)
}

// afterEntry, when set (tests), is called before each entry is copied; an
// error stops the copy there, as a crash would.
var afterEntry func() error

func copied(t fs.FileMode) bool { return t.IsDir() || t.IsRegular() || t&fs.ModeSymlink != 0 }

// copyFile writes dst (never through a link: O_NOFOLLOW) with src's bytes.
func copyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyAttrs gives dst src's owner, mode and times (a link's owner and times
// only).
func copyAttrs(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}
