package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// iamEnv is an API with authentication on, an owner client and a server log.
type iamEnv struct {
	*env
	owner   *client.Client
	log     *bytes.Buffer
	audit   *bytes.Buffer
	secrets []string // private key material and passwords the test used
}

func newIAMEnv(t *testing.T, opts ...envOpt) *iamEnv {
	ie := &iamEnv{log: &bytes.Buffer{}, audit: &bytes.Buffer{}}
	var lmu sync.Mutex
	all := append([]envOpt{func(o *Options) {
		o.Auth = iam.NewAuthenticator(iam.Options{Store: o.Store})
		o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&lmu, ie.log}, nil))
		o.AuditLog = lockedWriter{&lmu, ie.audit}
	}}, opts...)
	ie.env = newEnv(t, all...)
	keyPath := filepath.Join(t.TempDir(), "owner.json")
	if _, err := iam.BootstrapOwner(context.Background(), ie.st, keyPath, "http://x/token", time.Now()); err != nil {
		t.Fatal(err)
	}
	ie.owner = ie.clientFor(keyPath)
	return ie
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (ie *iamEnv) clientFor(keyPath string) *client.Client {
	c, err := client.New(ie.srv.URL, keyPath)
	if err != nil {
		ie.t.Fatal(err)
	}
	return c
}

func (ie *iamEnv) call(c *client.Client, method, path string, body any) (map[string]any, error) {
	var out map[string]any
	err := c.Do(context.Background(), method, path, nil, body, &out)
	return out, err
}

func status(err error) int {
	var ae *client.Error
	if errors.As(err, &ae) {
		return ae.HTTPStatus
	}
	if err != nil {
		return -1
	}
	return 200
}

// account creates a service account and a key through the API and returns a client
// signing with that key, and the account's email.
func (ie *iamEnv) account(id string) (*client.Client, string) {
	ie.t.Helper()
	path, email := ie.accountKeyFile(id)
	return ie.clientFor(path), email
}

// accountKeyFile creates a service account and a key through the API and returns
// the key file's path and the account's email.
func (ie *iamEnv) accountKeyFile(id string) (string, string) {
	ie.t.Helper()
	sa, err := ie.call(ie.owner, "POST", "/v1/projects/p1/serviceAccounts", map[string]any{"accountId": id, "serviceAccount": map[string]any{"displayName": id}})
	if err != nil {
		ie.t.Fatalf("create account %s: %v", id, err)
	}
	email := sa["email"].(string)
	path, _ := ie.keyFile(email)
	return path, email
}

// keyFile creates a key for the account email through the API and returns its key
// file's path and the key's ID.
func (ie *iamEnv) keyFile(email string) (string, string) {
	ie.t.Helper()
	key, err := ie.call(ie.owner, "POST", "/v1/projects/p1/serviceAccounts/"+email+"/keys", map[string]any{})
	if err != nil {
		ie.t.Fatalf("create key: %v", err)
	}
	data, err := base64.StdEncoding.DecodeString(key["privateKeyData"].(string))
	if err != nil {
		ie.t.Fatal(err)
	}
	var kf map[string]string
	json.Unmarshal(data, &kf)
	ie.secrets = append(ie.secrets, strings.Split(strings.TrimSpace(kf["private_key"]), "\n")[3])
	path := filepath.Join(ie.t.TempDir(), kf["private_key_id"]+".json")
	os.WriteFile(path, data, 0o600)
	return path, kf["private_key_id"]
}

func (ie *iamEnv) bind(bindings map[string][]string) {
	ie.t.Helper()
	var bs []map[string]any
	for role, members := range bindings {
		bs = append(bs, map[string]any{"role": role, "members": members})
	}
	if _, err := ie.call(ie.owner, "POST", "/v1/projects/p1:setIamPolicy", map[string]any{"policy": map[string]any{"bindings": bs}}); err != nil {
		ie.t.Fatal(err)
	}
}

