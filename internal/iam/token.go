package iam

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The OAuth 2.0 JWT-bearer grant (RFC 7523) that Google's auth libraries use with a
// service-account key file: they POST an assertion, a JWT signed with the key, to
// the key file's token_uri (Go's golang.org/x/oauth2, gcloud) or to Google's own
// token URL (google-auth-library for Node, which ignores token_uri), and send the
// access token they get back as "Authorization: Bearer".
//
// Basin's access tokens are not stored anywhere: a token carries its key ID, when it
// was issued and when it expires, under an HMAC-SHA256 with Options.TokenKey. Each
// use checks the token against the key's and account's state at that moment, so
// deleting the key, or disabling or deleting the account, refuses its tokens on
// their next request; tokens issued before an account was disabled stay refused
// after it is enabled again.

// GrantTypeJWTBearer is the grant_type of RFC 7523 §2.1.
const GrantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// GoogleTokenURI is the audience google-auth (Python, gcloud) and
// google-auth-library (Node) put in their assertions, whatever the key file's
// token_uri says.
const GoogleTokenURI = "https://oauth2.googleapis.com/token"

// TokenPath is the token endpoint's path; key files name it as token_uri.
const TokenPath = "/token"

// AccessTokenLifetime is how long an access token is valid (at most; less when its
// key expires sooner), as Google's are.
const AccessTokenLifetime = time.Hour

// PermGetAccessToken is the permission name token issuance is audited under (the
// one Google IAM checks when a token is made for a service account).
const PermGetAccessToken = "iam.serviceAccounts.getAccessToken"

// accessTokenPrefix starts every access token Basin issues ("basin1." + payload +
// "." + MAC, both base64url); a JWT never starts so.
const accessTokenPrefix = "basin1."

// OAuth error codes (RFC 6749 §5.2).
const (
	ErrInvalidRequest       = "invalid_request"
	ErrInvalidGrant         = "invalid_grant"
	ErrUnsupportedGrantType = "unsupported_grant_type"
	ErrInvalidScope         = "invalid_scope"
)

// GrantError is a refused token request: an OAuth error code and a description safe
// to send. Every GrantError is answered 400 (RFC 6749 §5.2).
type GrantError struct {
	Code        string
	Description string
}

func (e *GrantError) Error() string { return e.Code + ": " + e.Description }

func grantErr(code, format string, args ...any) error {
	return &GrantError{Code: code, Description: fmt.Sprintf(format, args...)}
}

// AccessToken is an issued token and what it stands for.
type AccessToken struct {
	// Token is the bearer token: for the caller only, never logged or stored.
	Token     string
	ExpiresIn time.Duration
	Principal Principal
	// Project is the account's project, KeyID the key that signed the assertion.
	Project, KeyID string
}

// tokenPayload is what an access token carries.
type tokenPayload struct {
	Key string `json:"k"`
	// Issued in Unix nanoseconds (compared with the account's DisableTime),
	// Expires in Unix seconds.
	Issued  int64 `json:"i"`
	Expires int64 `json:"e"`
}

// Exchange verifies a JWT-bearer assertion and issues an access token for its
// account. The assertion is verified as a self-signed JWT is (key — by its kid, or
// without one any key of the account iss names — RS256 signature,
// iss, iat/exp with Skew, lifetime at most MaxLifetime, account enabled, key not
// expired); in addition its aud must name a token endpoint: GoogleTokenURI, one of
// tokenURIs (the URLs the request reached, as the client wrote them) or an
// Options.Audiences URL + "token"; sub, if present, must be the account (no
// domain-wide delegation); and its scope must include the cloud-platform scope.
// Errors are *GrantError.
func (a *Authenticator) Exchange(ctx context.Context, assertion string, tokenURIs []string) (*AccessToken, error) {
	if assertion == "" {
		return nil, grantErr(ErrInvalidRequest, "the assertion parameter is required (a JWT signed with a service-account key)")
	}
	cl, key, sa, err := a.verifyJWT(ctx, assertion, true)
	if err != nil {
		return nil, grantErr(ErrInvalidGrant, "%s", assertionProblem(err))
	}
	if cl.Subject != "" && cl.Subject != key.Email {
		return nil, grantErr(ErrInvalidGrant, "Invalid JWT: sub must be absent or %s (Basin does not support domain-wide delegation)", key.Email)
	}
	if !slices.ContainsFunc(cl.Audience, a.tokenAudience(tokenURIs)) {
		return nil, grantErr(ErrInvalidGrant, "Invalid JWT: aud %v is not this token endpoint (%s)", []string(cl.Audience), strings.Join(tokenURIs, ", "))
	}
	if !slices.Contains(strings.Fields(cl.Scope), CloudPlatformScope) {
		if cl.TargetAudience != "" {
			return nil, grantErr(ErrInvalidScope, "Basin issues access tokens only, not ID tokens (target_audience)")
		}
		return nil, grantErr(ErrInvalidScope, "the assertion's scope must include %s", CloudPlatformScope)
	}
	if err := a.live(key, sa); err != nil {
		return nil, grantErr(ErrInvalidGrant, "%v", err)
	}
	now := a.opts.Now()
	exp := now.Add(AccessTokenLifetime)
	if !key.ExpireTime.IsZero() && key.ExpireTime.Before(exp) {
		exp = key.ExpireTime
	}
	tok, err := a.sealToken(tokenPayload{Key: key.ID, Issued: now.UnixNano(), Expires: exp.Unix()})
	if err != nil {
		return nil, err
	}
	return &AccessToken{Token: tok, ExpiresIn: exp.Sub(now).Round(time.Second), Principal: Principal{Email: sa.Email, Owner: sa.Owner},
		Project: sa.Project, KeyID: key.ID}, nil
}

