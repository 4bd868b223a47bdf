package iam

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// ownTokenURIs is what the api passes for a request to http://127.0.0.1:8780/token.
var ownTokenURIs = []string{"http://127.0.0.1:8780/token", "https://127.0.0.1:8780/token"}

// assertion signs a grant assertion as gcloud (google-auth) does: aud Google's token
// URL, the scopes, no sub.
func (f *fixture) assertion(mutate func(c jwt.MapClaims, h map[string]any)) string {
	return f.token(func(c jwt.MapClaims, h map[string]any) {
		delete(c, "sub")
		c["aud"] = GoogleTokenURI
		c["scope"] = "openid https://www.googleapis.com/auth/userinfo.email " + CloudPlatformScope
		if mutate != nil {
			mutate(c, h)
		}
	})
}

func (f *fixture) exchange(t *testing.T, assertion string) *AccessToken {
	t.Helper()
	tok, err := f.auth.Exchange(context.Background(), assertion, ownTokenURIs)
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	return tok
}

func (f *fixture) setAccount(change func(sa *model.ServiceAccount)) {
	f.st.Update(context.Background(), func(tx store.Tx) error {
		sa, err := store.Get[model.ServiceAccount](tx, store.KindServiceAccount, OwnerEmail)
		if err != nil {
			return err
		}
		change(sa)
		return tx.Put(store.KindServiceAccount, OwnerEmail, "", sa)
	})
}

// The assertions gcloud, Go's oauth2 and Node's google-auth-library send (as
// captured from each) are exchanged for an access token the API accepts.
func TestExchangeAcceptsLibraryAssertions(t *testing.T) {
	f := newFixture(t)
	for name, a := range map[string]string{
		"gcloud (google-auth)": f.assertion(nil),
		"Go oauth2: aud = token_uri of the key file": f.assertion(func(c jwt.MapClaims, _ map[string]any) {
			c["aud"] = f.kf.TokenURI
			c["scope"] = CloudPlatformScope
		}),
		"aud = the URL the request reached": f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "https://127.0.0.1:8780/token" }),
		"sub = iss":                         f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["sub"] = f.kf.ClientEmail }),
		"Node google-auth-library: no kid":  f.assertion(func(_ jwt.MapClaims, h map[string]any) { delete(h, "kid") }),
		"clock skew 4 min": f.assertion(func(c jwt.MapClaims, _ map[string]any) {
			c["iat"] = f.now.Add(4 * time.Minute).Unix()
			c["exp"] = f.now.Add(64 * time.Minute).Unix()
		}),
	} {
		tok, err := f.auth.Exchange(context.Background(), a, ownTokenURIs)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if tok.ExpiresIn != AccessTokenLifetime || tok.KeyID != f.kf.PrivateKeyID || tok.Project != "basin" || tok.Principal.Email != OwnerEmail {
			t.Errorf("%s: %+v", name, tok)
		}
		if strings.Contains(tok.Token, f.kf.PrivateKeyID) || strings.Count(tok.Token, ".") != 2 {
			t.Errorf("%s: token %q is not opaque", name, tok.Token)
		}
		p, err := f.auth.Authenticate(context.Background(), "Bearer "+tok.Token)
		if err != nil || p.Email != OwnerEmail || !p.Owner {
			t.Errorf("%s: the issued token is refused: %v %+v", name, err, p)
		}
	}
}

