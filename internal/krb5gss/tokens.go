package krb5gss

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/crypto/etype"
	"github.com/jcmturner/gokrb5/v8/iana/etypeID"
	"github.com/jcmturner/gokrb5/v8/types"
)

// Token flags (RFC 4121 §4.2.2).
const (
	flagSentByAcceptor = 0x01
	flagSealed         = 0x02
	flagAcceptorSubkey = 0x04
)

// Key usage numbers of the per-message tokens (RFC 4121 §2).
const (
	usageAcceptorSeal  = 22
	usageAcceptorSign  = 23
	usageInitiatorSeal = 24
	usageInitiatorSign = 25
)

const hdrLen = 16

// ErrBadToken is a per-message token that is malformed, comes from the wrong
// side or under the wrong key, or whose checksum or encryption does not hold.
var ErrBadToken = errors.New("krb5gss: bad token")

// Context is an established security context: it makes and checks MIC and
// Wrap tokens with the context's key. Its methods are safe for concurrent use.
//
// It neither enforces nor reports the order of the peer's sequence numbers:
// RPCSEC_GSS, its user, has a sequence number of its own, and its replies may
// come in any order.
type Context struct {
	key            types.EncryptionKey
	et             etype.EType
	initiator      bool // this side's role
	acceptorSubkey bool // key is the acceptor's subkey

	// rrc is the right rotation count of the Wrap tokens this side sends; 0,
	// as MIT and Heimdal send, except in tests (Windows sends 28).
	rrc uint16

	mu  sync.Mutex
	seq uint64 // the next sequence number this side sends
}

// newContext returns a context whose tokens use key: the acceptor's subkey
// (acceptorSubkey), else the initiator's subkey or the ticket's session key.
func newContext(key types.EncryptionKey, initiator, acceptorSubkey bool, seq uint64) (*Context, error) {
	if !cfxEtype(key.KeyType) {
		return nil, fmt.Errorf("krb5gss: encryption type %d has no RFC 4121 tokens", key.KeyType)
	}
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: %w", err)
	}
	return &Context{key: key, et: et, initiator: initiator, acceptorSubkey: acceptorSubkey, seq: seq}, nil
}

// cfxEtype reports whether RFC 4121's tokens are defined for an encryption
// type: the AES ones. DES3 and RC4 keep RFC 1964's, which this package lacks.
func cfxEtype(id int32) bool {
	switch id {
	case etypeID.AES128_CTS_HMAC_SHA1_96, etypeID.AES256_CTS_HMAC_SHA1_96,
		etypeID.AES128_CTS_HMAC_SHA256_128, etypeID.AES256_CTS_HMAC_SHA384_192:
		return true
	}
	return false
}

// EncType is the encryption type of the context's key.
func (c *Context) EncType() int32 { return c.key.KeyType }

func (c *Context) nextSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seq
	c.seq++
	return s
}

// sendFlags are the flags of the tokens this side sends.
func (c *Context) sendFlags() byte {
	var f byte
	if !c.initiator {
		f |= flagSentByAcceptor
	}
	if c.acceptorSubkey {
		f |= flagAcceptorSubkey
	}
	return f
}

// checkFlags checks a received token's flags: sent by the other side, and
// under the key this context uses.
func (c *Context) checkFlags(f byte) error {
	if (f&flagSentByAcceptor != 0) != c.initiator {
		return fmt.Errorf("%w: sent by this side (a reflected token)", ErrBadToken)
	}
	if (f&flagAcceptorSubkey != 0) != c.acceptorSubkey {
		return fmt.Errorf("%w: acceptor subkey flag %v, context's key is the acceptor subkey: %v", ErrBadToken, f&flagAcceptorSubkey != 0, c.acceptorSubkey)
	}
	return nil
}

func (c *Context) usages() (sendSign, sendSeal, recvSign, recvSeal uint32) {
	if c.initiator {
		return usageInitiatorSign, usageInitiatorSeal, usageAcceptorSign, usageAcceptorSeal
	}
	return usageAcceptorSign, usageAcceptorSeal, usageInitiatorSign, usageInitiatorSeal
}

func (c *Context) checksum(data []byte, usage uint32) ([]byte, error) {
	ck, err := c.et.GetChecksumHash(c.key.KeyValue, data, usage)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: checksum: %w", err)
	}
	return ck, nil
}

// GetMIC returns a MIC token of msg (RFC 4121 §4.2.6.1).
func (c *Context) GetMIC(msg []byte) ([]byte, error) {
	sign, _, _, _ := c.usages()
	hdr := [hdrLen]byte{0x04, 0x04, c.sendFlags(), 0xff, 0xff, 0xff, 0xff, 0xff}
	binary.BigEndian.PutUint64(hdr[8:], c.nextSeq())
	ck, err := c.checksum(append(append(make([]byte, 0, len(msg)+hdrLen), msg...), hdr[:]...), sign)
	if err != nil {
		return nil, err
	}
	return append(hdr[:], ck...), nil
}