// tokenAudience reports whether an aud value names this token endpoint.
func (a *Authenticator) tokenAudience(tokenURIs []string) func(string) bool {
	return func(aud string) bool {
		if aud == GoogleTokenURI || slices.Contains(tokenURIs, aud) {
			return true
		}
		for _, base := range a.opts.Audiences {
			if strings.HasSuffix(base, "/") && aud == base+strings.TrimPrefix(TokenPath, "/") {
				return true
			}
		}
		return false
	}
}

// assertionProblem words why verifyJWT refused an assertion, as a client may be
// told: an unknown key and a wrong signature read alike, so the answer does not
// tell whether a key ID exists.
func assertionProblem(err error) string {
	switch {
	case errors.Is(err, errUnknownKey), errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "Invalid JWT Signature: the key is unknown or the signature is not the key's"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "Invalid JWT: the token has expired; check iat and exp and the client's clock"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued), errors.Is(err, jwt.ErrTokenNotValidYet):
		return "Invalid JWT: iat is in the future; check the client's clock"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "Invalid JWT: malformed"
	}
	return "Invalid JWT: " + err.Error()
}

// sealToken makes an access token of p.
func (a *Authenticator) sealToken(p tokenPayload) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	body := accessTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return body + "." + base64.RawURLEncoding.EncodeToString(a.mac(body)), nil
}

func (a *Authenticator) mac(body string) []byte {
	m := hmac.New(sha256.New, a.opts.TokenKey)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// authenticateAccessToken verifies an access token Exchange issued, against the
// state of its key and account now.
func (a *Authenticator) authenticateAccessToken(ctx context.Context, tok string) (*Principal, error) {
	body, sig, ok := strings.Cut(tok, ".")
	if ok {
		var payload string
		payload, sig, ok = strings.Cut(sig, ".")
		body += "." + payload
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil || !hmac.Equal(mac, a.mac(body)) {
		return nil, deny("access token is not one this Basin issued")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(body, accessTokenPrefix))
	var p tokenPayload
	if err != nil || json.Unmarshal(raw, &p) != nil || p.Key == "" {
		return nil, deny("access token is malformed")
	}
	// Basin issued it to its holder: what is wrong from here on may be said.
	now := a.opts.Now()
	if now.Unix() >= p.Expires {
		principal := ""
		if key, _, err := a.lookup(ctx, p.Key); err == nil {
			principal = key.Email
		}
		return nil, denyHolder(principal, "access token has expired")
	}
	pr, err := a.Recheck(ctx, p.Key, time.Unix(0, p.Issued))
	var ue *unauthenticated
	if errors.As(err, &ue) {
		return nil, denyHolder(ue.principal, "access token refused: %s", ue.reason)
	}
	return pr, err
}

// newTokenKey makes a random MAC key, for an Authenticator given none: its tokens
// are valid only as long as the process runs.
func newTokenKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// Assertion signs a JWT-bearer grant assertion with the key file, as Google's
// libraries do: aud the token endpoint, the cloud-platform scope, an hour's
// lifetime from now. Basin's own clients sign API tokens instead; this is for tests
// and tools that exercise /token.
func (kf *KeyFile) Assertion(aud string, now time.Time) (string, error) {
	block, _ := pem.Decode([]byte(kf.PrivateKey))
	if block == nil {
		return "", errors.New("private_key is not PEM")
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return "", err
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": kf.ClientEmail, "aud": aud, "scope": CloudPlatformScope,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	tok.Header["kid"] = kf.PrivateKeyID
	return tok.SignedString(priv)
}