// Every refused assertion gets its OAuth error code and a description that says
// what is wrong, and no token.
func TestExchangeRefusals(t *testing.T) {
	f := newFixture(t)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	signWith := func(method jwt.SigningMethod, key any) string {
		tok := jwt.NewWithClaims(method, jwt.MapClaims{"iss": f.kf.ClientEmail, "aud": GoogleTokenURI, "scope": CloudPlatformScope,
			"iat": f.now.Unix(), "exp": f.now.Add(time.Hour).Unix()})
		tok.Header["kid"] = f.kf.PrivateKeyID
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const badSignature = "Invalid JWT Signature: the key is unknown or the signature is not the key's"
	cases := []struct {
		name, assertion, code, desc string
	}{
		{"no assertion", "", ErrInvalidRequest, "the assertion parameter is required"},
		{"garbage", "not.a.jwt", ErrInvalidGrant, "Invalid JWT: malformed"},
		{"forged signature", signWith(jwt.SigningMethodRS256, other), ErrInvalidGrant, badSignature},
		{"unknown kid reads as a bad signature", f.assertion(func(_ jwt.MapClaims, h map[string]any) { h["kid"] = "0123" }), ErrInvalidGrant, badSignature},
		{"alg HS256", signWith(jwt.SigningMethodHS256, []byte(f.kf.PrivateKeyID)), ErrInvalidGrant, "Invalid JWT"},
		{"alg none", signWith(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType), ErrInvalidGrant, "Invalid JWT"},
		{"no kid, not the account's key", f.signNoKid(t, other), ErrInvalidGrant, badSignature},
		{"no kid, unknown account", f.assertion(func(c jwt.MapClaims, h map[string]any) { delete(h, "kid"); c["iss"] = "nobody@x" }), ErrInvalidGrant, badSignature},
		{"expired", f.assertion(func(c jwt.MapClaims, _ map[string]any) {
			c["iat"] = f.now.Add(-2 * time.Hour).Unix()
			c["exp"] = f.now.Add(-time.Hour).Unix()
		}), ErrInvalidGrant, "the token has expired"},
		{"iat in the future", f.assertion(func(c jwt.MapClaims, _ map[string]any) {
			c["iat"] = f.now.Add(10 * time.Minute).Unix()
			c["exp"] = f.now.Add(70 * time.Minute).Unix()
		}), ErrInvalidGrant, "iat is in the future"},
		{"lifetime over 1h", f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["exp"] = f.now.Add(3 * time.Hour).Unix() }), ErrInvalidGrant, "exceeds 1h0m0s"},
		{"no exp", f.assertion(func(c jwt.MapClaims, _ map[string]any) { delete(c, "exp") }), ErrInvalidGrant, "Invalid JWT"},
		{"no iat", f.assertion(func(c jwt.MapClaims, _ map[string]any) { delete(c, "iat") }), ErrInvalidGrant, "token has no iat"},
		{"wrong issuer", f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["iss"] = "evil@x" }), ErrInvalidGrant, "iss must be " + OwnerEmail},
		{"domain-wide delegation", f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["sub"] = "user@example.com" }), ErrInvalidGrant, "domain-wide delegation"},
		{"an API audience is not a grant", f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "https://netapp.googleapis.com/" }), ErrInvalidGrant, "is not this token endpoint"},
		{"another server's token URL", f.assertion(func(c jwt.MapClaims, _ map[string]any) { c["aud"] = "http://10.0.0.1:8780/token" }), ErrInvalidGrant, "is not this token endpoint"},
		{"no aud", f.assertion(func(c jwt.MapClaims, _ map[string]any) { delete(c, "aud") }), ErrInvalidGrant, "is not this token endpoint"},
		{"no scope", f.assertion(func(c jwt.MapClaims, _ map[string]any) { delete(c, "scope") }), ErrInvalidScope, "scope must include " + CloudPlatformScope},
		{"another scope only", f.assertion(func(c jwt.MapClaims, _ map[string]any) {
			c["scope"] = "https://www.googleapis.com/auth/devstorage.read_only"
		}), ErrInvalidScope, "scope must include"},
		{"an ID token request (gcloud asks for one)", f.assertion(func(c jwt.MapClaims, _ map[string]any) {
			delete(c, "scope")
			c["target_audience"] = "32555940559.apps.googleusercontent.com"
		}), ErrInvalidScope, "not ID tokens"},
	}
	for _, tc := range cases {
		tok, err := f.auth.Exchange(context.Background(), tc.assertion, ownTokenURIs)
		var ge *GrantError
		if !errors.As(err, &ge) || ge.Code != tc.code || !strings.Contains(ge.Description, tc.desc) || tok != nil {
			t.Errorf("%s: got %v (%v), want %s: …%s…", tc.name, err, tok, tc.code, tc.desc)
		}
	}

	// The account's and key's state, checked last (only the key's holder learns it).
	good := f.assertion(nil)
	f.setAccount(func(sa *model.ServiceAccount) { sa.Disabled = true })
	if _, err := f.auth.Exchange(context.Background(), good, ownTokenURIs); !isGrant(err, ErrInvalidGrant, "is disabled") {
		t.Errorf("disabled account: %v", err)
	}
	f.setAccount(func(sa *model.ServiceAccount) { sa.Disabled = false })
	f.expireKey(f.now.Add(-time.Second))
	if _, err := f.auth.Exchange(context.Background(), good, ownTokenURIs); !isGrant(err, ErrInvalidGrant, "has expired") {
		t.Errorf("expired key: %v", err)
	}
}