// v1Methods is every v1 method with a request that would succeed for an owner (or
// fail on its merits), keyed by the permission it needs.
var v1Methods = []struct {
	perm, method, path string
	body               any
}{
	{"netapp.locations.list", "GET", "/v1/projects/p1/locations", nil},
	{"netapp.locations.get", "GET", loc, nil},
	{"netapp.storagePools.list", "GET", loc + "/storagePools", nil},
	{"netapp.storagePools.get", "GET", loc + "/storagePools/pool1", nil},
	{"netapp.storagePools.create", "POST", loc + "/storagePools?storagePoolId=px", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default"}},
	{"netapp.storagePools.update", "PATCH", loc + "/storagePools/pool1?updateMask=description", map[string]any{"description": "d"}},
	{"netapp.storagePools.delete", "DELETE", loc + "/storagePools/nope", nil},
	{"netapp.storagePools.switch", "POST", loc + "/storagePools/pool1:switch", map[string]any{}},
	{"netapp.storagePools.validateDirectoryService", "POST", loc + "/storagePools/pool1:validateDirectoryService", map[string]any{}},
	{"netapp.volumes.list", "GET", loc + "/volumes", nil},
	{"netapp.volumes.get", "GET", loc + "/volumes/vol1", nil},
	{"netapp.volumes.create", "POST", loc + "/volumes?volumeId=vx", map[string]any{"shareName": "vx", "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}}},
	{"netapp.volumes.update", "PATCH", loc + "/volumes/vol1?updateMask=description", map[string]any{"description": "d"}},
	{"netapp.volumes.delete", "DELETE", loc + "/volumes/nope", nil},
	{"netapp.volumes.revert", "POST", loc + "/volumes/vol1:revert", map[string]any{"snapshotId": "nope"}},
	{"netapp.snapshots.list", "GET", loc + "/volumes/vol1/snapshots", nil},
	{"netapp.snapshots.get", "GET", loc + "/volumes/vol1/snapshots/s1", nil},
	{"netapp.snapshots.create", "POST", loc + "/volumes/vol1/snapshots?snapshotId=sx", map[string]any{}},
	{"netapp.snapshots.update", "PATCH", loc + "/volumes/vol1/snapshots/s1?updateMask=description", map[string]any{"description": "d"}},
	{"netapp.snapshots.delete", "DELETE", loc + "/volumes/vol1/snapshots/nope", nil},
	{"netapp.activeDirectories.list", "GET", loc + "/activeDirectories", nil},
	{"netapp.activeDirectories.get", "GET", loc + "/activeDirectories/nope", nil},
	{"netapp.activeDirectories.create", "POST", loc + "/activeDirectories?activeDirectoryId=adx", map[string]any{"domain": "d", "dns": "10.0.0.2", "netBiosPrefix": "n", "username": "u", "password": "Hunter2-secret"}},
	{"netapp.activeDirectories.update", "PATCH", loc + "/activeDirectories/nope?updateMask=site", map[string]any{"site": "s"}},
	{"netapp.activeDirectories.delete", "DELETE", loc + "/activeDirectories/nope", nil},
	{"netapp.operations.list", "GET", loc + "/operations", nil},
	{"netapp.operations.get", "GET", loc + "/operations/nope", nil},
	{"netapp.operations.delete", "DELETE", loc + "/operations/nope", nil},
	{"netapp.operations.cancel", "POST", loc + "/operations/nope:cancel", map[string]any{}},
	{"iam.serviceAccounts.list", "GET", "/v1/projects/p1/serviceAccounts", nil},
	{"iam.serviceAccounts.create", "POST", "/v1/projects/p1/serviceAccounts", map[string]any{"accountId": "made-by-matrix"}},
	{"resourcemanager.projects.getIamPolicy", "POST", "/v1/projects/p1:getIamPolicy", map[string]any{}},
	{"basin.auditLogs.list", "GET", "/v1/projects/p1/auditLogs", nil},
	{"basin.settings.get", "GET", loc + "/settings", nil},
	{"basin.settings.update", "PATCH", loc + "/settings?updateMask=throughputCapMibps", map[string]any{"throughputCapMibps": 100}},
}

func TestRoleMethodMatrix(t *testing.T) {
	ie := newIAMEnv(t)
	owner := ie.owner
	ie.call(owner, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": 1, "capacityGib": "100", "network": "projects/p1/global/networks/default"})
	ie.call(owner, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}})
	ie.call(owner, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	viewer, viewerEmail := ie.account("viewer")
	admin, adminEmail := ie.account("netadmin")
	nobody, _ := ie.account("nobody")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(viewerEmail)}, iam.RoleNetappAdmin: {iam.Member(adminEmail)}})
	for _, role := range []struct {
		name string
		c    *client.Client
		r    string
	}{{"viewer", viewer, iam.RoleNetappViewer}, {"admin", admin, iam.RoleNetappAdmin}, {"none", nobody, ""}, {"owner", owner, iam.RoleOwner}} {
		for _, m := range v1Methods {
			want := role.r != "" && iam.RoleGrants(role.r, m.perm)
			ops := ie.countOps()
			_, err := ie.call(role.c, m.method, m.path, m.body)
			got := status(err)
			if want && got == 403 {
				t.Errorf("%s %s (%s): 403, want allowed: %v", role.name, m.method, m.path, err)
			}
			if !want {
				if got != 403 || !strings.Contains(err.Error(), m.perm) {
					t.Errorf("%s %s %s: %v, want 403 naming %s", role.name, m.method, m.path, err, m.perm)
				}
				if ie.countOps() != ops {
					t.Errorf("%s %s %s: a denied call started an operation", role.name, m.method, m.path)
				}
			}
		}
	}
	// testIamPermissions answers for the caller.
	out, err := ie.call(viewer, "POST", "/v1/projects/p1:testIamPermissions", map[string]any{"permissions": []string{"netapp.volumes.get", "netapp.volumes.create", "iam.serviceAccounts.create"}})
	if err != nil || fmt.Sprint(out["permissions"]) != "[netapp.volumes.get]" {
		t.Fatalf("viewer testIamPermissions: %v %v", out, err)
	}
}

