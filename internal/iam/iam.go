// Package iam authenticates API callers: service accounts whose keys Basin issued sign
// their own RS256 JWTs, as Google's client libraries do with a service-account key
// file (docs/api.md, "Authentication"), or exchange such a JWT at the token endpoint
// for an access token (token.go). Basin stores only public keys. On first start it
// creates an owner account and writes its key file for the CLI.
//
// Imported by the api and daemon packages.
package iam

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Audiences the official clients put in self-signed JWTs: the service's host, and
// the long-running operations host once the Python client's operations client has
// re-targeted the same credentials.
var DefaultAudiences = []string{"https://netapp.googleapis.com/", "https://longrunning.googleapis.com/"}

// CloudPlatformScope is accepted in place of an audience.
const CloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// OwnerEmail is the service account created on first start; it holds roles/owner on
// every project.
const OwnerEmail = "basin-owner@basin.iam.basin.internal"

// Principal is an authenticated caller.
type Principal struct {
	Email string
	Owner bool
	// KeyID is the key the caller's credential comes from (the JWT's kid, or the
	// key an access token was issued for): what Basin derives from the
	// credential, such as a console session, lives no longer than the key.
	KeyID string
}

// Options configures an Authenticator.
type Options struct {
	Store store.Store
	// Audiences accepted in addition to DefaultAudiences (Basin's own URLs).
	Audiences []string
	// Now returns the current time; nil = time.Now.
	Now func() time.Time
	// Skew is the clock skew tolerated on iat/exp; default 5 minutes.
	Skew time.Duration
	// MaxLifetime bounds exp - iat; default 1 hour.
	MaxLifetime time.Duration
	// TokenKey authenticates the access tokens Exchange issues (HMAC-SHA256); nil =
	// a random key, so tokens die with the process. The daemon derives it from
	// the secrets key, so tokens outlive a restart.
	TokenKey []byte
}

// Authenticator verifies bearer tokens.
type Authenticator struct {
	opts Options
}

// NewAuthenticator returns an Authenticator.
func NewAuthenticator(opts Options) *Authenticator {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Skew == 0 {
		opts.Skew = 5 * time.Minute
	}
	if opts.MaxLifetime == 0 {
		opts.MaxLifetime = time.Hour
	}
	if len(opts.TokenKey) == 0 {
		opts.TokenKey = newTokenKey()
	}
	opts.Audiences = append(slices.Clone(DefaultAudiences), opts.Audiences...)
	return &Authenticator{opts: opts}
}

type claims struct {
	jwt.RegisteredClaims
	Scope string `json:"scope,omitempty"`
	// TargetAudience asks a token endpoint for an ID token (gcloud asks for one
	// when it activates a key).
	TargetAudience string `json:"target_audience,omitempty"`
}

// unauthenticated is returned for every rejected token; its reason goes to the
// log and the audit log. Only a holder's reason is told to the caller (Public).
type unauthenticated struct {
	reason string
	holder bool
	// principal is the account whose key signed the token, where known (a
	// holder's token only).
	principal string
}

func (e *unauthenticated) Error() string {
	return "Request had invalid authentication credentials: " + e.reason
}
func (e *unauthenticated) Unwrap() error { return model.ErrUnauthenticated }

// Public is the reason the caller may be told, or "": only for a token whose
// signature verified with the key it names, i.e. one made by a holder of that
// key, who learns nothing of other keys or accounts (an unknown key or a bad
// signature gets no reason, so that no answer tells which keys exist).
func (e *unauthenticated) Public() string {
	if e.holder {
		return e.reason
	}
	return ""
}

// Principal is the account whose key the refused token verified with, or ""
// (not a holder's token, or its key since deleted): the caller it names, for
// the audit log.
func (e *unauthenticated) Principal() string {
	if e.holder {
		return e.principal
	}
	return ""
}

func deny(format string, args ...any) error {
	return &unauthenticated{reason: fmt.Sprintf(format, args...)}
}