// signNoKid signs a grant assertion for the owner with priv, without a kid, as
// Node's google-auth-library does.
func (f *fixture) signNoKid(t *testing.T, priv *rsa.PrivateKey) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": f.kf.ClientEmail, "aud": GoogleTokenURI, "scope": CloudPlatformScope,
		"iat": f.now.Unix(), "exp": f.now.Add(time.Hour).Unix()})
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An assertion without a kid is verified with each of its account's keys: the one
// that signed it is the token's.
func TestExchangeWithoutKidFindsTheKey(t *testing.T) {
	f := newFixture(t)
	second, rec, err := NewKey(OwnerEmail, "basin", f.kf.TokenURI, f.now)
	if err != nil {
		t.Fatal(err)
	}
	f.st.Update(context.Background(), func(tx store.Tx) error { return tx.Put(store.KindKey, rec.ID, OwnerEmail, rec) })
	block, _ := pem.Decode([]byte(second.PrivateKey))
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	a := f.signNoKid(t, priv.(*rsa.PrivateKey))
	tok := f.exchange(t, a)
	if tok.KeyID != rec.ID {
		t.Fatalf("token of key %s, want the second key %s", tok.KeyID, rec.ID)
	}
	f.st.Update(context.Background(), func(tx store.Tx) error { return tx.Delete(store.KindKey, rec.ID) })
	if _, err := f.auth.Exchange(context.Background(), a, ownTokenURIs); !isGrant(err, ErrInvalidGrant, "Invalid JWT Signature") {
		t.Fatalf("after its key was deleted: %v", err)
	}
}

func isGrant(err error, code, desc string) bool {
	var ge *GrantError
	return errors.As(err, &ge) && ge.Code == code && strings.Contains(ge.Description, desc)
}

func (f *fixture) expireKey(at time.Time) {
	f.st.Update(context.Background(), func(tx store.Tx) error {
		k, err := store.Get[model.ServiceAccountKey](tx, store.KindKey, f.kf.PrivateKeyID)
		if err != nil {
			return err
		}
		k.ExpireTime = at
		return tx.Put(store.KindKey, k.ID, k.Email, k)
	})
}

// A key that expires within the hour gives tokens that expire with it.
func TestAccessTokenEndsWithItsKey(t *testing.T) {
	f := newFixture(t)
	f.expireKey(f.now.Add(10 * time.Minute))
	tok := f.exchange(t, f.assertion(nil))
	if tok.ExpiresIn != 10*time.Minute {
		t.Fatalf("expires in %s, want 10m (the key's expiry)", tok.ExpiresIn)
	}
}

// Access tokens are checked against the live state of their key and account on
// every use: revocation is immediate, and a forged, altered or expired token is
// refused.
func TestAccessTokenRefusals(t *testing.T) {
	f := newFixture(t)
	auth := func(tok string) error {
		_, err := f.auth.Authenticate(context.Background(), "Bearer "+tok)
		return err
	}
	refused := func(name, tok, reason string) {
		t.Helper()
		err := auth(tok)
		var u *unauthenticated
		if !errors.Is(err, model.ErrUnauthenticated) || !errors.As(err, &u) || !strings.Contains(u.reason, reason) {
			t.Errorf("%s: got %v, want unauthenticated: …%s…", name, err, reason)
		}
	}
	tok := f.exchange(t, f.assertion(nil)).Token
	if err := auth(tok); err != nil {
		t.Fatal(err)
	}
	body, mac, _ := strings.Cut(strings.TrimPrefix(tok, accessTokenPrefix), ".")
	forged, err := f.auth.sealToken(tokenPayload{Key: "0123", Issued: f.now.UnixNano(), Expires: f.now.Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	foreign := NewAuthenticator(Options{Store: f.st, Now: func() time.Time { return f.now }})
	foreignTok, err := foreign.Exchange(context.Background(), f.assertion(nil), ownTokenURIs)
	if err != nil {
		t.Fatal(err)
	}
	refused("payload altered", accessTokenPrefix+body+"x."+mac, "not one this Basin issued")
	refused("MAC altered", accessTokenPrefix+body+"."+strings.ToUpper(mac), "not one this Basin issued")
	refused("no MAC", accessTokenPrefix+body, "not one this Basin issued")
	refused("another server's key", foreignTok.Token, "not one this Basin issued")
	refused("MAC'd, unknown key", forged, "has been deleted")

	f.now = f.now.Add(AccessTokenLifetime)
	refused("expired", tok, "has expired")
	f.now = f.now.Add(-AccessTokenLifetime)

	// Disabling the account refuses its tokens at once, and they stay refused once
	// it is enabled again; tokens issued after that work.
	f.setAccount(func(sa *model.ServiceAccount) { sa.Disabled, sa.DisableTime = true, f.now.Add(time.Millisecond) })
	refused("account disabled", tok, "is disabled")
	f.now = f.now.Add(time.Second)
	f.setAccount(func(sa *model.ServiceAccount) { sa.Disabled = false })
	refused("issued before the account was disabled", tok, "before service account")
	fresh := f.exchange(t, f.assertion(func(c jwt.MapClaims, _ map[string]any) {
		c["iat"], c["exp"] = f.now.Unix(), f.now.Add(time.Hour).Unix()
	})).Token
	if err := auth(fresh); err != nil {
		t.Fatalf("token issued after the account was enabled again: %v", err)
	}

	// Deleting the key refuses its tokens at once.
	f.st.Update(context.Background(), func(tx store.Tx) error { return tx.Delete(store.KindKey, f.kf.PrivateKeyID) })
	refused("key deleted", fresh, "has been deleted")
}