func (ie *iamEnv) countOps() int {
	var n int
	ie.st.View(context.Background(), func(tx store.Tx) error {
		ops, _ := store.List[model.Operation](tx, store.KindOperation, "")
		n = len(ops)
		return nil
	})
	return n
}

func TestRevocationThroughTheAPI(t *testing.T) {
	ie := newIAMEnv(t)
	admin, email := ie.account("netadmin")
	ie.bind(map[string][]string{iam.RoleNetappAdmin: {iam.Member(email)}})
	list := func() int { _, err := ie.call(admin, "GET", loc+"/volumes", nil); return status(err) }
	if got := list(); got != 200 {
		t.Fatalf("admin before revocation: %d", got)
	}
	sa := "/v1/projects/p1/serviceAccounts/" + email
	ie.call(ie.owner, "POST", sa+":disable", map[string]any{})
	if got := list(); got != 401 {
		t.Fatalf("disabled account: %d, want 401", got)
	}
	// Its holder is told why; a caller without a valid signature is not (see
	// TestUnauthenticatedReasons).
	if _, err := ie.call(admin, "GET", loc+"/volumes", nil); err == nil || !strings.Contains(err.Error(), "service account "+email+" is disabled") {
		t.Fatalf("disabled account's 401: %v, want it to say the account is disabled", err)
	}
	ie.call(ie.owner, "POST", sa+":enable", map[string]any{})
	if got := list(); got != 200 {
		t.Fatalf("re-enabled account: %d", got)
	}
	keys, _ := ie.call(ie.owner, "GET", sa+"/keys", nil)
	k := keys["keys"].([]any)[0].(map[string]any)
	if _, has := k["privateKeyData"]; has {
		t.Fatal("key listing returns private key data")
	}
	ie.call(ie.owner, "DELETE", "/v1/"+k["name"].(string), nil)
	if got := list(); got != 401 {
		t.Fatalf("deleted key: %d, want 401", got)
	}
	admin2, _ := func() (*client.Client, string) {
		key, _ := ie.call(ie.owner, "POST", sa+"/keys", map[string]any{})
		data, _ := base64.StdEncoding.DecodeString(key["privateKeyData"].(string))
		p := filepath.Join(t.TempDir(), "k2.json")
		os.WriteFile(p, data, 0o600)
		return ie.clientFor(p), ""
	}()
	if _, err := ie.call(admin2, "GET", loc+"/volumes", nil); status(err) != 200 {
		t.Fatalf("new key: %v", err)
	}
	ie.call(ie.owner, "DELETE", sa, nil)
	if _, err := ie.call(admin2, "GET", loc+"/volumes", nil); status(err) != 401 {
		t.Fatalf("deleted account: %v, want 401", err)
	}
	// Its bindings went with it: a new account of the same name starts with none.
	pol, _ := ie.call(ie.owner, "POST", "/v1/projects/p1:getIamPolicy", map[string]any{})
	if strings.Contains(fmt.Sprint(pol), email) {
		t.Fatalf("policy still names the deleted account: %v", pol)
	}
}

