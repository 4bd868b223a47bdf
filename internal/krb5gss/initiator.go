package krb5gss

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jcmturner/gofork/encoding/asn1"
	"github.com/jcmturner/gokrb5/v8/asn1tools"
	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/chksumtype"
	"github.com/jcmturner/gokrb5/v8/iana/flags"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
)

// Context flags of the initial token's checksum (RFC 4121 §4.1.1.1; RFC 2744).
const (
	FlagMutual = 0x02
	FlagConf   = 0x10
	FlagInteg  = 0x20
)

// Token IDs of the context tokens (RFC 4121 §4.1).
var (
	tokAPReq = []byte{0x01, 0x00}
	tokAPRep = []byte{0x02, 0x00}
	tokError = []byte{0x03, 0x00}
)

// Initiator establishes a context as the client of a service, with mutual
// authentication: Token is the initial token (an AP-REQ), the acceptor answers
// with an AP-REP, and Step checks it and returns the established Context.
type Initiator struct {
	sessionKey types.EncryptionKey
	auth       types.Authenticator
	token      []byte
	ctx        *Context
}

// NewInitiator gets a service ticket for spn (such as "nfs/server.example.com")
// with cl's credentials (cl has logged in) and makes the initial token, whose
// checksum asks for mutual authentication, integrity and confidentiality.
func NewInitiator(cl *client.Client, spn string) (*Initiator, error) {
	tkt, key, err := cl.GetServiceTicket(spn)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: service ticket for %s: %w", spn, err)
	}
	return newInitiator(cl.Credentials.Domain(), cl.Credentials.CName(), tkt, key, FlagMutual|FlagConf|FlagInteg)
}

// NewInitiatorTicket makes the initial token, as NewInitiator does, from a
// service ticket the caller already holds for cname of realm, with key its
// session key: no KDC is asked, and nothing checks the ticket's times, so a
// test can offer the acceptor one that has expired.
func NewInitiatorTicket(realm string, cname types.PrincipalName, tkt messages.Ticket, key types.EncryptionKey) (*Initiator, error) {
	return newInitiator(realm, cname, tkt, key, FlagMutual|FlagConf|FlagInteg)
}

func newInitiator(realm string, cname types.PrincipalName, tkt messages.Ticket, key types.EncryptionKey, flagBits uint32) (*Initiator, error) {
	if !cfxEtype(key.KeyType) {
		return nil, fmt.Errorf("krb5gss: the ticket's session key is of encryption type %d, which has no RFC 4121 tokens", key.KeyType)
	}
	et, err := crypto.GetEtype(key.KeyType)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: %w", err)
	}
	auth, err := types.NewAuthenticator(realm, cname)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: authenticator: %w", err)
	}
	// A subkey of the initiator's, and the first sequence number of its
	// tokens; the acceptor may answer with a subkey of its own.
	if err := auth.GenerateSeqNumberAndSubKey(key.KeyType, et.GetKeyByteSize()); err != nil {
		return nil, fmt.Errorf("krb5gss: subkey: %w", err)
	}
	// The checksum of RFC 4121 §4.1.1: Lgth 16, no channel bindings, flags.
	ck := make([]byte, 24)
	binary.LittleEndian.PutUint32(ck[0:], 16)
	binary.LittleEndian.PutUint32(ck[20:], flagBits)
	auth.Cksum = types.Checksum{CksumType: chksumtype.GSSAPI, Checksum: ck}
	req, err := messages.NewAPReq(tkt, key, auth)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: AP-REQ: %w", err)
	}
	if flagBits&FlagMutual != 0 {
		types.SetFlag(&req.APOptions, flags.APOptionMutualRequired)
	}
	b, err := req.Marshal()
	if err != nil {
		return nil, fmt.Errorf("krb5gss: AP-REQ: %w", err)
	}
	return &Initiator{sessionKey: key, auth: auth, token: frame(tokAPReq, b)}, nil
}

// frame makes an InitialContextToken (RFC 2743 §3.1): the Kerberos mechanism's
// OID, the token ID and the Kerberos message.
func frame(tokID, msg []byte) []byte {
	oid, _ := asn1.Marshal(gssapi.OIDKRB5.OID())
	b := append(append(oid, tokID...), msg...)
	return asn1tools.AddASNAppTag(b, 0)
}

// unframe returns the token ID and the Kerberos message of a framed token.
func unframe(tok []byte) (tokID, msg []byte, err error) {
	var oid asn1.ObjectIdentifier
	rest, err := asn1.UnmarshalWithParams(tok, &oid, "application,explicit,tag:0")
	if err != nil {
		return nil, nil, fmt.Errorf("krb5gss: context token: %w", err)
	}
	if !oid.Equal(gssapi.OIDKRB5.OID()) {
		return nil, nil, fmt.Errorf("krb5gss: context token of mechanism %s, not Kerberos V5", oid)
	}
	if len(rest) < 2 {
		return nil, nil, errors.New("krb5gss: context token too short")
	}
	return rest[:2], rest[2:], nil
}

// Token is the initial context token to send to the acceptor.
func (in *Initiator) Token() []byte { return in.token }

// Step checks the acceptor's reply, an AP-REP (a KRB-ERROR is returned as the
// error), and returns the established context. Its tokens use the acceptor's
// subkey if the AP-REP carries one, else the initiator's (RFC 4121 §2).
func (in *Initiator) Step(reply []byte) (*Context, error) {
	if in.ctx != nil {
		return nil, errors.New("krb5gss: context already established")
	}
	id, msg, err := unframe(reply)
	if err != nil {
		return nil, err
	}
	switch string(id) {
	case string(tokError):
		var ke messages.KRBError
		if err := ke.Unmarshal(msg); err != nil {
			return nil, fmt.Errorf("krb5gss: KRB-ERROR: %w", err)
		}
		return nil, fmt.Errorf("krb5gss: acceptor refused the context: %w", ke)
	case string(tokAPRep):
	default:
		return nil, fmt.Errorf("krb5gss: context token ID %x, want an AP-REP", id)
	}
	var rep messages.APRep
	if err := rep.Unmarshal(msg); err != nil {
		return nil, fmt.Errorf("krb5gss: AP-REP: %w", err)
	}
	plain, err := crypto.DecryptEncPart(rep.EncPart, in.sessionKey, keyusage.AP_REP_ENCPART)
	if err != nil {
		return nil, fmt.Errorf("krb5gss: AP-REP: %w", err)
	}
	var part messages.EncAPRepPart
	if err := part.Unmarshal(plain); err != nil {
		return nil, fmt.Errorf("krb5gss: AP-REP: %w", err)
	}
	// The acceptor proves it read the authenticator by echoing its time.
	if part.CTime.Unix() != in.auth.CTime.Unix() || part.Cusec != in.auth.Cusec {
		return nil, errors.New("krb5gss: AP-REP's time does not match the authenticator's")
	}
	key, acceptorSubkey := in.auth.SubKey, false
	if len(part.Subkey.KeyValue) > 0 {
		key, acceptorSubkey = part.Subkey, true
	}
	ctx, err := newContext(key, true, acceptorSubkey, uint64(uint32(in.auth.SeqNumber)))
	if err != nil {
		return nil, err
	}
	in.ctx = ctx
	return ctx, nil
}
