package cli

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/client"
)

func TestParseArgs(t *testing.T) {
	specs := []flagSpec{{name: "os"}, {name: "force", bool: true}, {name: "rule", multi: true}}
	p, err := parseArgs([]string{"--os=linux", "latency", "--force", "--rule", "a", "x", "--rule=b", "--", "--not-a-flag"}, specs)
	if err != nil {
		t.Fatal(err)
	}
	if p.str("os") != "linux" || !p.has("force") || !slices.Equal(p.all("rule"), []string{"a", "b"}) {
		t.Fatalf("flags: %+v", p.flags)
	}
	if !slices.Equal(p.args, []string{"latency", "x", "--not-a-flag"}) {
		t.Fatalf("args: %v", p.args)
	}
	for _, bad := range [][]string{{"--nope"}, {"--os"}, {"--force=maybe"}} {
		if _, err := parseArgs(bad, specs); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestParseExportRule(t *testing.T) {
	r, err := parseExportRule("clients=10.0.0.0/8;10.1.0.5,access=read_only,root=false,nfsv4")
	if err != nil {
		t.Fatal(err)
	}
	if r["allowedClients"] != "10.0.0.0/8,10.1.0.5" || r["accessType"] != "READ_ONLY" || r["hasRootAccess"] != "false" || r["nfsv3"] != false || r["nfsv4"] != true {
		t.Fatalf("rule: %v", r)
	}
	if r, _ := parseExportRule("clients=1.2.3.4"); r["nfsv3"] != true || r["nfsv4"] != true || r["accessType"] != "READ_WRITE" {
		t.Fatalf("defaults: %v", r)
	}
	for _, bad := range []string{"access=READ_WRITE", "clients=1.2.3.4,color=red", "clients=1.2.3.4,root=yes"} {
		if _, err := parseExportRule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Table output, golden: a resource with nested fields (export rules, mount
// options, labels, a snapshot policy) flattened into dotted paths; a list with
// list and number columns; a done operation.
func TestTableOutput(t *testing.T) {
	var out strings.Builder
	s := &session{env: Env{Stdout: &out}, output: "table"}
	var vol, op client.Object
	for name, into := range map[string]*client.Object{"volume.json": &vol, "operation_done_volume.json": &op} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, into); err != nil {
			t.Fatal(err)
		}
	}
	out.WriteString("$ basin volumes get vol1\n")
	if err := s.print(vol, nil); err != nil {
		t.Fatal(err)
	}
	out.WriteString("\n$ basin volumes list\n")
	clone := maps.Clone(vol)
	clone["name"], clone["usedGib"], clone["throughputMibps"], clone["protocols"] = "projects/p1/locations/us-east4/volumes/vol2", nil, 1e6, []any{"NFSV3"}
	if err := s.print([]client.Object{vol, clone}, []string{"id", "shareName", "storagePool", "capacityGib", "usedGib", "throughputMibps", "protocols", "labels", "exportPolicy.rules", "state"}); err != nil {
		t.Fatal(err)
	}
	out.WriteString("\n$ basin operations wait …\n")
	if err := s.print(op, nil); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	golden(t, "table.txt", got)
	if strings.Contains(got, "map[") || strings.Contains(got, "e+06") {
		t.Errorf("Go syntax in the table:\n%s", got)
	}
}

// A volume's usedGib of 1 is any use up to a GiB (the API rounds up), an empty
// volume's too: tables say "≤1", not 1; larger figures, JSON and YAML as the API
// sends them.
func TestUsedGibShown(t *testing.T) {
	vols := []client.Object{
		{"name": "projects/p/locations/l/volumes/empty", "usedGib": "1", "capacityGib": "1"},
		{"name": "projects/p/locations/l/volumes/full", "usedGib": "4", "capacityGib": "4"},
		{"name": "projects/p/locations/l/volumes/new"},
	}
	var out strings.Builder
	s := &session{env: Env{Stdout: &out}, output: "table"}
	if err := s.print(vols, []string{"id", "capacityGib", "usedGib"}); err != nil {
		t.Fatal(err)
	}
	want := "ID     CAPACITYGIB  USEDGIB\nempty  1            ≤1\nfull   4            4\nnew                 \n"
	if out.String() != want {
		t.Errorf("volumes list:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := s.print(client.Object{"response": map[string]any{"usedGib": "1"}, "usedGib": "1", "capacityGib": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "capacityGib:       1\nresponse.usedGib:  ≤1\nusedGib:           ≤1\n" {
		t.Errorf("volumes get:\n%s", got)
	}
	out.Reset()
	s.output = "json"
	if err := s.print(vols[:1], nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"usedGib": "1"`) {
		t.Errorf("JSON changed the API's usedGib:\n%s", out.String())
	}
}

// Help, golden: basin help and every command's --help. No flag is written with
// two dashes unless its name is longer than a letter, and a verb lists only the
// flags it uses.
func TestHelp(t *testing.T) {
	var all strings.Builder
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 0 {
			t.Fatalf("basin %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}
	all.WriteString("$ basin help\n" + run("help"))
	for _, c := range commands() {
		args := append(strings.Fields(c.group), c.verb, "--help")
		if c.verb == "" {
			args = append(strings.Fields(c.group), "--help")
		}
		all.WriteString("\n$ basin " + strings.Join(args, " ") + "\n" + run(args...))
	}
	got := all.String()
	golden(t, "help.txt", got)
	if m := regexp.MustCompile(`--[a-z]\b[^-]`).FindString(got); m != "" {
		t.Errorf("help writes a one-letter flag with two dashes: %q", m)
	}
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"volumes", "update", "-h"}, []string{"--capacity-gib", "--export-rule", "--pool", "--async"}, []string{"--from-snapshot", "--share-name", "--protocols"}},
		{[]string{"pools", "update", "--help"}, []string{"--capacity-gib", "--qos-type"}, []string{"--service-level", "--network"}},
		{[]string{"volumes", "get", "--help"}, []string{"--project", "-o, --output"}, []string{"--async", "--pool"}},
		{[]string{"fio", "recipe", "--help"}, []string{"--os"}, []string{"--endpoint", "--async", "--output"}},
		{[]string{"help", "volumes", "create"}, []string{"Usage: basin volumes create VOLUME", "--from-snapshot"}, nil},
		{[]string{"--help", "volumes"}, []string{"Usage: basin volumes <verb>"}, nil},
	} {
		out := run(tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("basin %s lacks %q:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("basin %s offers %q:\n%s", strings.Join(tc.args, " "), n, out)
			}
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"widgets", "list"}, Env{Stdout: &out, Stderr: &errb}); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if code := Main([]string{"help"}, Env{Stdout: &out, Stderr: &errb}); code != 0 || !strings.Contains(out.String(), "volumes create") {
		t.Fatalf("help: exit %d", code)
	}
}

func TestPerfCommandsOffline(t *testing.T) {
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		// No server and no key file: these commands must not need them.
		code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		return out.String() + errb.String(), code
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fio", "recipe", "--os=linux", "latency"}, 0, "--rw=randwrite --bs=4k --iodepth=1 --ioengine=libaio --direct=1"},
		{[]string{"fio", "recipe", "iops", "--os", "windows"}, 0, "--ioengine=windowsaio --thread"},
		{[]string{"fio", "recipe", "--jobfile", "--numjobs=8", "--latency-ms=2", "--target-iops=40000"}, 0, "numjobs=8"},
		{[]string{"fio", "recipe", "fastest"}, 2, "unknown recipe"},
		{[]string{"fio", "recipe", "iops", "--target-iops=200000", "--latency-ms=0.5"}, 0, "--rw=randread --bs=8k --iodepth=100 "},
		{[]string{"fio", "recipe", "throughput", "--iodepth=8"}, 0, "--bs=64k --iodepth=8 "},
		{[]string{"fio", "recipe", "iops", "--target-iops=200000"}, 2, "--target-iops needs --latency-ms"},
		{[]string{"fio", "recipe", "iops", "--latency-ms=0.5"}, 2, "--latency-ms needs --target-iops"},
		{[]string{"fio", "recipe", "--jobfile", "--target-iops=40000"}, 2, "--target-iops needs --latency-ms"},
		{[]string{"fio", "recipe", "latency", "--target-iops=1000", "--latency-ms=1"}, 2, "the latency recipe keeps one I/O outstanding"},
		{[]string{"fio", "recipe", "iops", "--numjobs=4"}, 2, "--numjobs shapes the job file: add --jobfile"},
		{[]string{"fio", "analyze", "--json", "../perf/testdata/fio/two_jobs_mixed.json"}, 0, `"id": "littles-law"`},
		{[]string{"fio", "analyze", "../perf/testdata/fio/group_reporting.txt", "--limit-mibps=100"}, 0, "qos-ceiling"},
		{[]string{"fio", "analyze", "cli_test.go"}, 2, "no fio job results"},
		{[]string{"advise", "--protocol=nfsv4.1", "--target-iops=400000", "--latency-ms=1"}, 0, "4 TCP connections per client"},
		{[]string{"advise", "--protocol=nfsv3", "--target-iops=400000", "--latency-ms=1", "--clients=4"}, 0, "100 outstanding I/Os per client"},
		{[]string{"advise", "--protocol=smb", "--os=windows", "--target-mibps=1000", "--json"}, 0, `"smb-multichannel"`},
		{[]string{"advise", "--protocol=afs"}, 2, "--protocol must be"},
	} {
		out, code := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("basin %s: exit %d, want %d with %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
}

func TestBenchCommands(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := Main([]string{"bench", "--engine=local", "--directory", dir, "--rw=randwrite", "--bs=4k", "--size=1M", "--runtime=0.1", "--output-format", "json"},
		Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	if code != 0 || !strings.Contains(out.String(), `"fio version": "basin-bench"`) || !strings.Contains(out.String(), `"rw": "randwrite"`) {
		t.Fatalf("bench: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	svg := dir + "/chart.svg"
	code = Main([]string{"bench", "sweep", "--directory=" + dir, "--size=1M", "--runtime=0.02", "--svg", svg}, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	if code != 0 || !strings.Contains(out.String(), "64 KiB sequential") {
		t.Fatalf("sweep: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if data, err := os.ReadFile(svg); err != nil || !strings.HasPrefix(string(data), "<svg") {
		t.Fatalf("chart: %v", err)
	}
	for _, bad := range [][]string{{"bench", "--engine=nfs", "--directory", dir}, {"bench", "--rw=up", "--directory", dir}, {"bench", "extra"},
		{"bench", "--engine=nfs", "--url=nfs://h/x", "--nconnect=17"}, {"bench", "--engine=nfs", "--url=nfs://h/x", "--nfs-version=4"},
		{"bench", "--engine=nfs", "--url=nfs://h/x", "--uid=-1"}, {"bench", "--engine=smb", "--url=smb://h/x"}} {
		if code := Main(bad, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// Every command's verb dispatches (with and without arguments after it) without
// reaching the server: a usage error or the missing key file are the only
// errors expected.
func TestDispatchEveryVerb(t *testing.T) {
	for _, c := range commands() {
		args := strings.Fields(c.group)
		if c.verb != "" {
			args = append(args, c.verb)
		}
		for _, extra := range [][]string{nil, {"--help"}} {
			var out, errb bytes.Buffer
			code := Main(append(append([]string{}, args...), extra...), Env{Stdout: &out, Stderr: &errb,
				Getenv: func(k string) string { return map[string]string{"BASIN_KEY_FILE": "/nonexistent/key.json"}[k] }})
			if extra != nil && (code != 0 || !strings.Contains(out.String(), "Usage: basin")) {
				t.Errorf("%v --help: exit %d: %s%s", args, code, out.String(), errb.String())
			}
			// Either a usage error naming the command's help, or the missing key file.
			if code != 0 && !strings.Contains(errb.String(), "key file") && !strings.Contains(errb.String(), " --help)") && !strings.Contains(errb.String(), "needs") && !strings.Contains(errb.String(), "must") {
				t.Errorf("%v: exit %d: %s", args, code, errb.String())
			}
		}
	}
}

// writeKeyFile writes a service-account key file whose token_uri is tokenURI.
func writeKeyFile(t *testing.T, tokenURI string) string {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"type": "service_account", "private_key_id": "k1", "client_email": "a@default.iam.basin.internal",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": tokenURI})
	path := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Without --endpoint or BASIN_ENDPOINT, the CLI talks to the server the key
// file's token_uri names; the flag and the variable still win.
func TestEndpointFromKeyFile(t *testing.T) {
	var rec, other recorder
	srv, otherSrv := httptest.NewServer(&rec), httptest.NewServer(&other)
	t.Cleanup(srv.Close)
	t.Cleanup(otherSrv.Close)
	key := writeKeyFile(t, srv.URL+"/token")
	run := func(env map[string]string, args ...string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
	}
	run(nil, "volumes", "get", "vol1", "--key-file", key)
	run(map[string]string{"BASIN_KEY_FILE": key}, "volumes", "get", "vol2")
	if len(rec.calls) != 2 || len(other.calls) != 0 {
		t.Fatalf("the key file's server got %v, the other %v", rec.calls, other.calls)
	}
	run(map[string]string{"BASIN_ENDPOINT": otherSrv.URL}, "volumes", "get", "vol3", "--key-file", key)
	run(nil, "volumes", "get", "vol4", "--key-file", key, "--endpoint", otherSrv.URL)
	if len(rec.calls) != 2 || len(other.calls) != 2 {
		t.Fatalf("BASIN_ENDPOINT and --endpoint: the key file's server got %v, theirs %v", rec.calls, other.calls)
	}
	for uri, want := range map[string]string{
		"http://127.0.0.1:8781/token":         "http://127.0.0.1:8781",
		"https://basin.example.com/token":     "https://basin.example.com",
		"http://0.0.0.0:8780/token":           "http://127.0.0.1:8780", // --listen 0.0.0.0:8780
		"http://:8780/token":                  "http://127.0.0.1:8780",
		"http://[::]:8780/token":              "http://[::1]:8780",
		"https://oauth2.googleapis.com/token": "http://127.0.0.1:8780", // not Basin's: the default
		"":                                    "http://127.0.0.1:8780",
	} {
		if got := endpointOf(uri); got != want {
			t.Errorf("endpointOf(%q) = %q, want %q", uri, got, want)
		}
	}
}

// A missing key file is reported naming the ways to point at one.
func TestMissingKeyFile(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"volumes", "list", "--data-dir", dir}, {"volumes", "list", "--key-file", dir + "/k.json"}} {
		var out, errb bytes.Buffer
		code := Main(args, Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
		for _, want := range []string{"basin volumes list: ", dir, "--key-file", "--data-dir", "BASIN_KEY_FILE"} {
			if code != 2 || !strings.Contains(errb.String(), want) {
				t.Errorf("%v: exit %d, want 2 naming %q: %s", args, code, want, errb.String())
			}
		}
	}
}

// Every command's errors start "basin COMMAND: ", as basin serve's do: usage
// errors, errors of its own and the server's.
func TestErrorPrefix(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(404)
		w.Write([]byte(`{"error":{"code":404,"status":"NOT_FOUND","message":"no such volume"}}`))
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"volumes", "get", "nope"}, "basin volumes get: 404 NOT_FOUND: no such volume\n"},
		{[]string{"volumes", "metrics", "vol1", "--since", "0s"}, "basin volumes metrics: --since must be a positive duration"},
		{[]string{"volumes", "get"}, "basin volumes get: expected VOLUME"},
		{[]string{"top", "--sort", "name"}, "basin top: --sort must be"},
		{[]string{"iam", "service-accounts", "get", "x", "--bogus"}, "basin iam service-accounts get: unknown flag --bogus"},
		{[]string{"widgets"}, "basin: unknown command"},
	} {
		out, code := runAt(srv.URL, false, tc.args...)
		if code == 0 || !strings.HasPrefix(out, tc.want) {
			t.Errorf("%v: exit %d: %q, want it to start %q", tc.args, code, out, tc.want)
		}
	}
}

// What bench learns of the connection reads as a measurement, not as a
// warning of a limit, in the words test/e2e parses.
func TestBenchConnectionNote(t *testing.T) {
	for _, tc := range []struct {
		proto string
		n     int64
		want  string
	}{
		{"nfs", 8, "nfs: at most 8 calls in flight on any one connection during the run (measured: the queue depth the server saw)\n"},
		{"smb", 1, "smb: at most 1 request in flight on any one connection during the run (measured: the queue depth the server saw)\n"},
	} {
		got := connectionNote(tc.proto, tc.n)
		if got != tc.want {
			t.Errorf("connectionNote(%s, %d) = %q, want %q", tc.proto, tc.n, got, tc.want)
		}
		var n int64
		if _, err := fmt.Sscanf(got, tc.proto+": at most %d", &n); err != nil || n != tc.n {
			t.Errorf("%q: the number is not where test/e2e reads it", got)
		}
	}
}