// Concurrent setIamPolicy calls carrying the same etag: exactly one wins.
func TestSetIamPolicyEtag(t *testing.T) {
	ie := newIAMEnv(t)
	pol, err := ie.call(ie.owner, "POST", "/v1/projects/p1:getIamPolicy", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	etag := pol["etag"].(string)
	const n = 8
	for i := range n {
		if _, err := ie.call(ie.owner, "POST", "/v1/projects/p1/serviceAccounts", map[string]any{"accountId": fmt.Sprintf("etag-sa%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	results := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := ie.call(ie.owner, "POST", "/v1/projects/p1:setIamPolicy", map[string]any{"policy": map[string]any{"etag": etag,
				"bindings": []any{map[string]any{"role": iam.RoleNetappViewer, "members": []string{fmt.Sprintf("serviceAccount:etag-sa%d@p1.iam.basin.internal", i)}}}}})
			results[i] = status(err)
			if err != nil && !strings.Contains(err.Error(), "ABORTED") {
				t.Errorf("loser's error: %v, want 409 ABORTED", err)
			}
		}()
	}
	wg.Wait()
	wins := 0
	for _, r := range results {
		if r == 200 {
			wins++
		} else if r != 409 {
			t.Errorf("status %d", r)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers won with the same etag, want exactly 1 (%v)", wins, results)
	}
	for _, bad := range []map[string]any{
		{"bindings": []any{map[string]any{"role": "roles/emperor", "members": []string{"serviceAccount:a@b"}}}},
		{"bindings": []any{map[string]any{"role": iam.RoleOwner, "members": []string{"user:someone@example.com"}}}},
	} {
		if _, err := ie.call(ie.owner, "POST", "/v1/projects/p1:setIamPolicy", map[string]any{"policy": bad}); status(err) != 400 {
			t.Errorf("policy %v: %v, want 400", bad, err)
		}
	}
}

func TestRateLimit(t *testing.T) {
	ie := newIAMEnv(t, func(o *Options) { o.RateLimit = 5 })
	for i := range 5 {
		if _, err := ie.call(ie.owner, "GET", loc+"/volumes", nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	req, _ := http.NewRequest("GET", ie.srv.URL+loc+"/volumes", nil)
	res, err := http.DefaultClient.Do(req) // unauthenticated: limited by address, separately
	if err != nil || res.StatusCode != 401 {
		t.Fatalf("unauthenticated request: %v %v", res.StatusCode, err)
	}
	_, err = ie.call(ie.owner, "GET", loc+"/volumes", nil)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.HTTPStatus != 429 || ae.Status != "RESOURCE_EXHAUSTED" {
		t.Fatalf("sixth request: %v, want 429 RESOURCE_EXHAUSTED", err)
	}
	r := ie.probe("/healthz")
	if r.status != 200 {
		t.Fatal("health checks are not rate limited")
	}
}

func TestRetryAfterHeader(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RateLimit = 1 })
	e.do("GET", loc+"/volumes", nil)
	r := e.do("GET", loc+"/volumes", nil)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
}

func TestAuditLog(t *testing.T) {
	ie := newIAMEnv(t)
	viewer, viewerEmail := ie.account("viewer")
	ie.bind(map[string][]string{iam.RoleNetappViewer: {iam.Member(viewerEmail)}})
	ie.call(ie.owner, "POST", loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "corp.example.com", "dns": "10.0.0.2",
		"netBiosPrefix": "nas", "username": "admin", "password": "Sup3r-Secret-Pw"})
	ie.secrets = append(ie.secrets, "Sup3r-Secret-Pw")
	ie.call(viewer, "POST", loc+"/storagePools?storagePoolId=p9", map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default"})
	req, _ := http.NewRequest("DELETE", ie.srv.URL+loc+"/volumes/v1", nil)
	req.Header.Set("Authorization", "Bearer forged.token.here")
	http.DefaultClient.Do(req)
	ie.call(viewer, "GET", loc+"/volumes", nil) // allowed read: not audited

	out, err := ie.call(ie.owner, "GET", "/v1/projects/p1/auditLogs?pageSize=100", nil)
	if err != nil {
		t.Fatal(err)
	}
	entries := out["entries"].([]any)
	find := func(method, outcome, principal string) map[string]any {
		for _, e := range entries {
			m := e.(map[string]any)
			p, _ := m["principal"].(string)
			if m["method"] == method && m["outcome"] == outcome && p == principal {
				return m
			}
		}
		return nil
	}
	if e := find("netapp.activeDirectories.create", "OK", iam.OwnerEmail); e == nil || e["resource"] != "projects/p1/locations/us-east4/activeDirectories/ad1" ||
		e["requestId"] == "" || e["clientAddress"] != "127.0.0.1" || e["status"] != 200.0 {
		t.Errorf("allowed create not audited as expected: %v", e)
	}
	if find("netapp.storagePools.create", "PERMISSION_DENIED", viewerEmail) == nil {
		t.Error("denied create not audited")
	}
	if find("netapp.volumes.delete", "UNAUTHENTICATED", "") == nil {
		t.Errorf("unauthenticated call not audited: %v", entries)
	}
	for _, e := range entries {
		if m := e.(map[string]any); m["method"] == "netapp.volumes.list" {
			t.Error("an allowed read was audited")
		}
	}
	if !strings.Contains(ie.audit.String(), "netapp.activeDirectories.create") {
		t.Error("JSON-lines audit log missing the entry")
	}
	// No secret anywhere: not the keys the test minted, not the AD password, not a token.
	b, _ := json.Marshal(entries)
	for where, text := range map[string]string{"audit entries": string(b), "audit log": ie.audit.String(), "server log": ie.log.String()} {
		for _, secret := range append(ie.secrets, "PRIVATE KEY", "forged.token.here", "Bearer") {
			if strings.Contains(text, secret) {
				t.Errorf("%s contain secret material %q", where, secret)
			}
		}
	}
}

// Every bad token is refused before any work: no resource, no operation.
func TestBadTokensLeaveNoTrace(t *testing.T) {
	ie := newIAMEnv(t)
	keyPath := filepath.Join(t.TempDir(), "k.json")
	if _, err := iam.BootstrapOwner(context.Background(), ie.st, keyPath, "http://x/token", time.Now()); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(keyPath)
	var kf iam.KeyFile
	json.Unmarshal(data, &kf)
	block, _ := pem.Decode([]byte(kf.PrivateKey))
	k, _ := x509.ParsePKCS8PrivateKey(block.Bytes)
	priv := k.(*rsa.PrivateKey)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	now := time.Now()
	sign := func(method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(method, claims)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": kf.ClientEmail, "sub": kf.ClientEmail, "aud": "https://netapp.googleapis.com/", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		if mod != nil {
			mod(c)
		}
		return c
	}
	tokens := map[string]string{
		"forged signature": sign(jwt.SigningMethodRS256, other, kf.PrivateKeyID, good(nil)),
		"unknown kid":      sign(jwt.SigningMethodRS256, priv, "0123456789", good(nil)),
		"expired":          sign(jwt.SigningMethodRS256, priv, kf.PrivateKeyID, good(func(c jwt.MapClaims) { c["iat"], c["exp"] = now.Add(-2*time.Hour).Unix(), now.Add(-time.Hour).Unix() })),
		"not yet valid":    sign(jwt.SigningMethodRS256, priv, kf.PrivateKeyID, good(func(c jwt.MapClaims) { c["iat"], c["exp"] = now.Add(time.Hour).Unix(), now.Add(2*time.Hour).Unix() })),
		"lifetime over 1h": sign(jwt.SigningMethodRS256, priv, kf.PrivateKeyID, good(func(c jwt.MapClaims) { c["exp"] = now.Add(3 * time.Hour).Unix() })),
		"wrong audience":   sign(jwt.SigningMethodRS256, priv, kf.PrivateKeyID, good(func(c jwt.MapClaims) { c["aud"] = "https://example.com/" })),
		"alg HS256":        sign(jwt.SigningMethodHS256, []byte("secret"), kf.PrivateKeyID, good(nil)),
		"alg none":         sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kf.PrivateKeyID, good(nil)),
	}
	// Only a token whose signature verified with the key it names is told what
	// is wrong with it; the others get one generic answer.
	told := map[string]string{"lifetime over 1h": "token lifetime 3h0m0s exceeds 1h0m0s", "wrong audience": "audience [https://example.com/] is not accepted"}
	for name, tok := range tokens {
		ie.token = tok
		r := ie.fails("POST", loc+"/storagePools?storagePoolId=p"+strings.ReplaceAll(strings.ReplaceAll(name, " ", ""), "1h", ""),
			map[string]any{"serviceLevel": 1, "capacityGib": "10", "network": "projects/p1/global/networks/default"}, 401, "UNAUTHENTICATED")
		msg := errMessage(r)
		want, ok := told[name]
		if ok && !strings.HasSuffix(msg, ": "+want+".") || !ok && !strings.HasSuffix(msg, "signed by a Basin service-account key.") {
			t.Errorf("%s: message %q (told the reason: %v)", name, msg, ok)
		}
	}
	ie.token = ""
	var pools, ops int
	ie.st.View(context.Background(), func(tx store.Tx) error {
		p, _ := store.List[model.Pool](tx, store.KindPool, "")
		o, _ := store.List[model.Operation](tx, store.KindOperation, "")
		pools, ops = len(p), len(o)
		return nil
	})
	if pools != 0 || ops != 0 {
		t.Fatalf("refused tokens left %d pools and %d operations", pools, ops)
	}
	// The valid token of the same key works, so the refusals were about the tokens.
	ie.token = sign(jwt.SigningMethodRS256, priv, kf.PrivateKeyID, good(nil))
	ie.ok("GET", loc+"/storagePools", nil)
}

