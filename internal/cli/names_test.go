package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder fakes enough of the API for any command to finish: it records each
// request as "METHOD path?query body" and answers with a plausible resource, a
// done operation, an empty policy or metrics.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.calls = append(r.calls, strings.TrimSpace(req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery+" "+string(body)))
	r.mu.Unlock()
	name := strings.TrimPrefix(req.URL.Path, "/v1/")
	var out any
	switch {
	case strings.HasSuffix(name, ":getIamPolicy"):
		out = map[string]any{"etag": "e1"}
	case strings.HasSuffix(name, ":setIamPolicy"):
		var in map[string]any
		json.Unmarshal(body, &in)
		out = in["policy"]
	case strings.HasSuffix(name, "/keys") && req.Method == http.MethodGet:
		out = map[string]any{"keys": []any{}}
	case strings.HasSuffix(name, "/metrics"):
		out = map[string]any{"volume": strings.TrimSuffix(name, "/metrics"), "step": "10s", "series": []any{}}
	case req.Method == http.MethodGet || strings.Contains(name, "/serviceAccounts"):
		out = map[string]any{"name": name, "done": true, "throughputMibps": 100}
	default: // a mutation: its operation, done
		out = map[string]any{"name": "projects/default/locations/local/operations/op1", "done": true, "response": map[string]any{"name": name}}
	}
	json.NewEncoder(w).Encode(out)
}

// runAt runs the CLI against srv with no environment; the endpoint and auth
// flags go first or last (global flags are accepted in both places).
func runAt(srv string, first bool, args ...string) (string, int) {
	var out, errb bytes.Buffer
	conn := []string{"--endpoint", srv, "--insecure-no-auth"}
	if first {
		args = append(conn, args...)
	} else {
		args = append(args, conn...)
	}
	code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return out.String() + errb.String(), code
}

const (
	locP = "/v1/projects/default/locations/local"
	locN = "projects/default/locations/local"
)

