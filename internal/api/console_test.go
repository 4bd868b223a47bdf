package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// consoleEnv is an iamEnv whose API clock the test moves (sign-in links and console
// sessions expire by it).
type consoleEnv struct {
	*iamEnv
	clock atomic.Int64 // unix nanoseconds
}

func newConsoleEnv(t *testing.T) *consoleEnv {
	ce := &consoleEnv{}
	ce.clock.Store(time.Now().UnixNano())
	ce.iamEnv = newIAMEnv(t, func(o *Options) { o.Now = func() time.Time { return time.Unix(0, ce.clock.Load()) } })
	return ce
}

func (ce *consoleEnv) advance(d time.Duration) { ce.clock.Add(int64(d)) }

// link asks for a sign-in link as the caller whose Authorization header is auth
// and returns the answer's status and code.
func (ce *consoleEnv) link(auth string) (int, string) {
	ce.t.Helper()
	req, _ := http.NewRequest("POST", ce.srv.URL+"/v1/consoleSignInLinks", strings.NewReader("{}"))
	req.Header.Set("Authorization", auth)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ce.t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]string
	json.NewDecoder(res.Body).Decode(&out)
	code, _ := strings.CutPrefix(out["path"], "/console/#signin=")
	if res.StatusCode == 200 && (code == "" || out["path"] == code) {
		ce.t.Fatalf("link answer without a /console/#signin= path: %v", out)
	}
	return res.StatusCode, code
}

// ownerLink is a sign-in link made by the owner (with its key-file JWT).
func (ce *consoleEnv) ownerLink() string {
	ce.t.Helper()
	var out map[string]string
	if err := ce.owner.Do(context.Background(), "POST", "/v1/consoleSignInLinks", nil, map[string]any{}, &out); err != nil {
		ce.t.Fatal(err)
	}
	code, ok := strings.CutPrefix(out["path"], "/console/#signin=")
	if !ok || len(code) < 40 || out["principal"] != iam.OwnerEmail {
		ce.t.Fatalf("link answer: %v", out)
	}
	return code
}

// console sends a request to the console's sign-in handler as a browser on the
// page would (same origin), with extra headers.
func (ce *consoleEnv) console(path, body string, hdr map[string]string) (int, map[string]any) {
	ce.t.Helper()
	req := httptest.NewRequest("POST", "http://basin.test"+path, strings.NewReader(body))
	req.Header.Set("Origin", "http://basin.test")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	ce.api.ConsoleSignIn().ServeHTTP(rec, req)
	var out map[string]any
	json.Unmarshal(rec.Body.Bytes(), &out)
	if rec.Code == 200 && rec.Header().Get("Cache-Control") != "no-store" {
		ce.t.Errorf("%s answered without Cache-Control: no-store", path)
	}
	return rec.Code, out
}

// exchange trades a code for a session token; "" if refused.
func (ce *consoleEnv) exchange(code string) (int, string) {
	ce.t.Helper()
	status, out := ce.console("/console/signin", `{"code":"`+code+`"}`, nil)
	tok, _ := out["access_token"].(string)
	return status, tok
}

// get calls GET path with the bearer token tok and returns the status.
func (ce *consoleEnv) get(tok, path string) int {
	ce.t.Helper()
	ce.token = tok
	defer func() { ce.token = "" }()
	return ce.do("GET", path, nil).status
}