// A 401 says what is wrong only to a caller whose token verified with the key it
// names (a holder of that key): a disabled account, an expired key, a wrong
// audience. An unknown key, a forged signature or garbage get one generic answer,
// whatever exists.
func TestUnauthenticatedReasons(t *testing.T) {
	ie := newIAMEnv(t)
	holder, email := ie.account("holder")
	message := func(header string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", ie.srv.URL+loc+"/volumes", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		if res.StatusCode != 401 {
			t.Fatalf("%q: status %d, want 401", header, res.StatusCode)
		}
		return body.Error.Message
	}
	generic := message("")
	if strings.Contains(generic, "disabled") || !strings.Contains(generic, "invalid authentication credentials") {
		t.Fatalf("no token: %q", generic)
	}
	// A token the holder signed: authenticated (403: no role), then for a
	// disabled account.
	if _, err := ie.call(holder, "GET", loc+"/volumes", nil); status(err) != 403 {
		t.Fatal(err)
	}
	ie.call(ie.owner, "POST", "/v1/projects/p1/serviceAccounts/"+email+":disable", map[string]any{})
	_, err := ie.call(holder, "GET", loc+"/volumes", nil)
	if status(err) != 401 || !strings.Contains(err.Error(), "service account "+email+" is disabled") {
		t.Fatalf("disabled: %v", err)
	}
	// Garbage or no Bearer token: the generic answer (forged signatures and
	// unknown keys: TestBadTokensLeaveNoTrace).
	for name, header := range map[string]string{"garbage": "Bearer abc.def.ghi", "not bearer": "Basic x"} {
		if got := message(header); got != generic {
			t.Errorf("%s: %q, want the generic %q", name, got, generic)
		}
	}
}

