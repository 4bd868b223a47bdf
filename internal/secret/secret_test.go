package secret

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	b, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	const aad = "projects/p/locations/l/activeDirectories/ad1#password"
	s1, err := b.Seal("hunter2", aad)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := b.Seal("hunter2", aad)
	if s1 == s2 {
		t.Fatal("two seals of one value are equal: nonces repeat")
	}
	if strings.Contains(s1, "hunter2") || !IsSealed(s1) {
		t.Fatalf("sealed form %q", s1)
	}
	if got, err := b.Open(s1, aad); err != nil || got != "hunter2" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Bound to its place: another resource's associated data does not open it.
	if _, err := b.Open(s1, "projects/p/locations/l/activeDirectories/ad2#password"); err == nil {
		t.Fatal("opened with another resource's associated data")
	}
	// Tampering is detected, wherever it is.
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s1, prefix))
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 1
		if _, err := b.Open(prefix+base64.RawURLEncoding.EncodeToString(bad), aad); err == nil {
			t.Fatalf("a flipped bit at byte %d went unnoticed", i)
		}
	}
	for _, bad := range []string{"", "hunter2", prefix, prefix + "!!", prefix + "AAAA"} {
		if _, err := b.Open(bad, aad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	// Another key does not open it.
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(s1, aad); err == nil {
		t.Fatal("opened with another key")
	}
	if _, err := New(make([]byte, 16)); err == nil {
		t.Fatal("accepted a 128-bit key")
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	if len(k1) != KeySize {
		t.Fatalf("key of %d bytes", len(k1))
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("files left beside the key: %v", ents)
	}
	os.Chmod(path, 0o644)
	k2, err := LoadOrCreateKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reloaded key differs: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode of an existing key file not corrected: %o", fi.Mode().Perm())
	}
	os.WriteFile(path, []byte("short\n"), 0o600)
	if _, err := LoadOrCreateKey(path); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("bad key file: %v (must fail without showing its content)", err)
	}
}

// Open never panics and opens nothing it did not seal.
func FuzzOpen(f *testing.F) {
	b, _ := New(bytes.Repeat([]byte{7}, KeySize))
	s, _ := b.Seal("pw", "aad")
	f.Add(s, "aad")
	f.Add(prefix+"AAAA", "")
	f.Fuzz(func(t *testing.T, sealed, aad string) {
		// Only real seals of "pw" for "aad" under this key (made by any fuzzing
		// process) open.
		if got, err := b.Open(sealed, aad); err == nil && (aad != "aad" || got != "pw") {
			t.Fatalf("opened %q for %q: %q", sealed, aad, got)
		}
	})
}
