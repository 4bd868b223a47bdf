package iam

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

type fixture struct {
	st   store.Store
	kf   *KeyFile
	priv *rsa.PrivateKey
	auth *Authenticator
	now  time.Time
}

func newFixture(t *testing.T) *fixture {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keyPath := filepath.Join(t.TempDir(), "owner-key.json")
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if created, err := BootstrapOwner(context.Background(), st, keyPath, "http://127.0.0.1:8780/token", now); err != nil || !created {
		t.Fatalf("bootstrap: %v %v", created, err)
	}
	data, _ := os.ReadFile(keyPath)
	var kf KeyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(kf.PrivateKey))
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, kf: &kf, priv: k.(*rsa.PrivateKey), now: now}
	f.auth = NewAuthenticator(Options{Store: st, Now: func() time.Time { return f.now }, Audiences: []string{"http://127.0.0.1:8780/"}})
	return f
}

// token signs claims like the Python client does; mutate adjusts them.
func (f *fixture) token(mutate func(c jwt.MapClaims, h map[string]any)) string {
	c := jwt.MapClaims{"iss": f.kf.ClientEmail, "sub": f.kf.ClientEmail, "aud": "https://netapp.googleapis.com/",
		"iat": f.now.Unix(), "exp": f.now.Add(time.Hour).Unix()}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = f.kf.PrivateKeyID
	if mutate != nil {
		mutate(c, tok.Header)
	}
	s, err := tok.SignedString(f.priv)
	if err != nil {
		panic(err)
	}
	return s
}

func TestAcceptsOfficialClientTokens(t *testing.T) {
	f := newFixture(t)
	for name, tok := range map[string]string{
		"netapp audience":      f.token(nil),
		"longrunning audience": f.token(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "https://longrunning.googleapis.com/" }),
		"own url":              f.token(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "http://127.0.0.1:8780/" }),
		"scope instead of aud": f.token(func(c jwt.MapClaims, _ map[string]any) {
			delete(c, "aud")
			c["scope"] = "https://www.googleapis.com/auth/cloud-platform"
		}),
		"empty aud and scope (Go auth's self-signed JWT)": f.token(func(c jwt.MapClaims, _ map[string]any) {
			c["aud"] = ""
			c["scope"] = "https://www.googleapis.com/auth/cloud-platform"
		}),
		"clock skew 4 min": f.token(func(c jwt.MapClaims, _ map[string]any) {
			c["iat"] = f.now.Add(4 * time.Minute).Unix()
			c["exp"] = f.now.Add(64 * time.Minute).Unix()
		}),
	} {
		p, err := f.auth.Authenticate(context.Background(), "Bearer "+tok)
		if err != nil || p.Email != OwnerEmail || !p.Owner {
			t.Errorf("%s: %v %+v", name, err, p)
		}
	}
}

func TestRejectsBadTokens(t *testing.T) {
	f := newFixture(t)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": f.kf.ClientEmail, "sub": f.kf.ClientEmail,
		"aud": "https://netapp.googleapis.com/", "iat": f.now.Unix(), "exp": f.now.Add(time.Hour).Unix()})
	forged.Header["kid"] = f.kf.PrivateKeyID
	forgedTok, _ := forged.SignedString(other)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": f.kf.ClientEmail, "sub": f.kf.ClientEmail,
		"aud": "https://netapp.googleapis.com/", "iat": f.now.Unix(), "exp": f.now.Add(time.Hour).Unix()})
	hs.Header["kid"] = f.kf.PrivateKeyID
	hsTok, _ := hs.SignedString([]byte(f.kf.PrivateKeyID))
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": f.kf.ClientEmail, "sub": f.kf.ClientEmail,
		"aud": "https://netapp.googleapis.com/", "iat": f.now.Unix(), "exp": f.now.Add(time.Hour).Unix()})
	none.Header["kid"] = f.kf.PrivateKeyID
	noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	cases := map[string]string{
		"no header":        "",
		"not bearer":       "Basic abc",
		"garbage":          "Bearer not.a.jwt",
		"forged signature": "Bearer " + forgedTok,
		"alg HS256":        "Bearer " + hsTok,
		"alg none":         "Bearer " + noneTok,
		"unknown kid":      "Bearer " + f.token(func(_ jwt.MapClaims, h map[string]any) { h["kid"] = "nope" }),
		"no kid":           "Bearer " + f.token(func(_ jwt.MapClaims, h map[string]any) { delete(h, "kid") }),
		"expired": "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) {
			c["iat"] = f.now.Add(-2 * time.Hour).Unix()
			c["exp"] = f.now.Add(-time.Hour).Unix()
		}),
		"not yet valid": "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) {
			c["iat"] = f.now.Add(10 * time.Minute).Unix()
			c["exp"] = f.now.Add(70 * time.Minute).Unix()
		}),
		"lifetime over 1h":    "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { c["exp"] = f.now.Add(3 * time.Hour).Unix() }),
		"no exp":              "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { delete(c, "exp") }),
		"no iat":              "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { delete(c, "iat") }),
		"wrong audience":      "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "https://storage.googleapis.com/" }),
		"no aud no scope":     "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { delete(c, "aud") }),
		"empty aud, no scope": "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "" }),
		"empty aud, other scope": "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) {
			c["aud"] = ""
			c["scope"] = "https://www.googleapis.com/auth/devstorage.read_only"
		}),
		"wrong issuer":  "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { c["iss"] = "evil@x" }),
		"wrong subject": "Bearer " + f.token(func(c jwt.MapClaims, _ map[string]any) { c["sub"] = "someone@x" }),
	}
	for name, header := range cases {
		if _, err := f.auth.Authenticate(context.Background(), header); !errors.Is(err, model.ErrUnauthenticated) {
			t.Errorf("%s: got %v, want unauthenticated", name, err)
		}
	}
}

