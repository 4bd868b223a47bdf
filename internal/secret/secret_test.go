package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
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
	head := prefix + b.KeyID() + ":"
	if !strings.HasPrefix(s1, head) {
		t.Fatalf("sealed form %q does not name its key %s", s1, b.KeyID())
	}
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s1, head))
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 1
		if _, err := b.Open(head+base64.RawURLEncoding.EncodeToString(bad), aad); err == nil {
			t.Fatalf("a flipped bit at byte %d went unnoticed", i)
		}
	}
	for _, bad := range []string{"", "hunter2", prefix, prefix + "!!", prefix + "AAAA", head, head + "AAAA", prefixV1 + "AAAA"} {
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

// A Box of several keys seals under the first, opens under any, names the key
// in what it seals, and still opens values sealed before key IDs (v1).
func TestKeyRing(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, KeySize), bytes.Repeat([]byte{2}, KeySize)
	old, _ := New(oldKey)
	ring, err := New(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if ring.KeyID() != KeyID(newKey) || !slices.Equal(ring.KeyIDs(), []string{KeyID(newKey), KeyID(oldKey)}) {
		t.Fatalf("key IDs %v", ring.KeyIDs())
	}
	if len(KeyID(newKey)) != 16 || strings.Contains(KeyID(newKey), hex.EncodeToString(newKey[:4])) || KeyID(oldKey) == KeyID(newKey) {
		t.Fatalf("key ID %q", KeyID(newKey))
	}
	const aad = "ad#password"
	byOld, _ := old.Seal("a", aad)
	byRing, _ := ring.Seal("b", aad)
	if SealedWith(byOld) != KeyID(oldKey) || SealedWith(byRing) != KeyID(newKey) {
		t.Fatalf("SealedWith: %s, %s", SealedWith(byOld), SealedWith(byRing))
	}
	if got, err := ring.Open(byOld, aad); err != nil || got != "a" {
		t.Errorf("the ring does not open the old key's value: %q, %v", got, err)
	}
	if _, err := old.Open(byRing, aad); err == nil {
		t.Error("the old key alone opened the new key's value")
	}
	// Before key IDs: "sealed:v1:" + base64url(nonce ‖ ciphertext ‖ tag).
	v1 := prefixV1 + strings.TrimPrefix(byOld, prefix+KeyID(oldKey)+":")
	if got, err := ring.Open(v1, aad); err != nil || got != "a" || !IsSealed(v1) {
		t.Errorf("a v1 value: %q, %v", got, err)
	}
	// A value naming one key but sealed by another does not open.
	forged := prefix + KeyID(newKey) + ":" + strings.TrimPrefix(byOld, prefix+KeyID(oldKey)+":")
	if _, err := ring.Open(forged, aad); err == nil {
		t.Error("opened a value under a key ID that did not seal it")
	}
	if _, err := New(newKey, newKey); err == nil {
		t.Error("accepted one key twice")
	}
}

// WriteKeys replaces a key file whole; LoadKeys reads its lines back in order.
func TestWriteAndLoadKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	k1, _ := NewKey()
	k2, _ := NewKey()
	if err := WriteKeys(path, [][]byte{k1}); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeys(path, [][]byte{k2, k1}); err != nil {
		t.Fatal(err)
	}
	got, err := LoadKeys(path)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], k2) || !bytes.Equal(got[1], k1) {
		t.Fatalf("LoadKeys = %d keys, %v", len(got), err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("files left beside the key: %v", ents)
	}
	if _, err := LoadKeys(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	os.WriteFile(path, []byte("\n\n"), 0o600)
	if _, err := LoadKeys(path); err == nil {
		t.Fatal("a file without a key loaded")
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	ks, err := LoadOrCreateKey(path)
	if err != nil || len(ks) != 1 {
		t.Fatal(err)
	}
	k1 := ks[0]
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
	ks, err = LoadOrCreateKey(path)
	if err != nil || len(ks) != 1 || !bytes.Equal(k1, ks[0]) {
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
	f.Add(prefix+b.KeyID()+":AAAA", "aad")
	f.Add(prefixV1+"AAAA", "aad")
	f.Fuzz(func(t *testing.T, sealed, aad string) {
		// Only real seals of "pw" for "aad" under this key (made by any fuzzing
		// process) open.
		if got, err := b.Open(sealed, aad); err == nil && (aad != "aad" || got != "pw") {
			t.Fatalf("opened %q for %q: %q", sealed, aad, got)
		}
	})
}
