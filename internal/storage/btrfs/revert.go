package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Revert implements storage.Backend in four steps, each of which leaves a state the
// next call recognises:
//
//	live, nothing aside        unmount live; rename live → retired/revert   ("unmounted", "set-aside")
//	no live, aside             snapshot snapshots/<snap> → live            ("copied")
//	live, aside                delete retired/revert (and any older copy set aside)
//
// So a call after a crash at any point finishes the same revert, and a call after
// it finished (live, nothing aside) reverts again. The live data is left unmounted:
// the caller mounts it (Mount). Before the snapshot's copy is live, Mount and
// EnsureVolume put the set-aside data back instead (recoverLive), so a revert
// abandoned half-way loses nothing.
func (b *Backend) Revert(ctx context.Context, key, snap string) error {
	defer b.lockKey(key)()
	v, err := b.open(ctx, key)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("volume %s has no filesystem", key)
	}
	live, snapPath := b.livePath(key), b.snapPath(key, snap)
	hasLive, hasSnap := exists(live), exists(snapPath)
	aside := b.asidePath(key)
	hasAside := exists(aside)
	if !hasLive && !hasAside {
		aside, hasAside = b.setAside(key) // an older Basin's copy
	}
	if hasLive && !hasAside {
		if !hasSnap {
			return fmt.Errorf("snapshot %s@%s does not exist", key, snap)
		}
		if err := b.Unmount(ctx, key); err != nil {
			return err
		}
		if err := b.step(key, "unmounted"); err != nil {
			return err
		}
		if err := os.Rename(live, aside); err != nil {
			return fmt.Errorf("set %s aside: %w", key, err)
		}
		if err := b.step(key, "set-aside"); err != nil {
			return err
		}
		hasLive, hasAside = false, true
	}
	if !hasLive {
		if !hasAside {
			return fmt.Errorf("volume %s has a filesystem without live data", key)
		}
		if !hasSnap {
			return errors.Join(fmt.Errorf("snapshot %s@%s does not exist", key, snap), b.recoverLive(key))
		}
		if _, err := b.btrfs(ctx, "subvolume", "snapshot", snapPath, live); err != nil {
			return fmt.Errorf("revert %s to %s: %w", key, snap, err)
		}
		if err := b.step(key, "copied"); err != nil {
			return err
		}
	}
	// Whatever is set aside goes, with copies an older Basin set aside under other
	// names.
	entries, err := os.ReadDir(filepath.Dir(aside))
	if err != nil {
		return err
	}
	var drop []string
	for _, e := range entries {
		drop = append(drop, filepath.Join(filepath.Dir(aside), e.Name()))
	}
	if err := b.deleteSubvolumes(ctx, drop); err != nil {
		return err
	}
	return b.ensureConsistent(ctx, key)
}

// recoverLive puts back live data a cut-short revert set aside and had not
// replaced yet. An opened volume without live data and nothing aside is an error:
// nothing here makes live data up.
func (b *Backend) recoverLive(key string) error {
	live := b.livePath(key)
	if exists(live) {
		return nil
	}
	src, ok := b.setAside(key)
	if !ok {
		return fmt.Errorf("volume %s has a filesystem without live data", key)
	}
	if err := os.Rename(src, live); err != nil {
		return fmt.Errorf("put back the live data of %s: %w", key, err)
	}
	b.log.Warn("put back live data an unfinished revert had set aside", "volume", key)
	return nil
}

// setAside returns the copy a revert set aside, if there is one: retired/revert,
// or the only copy in retired/ (an older Basin named it after its operation).
func (b *Backend) setAside(key string) (string, bool) {
	if p := b.asidePath(key); exists(p) {
		return p, true
	}
	dir := filepath.Dir(b.asidePath(key))
	entries, _ := os.ReadDir(dir)
	if len(entries) == 1 {
		return filepath.Join(dir, entries[0].Name()), true
	}
	return "", false
}

// SetFailpoint makes Revert call fn after each of its steps ("unmounted",
// "set-aside", "copied"); an error from fn stops Revert there, as a crash would.
// For tests; nil clears it.
func (b *Backend) SetFailpoint(fn func(op, key, step string) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failpoint = fn
}

func (b *Backend) step(key, name string) error {
	b.mu.Lock()
	fp := b.failpoint
	b.mu.Unlock()
	if fp == nil {
		return nil
	}
	return fp("Revert", key, name)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
