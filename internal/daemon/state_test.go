package daemon

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/basin-nas/basin/internal/config"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/secret"
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

// Several nodes share a PostgreSQL database (each its own data directory
// and node ID), but one node ID is one node: a second process registering
// under the ID of a live node on another data directory is refused, the same
// node restarted on its own data directory is not, and the ID is free again
// once the node has been silent for model.NodeDownAfter.
func TestNodeIDInUse(t *testing.T) {
	db := pgtest.Start(t).NewDatabase(t)
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	writeKeyFile(t, keyFile)
	opened := 0
	open := func() *state {
		cfg := testConfig()
		opened++
		cfg.DataDir, cfg.Database, cfg.SecretsKeyFile, cfg.NodeID = t.TempDir(), db, keyFile, fmt.Sprintf("opened%d", opened)
		s, err := openState(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open() // two nodes on one database
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	dirA, dirB := t.TempDir(), t.TempDir()
	tokA, tokB := must(nodeToken(dirA)), must(nodeToken(dirB))
	if tokA == tokB || tokA != must(nodeToken(dirA)) {
		t.Fatalf("tokens %q %q: want one per data directory, stable", tokA, tokB)
	}
	if err := registerNode(ctx, a.store, model.Node{ID: "n1", Instance: tokA}, nil, log); err != nil {
		t.Fatal(err)
	}
	if err := registerNode(ctx, b.store, model.Node{ID: "n2", Instance: tokB}, nil, log); err != nil {
		t.Fatalf("a second node ID on the database: %v", err)
	}
	err := registerNode(ctx, b.store, model.Node{ID: "n1", Instance: tokB}, nil, log)
	if !errors.Is(err, ErrNodeInUse) || !strings.Contains(err.Error(), "--node-id") {
		t.Fatalf("n1 again from another data directory: %v, want ErrNodeInUse naming --node-id", err)
	}
	if err := registerNode(ctx, a.store, model.Node{ID: "n1", Instance: tokA}, nil, log); err != nil {
		t.Fatalf("n1 restarted on its own data directory: %v", err)
	}
	// n1 silent past NodeDownAfter: its ID may be taken.
	if err := a.store.Update(ctx, func(tx store.Tx) error {
		n, err := store.Get[model.Node](tx, store.KindNode, "n1")
		if err != nil {
			return err
		}
		n.HeartbeatTime = time.Now().Add(-2 * model.NodeDownAfter)
		return tx.Put(store.KindNode, "n1", "", n)
	}); err != nil {
		t.Fatal(err)
	}
	if err := registerNode(ctx, b.store, model.Node{ID: "n1", Instance: tokB}, nil, log); err != nil {
		t.Fatalf("n1 from another data directory once it was down: %v", err)
	}
}

// writeKeyFile writes a key file of one new key and returns the key.
func writeKeyFile(t *testing.T, path string) []byte {
	t.Helper()
	key, err := secret.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := secret.WriteKeys(path, [][]byte{key}); err != nil {
		t.Fatal(err)
	}
	return key
}

// One cluster key (--secrets-key-file): an Active Directory password sealed by
// node A opens on node B, and an access token A issued is accepted by B; a node
// with another key file is refused, and a key file named but missing is never
// made up.
func TestClusterKey(t *testing.T) {
	ctx := context.Background()
	db := pgtest.Start(t).NewDatabase(t)
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	writeKeyFile(t, keyFile)
	nodes := 0
	node := func(key string) (config.Config, *state, error) {
		cfg := testConfig()
		nodes++
		cfg.DataDir, cfg.Database, cfg.SecretsKeyFile, cfg.NodeID = t.TempDir(), db, key, fmt.Sprintf("node%d", nodes)
		s, err := openState(ctx, cfg, slog.New(slog.DiscardHandler))
		return cfg, s, err
	}
	cfgA, a, err := node(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ad := &model.ActiveDirectory{Meta: model.Meta{Project: "p1", Location: "l1", ID: "ad1"}, Domain: "corp.example.com"}
	if ad.PasswordSealed, err = a.secrets.Seal("Join-Pw-1", ad.PasswordAAD()); err != nil {
		t.Fatal(err)
	}
	if err := a.store.Update(ctx, func(tx store.Tx) error { return store.PutAD(tx, ad) }); err != nil {
		t.Fatal(err)
	}
	var kf iam.KeyFile
	json.Unmarshal(must(os.ReadFile(filepath.Join(cfgA.DataDir, OwnerKeyFile))), &kf)
	authA := iam.NewAuthenticator(iam.Options{Store: a.store, TokenKey: a.tokenKey})
	tok, err := authA.Exchange(ctx, must(kf.Assertion(kf.TokenURI, time.Now())), []string{kf.TokenURI})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	_, b, err := node(keyFile) // while A runs
	if err != nil {
		t.Fatalf("node B with the cluster's key file: %v", err)
	}
	var got *model.ActiveDirectory
	b.store.View(ctx, func(tx store.Tx) (err error) {
		got, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ad.Name())
		return err
	})
	if pw, err := b.secrets.Open(got.PasswordSealed, got.PasswordAAD()); err != nil || pw != "Join-Pw-1" {
		t.Errorf("node B opens A's sealed password: %q, %v", pw, err)
	}
	authB := iam.NewAuthenticator(iam.Options{Store: b.store, TokenKey: b.tokenKey})
	if _, err := authB.Authenticate(ctx, "Bearer "+tok.Token); err != nil {
		t.Errorf("node B refused A's access token: %v", err)
	}
	b.Close()

	otherKey := filepath.Join(t.TempDir(), "other.key")
	writeKeyFile(t, otherKey)
	if _, s, err := node(otherKey); !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "--secrets-key-file") {
		if s != nil {
			s.Close()
		}
		t.Errorf("a node with another key: %v, want ErrWrongKey naming --secrets-key-file", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.key")
	if _, s, err := node(missing); err == nil || !strings.Contains(err.Error(), "does not exist") {
		if s != nil {
			s.Close()
		}
		t.Errorf("a missing key file: %v", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("a missing --secrets-key-file was made up")
	}
}

// basin secrets rotate: the key file gets a new first key (the old one after
// it), every stored secret is resealed under it, and a node with only the old
// key is refused. A rotation cut short after writing the key file is finished
// by the next start.
func TestRotateSecretsKey(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	log := slog.New(slog.DiscardHandler)
	s, err := openState(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ad := &model.ActiveDirectory{Meta: model.Meta{Project: "p1", Location: "l1", ID: "ad1"}, Domain: "corp.example.com"}
	ad.PasswordSealed = must(s.secrets.Seal("Join-Pw-2", ad.PasswordAAD()))
	op := &model.Operation{Project: "p1", Location: "l1", ID: "op1", Kind: model.OpADUpdate, Target: ad.Name(), Done: true,
		Response: must(json.Marshal(ad))}
	if err := s.store.Update(ctx, func(tx store.Tx) error {
		if err := store.PutAD(tx, ad); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	keyFile := filepath.Join(cfg.DataDir, SecretsKeyFile)
	oldKeys := must(secret.LoadKeys(keyFile))

	// sealedWith returns the key IDs the stored password is sealed with (policy,
	// operation record), checking it still opens.
	sealedWith := func(s *state) []string {
		t.Helper()
		var ids []string
		s.store.View(ctx, func(tx store.Tx) error {
			a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ad.Name())
			if err != nil {
				return err
			}
			o, err := store.Get[model.Operation](tx, store.KindOperation, op.Name())
			if err != nil {
				return err
			}
			var r model.ActiveDirectory
			json.Unmarshal(o.Response, &r)
			for _, sealed := range []string{a.PasswordSealed, r.PasswordSealed} {
				if pw, err := s.secrets.Open(sealed, ad.PasswordAAD()); err != nil || pw != "Join-Pw-2" {
					t.Errorf("password after rotation: %q, %v", pw, err)
				}
				ids = append(ids, secret.SealedWith(sealed))
			}
			return nil
		})
		return ids
	}
	oldID, newID, err := RotateSecretsKey(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	keys := must(secret.LoadKeys(keyFile))
	if oldID != secret.KeyID(oldKeys[0]) || newID == oldID || len(keys) != 2 || secret.KeyID(keys[0]) != newID || !bytes.Equal(keys[1], oldKeys[0]) {
		t.Fatalf("after rotation: %s → %s, key file %d keys", oldID, newID, len(keys))
	}
	s, err = openState(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if ids := sealedWith(s); !slices.Equal(ids, []string{newID, newID}) {
		t.Errorf("secrets sealed with %v after rotation, want %s", ids, newID)
	}
	s.Close()

	// The old key alone no longer starts Basin.
	if err := secret.WriteKeys(keyFile, oldKeys); err != nil {
		t.Fatal(err)
	}
	if s, err := openState(ctx, cfg, log); !errors.Is(err, ErrWrongKey) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("start with the key rotated out: %v, want ErrWrongKey", err)
	}
	// A rotation cut short: a newer key first in the file, the store not yet
	// resealed. The next start finishes it.
	third := must(secret.NewKey())
	if err := secret.WriteKeys(keyFile, [][]byte{third, keys[0], keys[1]}); err != nil {
		t.Fatal(err)
	}
	s, err = openState(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ids := sealedWith(s); !slices.Equal(ids, []string{secret.KeyID(third), secret.KeyID(third)}) {
		t.Errorf("after a start that finished a rotation: sealed with %v, want %s", ids, secret.KeyID(third))
	}
}

// --public-url (a load balancer's, before several nodes) is the owner key
// file's token_uri, and self-signed JWTs naming it as their audience are
// accepted; without it they are not.
func TestPublicURL(t *testing.T) {
	ctx := context.Background()
	for _, public := range []string{"", "https://basin.example.com"} {
		cfg := testConfig()
		cfg.DataDir, cfg.PublicURL = t.TempDir(), public
		s, err := openState(ctx, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		var kf iam.KeyFile
		json.Unmarshal(must(os.ReadFile(filepath.Join(cfg.DataDir, OwnerKeyFile))), &kf)
		want := "http://" + cfg.Listen + "/token"
		if public != "" {
			want = "https://basin.example.com/token"
		}
		if kf.TokenURI != want {
			t.Errorf("public URL %q: token_uri %q, want %q", public, kf.TokenURI, want)
		}
		auth := iam.NewAuthenticator(iam.Options{Store: s.store, TokenKey: s.tokenKey, Audiences: audiences(cfg)})
		_, err = auth.Authenticate(ctx, "Bearer "+selfSignedJWT(t, &kf, "https://basin.example.com/"))
		if (public != "") != (err == nil) {
			t.Errorf("public URL %q: a JWT for https://basin.example.com/: %v", public, err)
		}
		s.Close()
	}
}

// selfSignedJWT signs an API token with a key file as Google's libraries do
// for self-signed JWTs: iss and sub the account, aud the service.
func selfSignedJWT(t *testing.T, kf *iam.KeyFile, aud string) string {
	t.Helper()
	block, _ := pem.Decode([]byte(kf.PrivateKey))
	if block == nil {
		t.Fatal("private_key is not PEM")
	}
	priv := must(x509.ParsePKCS8PrivateKey(block.Bytes))
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": kf.ClientEmail, "sub": kf.ClientEmail, "aud": aud,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	tok.Header["kid"] = kf.PrivateKeyID
	return must(tok.SignedString(priv))
}

// A database from before key IDs whose secret was sealed under a key since lost
// still starts: the value is left as it is (its join fails and says so later).
func TestUnopenableSecretDoesNotStopStart(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	st, err := store.OpenSQLite(ctx, filepath.Join(cfg.DataDir, "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	ad := &model.ActiveDirectory{Meta: model.Meta{Project: "p1", Location: "l1", ID: "ad1"}, Domain: "corp.example.com"}
	ad.PasswordSealed = must(secret.NewEphemeral().Seal("Lost-Key-Pw", ad.PasswordAAD()))
	if err := st.Update(ctx, func(tx store.Tx) error { return store.PutAD(tx, ad) }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	s, err := openState(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start with a secret sealed under a lost key: %v", err)
	}
	defer s.Close()
	var got *model.ActiveDirectory
	s.store.View(ctx, func(tx store.Tx) (err error) {
		got, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ad.Name())
		return err
	})
	if got.PasswordSealed != ad.PasswordSealed {
		t.Errorf("the unopenable value was rewritten: %q", got.PasswordSealed)
	}
}

// basin secrets rotate refuses while another node on the database is alive:
// it would go on with the old key alone, unable to open what is resealed.
func TestRotateRefusedWhileNodesRun(t *testing.T) {
	ctx := context.Background()
	db := pgtest.Start(t).NewDatabase(t)
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	writeKeyFile(t, keyFile)
	cfg := testConfig()
	cfg.DataDir, cfg.Database, cfg.SecretsKeyFile, cfg.NodeID = t.TempDir(), db, keyFile, "here"
	log := slog.New(slog.DiscardHandler)
	s, err := openState(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Update(ctx, func(tx store.Tx) error {
		return tx.Put(store.KindNode, "there", "", &model.Node{ID: "there", Instance: "another-dir", HeartbeatTime: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before := must(os.ReadFile(keyFile))
	if _, _, err := RotateSecretsKey(ctx, cfg, log); err == nil || !strings.Contains(err.Error(), "there") {
		t.Fatalf("rotate while node there runs: %v, want a refusal naming it", err)
	}
	if after := must(os.ReadFile(keyFile)); !bytes.Equal(before, after) {
		t.Fatal("a refused rotation changed the key file")
	}
}