func TestConsoleSignInLink(t *testing.T) {
	ce := newConsoleEnv(t)
	locs := "/v1/projects/p1/locations"

	// A link works once, for an hour's session as its maker.
	code := ce.ownerLink()
	status, tok := ce.exchange(code)
	if status != 200 || !strings.HasPrefix(tok, consoleTokenPrefix) {
		t.Fatalf("exchange: %d %q", status, tok)
	}
	if s := ce.get(tok, locs); s != 200 {
		t.Fatalf("the session token is refused: %d", s)
	}
	if s, tok2 := ce.exchange(code); s != 401 || tok2 != "" {
		t.Fatalf("the same link a second time: %d %q, want 401", s, tok2)
	}
	// The code and the token are never logged or written to the audit log.
	for _, secret := range []string{code, tok} {
		if strings.Contains(ce.log.String(), secret) || strings.Contains(ce.audit.String(), secret) {
			t.Fatal("a sign-in code or session token reached the log or the audit log")
		}
	}
	if !strings.Contains(ce.audit.String(), "basin.console.signIn") {
		t.Error("the sign-in is not in the audit log")
	}

	// Sessions end after an hour; links after five minutes.
	late := ce.ownerLink()
	ce.advance(signInLinkTTL + time.Second)
	if s, _ := ce.exchange(late); s != 401 {
		t.Fatalf("an expired link: %d, want 401", s)
	}
	ce.advance(consoleSessionTTL - signInLinkTTL)
	if s := ce.get(tok, locs); s != 401 {
		t.Fatalf("a session after an hour: %d, want 401", s)
	}

	// A link made from a console session cannot outlive it.
	_, tok = ce.exchange(ce.ownerLink())
	ce.advance(50 * time.Minute)
	s, code := ce.link("Bearer " + tok)
	if s != 200 {
		t.Fatalf("a link from a console session: %d", s)
	}
	_, tok2 := ce.exchange(code)
	ce.advance(11 * time.Minute)
	if s := ce.get(tok2, locs); s != 401 {
		t.Fatalf("a session from a session's link outlived it: %d", s)
	}

	// Signing out ends the session.
	_, tok = ce.exchange(ce.ownerLink())
	if s, _ := ce.console("/console/signout", "", map[string]string{"Authorization": "Bearer " + tok}); s != 200 {
		t.Fatalf("sign out: %d", s)
	}
	if s := ce.get(tok, locs); s != 401 {
		t.Fatalf("a session after sign-out: %d, want 401", s)
	}

	// A session has its maker's permissions, no more; disabling the account ends it.
	viewer, email := ce.account("viewer")
	ce.bind(map[string][]string{"roles/netapp.viewer": {"serviceAccount:" + email}})
	var out map[string]string
	if err := viewer.Do(context.Background(), "POST", "/v1/consoleSignInLinks", nil, map[string]any{}, &out); err != nil {
		t.Fatal(err)
	}
	_, vtok := ce.exchange(strings.TrimPrefix(out["path"], "/console/#signin="))
	if s := ce.get(vtok, loc+"/volumes"); s != 200 {
		t.Fatalf("the viewer's session lists volumes: %d", s)
	}
	ce.token = vtok
	ce.fails("POST", loc+"/storagePools?storagePoolId=p", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "2048",
		"network": "projects/p1/global/networks/default"}, 403, "PERMISSION_DENIED")
	ce.token = ""
	if _, err := ce.call(ce.owner, "POST", "/v1/projects/p1/serviceAccounts/"+email+":disable", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if s := ce.get(vtok, loc+"/volumes"); s != 401 {
		t.Fatalf("a disabled account's session: %d, want 401", s)
	}

	// Refused: no credentials, a made-up code, a made-up session token, another
	// site's page, a GET.
	if s, _ := ce.link(""); s != 401 {
		t.Fatalf("a link without credentials: %d, want 401", s)
	}
	if s, _ := ce.exchange("nope"); s != 401 {
		t.Fatalf("a made-up code: %d, want 401", s)
	}
	if s := ce.get(consoleTokenPrefix+"AAAA", locs); s != 401 {
		t.Fatalf("a made-up session token: %d, want 401", s)
	}
	code = ce.ownerLink()
	if s, _ := ce.console("/console/signin", `{"code":"`+code+`"}`, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); s != 403 {
		t.Fatalf("an exchange from another site: %d, want 403", s)
	}
	rec := httptest.NewRecorder()
	ce.api.ConsoleSignIn().ServeHTTP(rec, httptest.NewRequest("GET", "http://basin.test/console/signin?code="+code, nil))
	if rec.Code == 200 {
		t.Fatal("GET /console/signin exchanged a code")
	}
	if s, _ := ce.exchange(code); s != 200 {
		t.Fatalf("the link, after refused attempts that did not use it: %d", s)
	}
}

// TestCrossOrigin: a browser request from another origin is refused before it does
// anything; the official clients (no Origin) and the console's own page are not.
func TestCrossOrigin(t *testing.T) {
	e := newEnv(t)
	host := strings.TrimPrefix(e.srv.URL, "http://")
	body := map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "2048", "network": "projects/p1/global/networks/default"}
	send := func(method, path string, hdr map[string]string) int {
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(data))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("the API sent CORS headers")
		}
		return res.StatusCode
	}
	for name, hdr := range map[string]map[string]string{
		"other origin":        {"Origin": "https://evil.example"},
		"other port":          {"Origin": "http://127.0.0.1:1"},
		"cross-site":          {"Sec-Fetch-Site": "cross-site"},
		"same-site":           {"Sec-Fetch-Site": "same-site", "Origin": "http://" + host},
		"null origin":         {"Origin": "null"},
		"other scheme":        {"Origin": "file://" + host},
		"preflight elsewhere": {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
	} {
		if s := send("POST", loc+"/storagePools?storagePoolId=x", hdr); s != 403 {
			t.Errorf("%s: %d, want 403", name, s)
		}
	}
	if s := send("OPTIONS", loc+"/storagePools", map[string]string{"Origin": "https://evil.example"}); s != 403 {
		t.Errorf("a preflight from another origin: %d, want 403", s)
	}
	if n := len(e.ok("GET", loc+"/storagePools", nil)); n != 0 {
		t.Fatalf("a refused request created something: %v", e.ok("GET", loc+"/storagePools", nil))
	}
	for i, hdr := range []map[string]string{
		nil, // curl, gcloud, the client libraries
		{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}, // the console
		{"Sec-Fetch-Site": "none"},                                    // typed into the address bar
	} {
		if s := send("POST", loc+"/storagePools?storagePoolId=ok"+string(rune('a'+i)), hdr); s != 200 {
			t.Errorf("%v: %d, want 200", hdr, s)
		}
	}
}