// denyHolder is deny for a token whose signature verified with a key of
// principal ("" = unknown) (see Public).
func denyHolder(principal, format string, args ...any) error {
	return &unauthenticated{reason: fmt.Sprintf(format, args...), holder: true, principal: principal}
}

// verifiedError is a JWT's fault found after its signature verified: its
// holder may be told (denyHolder). email is the account of the key it verified
// with.
type verifiedError struct {
	error
	email string
}

func (e verifiedError) Unwrap() error { return e.error }

// denyJWT turns verifyJWT's error into the caller's answer.
func denyJWT(err error) error {
	if ve := new(verifiedError); errors.As(err, ve) {
		return denyHolder(ve.email, "%v", err)
	}
	return deny("%v", err)
}

// Authenticate verifies the Authorization header value and returns the caller: a
// JWT the caller signed with its key, or an access token Basin issued (Exchange).
func (a *Authenticator) Authenticate(ctx context.Context, header string) (*Principal, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return nil, deny("expected a Bearer token")
	}
	tok = strings.TrimSpace(tok)
	if strings.HasPrefix(tok, accessTokenPrefix) {
		return a.authenticateAccessToken(ctx, tok)
	}
	cl, key, sa, err := a.verifyJWT(ctx, tok, false)
	if err != nil {
		return nil, denyJWT(err)
	}
	// The signature verified: what is wrong from here on may be said.
	if cl.Subject != key.Email {
		return nil, denyHolder(key.Email, "iss and sub must both be %s", key.Email)
	}
	if !a.audienceOK(*cl) {
		return nil, denyHolder(key.Email, "audience %v is not accepted", []string(cl.Audience))
	}
	if err := a.live(key, sa); err != nil {
		return nil, denyHolder(sa.Email, "%v", err)
	}
	return &Principal{Email: sa.Email, Owner: sa.Owner, KeyID: key.ID}, nil
}

// Recheck returns the caller of a credential Basin derived at time issued from
// a principal of key keyID (a console session, a sign-in link), refusing it if
// the key has been deleted or has expired, or its account is disabled or has
// been disabled since issued (enabling the account again revives nothing). The
// errors are for the credential's holder (Public).
func (a *Authenticator) Recheck(ctx context.Context, keyID string, issued time.Time) (*Principal, error) {
	key, sa, err := a.lookup(ctx, keyID)
	if errors.Is(err, model.ErrNotFound) {
		return nil, denyHolder("", "the key it was made with has been deleted")
	}
	if err != nil {
		return nil, err
	}
	if err := a.live(key, sa); err != nil {
		return nil, denyHolder(sa.Email, "%v", err)
	}
	if !sa.DisableTime.IsZero() && !issued.After(sa.DisableTime) {
		return nil, denyHolder(sa.Email, "it was made before service account %s was last disabled", sa.Email)
	}
	return &Principal{Email: sa.Email, Owner: sa.Owner, KeyID: key.ID}, nil
}

// verifyJWT checks a JWT signed RS256 by a key Basin issued: the key named by its
// kid exists, the signature is the key's, iss is the key's account, exp and iat are
// present and now lies between them (with Skew), and the lifetime is at most
// MaxLifetime. Audience, subject and the account's state are the caller's to check.
// A JWT without a kid is refused unless anyKeyOfIssuer: then each key of the
// account its iss names is tried (google-auth-library for Node signs its grant
// assertions without a kid, as Google's token endpoint allows).
func (a *Authenticator) verifyJWT(ctx context.Context, tok string, anyKeyOfIssuer bool) (*claims, *model.ServiceAccountKey, *model.ServiceAccount, error) {
	var uc claims
	unverified, _, err := jwt.NewParser().ParseUnverified(tok, &uc)
	if err != nil {
		return nil, nil, nil, err
	}
	kid, _ := unverified.Header["kid"].(string)
	candidates := []string{kid}
	if kid == "" {
		if !anyKeyOfIssuer {
			return nil, nil, nil, errNoKid
		}
		if candidates, err = a.keysOf(ctx, uc.Issuer); err != nil {
			return nil, nil, nil, err
		}
	}
	err = errUnknownKey
	for _, id := range candidates {
		var cl *claims
		var key *model.ServiceAccountKey
		var sa *model.ServiceAccount
		cl, key, sa, err = a.verifyWith(ctx, tok, id)
		if !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			return cl, key, sa, err
		}
	}
	return nil, nil, nil, err
}