// VerifyMIC checks that mic is the peer's MIC token of msg.
func (c *Context) VerifyMIC(msg, mic []byte) error {
	if len(mic) < hdrLen || mic[0] != 0x04 || mic[1] != 0x04 || string(mic[3:8]) != "\xff\xff\xff\xff\xff" {
		return fmt.Errorf("%w: not a MIC token", ErrBadToken)
	}
	if err := c.checkFlags(mic[2]); err != nil {
		return err
	}
	_, _, sign, _ := c.usages()
	ck, err := c.checksum(append(append(make([]byte, 0, len(msg)+hdrLen), msg...), mic[:hdrLen]...), sign)
	if err != nil {
		return err
	}
	if !hmac.Equal(ck, mic[hdrLen:]) {
		return fmt.Errorf("%w: MIC checksum does not match", ErrBadToken)
	}
	return nil
}

// Wrap returns a Wrap token of msg (RFC 4121 §4.2.6.2): encrypted and
// integrity-protected if conf, else msg in the clear with a checksum.
func (c *Context) Wrap(msg []byte, conf bool) ([]byte, error) {
	_, seal, _, _ := c.usages()
	hdr := [hdrLen]byte{0x05, 0x04, c.sendFlags(), 0xff}
	binary.BigEndian.PutUint64(hdr[8:], c.nextSeq())
	var body []byte
	if conf {
		// {msg | filler | header}, the header's RRC 0; with AES no filler
		// is needed (EC 0), as MIT sends.
		hdr[2] |= flagSealed
		plain := append(append(make([]byte, 0, len(msg)+hdrLen), msg...), hdr[:]...)
		_, ct, err := c.et.EncryptMessage(c.key.KeyValue, plain, seal)
		if err != nil {
			return nil, fmt.Errorf("krb5gss: encrypt: %w", err)
		}
		body = ct
	} else {
		// {msg | checksum of (msg | header with EC and RRC 0)}, EC the
		// checksum's length; a Wrap token's checksum has the seal key
		// usage too (RFC 4121 §4.2.4), not the MIC's.
		ck, err := c.checksum(append(append(make([]byte, 0, len(msg)+hdrLen), msg...), hdr[:]...), seal)
		if err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint16(hdr[4:], uint16(len(ck)))
		body = append(append(make([]byte, 0, len(msg)+len(ck)), msg...), ck...)
	}
	binary.BigEndian.PutUint16(hdr[6:], c.rrc)
	return append(hdr[:], rotateRight(body, int(c.rrc))...), nil
}

// Unwrap checks a Wrap token of the peer's and returns its message, and
// whether it was encrypted. It accepts any right rotation count.
func (c *Context) Unwrap(tok []byte) (msg []byte, conf bool, err error) {
	if len(tok) < hdrLen || tok[0] != 0x05 || tok[1] != 0x04 || tok[3] != 0xff {
		return nil, false, fmt.Errorf("%w: not a Wrap token", ErrBadToken)
	}
	if err := c.checkFlags(tok[2]); err != nil {
		return nil, false, err
	}
	_, _, _, seal := c.usages()
	ec := int(binary.BigEndian.Uint16(tok[4:]))
	rrc := int(binary.BigEndian.Uint16(tok[6:]))
	body := rotateLeft(tok[hdrLen:], rrc)
	// The header as protected: RRC 0, and EC 0 too for a checksum.
	var hdr [hdrLen]byte
	copy(hdr[:], tok)
	hdr[6], hdr[7] = 0, 0
	if tok[2]&flagSealed != 0 {
		if len(body) < c.et.GetConfounderByteSize()+c.et.GetHMACBitLength()/8 {
			return nil, false, fmt.Errorf("%w: sealed Wrap token too short", ErrBadToken)
		}
		plain, err := c.et.DecryptMessage(c.key.KeyValue, body, seal)
		if err != nil {
			return nil, false, fmt.Errorf("%w: decrypt: %v", ErrBadToken, err)
		}
		if len(plain) < ec+hdrLen || !hmac.Equal(plain[len(plain)-hdrLen:], hdr[:]) {
			return nil, false, fmt.Errorf("%w: sealed Wrap token's header copy does not match", ErrBadToken)
		}
		return plain[:len(plain)-hdrLen-ec], true, nil
	}
	if len(body) < ec {
		return nil, false, fmt.Errorf("%w: Wrap token shorter than its checksum", ErrBadToken)
	}
	hdr[4], hdr[5] = 0, 0
	msg = body[:len(body)-ec]
	ck, err := c.checksum(append(append(make([]byte, 0, len(msg)+hdrLen), msg...), hdr[:]...), seal)
	if err != nil {
		return nil, false, err
	}
	if !hmac.Equal(ck, body[len(body)-ec:]) {
		return nil, false, fmt.Errorf("%w: Wrap checksum does not match", ErrBadToken)
	}
	return msg, false, nil
}

// rotateRight returns a copy of b rotated right by n bytes (RFC 4121 §4.2.5).
func rotateRight(b []byte, n int) []byte {
	if len(b) == 0 {
		return b
	}
	n %= len(b)
	return append(append(make([]byte, 0, len(b)), b[len(b)-n:]...), b[:len(b)-n]...)
}

// rotateLeft undoes rotateRight.
func rotateLeft(b []byte, n int) []byte {
	if len(b) == 0 {
		return b
	}
	n %= len(b)
	return append(append(make([]byte, 0, len(b)), b[n:]...), b[:n]...)
}