// A refused call whose token verified with its key (a disabled account's) is
// audited under the account its 401 names; one that names nobody verifiably
// stays anonymous.
func TestRefusedCallAuditedUnderItsAccount(t *testing.T) {
	ie := newIAMEnv(t)
	holder, email := ie.account("holder")
	ie.call(ie.owner, "POST", "/v1/projects/p1/serviceAccounts/"+email+":disable", map[string]any{})
	if _, err := ie.call(holder, "GET", loc+"/volumes", nil); status(err) != 401 || !strings.Contains(err.Error(), email) {
		t.Fatalf("disabled: %v", err)
	}
	req, _ := http.NewRequest("GET", ie.srv.URL+loc+"/volumes", nil)
	req.Header.Set("Authorization", "Bearer abc.def.ghi")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 401 {
		t.Fatalf("garbage token: %v %v", res, err)
	}
	ie.api.Close() // writes what is still being aggregated
	var entries []*model.AuditEntry
	ie.st.View(context.Background(), func(tx store.Tx) (err error) {
		entries, err = store.List[model.AuditEntry](tx, store.KindAudit, "")
		return err
	})
	var named, anonymous int
	for _, e := range entries {
		if e.Status != 401 {
			continue
		}
		switch e.Principal {
		case email:
			named++
		case "":
			anonymous++
		default:
			t.Errorf("401 audited under %q", e.Principal)
		}
	}
	if named != 1 || anonymous != 1 {
		t.Errorf("401s audited: %d under %s, %d anonymous; want 1 and 1: %+v", named, email, anonymous, entries)
	}
	if !strings.Contains(ie.audit.String(), `"principal":"`+email+`"`) {
		t.Errorf("audit.log has no entry under %s:\n%s", email, ie.audit.String())
	}
}