// Every verb that takes a name takes the ID, the full name the CLI prints, and
// (snapshots, keys) the short PARENT/ID form, and sends the same request.
func TestFullNames(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	fio := filepath.Join(t.TempDir(), "run.txt")
	sample, _ := os.ReadFile("../perf/testdata/fio/gcnv_faq.txt")
	os.WriteFile(fio, sample, 0o644)
	// fio analyze --volume of a run that just ended waits for Basin's sample
	// of its end, up to 30 s (TestFioAnalyzeVolumeMetrics checks that): here
	// only its first request counts, so it gives up at once.
	shortenSampleWait(t, time.Millisecond, time.Millisecond)
	cases := []struct {
		want string // the first request the command sends
		args [][]string
	}{
		{"GET " + locP + "/volumes/vol1?", [][]string{{"volumes", "get", "vol1"}, {"volumes", "get", locN + "/volumes/vol1"}}},
		{"GET " + locP + "/storagePools/pool1?", [][]string{{"pools", "get", "pool1"}, {"pools", "get", locN + "/storagePools/pool1"}}},
		{"DELETE " + locP + "/storagePools/pool1?", [][]string{{"pools", "delete", "pool1"}, {"pools", "delete", locN + "/storagePools/pool1"}}},
		{"GET /v1/projects/default/locations/east?", [][]string{{"locations", "get", "east"}, {"locations", "get", "projects/default/locations/east"}}},
		{"GET " + locP + "/operations/op9?", [][]string{{"operations", "get", "op9"}, {"operations", "get", locN + "/operations/op9"},
			{"operations", "wait", "op9"}, {"operations", "wait", locN + "/operations/op9"}}},
		{"POST " + locP + "/operations/op9:cancel? {}", [][]string{{"operations", "cancel", locN + "/operations/op9"}}},
		{"DELETE " + locP + "/operations/op9?", [][]string{{"operations", "delete", locN + "/operations/op9"}}},
		{"PATCH " + locP + "/volumes/vol1?updateMask=capacityGib {\"capacityGib\":\"20\"}", [][]string{
			{"volumes", "update", "vol1", "--capacity-gib", "20"}, {"volumes", "update", locN + "/volumes/vol1", "--capacity-gib=20"}}},
		{"DELETE " + locP + "/volumes/vol1?force=true", [][]string{{"volumes", "delete", locN + "/volumes/vol1", "--force"}}},
		{"POST " + locP + "/volumes/vol1:revert? {\"snapshotId\":\"s1\"}", [][]string{{"volumes", "revert", "vol1", "--snapshot", "s1"},
			{"volumes", "revert", locN + "/volumes/vol1", "--snapshot", locN + "/volumes/vol1/snapshots/s1"}}},
		{"GET " + locP + "/volumes/vol1/metrics?", [][]string{{"volumes", "metrics", locN + "/volumes/vol1"}}},
		{"GET " + locP + "/volumes/vol1/snapshots?", [][]string{{"snapshots", "list", "vol1"}, {"snapshots", "list", locN + "/volumes/vol1"}}},
		{"GET " + locP + "/volumes/vol1/snapshots/s1?", [][]string{{"snapshots", "get", "vol1", "s1"}, {"snapshots", "get", "vol1/s1"},
			{"snapshots", "get", locN + "/volumes/vol1/snapshots/s1"}, {"snapshots", "get", locN + "/volumes/vol1", "s1"}}},
		{"POST " + locP + "/volumes/vol1/snapshots?snapshotId=s2 {}", [][]string{{"snapshots", "create", "vol1", "s2"}, {"snapshots", "create", "vol1/s2"},
			{"snapshots", "create", locN + "/volumes/vol1/snapshots/s2"}}},
		{"DELETE " + locP + "/volumes/vol1/snapshots/s1?", [][]string{{"snapshots", "delete", "vol1", "s1"}, {"snapshots", "delete", locN + "/volumes/vol1/snapshots/s1"}}},
		{"PATCH " + locP + "/volumes/vol1/snapshots/s1?updateMask=description {\"description\":\"d\"}", [][]string{
			{"snapshots", "update", "vol1/s1", "--description", "d"}}},
		{"POST " + locP + "/volumes?volumeId=v2 {\"capacityGib\":\"1\",\"protocols\":[\"NFSV3\"],\"shareName\":\"v2\",\"storagePool\":\"pool1\"}", [][]string{
			{"volumes", "create", "v2", "--pool", "pool1", "--capacity-gib", "1"},
			{"volumes", "create", locN + "/volumes/v2", "--pool", locN + "/storagePools/pool1", "--capacity-gib", "1"}}},
		{"POST " + locP + "/volumes?volumeId=v3 {\"capacityGib\":\"1\",\"protocols\":[\"NFSV3\"],\"restoreParameters\":{\"sourceSnapshot\":\"" + locN + "/volumes/vol1/snapshots/s1\"},\"shareName\":\"v3\",\"storagePool\":\"pool1\"}", [][]string{
			{"volumes", "create", "v3", "--pool", "pool1", "--capacity-gib", "1", "--from-snapshot", "vol1/s1"},
			{"volumes", "create", "v3", "--pool", "pool1", "--capacity-gib", "1", "--from-snapshot", locN + "/volumes/vol1/snapshots/s1"}}},
		{"POST " + locP + "/storagePools?storagePoolId=p2 {\"activeDirectory\":\"" + locN + "/activeDirectories/ad1\",\"capacityGib\":\"10\",\"network\":\"projects/default/global/networks/n2\"}", [][]string{
			{"pools", "create", "p2", "--capacity-gib", "10", "--network", "n2", "--active-directory", "ad1"},
			{"pools", "create", locN + "/storagePools/p2", "--capacity-gib", "10", "--network", "projects/default/global/networks/n2", "--active-directory", locN + "/activeDirectories/ad1"}}},
		{"GET /v1/projects/default/serviceAccounts/ci-bot@default.iam.basin.internal?", [][]string{
			{"iam", "service-accounts", "get", "ci-bot@default.iam.basin.internal"},
			{"iam", "service-accounts", "get", "serviceAccount:ci-bot@default.iam.basin.internal"},
			{"iam", "service-accounts", "get", "projects/default/serviceAccounts/ci-bot@default.iam.basin.internal"}}},
		{"POST /v1/projects/default/serviceAccounts/ci-bot@default.iam.basin.internal:disable? {}", [][]string{
			{"iam", "service-accounts", "disable", "projects/default/serviceAccounts/ci-bot@default.iam.basin.internal"}}},
		{"GET /v1/projects/default/serviceAccounts/ci-bot@default.iam.basin.internal/keys?", [][]string{
			{"iam", "keys", "list", "projects/default/serviceAccounts/ci-bot@default.iam.basin.internal"}}},
		{"DELETE /v1/projects/default/serviceAccounts/ci-bot@default.iam.basin.internal/keys/k1?", [][]string{
			{"iam", "keys", "delete", "ci-bot@default.iam.basin.internal", "k1"},
			{"iam", "keys", "delete", "ci-bot@default.iam.basin.internal/k1"},
			{"iam", "keys", "delete", "projects/default/serviceAccounts/ci-bot@default.iam.basin.internal/keys/k1"}}},
		{"GET " + locP + "/volumes/vol1?", [][]string{{"fio", "analyze", fio, "--volume", locN + "/volumes/vol1"}}},
	}
	for _, tc := range cases {
		for _, args := range tc.args {
			for _, first := range []bool{false, true} {
				rec.mu.Lock()
				rec.calls = nil
				rec.mu.Unlock()
				out, code := runAt(srv.URL, first, args...)
				rec.mu.Lock()
				calls := rec.calls
				rec.mu.Unlock()
				if code != 0 || len(calls) == 0 || !strings.HasPrefix(calls[0], tc.want) {
					t.Errorf("basin %s (global flags first: %v): exit %d, calls %q, want first %q\n%s", strings.Join(args, " "), first, code, calls, tc.want, out)
				}
			}
		}
	}

	// A binding's member may be written three ways, and be of another project.
	for _, m := range []string{"x-robot@other.iam.basin.internal", "serviceAccount:x-robot@other.iam.basin.internal", "projects/other/serviceAccounts/x-robot@other.iam.basin.internal"} {
		rec.mu.Lock()
		rec.calls = nil
		rec.mu.Unlock()
		out, code := runAt(srv.URL, false, "iam", "policy", "add-binding", "--role", "roles/netapp.viewer", "--member", m)
		if code != 0 || len(rec.calls) != 2 || !strings.Contains(rec.calls[1], `"members":["serviceAccount:x-robot@other.iam.basin.internal"]`) {
			t.Errorf("--member %s: exit %d, calls %q\n%s", m, code, rec.calls, out)
		}
	}
}

