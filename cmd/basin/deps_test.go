package main

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/config"
)

// TestImportRules enforces the dependency direction of docs/architecture.md ("Import
// rules"): drivers (storage, dataplane, nfs, smb, qos, runner, mountinfo) never see
// the model, store, API or configuration; configuration is pure data and imports no
// driver; the API never touches drivers; clients never import server packages.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/basin-nas/basin/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/basin-nas/basin/internal/"
	forbidden := map[string][]string{
		"storage":    {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "intent", "config", "dataplane"},
		"dataplane":  {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "intent", "config", "storage"},
		"nfs":        {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "intent", "config", "storage", "dataplane"},
		"smb":        {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "intent", "config", "storage", "dataplane", "nfs"},
		"qos":        {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "intent", "config", "storage", "dataplane", "nfs"},
		"mountinfo":  {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "intent", "config", "storage", "dataplane"},
		"config":     {"dataplane", "storage", "nfs", "runner", "controller", "api", "store", "iam", "daemon", "intent"},
		"runner":     {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "storage"},
		"api":        {"storage", "runner", "controller", "daemon"},
		"apiv1":      {"model", "store", "api", "controller", "iam", "daemon", "storage", "runner"},
		"model":      {"store", "api", "apiv1", "controller", "iam", "daemon", "storage", "runner"},
		"controller": {"api", "apiv1", "iam", "daemon", "runner"},
		"store":      {"api", "apiv1", "controller", "iam", "daemon", "storage", "runner"},
		"client":     {"api", "apiv1", "model", "store", "controller", "iam", "daemon", "storage", "runner"},
		"cli":        {"api", "apiv1", "model", "store", "controller", "iam", "daemon", "storage", "runner"},
		"bench":      {"api", "apiv1", "model", "store", "controller", "iam", "daemon", "storage", "runner", "dataplane", "nfs"},
		"nfs3":       {"api", "apiv1", "model", "store", "controller", "iam", "daemon", "storage", "runner", "dataplane", "nfs", "client", "cli", "bench", "perf"},
		"secret":     {"model", "store", "api", "apiv1", "controller", "iam", "daemon", "storage", "runner", "dataplane", "nfs", "client", "cli"},
		"intent":     {"api", "apiv1", "controller", "daemon", "storage", "runner", "dataplane", "nfs", "iam"},
		"schedule":   {"api", "apiv1", "controller", "daemon", "storage", "runner", "dataplane", "nfs", "iam", "config"},
		"metrics":    {"api", "apiv1", "controller", "iam", "daemon", "storage", "runner", "dataplane", "intent", "config"},
		"perf":       {"api", "apiv1", "model", "store", "controller", "iam", "daemon", "storage", "runner", "dataplane", "nfs", "client"},
		// gRPC serves the API through internal/api's functions, never around them.
		"grpcapi": {"controller", "daemon", "store", "storage", "runner", "dataplane", "nfs", "intent", "client", "cli"},
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], mod)
		if !ok {
			continue
		}
		room, _, _ := strings.Cut(pkg, "/")
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			depRoom, _, _ := strings.Cut(dep, "/")
			for _, f := range forbidden[room] {
				if depRoom == f {
					t.Errorf("%s imports %s: %s may not import %s", pkg, dep, room, f)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no imports checked: go list output not understood")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"64G": 64 << 30, "64GiB": 64 << 30, "512M": 512 << 20, "1T": 1 << 40, "4096": 4096, "2k": 2048} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "12X", "1.5G"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// Every flag of basin serve has a row in README.md's flag table.
func TestServeFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	fs, _, _ := serveFlags(&cfg)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"`") && !strings.Contains(string(readme), "`--"+f.Name+"` |") &&
			!strings.Contains(string(readme), ", `--"+f.Name+"`") {
			t.Errorf("--%s is not in README.md's flag table", f.Name)
		}
	})
}
