package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// signAssertion signs a JWT-bearer grant assertion with a key file, as gcloud does
// (aud Google's token URL) unless aud is given.
func signAssertion(t *testing.T, keyPath, aud string) string {
	t.Helper()
	kf := readKeyFile(t, keyPath)
	if aud == "" {
		aud = iam.GoogleTokenURI
	}
	s, err := kf.Assertion(aud, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readKeyFile(t *testing.T, path string) iam.KeyFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kf iam.KeyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		t.Fatal(err)
	}
	return kf
}

type tokenAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

// postToken sends a token request with form as its body.
func (e *env) postToken(contentType string, form url.Values) tokenAnswer {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", contentType)
	return e.tokenRequest(req)
}

func (e *env) tokenRequest(req *http.Request) tokenAnswer {
	e.t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := tokenAnswer{status: res.StatusCode, header: res.Header}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		e.t.Fatalf("token endpoint answered %d with a body that is not JSON: %q", res.StatusCode, raw)
	}
	return a
}

func grant(assertion string) url.Values {
	return url.Values{"grant_type": {iam.GrantTypeJWTBearer}, "assertion": {assertion}}
}

const formType = "application/x-www-form-urlencoded"

// GET an API path with a bearer token; returns the status.
func (e *env) getWith(token, path string) int {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// POST /token exchanges a key's assertion for an access token the API accepts,
// audited without the token; deleting the key refuses the token at once.
func TestTokenEndpoint(t *testing.T) {
	ie := newIAMEnv(t)
	keyPath, email := ie.accountKeyFile("token-user")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(email)}})

	for _, aud := range []string{iam.GoogleTokenURI, ie.srv.URL + "/token"} { // gcloud and Node; Go (token_uri)
		a := ie.postToken(formType+"; charset=utf-8", grant(signAssertion(t, keyPath, aud)))
		if a.status != 200 || a.body["token_type"] != "Bearer" || a.body["expires_in"] != float64(3600) || a.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("aud %s: %d %v %v", aud, a.status, a.body, a.header)
		}
	}
	a := ie.postToken(formType, grant(signAssertion(t, keyPath, "")))
	tok, _ := a.body["access_token"].(string)
	if tok == "" {
		t.Fatalf("no access_token: %v", a.body)
	}
	if got := ie.getWith(tok, loc+"/storagePools"); got != 200 {
		t.Fatalf("the API answered the access token %d", got)
	}
	if got := ie.getWith(tok, "/v1/projects/p1/serviceAccounts"); got != 403 {
		t.Fatalf("the token carries its account's roles only: listing accounts answered %d, want 403", got)
	}

	// Issuance is audited under the account's project, with its key; the token
	// appears in no log and nowhere in the store.
	var entries []*model.AuditEntry
	ie.st.View(context.Background(), func(tx store.Tx) (err error) {
		entries, err = store.List[model.AuditEntry](tx, store.KindAudit, "projects/p1")
		return err
	})
	issued := 0
	for _, e := range entries {
		if e.Method == iam.PermGetAccessToken && e.Principal == email && e.Status == 200 &&
			strings.HasPrefix(e.Resource, "projects/p1/serviceAccounts/"+email+"/keys/") {
			issued++
		}
	}
	if issued != 3 {
		t.Errorf("%d token issuances audited, want 3", issued)
	}
	for name, text := range map[string]string{"audit.log": ie.audit.String(), "server log": ie.log.String(), "database": dbText(ie.env)} {
		if strings.Contains(text, tok) || strings.Contains(text, strings.Split(tok, ".")[2]) {
			t.Errorf("the access token is in the %s", name)
		}
	}

	// Deleting the key refuses its tokens on their next request.
	kid := readKeyFile(t, keyPath).PrivateKeyID
	if _, err := ie.call(ie.owner, "DELETE", "/v1/projects/p1/serviceAccounts/"+email+"/keys/"+kid, nil); err != nil {
		t.Fatal(err)
	}
	if got := ie.getWith(tok, loc+"/storagePools"); got != 401 {
		t.Fatalf("token of a deleted key answered %d, want 401", got)
	}
}