// Names of another project, location or kind, and malformed ones, are refused
// before any request, saying what is wrong; so are missing or extra arguments,
// in one wording.
func TestNamesRefused(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"volumes", "get", "projects/p2/locations/local/volumes/vol1"}, "is in project p2, but this command works in project default (give --project p2)"},
		{[]string{"volumes", "get", locN + "/volumes/vol1", "--project", "p2"}, "is in project default, but this command works in project p2"},
		{[]string{"volumes", "get", "projects/default/locations/east/volumes/vol1"}, "is in location east, but this command works in location local (give --location east)"},
		{[]string{"volumes", "get", locN + "/storagePools/pool1"}, "names a storage pool, not a volume"},
		{[]string{"operations", "wait", locN + "/volumes/vol1"}, "names a volume, not a operation"},
		{[]string{"pools", "delete", locN + "/volumes/vol1/snapshots/s1"}, "names a snapshot, not a storage pool"},
		{[]string{"volumes", "get", "projects/default/volumes/vol1"}, "is not a volume name (projects/{project}/locations/{location}/volumes/{volume})"},
		{[]string{"volumes", "get", "a/b"}, `"a/b" is neither a volume (VOLUME) nor a full name projects/{project}/locations/{location}/volumes/{volume}`},
		{[]string{"snapshots", "get", "vol1"}, `"vol1" is neither a snapshot (VOLUME/SNAPSHOT) nor a full name projects/{project}/locations/{location}/volumes/{volume}/snapshots/{snapshot}`},
		{[]string{"snapshots", "get", "vol1", locN + "/volumes/vol2/snapshots/s1"}, "is not under vol1"},
		{[]string{"snapshots", "get", locN + "/volumes/vol1/snapshots/s1", "s1"}, "names a snapshot, not a volume"},
		{[]string{"volumes", "revert", "vol1", "--snapshot", locN + "/volumes/vol2/snapshots/s1"}, "--snapshot: " + locN + "/volumes/vol2/snapshots/s1 is not under vol1"},
		{[]string{"volumes", "create", "v", "--pool", locN + "/volumes/vol1"}, "--pool: " + locN + "/volumes/vol1 names a volume, not a storage pool"},
		{[]string{"volumes", "create", "v", "--from-snapshot", "projects/p9/locations/local/volumes/a/snapshots/b"}, "--from-snapshot: projects/p9/locations/local/volumes/a/snapshots/b is in project p9"},
		{[]string{"pools", "create", "p", "--network", "projects/p9/global/networks/n"}, "--network: projects/p9/global/networks/n is in project p9"},
		{[]string{"iam", "keys", "delete", "ci-bot@default.iam.basin.internal"}, "is neither a service-account key (EMAIL/KEY_ID)"},
		{[]string{"iam", "policy", "add-binding", "--role", "roles/owner", "--member", "nobody"}, `--member: "nobody" is not a service account`},
		{[]string{"fio", "analyze", "x.txt", "--volume", locN + "/storagePools/p"}, "--volume: " + locN + "/storagePools/p names a storage pool, not a volume"},
		// One wording for a missing or extra argument.
		{[]string{"volumes", "get"}, "volumes get: expected VOLUME, got none"},
		{[]string{"volumes", "delete"}, "volumes delete: expected VOLUME, got none"},
		{[]string{"pools", "delete"}, "pools delete: expected POOL, got none"},
		{[]string{"operations", "wait"}, "operations wait: expected OPERATION, got none"},
		{[]string{"volumes", "get", "a", "b"}, `volumes get: expected VOLUME, got 2: ["a" "b"]`},
		{[]string{"volumes", "metrics"}, "volumes metrics: expected VOLUME, got none"},
		{[]string{"snapshots", "get"}, "snapshots get: expected VOLUME SNAPSHOT (or VOLUME/SNAPSHOT, or a snapshot's full name), got none"},
		{[]string{"settings", "get", "x"}, `settings get: expected no arguments, got 1: ["x"]`},
		{[]string{"top", "x"}, `top: expected no arguments, got 1: ["x"]`},
		{[]string{"iam", "service-accounts", "get"}, "iam service-accounts get: expected EMAIL, got none"},
		{[]string{"fio", "analyze"}, "fio analyze: expected FILE|-, got none"},
		// --export-rule names its keys.
		{[]string{"volumes", "create", "v", "--export-rule", "foo"}, `--export-rule "foo": unknown key "foo" (the keys: clients, access, root, squash, anon-uid, nfsv3, nfsv4)`},
		{[]string{"volumes", "create", "v", "--export-rule", "access=READ_ONLY"}, `clients= is required (the keys: clients, access`},
		{[]string{"volumes", "create", "v", "--export-rule", "clients=10.0.0.0/8,access=rw"}, `access="RW" must be READ_WRITE, READ_ONLY or READ_NONE`},
		// Flags: only global ones before the command; the usage error names the command and its help.
		{[]string{"--pool", "p", "volumes", "list"}, "unknown flag --pool before the command: only global flags may come first"},
		{[]string{"volumes", "update", "vol1", "--from-snapshot", "vol1/s1"}, "volumes update: unknown flag --from-snapshot (basin volumes update --help)"},
		{[]string{"volumes", "update", "vol1", "--share-name", "x"}, "unknown flag --share-name"},
		{[]string{"pools", "update", "pool1", "--service-level", "EXTREME"}, "unknown flag --service-level"},
	} {
		rec.mu.Lock()
		rec.calls = nil
		rec.mu.Unlock()
		out, code := runAt(srv.URL, false, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("basin %s: exit %d, want 2 and %q:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
		if len(rec.calls) != 0 {
			t.Errorf("basin %s reached the server: %q", strings.Join(tc.args, " "), rec.calls)
		}
	}
}

// Global flags work before the command, between group and verb, and after.
func TestGlobalFlagPositions(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	for _, args := range [][]string{
		{"--project", "p1", "-o", "json", "volumes", "get", "vol1"},
		{"--project=p1", "volumes", "--output", "json", "get", "vol1"},
		{"volumes", "-o", "json", "get", "vol1", "--project", "p1"},
		{"volumes", "get", "--project", "p1", "vol1", "-o=json"},
	} {
		rec.mu.Lock()
		rec.calls = nil
		rec.mu.Unlock()
		var out, errb bytes.Buffer
		all := append([]string{"--endpoint", srv.URL, "--insecure-no-auth"}, args...)
		code := Main(all, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		var obj map[string]any
		if code != 0 || len(rec.calls) != 1 || rec.calls[0] != "GET /v1/projects/p1/locations/local/volumes/vol1?" || json.Unmarshal(out.Bytes(), &obj) != nil {
			t.Errorf("basin %s: exit %d, calls %q:\n%s%s", strings.Join(args, " "), code, rec.calls, out.String(), errb.String())
		}
	}
}