// verifyWith verifies tok with the key kid (verifyJWT).
func (a *Authenticator) verifyWith(ctx context.Context, tok, kid string) (*claims, *model.ServiceAccountKey, *model.ServiceAccount, error) {
	var key *model.ServiceAccountKey
	var sa *model.ServiceAccount
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256"}),
		jwt.WithTimeFunc(a.opts.Now),
		jwt.WithLeeway(a.opts.Skew),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	)
	var cl claims
	_, err := parser.ParseWithClaims(tok, &cl, func(t *jwt.Token) (any, error) {
		var err error
		if key, sa, err = a.lookup(ctx, kid); err != nil {
			return nil, errUnknownKey
		}
		block, _ := pem.Decode([]byte(key.PublicKeyPEM))
		if block == nil {
			return nil, errors.New("stored key is not PEM")
		}
		return x509.ParsePKIXPublicKey(block.Bytes)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	// The signature verified: the errors below are the holder's (verifiedError).
	if cl.Issuer != key.Email {
		return nil, nil, nil, verifiedError{fmt.Errorf("iss must be %s", key.Email), key.Email}
	}
	if cl.IssuedAt == nil {
		return nil, nil, nil, verifiedError{errors.New("token has no iat"), key.Email}
	}
	if life := cl.ExpiresAt.Sub(cl.IssuedAt.Time); life > a.opts.MaxLifetime+a.opts.Skew || life <= 0 {
		return nil, nil, nil, verifiedError{fmt.Errorf("token lifetime %s exceeds %s", life, a.opts.MaxLifetime), key.Email}
	}
	return &cl, key, sa, nil
}

// keysOf lists the IDs of an account's keys (none for an unknown account).
func (a *Authenticator) keysOf(ctx context.Context, email string) ([]string, error) {
	var ids []string
	err := a.opts.Store.View(ctx, func(tx store.Tx) error {
		keys, err := store.List[model.ServiceAccountKey](tx, store.KindKey, email)
		for _, k := range keys {
			ids = append(ids, k.ID)
		}
		return err
	})
	return ids, err
}

var (
	errUnknownKey = errors.New("unknown key")
	errNoKid      = errors.New("token has no kid")
)

// lookup reads a key and its account.
func (a *Authenticator) lookup(ctx context.Context, kid string) (key *model.ServiceAccountKey, sa *model.ServiceAccount, err error) {
	err = a.opts.Store.View(ctx, func(tx store.Tx) (err error) {
		if key, err = store.Get[model.ServiceAccountKey](tx, store.KindKey, kid); err != nil {
			return err
		}
		sa, err = store.Get[model.ServiceAccount](tx, store.KindServiceAccount, key.Email)
		return err
	})
	return key, sa, err
}

// live checks that a key may be used now: its account is enabled and the key has
// not expired.
func (a *Authenticator) live(key *model.ServiceAccountKey, sa *model.ServiceAccount) error {
	if sa.Disabled {
		return fmt.Errorf("service account %s is disabled", sa.Email)
	}
	if !key.ExpireTime.IsZero() && a.opts.Now().After(key.ExpireTime) {
		return fmt.Errorf("key %s has expired", key.ID)
	}
	return nil
}

// audienceOK accepts a token meant for Basin: an audience Basin answers to,
// or, without one, the cloud-platform scope. An empty audience is none: Google's
// Go auth library signs its self-signed JWTs with scopes and "aud": "" (its
// audience field is not omitempty), which golang-jwt reads as [""].
func (a *Authenticator) audienceOK(cl claims) bool {
	if !slices.ContainsFunc(cl.Audience, func(aud string) bool { return aud != "" }) {
		return slices.Contains(strings.Fields(cl.Scope), CloudPlatformScope)
	}
	for _, aud := range cl.Audience {
		if slices.Contains(a.opts.Audiences, aud) {
			return true
		}
	}
	return false
}

// KeyFile is a Google service-account key file, in the fields google-auth's
// service_account.Credentials.from_service_account_file reads.
type KeyFile struct {
	Type           string `json:"type"`
	ProjectID      string `json:"project_id"`
	PrivateKeyID   string `json:"private_key_id"`
	PrivateKey     string `json:"private_key"`
	ClientEmail    string `json:"client_email"`
	ClientID       string `json:"client_id"`
	AuthURI        string `json:"auth_uri,omitempty"`
	TokenURI       string `json:"token_uri"`
	UniverseDomain string `json:"universe_domain,omitempty"`
}

// NewKey makes an RSA key pair for email and returns the key file (with the private
// key, for the caller only) and the public record Basin stores.
func NewKey(email, project, tokenURI string, now time.Time) (*KeyFile, *model.ServiceAccountKey, error) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	idBytes := make([]byte, 20)
	if _, err := rand.Read(idBytes); err != nil {
		return nil, nil, err
	}
	cid, err := rand.Int(rand.Reader, new(big.Int).Exp(big.NewInt(10), big.NewInt(21), nil))
	if err != nil {
		return nil, nil, err
	}
	kid := hex.EncodeToString(idBytes)
	kf := &KeyFile{
		Type: "service_account", ProjectID: project, PrivateKeyID: kid,
		PrivateKey:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		ClientEmail: email, ClientID: fmt.Sprintf("1%021s", cid.String()), TokenURI: tokenURI,
		UniverseDomain: "googleapis.com",
	}
	rec := &model.ServiceAccountKey{ID: kid, Email: email, CreateTime: now.UTC(),
		PublicKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))}
	return kf, rec, nil
}

