package cli

import (
	"bytes"
	"os"
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

func TestTableOutput(t *testing.T) {
	var out bytes.Buffer
	s := &session{env: Env{Stdout: &out}, output: "table"}
	rows := []client.Object{{"name": "projects/p/locations/l/volumes/v1", "capacityGib": "10", "protocols": []any{"NFSV3", "NFSV4"}, "metadata": map[string]any{"verb": "create"}}}
	if err := s.print(rows, []string{"id", "capacityGib", "protocols", "metadata.verb", "missing"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "v1") || !strings.Contains(lines[1], "NFSV3,NFSV4") || !strings.Contains(lines[1], "create") {
		t.Fatalf("table:\n%s", out.String())
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
		{[]string{"fio", "analyze", "--json", "../perf/testdata/fio/two_jobs_mixed.json"}, 0, `"id": "littles-law"`},
		{[]string{"fio", "analyze", "../perf/testdata/fio/group_reporting.txt", "--limit-mibps=100"}, 0, "qos-ceiling"},
		{[]string{"fio", "analyze", "cli_test.go"}, 2, "no fio job results"},
		{[]string{"advise", "--protocol=nfsv4.1", "--target-iops=400000", "--latency-ms=1"}, 0, "3 TCP connection(s)"},
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
// reaching the server: a missing key file is the only error expected.
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
			if code != 0 && !strings.Contains(errb.String(), "key file") && !strings.Contains(errb.String(), "expected") && !strings.Contains(errb.String(), "required") && !strings.Contains(errb.String(), "needs") && !strings.Contains(errb.String(), "must") {
				t.Errorf("%v: exit %d: %s", args, code, errb.String())
			}
		}
	}
}
