// Package secret seals the few secrets Basin must store and later hand to another
// service (today: an Active Directory policy's join password), so that the database,
// its backups and the records derived from it hold only ciphertext. It uses
// AES-256-GCM (crypto/aes, crypto/cipher) under a 256-bit key kept in a file of its
// own (DATA_DIR/secrets.key), apart from the database. Associated data binds a
// sealed value to where it belongs (a resource name and field), so it cannot be
// moved to another resource.
//
// It imports nothing of Basin's. The daemon loads the key and builds a Box; the api
// package seals with it, and the controller opens with it when it needs the clear
// value.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// prefix marks a sealed value and its format: "sealed:v1:" + base64url(nonce ‖
// ciphertext ‖ tag), without padding.
const prefix = "sealed:v1:"

// ErrOpen is returned when a sealed value cannot be opened: malformed, tampered
// with, sealed for another place, or under another key.
var ErrOpen = errors.New("secret: cannot open sealed value")

// Box seals and opens values under one key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// New returns a Box for a KeySize-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret: key must be %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
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
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(plaintext)+b.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secret: nonce: %w", err)
	}
	out := b.aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
	return prefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal returned for the same aad, or returns ErrOpen.
func (b *Box) Open(sealed, aad string) (string, error) {
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return "", ErrOpen
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) < b.aead.NonceSize()+b.aead.Overhead() {
		return "", ErrOpen
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], []byte(aad))
	if err != nil {
		return "", ErrOpen
	}
	return string(plain), nil
}

// IsSealed reports whether s has the form Seal produces.
func IsSealed(s string) bool { return strings.HasPrefix(s, prefix) }

// LoadOrCreateKey reads the key in the file at path, or, if there is none, makes a
// random one and writes it there (base64, mode 0600). An existing file's mode is
// corrected to 0600. Errors never show the file's content.
func LoadOrCreateKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return createKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("secrets key %s: not a base64 %d-bit key", path, KeySize*8)
	}
	return key, nil
}

// createKey writes a new key to a temporary file and links it into place, so a crash
// never leaves a partial key file, and an existing one is never replaced.
func createKey(path string) ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
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
		err = os.Link(f.Name(), path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	return key, nil
}
