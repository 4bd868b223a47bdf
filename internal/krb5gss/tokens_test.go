package krb5gss

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/types"
)

// pair returns the two ends of a context under one acceptor subkey.
func pair(t testing.TB, etype int32, size int) (initiator, acceptor *Context) {
	t.Helper()
	key := types.EncryptionKey{KeyType: etype, KeyValue: bytes.Repeat([]byte{7}, size)}
	i, err := newContext(key, true, true, 100)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newContext(key, false, true, 5000)
	if err != nil {
		t.Fatal(err)
	}
	return i, a
}

func TestTokensRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		etype int32
		size  int
	}{
		{"aes128-sha1", etypeID.AES128_CTS_HMAC_SHA1_96, 16},
		{"aes256-sha1", etypeID.AES256_CTS_HMAC_SHA1_96, 32},
		{"aes128-sha256", etypeID.AES128_CTS_HMAC_SHA256_128, 16},
		{"aes256-sha384", etypeID.AES256_CTS_HMAC_SHA384_192, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ini, acc := pair(t, tc.etype, tc.size)
			msg := []byte("read 4096 bytes at 0")
			for _, dir := range []struct{ from, to *Context }{{ini, acc}, {acc, ini}} {
				mic, err := dir.from.GetMIC(msg)
				if err != nil {
					t.Fatal(err)
				}
				if err := dir.to.VerifyMIC(msg, mic); err != nil {
					t.Fatalf("MIC: %v", err)
				}
				// A token is refused by its own sender: reflected back, it
				// would pass for the peer's.
				if err := dir.from.VerifyMIC(msg, mic); !errors.Is(err, ErrBadToken) {
					t.Fatalf("reflected MIC: %v", err)
				}
				for _, conf := range []bool{false, true} {
					dir.from.rrc = 28
					tok, err := dir.from.Wrap(msg, conf)
					if err != nil {
						t.Fatal(err)
					}
					got, enc, err := dir.to.Unwrap(tok)
					if err != nil || !bytes.Equal(got, msg) || enc != conf {
						t.Fatalf("Unwrap(conf %v) = %q, %v, %v", conf, got, enc, err)
					}
					if _, _, err := dir.from.Unwrap(tok); !errors.Is(err, ErrBadToken) {
						t.Fatalf("reflected Wrap token: %v", err)
					}
					for i := range tok {
						if i == 6 || i == 7 {
							continue // the RRC is not protected: a changed one fails by the rotation
						}
						if _, _, err := dir.to.Unwrap(flipped(tok, i)); err == nil {
							t.Fatalf("Wrap token (conf %v) altered at byte %d opened", conf, i)
						}
					}
				}
			}
		})
	}
}

func TestSequenceNumbersCount(t *testing.T) {
	ini, _ := pair(t, etypeID.AES256_CTS_HMAC_SHA1_96, 32)
	a, _ := ini.GetMIC(nil)
	b, _ := ini.Wrap(nil, true)
	if string(a[8:16]) != "\x00\x00\x00\x00\x00\x00\x00\x64" || string(b[8:16]) != "\x00\x00\x00\x00\x00\x00\x00\x65" {
		t.Fatalf("sequence numbers %x, %x; want 100 and 101", a[8:16], b[8:16])
	}
}

func TestKeyFlagMismatch(t *testing.T) {
	key := types.EncryptionKey{KeyType: etypeID.AES256_CTS_HMAC_SHA1_96, KeyValue: bytes.Repeat([]byte{7}, 32)}
	ini, _ := newContext(key, true, false, 0)
	acc, _ := newContext(key, false, true, 0) // believes the key is its subkey
	tok, _ := acc.Wrap([]byte("x"), true)
	if _, _, err := ini.Unwrap(tok); err == nil || !strings.Contains(err.Error(), "subkey") {
		t.Fatalf("token under the acceptor's subkey flag opened by a context without one: %v", err)
	}
}

func TestOldEncTypesRefused(t *testing.T) {
	for _, id := range []int32{etypeID.RC4_HMAC, etypeID.DES3_CBC_SHA1_KD} {
		if _, err := newContext(types.EncryptionKey{KeyType: id, KeyValue: make([]byte, 24)}, true, false, 0); err == nil {
			t.Errorf("encryption type %d accepted", id)
		}
	}
}

func TestStepRefusesNonAPRep(t *testing.T) {
	in := &Initiator{sessionKey: types.EncryptionKey{KeyType: etypeID.AES256_CTS_HMAC_SHA1_96, KeyValue: make([]byte, 32)}}
	for name, tok := range map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("not a token"),
		"AP-REQ echoed":  frame(tokAPReq, []byte{0x30, 0}),
		"short AP-REP":   frame(tokAPRep, []byte{0x6f, 0}),
		"unknown tok ID": frame([]byte{9, 9}, nil),
	} {
		if _, err := in.Step(tok); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzUnwrap feeds the token parsers anything: they refuse, never panic.
func FuzzUnwrap(f *testing.F) {
	ini, acc := pair(f, etypeID.AES256_CTS_HMAC_SHA1_96, 32)
	for _, conf := range []bool{false, true} {
		tok, _ := acc.Wrap([]byte("seed"), conf)
		f.Add(tok)
	}
	mic, _ := acc.GetMIC([]byte("seed"))
	f.Add(mic)
	f.Add([]byte{0x05, 0x04, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tok []byte) {
		ini.Unwrap(tok)                             //nolint:errcheck // only panics matter
		ini.VerifyMIC([]byte("seed"), tok)          //nolint:errcheck
		(&Initiator{sessionKey: ini.key}).Step(tok) //nolint:errcheck
	})
}
