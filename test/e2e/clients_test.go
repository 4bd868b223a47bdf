package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The clients users point at Basin, driven as their documentation shows
// (docs/clients.md): gcloud, Google's Go client and the googleapis Node client, each
// authenticating with a Basin key file. None of them may try to reach anything but
// the Basin under test: they run with every HTTP(S) proxy variable, and gcloud's
// metadata server address, pointing at an outboundWatch that refuses and records
// whatever reaches it.

// outboundWatch is an HTTP proxy that refuses every request and records it.
type outboundWatch struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newOutboundWatch(t *testing.T) *outboundWatch {
	w := &outboundWatch{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.seen = append(w.seen, r.Method+" "+r.Host+r.URL.Path)
		w.mu.Unlock()
		http.Error(rw, "tests send no traffic off this machine", http.StatusForbidden)
	}))
	t.Cleanup(func() {
		w.srv.Close()
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.seen) > 0 {
			t.Errorf("a client tried to reach beyond Basin: %v", w.seen)
		}
	})
	return w
}

// env points every proxy variable and gcloud's metadata server at the watch; only
// loopback (the Basin under test) is reached directly.
func (w *outboundWatch) env() []string {
	u := w.srv.URL
	host := strings.TrimPrefix(u, "http://")
	return []string{"HTTPS_PROXY=" + u, "https_proxy=" + u, "HTTP_PROXY=" + u, "http_proxy=" + u,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"GCE_METADATA_ROOT=" + host, "GCE_METADATA_HOST=" + host, "GCE_METADATA_IP=" + host, "NO_GCE_CHECK=True"}
}

// clientEnv is what test/clients' tests read: where Basin is and what to create.
func (s *server) clientEnv(project string) []string {
	return []string{"BASIN_ENDPOINT=http://" + s.addr + "/", "BASIN_KEY_FILE=" + s.ownerKey(),
		"GOOGLE_APPLICATION_CREDENTIALS=" + s.ownerKey(), "BASIN_PROJECT=" + project, "BASIN_LOCATION=us-east4",
		"BASIN_NETWORK=default", "BASIN_CLIENTS=" + s.subnet.String()}
}

func (s *server) ownerKey() string { return filepath.Join(s.dataDir, "owner-key.json") }

// repoDir is the repository's root (tests run in test/e2e).
func repoDir(t *testing.T) string {
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// runClientTest runs a client's own test command in dir against s and checks that
// it ran (and passed) every test named in want.
func runClientTest(t *testing.T, s *server, project, dir string, want []string, name string, args ...string) {
	w := newOutboundWatch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), s.clientEnv(project)...), w.env()...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Fatalf("%s did not report %q: a test was skipped or not run", name, w)
		}
	}
}

// Google's Go client, google.golang.org/api/netapp/v1, with its default credentials
// (GOOGLE_APPLICATION_CREDENTIALS → token exchange at the key's token_uri), through
// pools, volumes, update masks, paging, snapshots, revert, deletes and polled
// operations (--sync-wait 0s: every mutation answers a running operation; pools of
// a few TiB on the 4 GiB store: --overcommit-ratio); and a
// revoked key's or disabled account's access token is refused at once. The client
// lives in a module of its own, test/clients/go.
func TestGoClient(t *testing.T) {
	s := newServer(t)
	s.start("--sync-wait", "0s", "--overcommit-ratio", "10000")
	runClientTest(t, s, "pgo", filepath.Join(repoDir(t), "test/clients/go"),
		[]string{"--- PASS: TestNetAppClient", "--- PASS: TestRevocationIsImmediate"},
		"go", "test", "-count=1", "-v", "./...")
}

// The googleapis Node client (test/clients/node, pinned by its package-lock.json)
// with both its flows, token exchange and self-signed JWTs, through the same steps.
func TestNodeClient(t *testing.T) {
	dir := filepath.Join(repoDir(t), "test/clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules/googleapis")); err != nil {
		t.Fatalf("googleapis is not installed in %s: run scripts/setup.sh --test (npm ci)", dir)
	}
	s := newServer(t)
	s.start("--sync-wait", "0s", "--overcommit-ratio", "10000")
	runClientTest(t, s, "pnode", dir, []string{"# pass 2", "# fail 0", "# skipped 0"}, "node", "--test", "netapp.test.js")
}