// Service-account IDs follow upstream's rule: 6 to 30 lowercase letters, digits
// and hyphens, starting with a letter, not ending with a hyphen.
func TestServiceAccountIDRule(t *testing.T) {
	ie := newIAMEnv(t)
	create := func(id string) error {
		_, err := ie.call(ie.owner, "POST", "/v1/projects/p1/serviceAccounts", map[string]any{"accountId": id})
		return err
	}
	for _, ok := range []string{"ci-bot", "ci-pipeline", "a23456789012345678901234567890"} {
		if err := create(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"ci", "abcde", "a234567890123456789012345678901", "1abcdef", "abcdef-", "Abcdef", "ab_cdef", ""} {
		if err := create(bad); status(err) != 400 || !strings.Contains(err.Error(), "accountId") || !strings.Contains(err.Error(), "6-30") {
			t.Errorf("%q: %v, want 400 naming accountId and the rule", bad, err)
		}
	}
}

// A binding to a service account of the project that does not exist is refused
// (400 naming the member), as Google IAM refuses it, and the policy is left as
// it was. Another project's accounts are not looked up (that would tell whether
// they exist).
func TestBindingUnknownMember(t *testing.T) {
	ie := newIAMEnv(t)
	_, email := ie.account("viewer")
	set := func(members ...string) (map[string]any, error) {
		return ie.call(ie.owner, "POST", "/v1/projects/p1:setIamPolicy", map[string]any{"policy": map[string]any{
			"bindings": []any{map[string]any{"role": iam.RoleNetappViewer, "members": members}}}})
	}
	if _, err := set(iam.Member(email)); err != nil {
		t.Fatal(err)
	}
	before, _ := ie.call(ie.owner, "POST", "/v1/projects/p1:getIamPolicy", map[string]any{})
	_, err := set(iam.Member(email), "serviceAccount:ghost-account@p1.iam.basin.internal")
	if status(err) != 400 || !strings.Contains(err.Error(), "policy.bindings[0].members") || !strings.Contains(err.Error(), "ghost-account@p1.iam.basin.internal does not exist") {
		t.Fatalf("unknown member: %v, want 400 naming it", err)
	}
	if after, _ := ie.call(ie.owner, "POST", "/v1/projects/p1:getIamPolicy", map[string]any{}); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("policy changed by a refused call: %v -> %v", before, after)
	}
	// Another project's account, existing or not, is taken as given.
	if _, err := set(iam.Member(email), "serviceAccount:someone-else@p2.iam.basin.internal"); err != nil {
		t.Fatalf("another project's member: %v", err)
	}
}