// newKey makes another key for the account email through the API and returns a
// client signing with it and the key's ID.
func (ce *consoleEnv) newKey(email string) (*client.Client, string) {
	ce.t.Helper()
	path, id := ce.keyFile(email)
	return ce.clientFor(path), id
}

// linkFrom asks for a sign-in link as c and returns its code.
func (ce *consoleEnv) linkFrom(c *client.Client) string {
	ce.t.Helper()
	var out map[string]string
	if err := c.Do(context.Background(), "POST", "/v1/consoleSignInLinks", nil, map[string]any{}, &out); err != nil {
		ce.t.Fatal(err)
	}
	return strings.TrimPrefix(out["path"], "/console/#signin=")
}

// TestConsoleSessionsFollowTheirKey: a console session, and a sign-in link not yet
// used, live only as long as the key that made them and their account's enabled
// state: deleting or expiring the key ends them, disabling the account ends them
// for good (enabling it again revives none), and other keys' sessions go on.
func TestConsoleSessionsFollowTheirKey(t *testing.T) {
	ce := newConsoleEnv(t)
	vols := loc + "/volumes"
	_, email := ce.account("console-user")
	ce.bind(map[string][]string{"roles/netapp.viewer": {"serviceAccount:" + email}})
	k1, id1 := ce.newKey(email)
	k2, _ := ce.newKey(email)
	k3, id3 := ce.newKey(email)
	session := func(c *client.Client) string {
		t.Helper()
		s, tok := ce.exchange(ce.linkFrom(c))
		if s != 200 || ce.get(tok, vols) != 200 {
			t.Fatalf("a new session: exchange %d", s)
		}
		return tok
	}
	s1, s2, s3 := session(k1), session(k2), session(k3)
	pending1 := ce.linkFrom(k1)

	// Deleting key 1 ends its session and its pending link; key 2's go on.
	if _, err := ce.call(ce.owner, "DELETE", "/v1/projects/p1/serviceAccounts/"+email+"/keys/"+id1, nil); err != nil {
		t.Fatal(err)
	}
	if s := ce.get(s1, vols); s != 401 {
		t.Errorf("the session of a deleted key: %d, want 401", s)
	}
	if s, _ := ce.exchange(pending1); s != 401 {
		t.Errorf("the pending link of a deleted key: %d, want 401", s)
	}
	if s := ce.get(s2, vols); s != 200 {
		t.Errorf("another key's session after a key was deleted: %d", s)
	}

	// An expired key ends its session too.
	if err := ce.st.Update(context.Background(), func(tx store.Tx) error {
		k, err := store.Get[model.ServiceAccountKey](tx, store.KindKey, id3)
		if err != nil {
			return err
		}
		k.ExpireTime = time.Now().Add(-time.Minute)
		return tx.Put(store.KindKey, id3, email, k)
	}); err != nil {
		t.Fatal(err)
	}
	if s := ce.get(s3, vols); s != 401 {
		t.Errorf("the session of an expired key: %d, want 401", s)
	}

	// Disabling the account ends every session and pending link, for good.
	fromSession := ce.linkFromSession(s2)
	pending2 := ce.linkFrom(k2)
	for _, verb := range []string{":disable", ":enable"} {
		if _, err := ce.call(ce.owner, "POST", "/v1/projects/p1/serviceAccounts/"+email+verb, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		if s := ce.get(s2, vols); s != 401 {
			t.Errorf("after %s: a session from before the disable: %d, want 401", verb, s)
		}
	}
	for name, code := range map[string]string{"made with the key": pending2, "made from a session": fromSession} {
		if s, _ := ce.exchange(code); s != 401 {
			t.Errorf("a link %s before the disable, used after the enable: %d, want 401", name, s)
		}
	}
	// Sessions made after the account is enabled again work (the test's clock
	// moves only when told).
	ce.advance(time.Second)
	session(k2)
}

// linkFromSession asks for a sign-in link with a console session token.
func (ce *consoleEnv) linkFromSession(tok string) string {
	ce.t.Helper()
	s, code := ce.link("Bearer " + tok)
	if s != 200 {
		ce.t.Fatalf("a link from a console session: %d", s)
	}
	return code
}