// dbText returns the database's files (with its WAL) as text.
func dbText(e *env) string {
	var b strings.Builder
	for _, f := range []string{e.db, e.db + "-wal"} {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// Disabling the account refuses its tokens at once; enabling it again does not
// bring them back.
func TestTokenOfDisabledAccount(t *testing.T) {
	ie := newIAMEnv(t)
	keyPath, email := ie.accountKeyFile("token-user")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(email)}})
	tok := ie.postToken(formType, grant(signAssertion(t, keyPath, ""))).body["access_token"].(string)
	if got := ie.getWith(tok, loc+"/volumes"); got != 200 {
		t.Fatalf("%d", got)
	}
	acct := "/v1/projects/p1/serviceAccounts/" + email
	if _, err := ie.call(ie.owner, "POST", acct+":disable", nil); err != nil {
		t.Fatal(err)
	}
	if got := ie.getWith(tok, loc+"/volumes"); got != 401 {
		t.Fatalf("token of a disabled account answered %d", got)
	}
	if a := ie.postToken(formType, grant(signAssertion(t, keyPath, ""))); a.status != 400 || a.body["error"] != "invalid_grant" ||
		!strings.Contains(a.body["error_description"].(string), "disabled") {
		t.Fatalf("a disabled account got a token: %d %v", a.status, a.body)
	}
	if _, err := ie.call(ie.owner, "POST", acct+":enable", nil); err != nil {
		t.Fatal(err)
	}
	if got := ie.getWith(tok, loc+"/volumes"); got != 401 {
		t.Fatalf("token issued before the account was disabled answered %d after it was enabled", got)
	}
	fresh := ie.postToken(formType, grant(signAssertion(t, keyPath, ""))).body["access_token"].(string)
	if got := ie.getWith(fresh, loc+"/volumes"); got != 200 {
		t.Fatalf("a new token after enabling answered %d", got)
	}
}

// Every malformed request gets an OAuth error body naming what is wrong, with the
// status RFC 6749 gives it.
func TestTokenRequestRefusals(t *testing.T) {
	ie := newIAMEnv(t)
	keyPath, _ := ie.accountKeyFile("token-user")
	good := signAssertion(t, keyPath, "")
	get, _ := http.NewRequest("GET", ie.srv.URL+"/token?"+grant(good).Encode(), nil)
	cases := []struct {
		name   string
		answer tokenAnswer
		status int
		code   string
		desc   string
	}{
		{"GET", ie.tokenRequest(get), 405, "invalid_request", "POST only"},
		{"JSON body", ie.postToken("application/json", grant(good)), 400, "invalid_request", "application/x-www-form-urlencoded"},
		{"no grant_type", ie.postToken(formType, url.Values{"assertion": {good}}), 400, "invalid_request", "grant_type is required"},
		{"another grant", ie.postToken(formType, url.Values{"grant_type": {"client_credentials"}, "assertion": {good}}), 400, "unsupported_grant_type", `"client_credentials" is not supported`},
		{"assertion twice", ie.postToken(formType, url.Values{"grant_type": {iam.GrantTypeJWTBearer}, "assertion": {good, good}}), 400, "invalid_request", "assertion is given more than once"},
		{"no assertion", ie.postToken(formType, url.Values{"grant_type": {iam.GrantTypeJWTBearer}}), 400, "invalid_request", "assertion parameter is required"},
		{"bad assertion", ie.postToken(formType, grant("x.y.z")), 400, "invalid_grant", "Invalid JWT"},
		{"wrong audience", ie.postToken(formType, grant(signAssertion(t, keyPath, "https://netapp.googleapis.com/"))), 400, "invalid_grant", "is not this token endpoint"},
	}
	for _, tc := range cases {
		a := tc.answer
		desc, _ := a.body["error_description"].(string)
		if a.status != tc.status || a.body["error"] != tc.code || !strings.Contains(desc, tc.desc) || a.body["access_token"] != nil {
			t.Errorf("%s: %d %v, want %d %s …%s…", tc.name, a.status, a.body, tc.status, tc.code, tc.desc)
		}
	}
	// The 7 refused POSTs are logged and audited in aggregate (GETs are not audited).
	ie.api.Close() // writes what is still being aggregated
	logged := 0
	for _, m := range regexp.MustCompile(`msg="refused calls" client=127.0.0.1 principal="" .*count=(\d+) .*first_method=`+iam.PermGetAccessToken).FindAllStringSubmatch(ie.log.String(), -1) {
		c, _ := strconv.Atoi(m[1])
		logged += c
	}
	if logged != 7 {
		t.Errorf("%d refused token requests logged in aggregate, want 7:\n%s", logged, ie.log.String())
	}
}

