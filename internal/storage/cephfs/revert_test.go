package cephfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tree lists a directory's entries with their types, modes, link targets and
// contents, for comparison.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error { //nolint:errcheck
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel + " " + fi.Mode().String())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			b.WriteString(" -> " + target)
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data) + " " + fi.ModTime().UTC().Format(time.RFC3339Nano))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// snapshotAndLive makes a snapshot tree and a live tree that differs from it in
// every way the copy must undo, with a symbolic link in live that points out of
// the volume, at a directory whose names the snapshot uses too.
func snapshotAndLive(t *testing.T) (src, dst, outside string) {
	root := t.TempDir()
	src, dst, outside = filepath.Join(root, "snap"), filepath.Join(root, "live"), filepath.Join(root, "outside")
	write(t, filepath.Join(src, "f"), "old f", 0o640)
	write(t, filepath.Join(src, "d", "g"), "old g", 0o600)
	write(t, filepath.Join(src, "d", "deep", "h"), "old h", 0o644)
	write(t, filepath.Join(src, "x", "inside"), "snapshot's x", 0o644)
	if err := os.Symlink("f", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(src, "d"), 0o750) //nolint:errcheck

	write(t, filepath.Join(dst, "f"), "new f, longer than the old one", 0o666)
	write(t, filepath.Join(dst, "d", "g"), "new g", 0o644)
	write(t, filepath.Join(dst, "d", "extra"), "only live", 0o644)
	write(t, filepath.Join(dst, "added", "file"), "only live", 0o644)
	write(t, filepath.Join(dst, "link"), "a file where the snapshot has a link", 0o644)
	write(t, filepath.Join(outside, "inside"), "not the volume's", 0o644)
	// live's x is a link out of the volume; the snapshot's x is a directory
	// holding "inside".
	if err := os.Symlink(outside, filepath.Join(dst, "x")); err != nil {
		t.Fatal(err)
	}
	return src, dst, outside
}

// The copy makes live the snapshot's tree exactly, never through a link.
func TestSyncTree(t *testing.T) {
	src, dst, outside := snapshotAndLive(t)
	if err := syncTree(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	if got, want := tree(t, dst), tree(t, src); got != want {
		t.Fatalf("live after the copy:\n%s\nwant the snapshot's:\n%s", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(outside, "inside")); err != nil || string(data) != "not the volume's" {
		t.Fatalf("the copy went through live's link: outside/inside = %q, %v", data, err)
	}
	// Again: nothing to change, the same tree.
	if err := syncTree(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	if got, want := tree(t, dst), tree(t, src); got != want {
		t.Fatalf("live after copying again:\n%s", got)
	}
}

// A copy stopped after any entry, as a crash would, finishes when run again.
func TestSyncTreeResumes(t *testing.T) {
	for stop := 1; ; stop++ {
		src, dst, _ := snapshotAndLive(t)
		n := 0
		crash := errors.New("crash")
		afterEntry = func() error {
			if n++; n == stop {
				return crash
			}
			return nil
		}
		err := syncTree(context.Background(), src, dst)
		afterEntry = nil
		if err == nil {
			if stop == 1 {
				t.Fatal("the hook never stopped the copy")
			}
			return // stopped after every entry there is
		}
		if !errors.Is(err, crash) {
			t.Fatal(err)
		}
		if err := syncTree(context.Background(), src, dst); err != nil {
			t.Fatal(err)
		}
		if got, want := tree(t, dst), tree(t, src); got != want {
			t.Fatalf("stopped after %d entries, then run again:\n%s\nwant:\n%s", stop, got, want)
		}
	}
}