// WriteKeyFile writes kf to path with mode 0600, atomically.
func WriteKeyFile(path string, kf *KeyFile) error {
	data, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// BootstrapOwner makes sure the owner account exists and that keyPath holds a key
// file for one of its live keys, creating both as needed.
func BootstrapOwner(ctx context.Context, st store.Store, keyPath, tokenURI string, now time.Time) (created bool, err error) {
	if data, err := os.ReadFile(keyPath); err == nil {
		var kf KeyFile
		if json.Unmarshal(data, &kf) == nil && kf.PrivateKeyID != "" {
			var found bool
			err := st.View(ctx, func(tx store.Tx) error {
				k, err := store.Get[model.ServiceAccountKey](tx, store.KindKey, kf.PrivateKeyID)
				found = err == nil && k.Email == OwnerEmail
				if errors.Is(err, model.ErrNotFound) {
					return nil
				}
				return err
			})
			if err != nil {
				return false, err
			}
			if found {
				return false, nil
			}
		}
	}
	kf, rec, err := NewKey(OwnerEmail, "basin", tokenURI, now)
	if err != nil {
		return false, err
	}
	err = st.Update(ctx, func(tx store.Tx) error {
		var sa model.ServiceAccount
		if err := tx.Get(store.KindServiceAccount, OwnerEmail, &sa); errors.Is(err, model.ErrNotFound) {
			sa = model.ServiceAccount{Email: OwnerEmail, Project: "basin", DisplayName: "Basin owner", Owner: true, CreateTime: now.UTC()}
			if err := tx.Put(store.KindServiceAccount, OwnerEmail, "", &sa); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		return tx.Put(store.KindKey, rec.ID, OwnerEmail, rec)
	})
	if err != nil {
		return false, err
	}
	if err := WriteKeyFile(keyPath, kf); err != nil {
		return false, fmt.Errorf("write %s: %w", keyPath, err)
	}
	return true, nil
}
