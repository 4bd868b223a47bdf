package daemon

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Everything Basin keeps in its data directory is private to it: the directory is
// 0700 and every file 0600, even under a permissive umask (which the daemons Basin
// starts would inherit, so Basin does not change it) and even if an earlier version
// left them readable.
func TestDataDirModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit.log"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.DataDir = dir
	check := func(when string) {
		t.Helper()
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: data dir mode %o, want 700", when, fi.Mode().Perm())
		}
		var files []string
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			files = append(files, filepath.Base(path))
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s has mode %o, want 600", when, path, fi.Mode().Perm())
			}
			return nil
		})
		for _, want := range []string{"basin.db", "basin.db-wal", "basin.db-shm", "audit.log", "basin.lock", OwnerKeyFile} {
			found := false
			for _, f := range files {
				found = found || f == want
			}
			if !found {
				t.Errorf("%s: %s not made (files: %v)", when, want, files)
			}
		}
	}
	for _, when := range []string{"first start", "second start"} {
		s, err := openState(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		// A write, so the WAL and its index exist.
		err = s.store.Update(context.Background(), func(tx store.Tx) error {
			return tx.Put(store.KindAudit, "projects/p/auditLogs/1", "projects/p", &model.AuditEntry{ID: "1"})
		})
		if err != nil {
			t.Fatal(err)
		}
		check(when)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// An earlier version's modes are corrected on the next start.
		os.Chmod(dir, 0o755)
		for _, f := range []string{"basin.db", "audit.log", OwnerKeyFile} {
			os.Chmod(filepath.Join(dir, f), 0o644)
		}
	}
}
