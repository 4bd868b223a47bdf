package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/store/pgtest"
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
		for _, want := range []string{"basin.db", "basin.db-wal", "basin.db-shm", "audit.log", "basin.lock", OwnerKeyFile, SecretsKeyFile} {
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
		for _, f := range []string{"basin.db", "audit.log", OwnerKeyFile, SecretsKeyFile} {
			os.Chmod(filepath.Join(dir, f), 0o644)
		}
	}
}

// A database written before secrets were sealed has its clear passwords sealed at
// start, in the policies and in the operation records, and no trace is left in the
// database files.
func TestLegacySecretsSealedAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.DataDir = dir
	const pw = "Legacy-Clear-Pw-9911-Otter"
	name := "projects/p1/locations/l1/activeDirectories/ad1"
	legacy := `{"project":"p1","location":"l1","id":"ad1","createTime":"2026-01-01T00:00:00Z","state":"READY","domain":"corp.example.com",` +
		`"dns":"10.0.0.2","netBiosPrefix":"nas","username":"admin","password":"` + pw + `"}`
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dir, "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(context.Background(), func(tx store.Tx) error {
		// A policy with nothing to seal comes first.
		if err := tx.Put(store.KindActiveDirectory, name[:len(name)-1]+"0", "projects/p1/locations/l1", json.RawMessage(`{"id":"ad0"}`)); err != nil {
			return err
		}
		if err := tx.Put(store.KindActiveDirectory, name, "projects/p1/locations/l1", json.RawMessage(legacy)); err != nil {
			return err
		}
		op := &model.Operation{Project: "p1", Location: "l1", ID: "op1", Kind: model.OpADUpdate, Target: name, Done: true,
			Prev: []byte(legacy), Response: []byte(legacy)}
		return store.PutOperation(tx, op)
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	s, err := openState(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var a *model.ActiveDirectory
	var op *model.Operation
	s.store.View(context.Background(), func(tx store.Tx) (err error) {
		if a, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, name); err != nil {
			return err
		}
		op, err = store.Get[model.Operation](tx, store.KindOperation, "projects/p1/locations/l1/operations/op1")
		return err
	})
	if got, err := s.secrets.Open(a.PasswordSealed, a.PasswordAAD()); err != nil || got != pw {
		t.Fatalf("policy's password after start: %q, %v", got, err)
	}
	for _, doc := range [][]byte{op.Prev, op.Response} {
		var o model.ActiveDirectory
		json.Unmarshal(doc, &o)
		if got, err := s.secrets.Open(o.PasswordSealed, o.PasswordAAD()); err != nil || got != pw {
			t.Fatalf("operation record's password after start: %q, %v", got, err)
		}
	}
	s.Close()
	for _, f := range []string{"basin.db", "basin.db-wal"} {
		data, _ := os.ReadFile(filepath.Join(dir, f))
		forms := []string{pw}
		for pad := range 3 {
			e := base64.StdEncoding.EncodeToString(append(bytes.Repeat([]byte{'x'}, pad), pw...))
			forms = append(forms, e[4:len(e)-4])
		}
		for _, form := range forms {
			if strings.Contains(string(data), form) {
				t.Errorf("%s still holds the clear password (as %q)", f, form)
			}
		}
	}
	// Nothing to do on the next start.
	s, err = openState(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// The owner's key file names Basin's token endpoint, and an access token issued
// there is still accepted after a restart (its MAC key derives from secrets.key,
// which is not the MAC key itself); with the embedded SQLite database and with
// PostgreSQL (--database), where the owner's account is kept there.
func TestAccessTokensOutliveARestart(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testTokensOutliveARestart(t, "") })
	t.Run("PostgreSQL", func(t *testing.T) { testTokensOutliveARestart(t, pgtest.Start(t).NewDatabase(t)) })
}

func testTokensOutliveARestart(t *testing.T, database string) {
	cfg := testConfig()
	cfg.DataDir, cfg.Database = t.TempDir(), database
	open := func() (*state, *iam.Authenticator) {
		s, err := openState(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return s, iam.NewAuthenticator(iam.Options{Store: s.store, TokenKey: s.tokenKey})
	}
	s, auth := open()
	data, err := os.ReadFile(filepath.Join(cfg.DataDir, OwnerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	var kf iam.KeyFile
	json.Unmarshal(data, &kf)
	if kf.TokenURI != "http://"+cfg.Listen+iam.TokenPath {
		t.Fatalf("token_uri %q", kf.TokenURI)
	}
	secretKey, _ := os.ReadFile(filepath.Join(cfg.DataDir, SecretsKeyFile))
	if len(s.tokenKey) != 32 || bytes.Contains(secretKey, []byte(base64.StdEncoding.EncodeToString(s.tokenKey))) {
		t.Fatal("the token key is missing or is the secrets key")
	}
	tok, err := auth.Exchange(context.Background(), must(kf.Assertion(kf.TokenURI, time.Now())), []string{kf.TokenURI})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, auth = open()
	defer s.Close()
	if _, err := auth.Authenticate(context.Background(), "Bearer "+tok.Token); err != nil {
		t.Fatalf("token refused after a restart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "basin.db")); (database == "") != (err == nil) {
		t.Errorf("database %q: basin.db in the data dir: %v", database, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Until Basin runs as a cluster, one basin serve per PostgreSQL database: a
// second one (another data directory) is refused while the first runs, and
// starts once it stopped.
func TestOneNodePerDatabase(t *testing.T) {
	db := pgtest.Start(t).NewDatabase(t)
	open := func() (*state, error) {
		cfg := testConfig()
		cfg.DataDir, cfg.Database = t.TempDir(), db
		return openState(context.Background(), cfg, slog.New(slog.DiscardHandler))
	}
	first, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := open(); !errors.Is(err, store.ErrDatabaseInUse) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("second node: %v, want ErrDatabaseInUse", err)
	}
	first.Close()
	second, err := open()
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	second.Close()
}
