// Package secret seals the few secrets Basin must store and later hand to another
// service (today: an Active Directory policy's join password), so that the database,
// its backups and the records derived from it hold only ciphertext. It uses
// AES-256-GCM (crypto/aes, crypto/cipher) under a 256-bit key kept in a file of its
// own (DATA_DIR/secrets.key, or --secrets-key-file), apart from the database.
// Associated data binds a sealed value to where it belongs (a resource name and
// field), so it cannot be moved to another resource.
//
// A key file holds one key per line: the first seals, the others (keys rotated
// out) still open what they sealed. A sealed value names its key by key ID, a
// fingerprint that says nothing of the key (KeyID), which the store also keeps
// so that a node started with another key is refused.
//
// It imports nothing of Basin's. The daemon loads the key and builds a Box; the api
// package seals with it, and the controller opens with it when it needs the clear
// value.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// prefix marks a sealed value and its format: "sealed:v2:" + key ID + ":" +
// base64url(nonce ‖ ciphertext ‖ tag), without padding. prefixV1 is the format
// before key IDs: the same without the key ID (opened by trying every key).
const (
	prefix   = "sealed:v2:"
	prefixV1 = "sealed:v1:"
)

// ErrOpen is returned when a sealed value cannot be opened: malformed, tampered
// with, sealed for another place, or under another key.
var ErrOpen = errors.New("secret: cannot open sealed value")

// Box seals under its first key and opens under any of its keys. It is safe for
// concurrent use.
type Box struct {
	ids   []string // key IDs, the sealing key's first
	aeads map[string]cipher.AEAD
}

// New returns a Box for KeySize-byte keys: the first seals, all open.
func New(key []byte, older ...[]byte) (*Box, error) {
	b := &Box{aeads: map[string]cipher.AEAD{}}
	for _, k := range append([][]byte{key}, older...) {
		if len(k) != KeySize {
			return nil, fmt.Errorf("secret: key must be %d bytes, got %d", KeySize, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		id := KeyID(k)
		if _, dup := b.aeads[id]; dup {
			return nil, fmt.Errorf("secret: key %s given twice", id)
		}
		b.ids = append(b.ids, id)
		b.aeads[id] = aead
	}
	return b, nil
}

// KeyID returns the ID of a key: 16 hex digits derived from it by HKDF-SHA256,
// which tell nothing of it.
func KeyID(key []byte) string {
	id, err := hkdf.Key(sha256.New, key, nil, "basin secrets key id v1", 8)
	if err != nil {
		panic(err) // only for lengths HKDF-SHA256 cannot give
	}
	return hex.EncodeToString(id)
}

// KeyID returns the ID of the key that seals.
func (b *Box) KeyID() string { return b.ids[0] }

// KeyIDs returns the IDs of every key, the sealing one first.
func (b *Box) KeyIDs() []string { return slices.Clone(b.ids) }

// SealedWith returns the ID of the key a value was sealed with ("" for a value
// sealed before key IDs, or not sealed).
func SealedWith(sealed string) string {
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ":")
	return id
}

// NewEphemeral returns a Box under a random key that is never stored: what it seals
// cannot be opened after the process exits. For tests.
func NewEphemeral() *Box {
	key := make([]byte, KeySize)
	rand.Read(key)
	b, _ := New(key)
	return b
}

// Seal encrypts plaintext, bound to aad (where the value belongs, e.g.
// "projects/p/locations/l/activeDirectories/ad1#password"). Each call uses a fresh
// random nonce.
func (b *Box) Seal(plaintext, aad string) (string, error) {
	id := b.ids[0]
	aead := b.aeads[id]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secret: nonce: %w", err)
	}
	out := aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
	return prefix + id + ":" + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal returned for the same aad, under whichever of the
// Box's keys sealed it, or returns ErrOpen.
func (b *Box) Open(sealed, aad string) (string, error) {
	if rest, ok := strings.CutPrefix(sealed, prefixV1); ok {
		for _, id := range b.ids {
			if plain, err := open(b.aeads[id], rest, aad); err == nil {
				return plain, nil
			}
		}
		return "", ErrOpen
	}
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return "", ErrOpen
	}
	id, rest, _ := strings.Cut(rest, ":")
	aead, ok := b.aeads[id]
	if !ok {
		return "", ErrOpen
	}
	return open(aead, rest, aad)
}

func open(aead cipher.AEAD, b64, aad string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", ErrOpen
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], []byte(aad))
	if err != nil {
		return "", ErrOpen
	}
	return string(plain), nil
}

// IsSealed reports whether s has a form Seal produces (now or before key IDs).
func IsSealed(s string) bool { return strings.HasPrefix(s, prefix) || strings.HasPrefix(s, prefixV1) }

// LoadOrCreateKey reads the keys in the file at path (LoadKeys), or, if there is
// none, makes a random key and writes it there (base64, mode 0600).
func LoadOrCreateKey(path string) ([][]byte, error) {
	keys, err := LoadKeys(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err := createKey(path)
		if err != nil {
			return nil, err
		}
		return [][]byte{key}, nil
	}
	return keys, err
}

// LoadKeys reads the keys in the file at path: one base64 key per line, the
// sealing key first. The file's mode is corrected to 0600. Errors never show the
// file's content; a missing file's wraps os.ErrNotExist.
func LoadKeys(path string) ([][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(key) != KeySize {
			return nil, fmt.Errorf("secrets key %s, line %d: not a base64 %d-bit key", path, i+1, KeySize*8)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("secrets key %s: no key in it", path)
	}
	return keys, nil
}

// NewKey returns a random key.
func NewKey() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return key, nil
}

// WriteKeys replaces the key file at path with keys (the sealing key first),
// through a temporary file renamed into place: a crash leaves the old file or
// the new, never a part.
func WriteKeys(path string, keys [][]byte) error {
	return writeKeys(path, keys, os.Rename)
}

// createKey writes a new key to a temporary file and links it into place, so a crash
// never leaves a partial key file, and an existing one is never replaced.
func createKey(path string) ([]byte, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	if err := writeKeys(path, [][]byte{key}, os.Link); err != nil {
		return nil, err
	}
	return key, nil
}

// writeKeys writes keys to a temporary file beside path (mode 0600, synced) and
// puts it in place with place (os.Rename to replace, os.Link never to).
func writeKeys(path string, keys [][]byte, place func(tmp, path string) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return fmt.Errorf("secrets key: %w", err)
	}
	defer os.Remove(f.Name())
	var lines strings.Builder
	for _, k := range keys {
		lines.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	_, err = f.WriteString(lines.String())
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = place(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("secrets key %s: %w", path, err)
	}
	return nil
}