// gcloud runs the Google Cloud CLI with a configuration directory of its own.
type gcloud struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

func newGcloud(t *testing.T, w *outboundWatch) *gcloud {
	bin, err := exec.LookPath("gcloud")
	if err != nil {
		t.Skip("gcloud (the Google Cloud CLI) is not installed")
	}
	g := &gcloud{t: t, bin: bin, dir: t.TempDir()}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CLOUDSDK_") && !strings.HasPrefix(kv, "GOOGLE_") {
			env = append(env, kv)
		}
	}
	g.env = append(append(env, "CLOUDSDK_CONFIG="+g.dir, "CLOUDSDK_CORE_DISABLE_PROMPTS=1"), w.env()...)
	for _, kv := range [][2]string{
		{"core/disable_usage_reporting", "true"},
		{"component_manager/disable_update_check", "true"},
		{"survey/disable_prompts", "true"},
		{"core/check_gce_metadata", "false"},
	} {
		g.run("config", "set", kv[0], kv[1])
	}
	return g
}

// exec runs gcloud; its stdout and stderr, and whether it succeeded. gcloud checks
// whether it runs on GCE at most every 10 minutes, unless its cache (the file gce
// in its configuration directory) says, freshly, that it does not.
func (g *gcloud) exec(args ...string) (string, string, error) {
	g.t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, "gce"), []byte("False"), 0o600); err != nil {
		g.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Env = g.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// run runs a gcloud command that must succeed and returns its stdout.
func (g *gcloud) run(args ...string) string {
	g.t.Helper()
	out, errOut, err := g.exec(args...)
	if err != nil {
		g.t.Fatalf("gcloud %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// json runs a gcloud command with --format=json and decodes its answer.
func (g *gcloud) json(out any, args ...string) {
	g.t.Helper()
	if err := json.Unmarshal([]byte(g.run(append(args, "--format=json")...)), out); err != nil {
		g.t.Fatalf("gcloud %s: %v", strings.Join(args, " "), err)
	}
}

// fails runs a gcloud command that must fail and returns what it printed.
func (g *gcloud) fails(args ...string) string {
	g.t.Helper()
	out, errOut, err := g.exec(args...)
	if err == nil {
		g.t.Fatalf("gcloud %s succeeded:\n%s", strings.Join(args, " "), out)
	}
	return out + errOut
}

type obj = map[string]any

// gcloudUnserved are gcloud commands whose methods Basin does not implement, one
// per collection the issue named and a create and a describe.
var gcloudUnserved = [][]string{
	{"netapp", "kms-configs", "list"},
	{"netapp", "kms-configs", "describe", "k1"},
	{"netapp", "backup-vaults", "list"},
	{"netapp", "backup-vaults", "create", "bv1"},
	{"netapp", "backup-policies", "list"},
	{"netapp", "volumes", "replications", "list", "--volume=vol1"},
	{"netapp", "volumes", "quota-rules", "list", "--volume=vol1"},
}

// Every gcloud command whose method Basin does not implement fails at once with
// Basin's message. Other clients get 501; gcloud, known by its User-Agent, gets
// 400 FAILED_PRECONDITION, because its HTTP layer (apitools) tries a 5xx or 429
// five times, 2 to 16 s apart, and after some 30 s prints the raw answer as a
// network problem (docs/api.md, "Statuses"). On a quiet machine each command
// takes what gcloud takes to start and make one call (under 3 s, as `locations
// list`, timed first for comparison); the bound leaves room for a loaded machine
// and is still far below gcloud's first two retries.
func TestGcloudUnservedFailsAtOnce(t *testing.T) {
	w := newOutboundWatch(t)
	g := newGcloud(t, w)
	s := newServer(t)
	s.start()
	g.run("config", "set", "project", "p1")
	g.run("config", "set", "api_endpoint_overrides/netapp", "http://"+s.addr+"/")
	g.run("auth", "activate-service-account", "--key-file="+s.ownerKey())
	const bound = 10 * time.Second
	start := time.Now()
	g.run("netapp", "locations", "list")
	t.Logf("gcloud netapp locations list (served): %v", time.Since(start).Round(10*time.Millisecond))
	for _, args := range gcloudUnserved {
		args = slices.Concat(args, []string{"--location=us-east4"})
		start := time.Now()
		out := g.fails(args...)
		took := time.Since(start)
		t.Logf("gcloud %s: %v", strings.Join(args, " "), took.Round(10*time.Millisecond))
		if !strings.Contains(out, "is not implemented by Basin") || !strings.Contains(out, "FAILED_PRECONDITION") ||
			strings.Contains(out, "network connectivity") {
			t.Errorf("gcloud %s: want Basin's message, FAILED_PRECONDITION, in:\n%s", strings.Join(args, " "), out)
		}
		if took > bound {
			t.Errorf("gcloud %s took %v (more than %v): it retried", strings.Join(args, " "), took, bound)
		}
	}
}

// gcloud netapp as its users type it, after `gcloud auth activate-service-account
// --key-file` with a Basin key file (which exchanges a signed assertion at the
// key's token_uri) and the endpoint override: every command whose method Basin
// implements, with gcloud's documented argument forms (--network=name=default, a
// bare --active-directory ID), and clear errors from commands whose methods it
// does not.
func TestGcloud(t *testing.T) {
	w := newOutboundWatch(t)
	g := newGcloud(t, w)
	s := newServer(t)
	s.start("--overcommit-ratio", "10000") // pools of a few TiB on a 4 GiB store
	// Once an account is active, gcloud checks a project it is given with Resource
	// Manager (GET /v1/projects/p1), which Basin serves at the override: the
	// project may come after the key, and is found at once, without a warning.
	g.run("config", "set", "api_endpoint_overrides/netapp", "http://"+s.addr+"/")
	g.run("config", "set", "api_endpoint_overrides/cloudresourcemanager", "http://"+s.addr+"/")
	g.run("auth", "activate-service-account", "--key-file="+s.ownerKey())
	start := time.Now()
	if out, errOut, err := g.exec("config", "set", "project", "p1"); err != nil || strings.Contains(errOut, "WARNING") {
		t.Fatalf("gcloud config set project p1: %v\n%s%s", err, out, errOut)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("gcloud config set project took %v: it did not find the project at once", took)
	}
	const at = "--location=us-east4"
	const parent = "projects/p1/locations/us-east4"

	var locs []obj
	g.json(&locs, "netapp", "locations", "list")
	if len(locs) != 1 || locs[0]["name"] != parent {
		t.Fatalf("locations list: %v", locs)
	}
	var o obj
	g.json(&o, "netapp", "locations", "describe", "us-east4")
	if o["locationId"] != "us-east4" {
		t.Fatalf("locations describe: %v", o)
	}

	// Active Directory policies are records until a pool names one.
	adFlags := []string{at, "--domain=corp.example.com", "--dns=10.99.255.2", "--net-bios-prefix=nas", "--username=admin", "--password=secret-pw"}
	g.run(append([]string{"netapp", "active-directories", "create", "ad1"}, adFlags...)...)
	g.run(append([]string{"netapp", "active-directories", "update", "ad1", "--description=lab domain"}, adFlags...)...)
	g.json(&o, "netapp", "active-directories", "describe", "ad1", at)
	if o["domain"] != "corp.example.com" || o["description"] != "lab domain" || o["password"] != nil {
		t.Fatalf("active-directories describe: %v", o)
	}
	var list []obj
	g.json(&list, "netapp", "active-directories", "list", at)
	if len(list) != 1 {
		t.Fatalf("active-directories list: %v", list)
	}

	// Pools: the network by its short name, as gcloud's documentation writes it.
	g.run("netapp", "storage-pools", "create", "pool1", at, "--service-level=premium", "--capacity=2048",
		"--network=name=default", "--description=from gcloud")
	g.run("netapp", "storage-pools", "create", "pool2", at, "--service-level=standard", "--capacity=1024",
		"--network=name=default")
	g.json(&o, "netapp", "storage-pools", "describe", "pool1", at)
	if o["network"] != "projects/p1/global/networks/default" || o["serviceLevel"] != "PREMIUM" || o["state"] != "READY" {
		t.Fatalf("storage-pools describe: %v", o)
	}
	g.run("netapp", "storage-pools", "update", "pool1", at, "--capacity=3072", "--description=bigger")
	g.json(&o, "netapp", "storage-pools", "describe", "pool1", at)
	if o["capacityGib"] != "3072" || o["description"] != "bigger" {
		t.Fatalf("storage-pools update: %v", o)
	}
	g.json(&list, "netapp", "storage-pools", "list", at, "--page-size=1")
	if len(list) != 2 {
		t.Fatalf("storage-pools list: %v", list)
	}
	// A pool with a replica zone switches: zone and replicaZone swap.
	g.run("netapp", "storage-pools", "create", "zpool", at, "--service-level=standard", "--capacity=1024",
		"--network=name=default", "--zone=us-east4-a", "--replica-zone=us-east4-b")
	g.run("netapp", "storage-pools", "switch", "zpool", at)
	g.json(&o, "netapp", "storage-pools", "describe", "zpool", at)
	if o["zone"] != "us-east4-b" || o["replicaZone"] != "us-east4-a" {
		t.Fatalf("storage-pools switch: %v", o)
	}
	g.run("netapp", "storage-pools", "delete", "zpool", at)

	// Volumes with an export policy.
	g.run("netapp", "volumes", "create", "vol1", at, "--storage-pool=pool1", "--capacity=1", "--protocols=nfsv3",
		"--share-name=vol1", "--export-policy=allowed-clients="+s.subnet.String()+",has-root-access=true,access-type=READ_WRITE,nfsv3=true",
		"--snapshot-directory=true", "--description=first")
	g.json(&o, "netapp", "volumes", "describe", "vol1", at)
	rules, _ := o["exportPolicy"].(obj)["rules"].([]any)
	if o["state"] != "READY" || len(rules) != 1 || rules[0].(obj)["allowedClients"] != s.subnet.String() || o["mountOptions"] == nil {
		t.Fatalf("volumes describe: %v", o)
	}
	instructions := g.run("netapp", "volumes", "describe", "vol1", at, "--format=value(mountOptions[0].instructions)")
	if !strings.Contains(instructions, "mount -t nfs") || !strings.Contains(instructions, ":/vol1") {
		t.Fatalf("mount instructions: %q", instructions)
	}
	g.run("netapp", "volumes", "update", "vol1", at, "--capacity=2", "--description=second")
	g.json(&o, "netapp", "volumes", "describe", "vol1", at)
	if o["capacityGib"] != "2" || o["description"] != "second" {
		t.Fatalf("volumes update: %v", o)
	}
	g.json(&list, "netapp", "volumes", "list", at)
	if len(list) != 1 || list[0]["name"] != parent+"/volumes/vol1" {
		t.Fatalf("volumes list: %v", list)
	}

	// Snapshots and a revert.
	g.run("netapp", "volumes", "snapshots", "create", "snap1", "--volume=vol1", at, "--description=before")
	g.run("netapp", "volumes", "snapshots", "update", "snap1", "--volume=vol1", at, "--description=kept")
	g.json(&o, "netapp", "volumes", "snapshots", "describe", "snap1", "--volume=vol1", at)
	if o["state"] != "READY" || o["description"] != "kept" {
		t.Fatalf("snapshots describe: %v", o)
	}
	g.json(&list, "netapp", "volumes", "snapshots", "list", "--volume=vol1", at)
	if len(list) != 1 {
		t.Fatalf("snapshots list: %v", list)
	}
	g.run("netapp", "volumes", "revert", "vol1", at, "--snapshot=snap1")
	g.run("netapp", "volumes", "snapshots", "create", "snap2", "--volume=vol1", at)
	g.run("netapp", "volumes", "snapshots", "delete", "snap1", "--volume=vol1", at)
	g.json(&list, "netapp", "volumes", "snapshots", "list", "--volume=vol1", at)
	if len(list) != 1 || !strings.HasSuffix(list[0]["name"].(string), "/snap2") {
		t.Fatalf("snapshots after delete: %v", list)
	}

	// Operations.
	g.json(&list, "netapp", "operations", "list", at)
	if len(list) < 10 {
		t.Fatalf("operations list: %d operations", len(list))
	}
	name := list[0]["name"].(string)
	g.json(&o, "netapp", "operations", "describe", name[strings.LastIndex(name, "/")+1:], at)
	if o["name"] != name || o["done"] != true {
		t.Fatalf("operations describe: %v", o)
	}

	// What Basin does not do fails with its reason.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"netapp", "kms-configs", "list", at}, "is not implemented by Basin"},
		{[]string{"netapp", "backup-vaults", "list", at}, "is not implemented by Basin"},
		{[]string{"netapp", "volumes", "replications", "list", "--volume=vol1", at}, "is not implemented by Basin"},
		{[]string{"netapp", "storage-pools", "switch", "pool1", at}, "has no replica zone to switch to"},
		{[]string{"netapp", "volumes", "delete", "vol1", at}, "has 1 snapshot(s); delete them or use force=true"},
	} {
		if out := g.fails(c.args...); !strings.Contains(out, c.want) {
			t.Errorf("gcloud %s: want %q in:\n%s", strings.Join(c.args, " "), c.want, out)
		}
	}

	// Deletes.
	g.run("netapp", "volumes", "delete", "vol1", at, "--force")
	g.run("netapp", "storage-pools", "delete", "pool1", at)
	g.run("netapp", "storage-pools", "delete", "pool2", at)
	g.run("netapp", "active-directories", "delete", "ad1", at)
	for _, kind := range []string{"volumes", "storage-pools", "active-directories"} {
		g.json(&list, "netapp", kind, "list", at)
		if len(list) != 0 {
			t.Fatalf("%s left: %v", kind, list)
		}
	}

	// curl with the access token gcloud holds (docs/clients.md).
	tok := strings.TrimSpace(g.run("auth", "print-access-token"))
	for _, args := range [][]string{
		{"-H", "Authorization: Bearer " + tok, "http://" + s.addr + "/v1/" + parent + "/storagePools"},
		{"-H", "Authorization: Bearer " + tok, "-H", "Content-Type: application/json",
			"-d", `{"serviceLevel":"PREMIUM","capacityGib":"2048","network":"default"}`,
			"http://" + s.addr + "/v1/" + parent + "/storagePools?storagePoolId=pool3"},
	} {
		out, err := exec.Command("curl", append([]string{"-sS", "--fail-with-body", "--noproxy", "*"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
	}
	g.json(&o, "netapp", "storage-pools", "describe", "pool3", at)
	if o["network"] != "projects/p1/global/networks/default" {
		t.Fatalf("pool made with curl: %v", o)
	}
	g.run("netapp", "storage-pools", "delete", "pool3", at)

	// gcloud authenticated with access tokens from Basin's /token.
	var audit struct {
		Entries []struct{ Method, Principal string } `json:"entries"`
	}
	if err := s.client().Do(context.Background(), "GET", "/v1/projects/basin/auditLogs", nil, nil, &audit); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(audit.Entries, func(e struct{ Method, Principal string }) bool {
		return e.Method == "iam.serviceAccounts.getAccessToken" && e.Principal == "basin-owner@basin.iam.basin.internal"
	}) {
		t.Fatalf("no access token issued to gcloud: %+v", audit.Entries)
	}
}