// Refused token requests count against the address's failed-authentication limit,
// issued ones against the account's rate limit; both answer 429 with Retry-After.
func TestTokenRateLimits(t *testing.T) {
	ie := newIAMEnv(t, func(o *Options) { o.FailedAuthLimit = 3; o.RateLimit = 2 })
	keyPath, _ := ie.accountKeyFile("token-user")
	for i := range 2 {
		if a := ie.postToken(formType, grant(signAssertion(t, keyPath, ""))); a.status != 200 {
			t.Fatalf("token %d: %d %v", i, a.status, a.body)
		}
	}
	if a := ie.postToken(formType, grant(signAssertion(t, keyPath, ""))); a.status != 429 || a.body["error"] != "rate_limit_exceeded" || a.header.Get("Retry-After") == "" {
		t.Fatalf("third token in a minute at 2 per minute: %d %v", a.status, a.body)
	}
	for i := range 3 {
		if a := ie.postToken(formType, grant("x.y.z")); a.status != 400 {
			t.Fatalf("refusal %d: %d %v", i, a.status, a.body)
		}
	}
	if a := ie.postToken(formType, grant("x.y.z")); a.status != 429 || a.body["error"] != "rate_limit_exceeded" || a.header.Get("Retry-After") == "" {
		t.Fatalf("fourth refusal at 3 per minute: %d %v", a.status, a.body)
	}
}

// Without authentication (--insecure-no-auth) no token is issued.
func TestTokenWithoutAuth(t *testing.T) {
	e := newEnv(t)
	if a := e.postToken(formType, grant("x.y.z")); a.status != 404 || a.body["error"] != "invalid_request" ||
		!strings.Contains(a.body["error_description"].(string), "--insecure-no-auth") {
		t.Fatalf("%d %v", a.status, a.body)
	}
}

// FuzzToken: whatever a token request holds, the endpoint answers an OAuth error (or,
// for the one valid seed, a token), never a 5xx or a panic.
func FuzzToken(f *testing.F) {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(f.TempDir(), "db"))
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	keyPath := filepath.Join(f.TempDir(), "owner.json")
	if _, err := iam.BootstrapOwner(context.Background(), st, keyPath, "http://basin/token", time.Now()); err != nil {
		f.Fatal(err)
	}
	data, _ := os.ReadFile(keyPath)
	var kf iam.KeyFile
	json.Unmarshal(data, &kf)
	good, err := kf.Assertion(iam.GoogleTokenURI, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct{ ct, body string }{
		{formType, grant(good).Encode()},
		{formType, "grant_type=client_credentials"},
		{formType, "grant_type=" + url.QueryEscape(iam.GrantTypeJWTBearer) + "&assertion=eyJhbGciOiJub25lIn0.e30."},
		{formType, "assertion=%zz"},
		{"application/json", `{"assertion":"x"}`},
		{formType + "; charset=utf-8", "grant_type=a&grant_type=b"},
	} {
		f.Add(seed.ct, seed.body)
	}
	h := New(Options{Store: st, Auth: iam.NewAuthenticator(iam.Options{Store: st}), Locations: []string{"l"}, RateLimit: -1, FailedAuthLimit: -1})
	defer h.Close()
	f.Fuzz(func(t *testing.T, contentType, body string) {
		req := httptest.NewRequest("POST", "http://basin/token", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%d, not JSON: %q", rec.Code, rec.Body.String())
		}
		switch rec.Code {
		case 200:
			if out["access_token"] == nil || body != grant(good).Encode() && !strings.Contains(body, good) {
				t.Fatalf("a token for %q: %v", body, out)
			}
		case 400:
			if out["error"] == nil || out["error_description"] == nil || out["access_token"] != nil {
				t.Fatalf("400 without an OAuth error: %v", out)
			}
		default:
			t.Fatalf("status %d: %v", rec.Code, out)
		}
	})
}