func TestRevocationIsImmediate(t *testing.T) {
	f := newFixture(t)
	tok := "Bearer " + f.token(nil)
	if _, err := f.auth.Authenticate(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	f.st.Update(context.Background(), func(tx store.Tx) error {
		sa, _ := store.Get[model.ServiceAccount](tx, store.KindServiceAccount, OwnerEmail)
		sa.Disabled = true
		return tx.Put(store.KindServiceAccount, OwnerEmail, "", sa)
	})
	if _, err := f.auth.Authenticate(context.Background(), tok); !errors.Is(err, model.ErrUnauthenticated) {
		t.Fatalf("disabled account: %v", err)
	}
	f.st.Update(context.Background(), func(tx store.Tx) error {
		sa, _ := store.Get[model.ServiceAccount](tx, store.KindServiceAccount, OwnerEmail)
		sa.Disabled = false
		if err := tx.Put(store.KindServiceAccount, OwnerEmail, "", sa); err != nil {
			return err
		}
		return tx.Delete(store.KindKey, f.kf.PrivateKeyID)
	})
	if _, err := f.auth.Authenticate(context.Background(), tok); !errors.Is(err, model.ErrUnauthenticated) {
		t.Fatalf("deleted key: %v", err)
	}
}

func TestKeyFileAndBootstrap(t *testing.T) {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	path := filepath.Join(t.TempDir(), "owner-key.json")
	now := time.Now()
	if created, err := BootstrapOwner(context.Background(), st, path, "http://x/token", now); err != nil || !created {
		t.Fatal(created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode(), err)
	}
	data, _ := os.ReadFile(path)
	var m map[string]string
	json.Unmarshal(data, &m)
	for _, k := range []string{"type", "project_id", "private_key_id", "private_key", "client_email", "client_id", "token_uri"} {
		if m[k] == "" {
			t.Errorf("key file lacks %s", k)
		}
	}
	if m["type"] != "service_account" {
		t.Errorf("type = %q", m["type"])
	}
	// Basin stores only the public key.
	var stored model.ServiceAccountKey
	st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindKey, m["private_key_id"], &stored) })
	if stored.PublicKeyPEM == "" || len(stored.PublicKeyPEM) > 600 || containsPrivate(stored) {
		t.Fatalf("stored key: %+v", stored)
	}
	// A second start keeps the key; a lost key file gets a new one.
	if created, _ := BootstrapOwner(context.Background(), st, path, "http://x/token", now); created {
		t.Fatal("second start replaced a valid key")
	}
	os.Remove(path)
	if created, _ := BootstrapOwner(context.Background(), st, path, "http://x/token", now); !created {
		t.Fatal("missing key file not recreated")
	}
}

func containsPrivate(k model.ServiceAccountKey) bool {
	b, _ := json.Marshal(k)
	return strings.Contains(string(b), "PRIVATE")
}

func TestExpiredKeyIsRefused(t *testing.T) {
	f := newFixture(t)
	f.st.Update(context.Background(), func(tx store.Tx) error {
		k, _ := store.Get[model.ServiceAccountKey](tx, store.KindKey, f.kf.PrivateKeyID)
		k.ExpireTime = f.now.Add(time.Minute)
		return tx.Put(store.KindKey, k.ID, k.Email, k)
	})
	if _, err := f.auth.Authenticate(context.Background(), "Bearer "+f.token(nil)); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	f.now = f.now.Add(2 * time.Minute)
	if _, err := f.auth.Authenticate(context.Background(), "Bearer "+f.token(nil)); !errors.Is(err, model.ErrUnauthenticated) {
		t.Fatalf("after expiry: %v", err)
	}
}

// The project settings go with the netapp.* roles: the admin reads and changes
// them, the viewer only reads them; both read volume metrics; all are in the
// catalogue.
func TestSettingsPermissions(t *testing.T) {
	for _, tc := range []struct {
		name, role, perm string
		want             bool
	}{
		{"owner get", RoleOwner, PermSettingsGet, true},
		{"owner update", RoleOwner, PermSettingsUpdate, true},
		{"admin get", RoleNetappAdmin, PermSettingsGet, true},
		{"admin update", RoleNetappAdmin, PermSettingsUpdate, true},
		{"viewer get", RoleNetappViewer, PermSettingsGet, true},
		{"viewer update", RoleNetappViewer, PermSettingsUpdate, false},
		{"admin audit log", RoleNetappAdmin, PermAuditList, false},
		{"viewer volumes", RoleNetappViewer, "netapp.volumes.get", true},
		{"no role", "", PermSettingsGet, false},
		{"viewer metrics", RoleNetappViewer, PermMetricsGet, true},
		{"admin metrics", RoleNetappAdmin, PermMetricsGet, true},
		{"no role metrics", "", PermMetricsGet, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RoleGrants(tc.role, tc.perm); got != tc.want {
				t.Errorf("RoleGrants(%s, %s) = %v, want %v", tc.role, tc.perm, got, tc.want)
			}
		})
	}
	for _, p := range []string{PermSettingsGet, PermSettingsUpdate, PermMetricsGet} {
		if !slices.Contains(Permissions(), p) {
			t.Errorf("%s is not in Permissions()", p)
		}
	}
}
