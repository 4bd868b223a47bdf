package krb5gss

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/jcmturner/gokrb5/v8/iana/etypeID"

	"github.com/basin-nas/basin/internal/krb5gss/mittest"
)

// rotated returns a Wrap token as a sender with right rotation count n would
// have sent it: the RRC field is not protected, so the token stays valid.
func rotated(tok []byte, n uint16) []byte {
	out := append([]byte(nil), tok[:hdrLen]...)
	binary.BigEndian.PutUint16(out[6:], n)
	return append(out, rotateRight(rotateLeft(tok[hdrLen:], int(binary.BigEndian.Uint16(tok[6:]))), int(n))...)
}

func flipped(b []byte, i int) []byte {
	out := append([]byte(nil), b...)
	out[i] ^= 0x40
	return out
}

// TestMITInterop establishes contexts with MIT Kerberos's GSS-API as the
// acceptor, one per encryption type, with a ticket gokrb5 got from an MIT KDC,
// and checks every token both ways: MIT checks and opens Go's MIC and Wrap
// tokens (sealed or not, rotated or not), Go checks and opens MIT's, and each
// side refuses the other's tokens once altered.
func TestMITInterop(t *testing.T) {
	kdc := mittest.Start(t)
	kdc.AddUser(t, "alice", "alice-pw")
	ids := map[string]int32{
		"aes256-cts-hmac-sha1-96":    etypeID.AES256_CTS_HMAC_SHA1_96,
		"aes128-cts-hmac-sha1-96":    etypeID.AES128_CTS_HMAC_SHA1_96,
		"aes256-cts-hmac-sha384-192": etypeID.AES256_CTS_HMAC_SHA384_192,
		"aes128-cts-hmac-sha256-128": etypeID.AES128_CTS_HMAC_SHA256_128,
	}
	big := make([]byte, 70000)
	rand.Read(big)
	msgs := map[string][]byte{"empty": {}, "one byte": {'x'}, "15 bytes": []byte("fifteen bytes!!"), "70000 bytes": big}
	for _, et := range mittest.Enctypes {
		t.Run(et, func(t *testing.T) {
			svc := "nfs/" + et + ".basin.test"
			acc := kdc.NewAcceptor(t, kdc.AddService(t, svc, et))
			cl := kdc.Client(t, "alice", "alice-pw", et)
			in, err := NewInitiator(cl, svc)
			if err != nil {
				t.Fatal(err)
			}
			reply, name, fl, err := acc.Accept(in.Token())
			if err != nil {
				t.Fatalf("MIT refused the initial token: %v", err)
			}
			if name != "alice@"+mittest.Realm || fl&(FlagMutual|FlagConf|FlagInteg) != FlagMutual|FlagConf|FlagInteg {
				t.Fatalf("MIT accepted %q with flags %#x", name, fl)
			}
			ctx, err := in.Step(reply)
			if err != nil {
				t.Fatalf("MIT's AP-REP: %v", err)
			}
			if ctx.EncType() != ids[et] || !ctx.acceptorSubkey {
				t.Fatalf("context of encryption type %d, acceptor subkey %v; want %d and MIT's subkey", ctx.EncType(), ctx.acceptorSubkey, ids[et])
			}
			if _, err := in.Step(reply); err == nil {
				t.Fatal("a second AP-REP accepted")
			}
			for name, msg := range msgs {
				t.Run(name, func(t *testing.T) {
					mic, err := ctx.GetMIC(msg)
					if err != nil {
						t.Fatal(err)
					}
					if err := acc.VerifyMIC(msg, mic); err != nil {
						t.Errorf("MIT refused Go's MIC: %v", err)
					}
					if err := acc.VerifyMIC(append(msg, 0), mic); err == nil {
						t.Error("MIT accepted Go's MIC of another message")
					}
					mmic, err := acc.GetMIC(msg)
					if err != nil {
						t.Fatal(err)
					}
					if err := ctx.VerifyMIC(msg, mmic); err != nil {
						t.Errorf("Go refused MIT's MIC: %v", err)
					}
					if err := ctx.VerifyMIC(append(msg, 0), mmic); err == nil {
						t.Error("Go accepted MIT's MIC of another message")
					}
					if err := ctx.VerifyMIC(msg, flipped(mmic, len(mmic)-1)); err == nil {
						t.Error("Go accepted an altered MIT MIC")
					}
					for _, conf := range []bool{false, true} {
						for _, rrc := range []uint16{0, 28} {
							ctx.rrc = rrc
							tok, err := ctx.Wrap(msg, conf)
							if err != nil {
								t.Fatal(err)
							}
							if conf && len(msg) >= 15 && bytes.Contains(tok, msg) { // a shorter one may occur by chance
								t.Fatalf("sealed token holds the message in the clear")
							}
							got, enc, err := acc.Unwrap(tok)
							if err != nil || !bytes.Equal(got, msg) || enc != conf {
								t.Errorf("MIT unwrapped Go's token (conf %v, rrc %d): %d bytes, encrypted %v, %v", conf, rrc, len(got), enc, err)
							}
							if _, _, err := acc.Unwrap(flipped(tok, len(tok)-1)); err == nil {
								t.Errorf("MIT unwrapped an altered Go token (conf %v, rrc %d)", conf, rrc)
							}
						}
						ctx.rrc = 0
						mtok, err := acc.Wrap(msg, conf)
						if err != nil {
							t.Fatal(err)
						}
						for _, rrc := range []uint16{0, 28, 5} {
							got, enc, err := ctx.Unwrap(rotated(mtok, rrc))
							if err != nil || !bytes.Equal(got, msg) || enc != conf {
								t.Errorf("Go unwrapped MIT's token (conf %v, rrc %d): %d bytes, encrypted %v, %v", conf, rrc, len(got), enc, err)
							}
						}
						for _, i := range []int{2, 9, hdrLen, len(mtok) - 1} { // flags, sequence number, body, checksum
							if _, _, err := ctx.Unwrap(flipped(mtok, i)); err == nil {
								t.Errorf("Go unwrapped MIT's token (conf %v) altered at byte %d", conf, i)
							}
						}
					}
				})
			}
		})
	}
}
