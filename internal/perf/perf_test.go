package perf

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		os.WriteFile(path, got, 0o644)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// The fio outputs in testdata/fio were made by running fio (generate.sh).
func TestParseRealFioOutputs(t *testing.T) {
	for _, name := range []string{"randread_qd16", "two_jobs_mixed", "group_reporting", "latency_lat_pct"} {
		t.Run(name, func(t *testing.T) {
			js, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".json"))
			txt, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".txt"))
			fromJSON, err := Parse(js)
			if err != nil {
				t.Fatal(err)
			}
			fromText, err := Parse(txt)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := json.MarshalIndent(Analyze(fromJSON, AnalyzeOptions{LimitMiBps: 100}), "", "  ")
			golden(t, name+".analysis.json", append(out, '\n'))
			var text bytes.Buffer
			WriteText(&text, Analyze(fromText, AnalyzeOptions{}))
			golden(t, name+".analysis.txt", text.Bytes())
		})
	}
}

func TestParsedShape(t *testing.T) {
	js, _ := os.ReadFile("testdata/fio/two_jobs_mixed.json")
	rep, err := Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Jobs) != 2 || rep.Jobs[0].Name != "mixed" || rep.Jobs[0].Read == nil || rep.Jobs[0].Write == nil ||
		rep.Jobs[1].Read != nil || rep.Jobs[1].Write == nil || rep.Jobs[1].BS != 64<<10 || rep.Jobs[0].IODepth != 8 {
		t.Fatalf("jobs = %+v", rep.Jobs)
	}
	js, _ = os.ReadFile("testdata/fio/group_reporting.json")
	rep, _ = Parse(js)
	if len(rep.Jobs) != 1 || rep.Jobs[0].NumJobs != 2 || rep.Jobs[0].BS != 8192 {
		t.Fatalf("group reporting = %+v", rep.Jobs)
	}
}

// The JSON and text forms (two runs of the same jobs) describe the same jobs.
func TestJSONAndTextAgree(t *testing.T) {
	for _, name := range []string{"randread_qd16", "two_jobs_mixed", "group_reporting", "latency_lat_pct", "same_name_jobs"} {
		js, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".json"))
		txt, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".txt"))
		a, _ := Parse(js)
		b, _ := Parse(txt)
		compareReports(t, name, a, b, false)
	}
}

// compareReports checks that two parses describe the same jobs and, with numbers,
// the same results within the text form's rounding (3 significant digits).
func compareReports(t *testing.T, name string, a, b *Report, numbers bool) {
	t.Helper()
	if len(a.Jobs) != len(b.Jobs) {
		t.Fatalf("%s: %d jobs from JSON, %d from text", name, len(a.Jobs), len(b.Jobs))
	}
	near := func(x, y float64) bool { return math.Abs(x-y) <= 0.01*math.Max(math.Abs(x), math.Abs(y))+1 }
	for i := range a.Jobs {
		ja, jb := a.Jobs[i], b.Jobs[i]
		if ja.Name != jb.Name || ja.BS != jb.BS || ja.NumJobs != jb.NumJobs {
			t.Errorf("%s job %d: %+v vs %+v", name, i, ja, jb)
		}
		if jb.RW != "" && (ja.RW != jb.RW || ja.IODepth != jb.IODepth) { // the text header may be absent
			t.Errorf("%s job %d: rw/iodepth %s/%d vs %s/%d", name, i, ja.RW, ja.IODepth, jb.RW, jb.IODepth)
		}
		for _, d := range [][2]*Direction{{ja.Read, jb.Read}, {ja.Write, jb.Write}} {
			if (d[0] == nil) != (d[1] == nil) {
				t.Errorf("%s job %s: direction present in one form only", name, ja.Name)
				continue
			}
			if d[0] == nil || !numbers {
				continue
			}
			if !near(d[0].IOPS, d[1].IOPS) || !near(d[0].BwBytes, d[1].BwBytes) || !near(d[0].Lat.Mean, d[1].Lat.Mean) || d[0].RuntimeMs != d[1].RuntimeMs {
				t.Errorf("%s job %s: JSON %+v vs text %+v", name, ja.Name, *d[0], *d[1])
			}
		}
	}
}

// A live run: fio writes both forms of one run; the parsers must agree.
func TestLiveFio(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed (scripts/setup.sh --test installs it)")
	}
	dir := t.TempDir()
	out, err := exec.Command("fio", "--name=live", "--directory="+dir, "--size=16M", "--rw=randrw", "--rwmixread=60", "--bs=4k",
		"--iodepth=4", "--ioengine=psync", "--time_based", "--runtime=1", "--output-format=json,normal").Output()
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(out, []byte("\n}\n"))
	if i < 0 {
		t.Fatalf("no JSON in fio output:\n%s", out)
	}
	a, err := Parse(out[:i+2])
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(out[i+3:])
	if err != nil {
		t.Fatal(err)
	}
	compareReports(t, "live", a, b, true)
	// psync keeps one I/O in flight whatever iodepth says: Little's law must notice.
	for _, f := range Analyze(a, AnalyzeOptions{}).Findings {
		if f.ID == "littles-law" && f.Status != "warn" {
			t.Errorf("psync with iodepth 4 passed Little's law: %+v", f)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", "   ", "garbage", `{"fio version":"fio-3.33","jobs":[]}`, `{"fio version": "x", "jobs": [{"jobname": "a", "read": {"io_bytes": 0}}]}`,
		"job: (groupid=0, jobs=1): err= 0\n", `{"fio version": "fio-3", "jobs": [`} {
		if rep, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", in, rep)
		}
	}
}

func TestFindingsEdgeCases(t *testing.T) {
	dir := func(iops, bw, meanNs, p999 float64) *Direction {
		return &Direction{IOPS: iops, BwBytes: bw, Lat: Latency{Mean: meanNs, Max: p999 * 2, Percentiles: map[string]float64{"99.900000": p999}}}
	}
	status := func(a Analysis, id, job string) string {
		for _, f := range a.Findings {
			if f.ID == id && (job == "" || f.Job == job) {
				return f.Status
			}
		}
		return "missing"
	}
	cases := []struct {
		name   string
		job    Job
		limit  float64
		id     string
		status string
	}{
		{"little ok", Job{Name: "j", BS: 4096, IODepth: 16, NumJobs: 1, Read: dir(16000, 16000*4096, 1e6, 2e6)}, 0, "littles-law", "ok"},
		{"little too few in flight", Job{Name: "j", BS: 4096, IODepth: 32, NumJobs: 1, Read: dir(1000, 1000*4096, 1e6, 2e6)}, 0, "littles-law", "warn"},
		{"little cached", Job{Name: "j", BS: 4096, IODepth: 1, NumJobs: 1, Read: dir(10000, 10000*4096, 1e6, 2e6)}, 0, "littles-law", "warn"},
		{"little several jobs mixed", Job{Name: "j", BS: 4096, IODepth: 4, NumJobs: 2, Read: dir(6000, 6000*4096, 1e6, 2e6), Write: dir(2000, 2000*4096, 1e6, 2e6)}, 0, "littles-law", "ok"},
		{"little no latency", Job{Name: "j", BS: 4096, IODepth: 1, Read: &Direction{IOPS: 5}}, 0, "littles-law", "info"},
		{"bw matches", Job{Name: "j", BS: 65536, IODepth: 1, Read: dir(100, 100*65536, 1e7, 2e7)}, 0, "iops-times-bs", "ok"},
		{"bw varies", Job{Name: "j", BS: 4096, IODepth: 1, Read: dir(100, 100*65536, 1e7, 2e7)}, 0, "iops-times-bs", "warn"},
		{"tail ok", Job{Name: "j", BS: 4096, IODepth: 1, Read: dir(1000, 1000*4096, 1e6, 3e6)}, 0, "latency-tail", "ok"},
		{"tail long", Job{Name: "j", BS: 4096, IODepth: 1, Read: dir(1000, 1000*4096, 1e6, 50e6)}, 0, "latency-tail", "warn"},
		{"tail from max", Job{Name: "j", BS: 4096, IODepth: 1, Read: &Direction{IOPS: 1000, BwBytes: 1000 * 4096, Lat: Latency{Mean: 1e6, Max: 30e6}}}, 0, "latency-tail", "warn"},
		{"at the ceiling", Job{Name: "j", BS: 1 << 20, IODepth: 8, Read: dir(64, 64<<20, 125e6, 2e8)}, 64, "qos-ceiling", "info"},
		{"below the ceiling", Job{Name: "j", BS: 1 << 20, IODepth: 8, Read: dir(10, 10<<20, 800e6, 1e9)}, 64, "qos-ceiling", "ok"},
		{"no limit no finding", Job{Name: "j", BS: 1 << 20, IODepth: 8, Read: dir(10, 10<<20, 800e6, 1e9)}, 0, "qos-ceiling", "missing"},
	}
	for _, tc := range cases {
		a := Analyze(&Report{Jobs: []Job{tc.job}}, AnalyzeOptions{LimitMiBps: tc.limit})
		if got := status(a, tc.id, ""); got != tc.status {
			t.Errorf("%s: %s = %s, want %s (%+v)", tc.name, tc.id, got, tc.status, a.Findings)
		}
	}
}

func TestRecipes(t *testing.T) {
	var all strings.Builder
	for _, os := range []string{"linux", "windows"} {
		for _, kind := range []string{"latency", "iops", "throughput"} {
			r, err := Recipe(kind, RecipeOptions{OS: os})
			if err != nil {
				t.Fatal(err)
			}
			all.WriteString(r)
		}
	}
	for _, o := range []RecipeOptions{{}, {NumJobs: 8, RWMixRead: 50, LatencyMs: 2, TargetIOPS: 40000}} {
		j, err := SMBJobFile(o)
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(j)
	}
	for _, bad := range []RecipeOptions{{TargetIOPS: 40000}, {LatencyMs: 2}, {IODepth: 8, TargetIOPS: 40000, LatencyMs: 2}} {
		if j, err := SMBJobFile(bad); err == nil {
			t.Errorf("job file of %+v: %s", bad, j)
		}
	}
	golden(t, "recipes.txt", []byte(all.String()))
	if _, err := Recipe("speed", RecipeOptions{}); err == nil {
		t.Error("unknown recipe accepted")
	}
	if _, err := Recipe("iops", RecipeOptions{OS: "plan9"}); err == nil {
		t.Error("unknown OS accepted")
	}
}

func TestAdvice(t *testing.T) {
	get := func(o AdviseOptions, id string) Advice {
		t.Helper()
		as, err := Advise(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.ID == id {
				return a
			}
		}
		return Advice{}
	}
	cases := []struct {
		name    string
		o       AdviseOptions
		id, has string
	}{
		{"little's law", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 100000, LatencyMs: 0.5}, "concurrency", "50 outstanding"},
		{"one v3 connection", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 100000, LatencyMs: 1}, "connections", "1 TCP"},
		{"v3 needs more connections", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 300000, LatencyMs: 1}, "connections", "4 TCP connections per client"},
		{"v3 slots", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 300000, LatencyMs: 1}, "connections", "128 requests at once (sunrpc slot table); 300.0 in flight per client needs 3"},
		{"windows v3 slots", AdviseOptions{Protocol: "nfsv3", OS: "windows", TargetIOPS: 300000, LatencyMs: 1}, "connections", "3 TCP connections per client"},
		{"v4.1 session slots", AdviseOptions{Protocol: "nfsv4.1", TargetIOPS: 300000, LatencyMs: 1}, "connections", "180 requests at once (session slots); 300.0 in flight per client needs 2"},
		{"nconnect for bandwidth", AdviseOptions{Protocol: "nfsv3", TargetMiB: 2000, LatencyMs: 2}, "nconnect", "nconnect=4"},
		{"nconnect 6", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 700000, LatencyMs: 1}, "nconnect", "nconnect=6"},
		{"nconnect capped at 16", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 5000000, LatencyMs: 1}, "nconnect", "nconnect=16"},
		{"old kernel", AdviseOptions{Protocol: "nfsv3", TargetMiB: 2000, Kernel: "4.18"}, "nconnect", "upgrade"},
		{"new kernel", AdviseOptions{Protocol: "nfsv3", TargetMiB: 2000, Kernel: "5.15"}, "nconnect", "nconnect="},
		{"small load", AdviseOptions{Protocol: "nfsv3", TargetIOPS: 1000}, "nconnect", "no nconnect"},
		{"slot table default", AdviseOptions{Protocol: "nfsv3", Clients: 10}, "slot-table", "=128"},
		{"slot table many clients", AdviseOptions{Protocol: "nfsv3", Clients: 31}, "slot-table", "=16"},
		{"smb multichannel", AdviseOptions{Protocol: "smb", OS: "windows", TargetMiB: 1000}, "smb-multichannel", "4 connections"},
		{"smb multichannel linux", AdviseOptions{Protocol: "smb", TargetMiB: 1000, Kernel: "6.1"}, "smb-multichannel", "4 connections"},
		{"smb multichannel old kernel", AdviseOptions{Protocol: "smb", TargetMiB: 1000, Kernel: "5.4"}, "smb-multichannel", "upgrade"},
		{"smb mounts of their own", AdviseOptions{Protocol: "smb", TargetMiB: 1000, Kernel: "5.4"}, "smb-multichannel", "each with nosharesock"},
		{"smb signing cost", AdviseOptions{Protocol: "smb"}, "smb-signing-encryption", "signing"},
		{"placement", AdviseOptions{Protocol: "smb"}, "placement", "near"},
	}
	for _, tc := range cases {
		a := get(tc.o, tc.id)
		if !strings.Contains(a.Setting+" "+a.Why, tc.has) {
			t.Errorf("%s: %s = %+v, want %q", tc.name, tc.id, a, tc.has)
		}
	}
	// Each OS gets its own commands: PowerShell is no answer for a Linux client.
	for _, tc := range []struct {
		o        AdviseOptions
		id, want string
		not      string
	}{
		{AdviseOptions{Protocol: "smb", TargetMiB: 1000}, "smb-multichannel", "mount -t cifs", "SmbClient"},
		{AdviseOptions{Protocol: "smb", TargetMiB: 1000}, "smb-multichannel", "multichannel,max_channels=4", "SmbClient"},
		{AdviseOptions{Protocol: "smb"}, "smb-signing-encryption", "seal", "SmbClient"},
		{AdviseOptions{Protocol: "smb", OS: "windows", TargetMiB: 1000}, "smb-multichannel", "Get-SmbClientConfiguration", "mount"},
		{AdviseOptions{Protocol: "smb", OS: "windows"}, "smb-signing-encryption", "Set-SmbClientConfiguration", "mount"},
	} {
		a := get(tc.o, tc.id)
		if !strings.Contains(a.Command, tc.want) || strings.Contains(a.Command, tc.not) {
			t.Errorf("%+v: %s command %q: want %q, not %q", tc.o, tc.id, a.Command, tc.want, tc.not)
		}
	}
	for _, bad := range []AdviseOptions{{Protocol: "iscsi"}, {Protocol: "nfsv3", OS: "plan9"}, {Protocol: "smb", TargetIOPS: 1, TargetMiB: 1}, {Protocol: "smb", TargetIOPS: -1}} {
		if _, err := Advise(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	as, _ := Advise(AdviseOptions{Protocol: "nfsv3", TargetIOPS: 300000, LatencyMs: 1, Clients: 40, Kernel: "6.1"})
	out, _ := json.MarshalIndent(as, "", "  ")
	golden(t, "advice_nfsv3.json", append(out, '\n'))
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"randread_qd16", "two_jobs_mixed", "group_reporting", "latency_lat_pct"} {
		b, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".json"))
		f.Add(b)
	}
	addTextSamples(f)
	f.Add([]byte("x: (groupid=0, jobs=1): err= 0\n  read: IOPS=1k, BW=4MiB/s (4MB/s)(4MiB/1000msec)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Parse(data)
		if err != nil {
			return
		}
		a := Analyze(rep, AnalyzeOptions{LimitMiBps: 10})
		WriteText(&bytes.Buffer{}, a)
		if _, err := json.Marshal(a); err != nil && !strings.Contains(err.Error(), "unsupported value") {
			t.Fatalf("analysis does not encode: %v", err)
		}
	})
}

// Percentiles are printed under the name of what they are: fio gives total
// latency's (lat) only with lat_percentiles=1, else completion latency's (clat),
// and a clat p50 under a lat heading can read below the lat minimum.
func TestPercentilesLabelled(t *testing.T) {
	for _, tc := range []struct {
		name, want, tail string
	}{
		{"randread_qd16", "clat percentiles: p50=", "clat p99.9 "},
		{"latency_lat_pct", "lat percentiles: p50=", "lat p99.9 "},
	} {
		for _, ext := range []string{".json", ".txt"} {
			data, err := os.ReadFile(filepath.Join("testdata", "fio", tc.name+ext))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			WriteText(&out, Analyze(rep, AnalyzeOptions{}))
			var pctLines []string
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, "p50=") {
					pctLines = append(pctLines, strings.TrimSpace(line))
				}
			}
			if len(pctLines) != 1 || !strings.HasPrefix(pctLines[0], tc.want) {
				t.Errorf("%s%s: percentile lines %q, want one starting %q\n%s", tc.name, ext, pctLines, tc.want, out.String())
			}
			if !strings.Contains(out.String(), "latency-tail ["+rep.Jobs[0].Name+" ") || !strings.Contains(out.String(), ": "+tc.tail) {
				t.Errorf("%s%s: the latency-tail finding does not say %q:\n%s", tc.name, ext, tc.tail, out.String())
			}
		}
	}
	// lat_percentiles=1: the p50 is the total latency's, not below its minimum.
	data, _ := os.ReadFile("testdata/fio/latency_lat_pct.json")
	rep, _ := Parse(data)
	if l := rep.Jobs[0].Write.Lat; l.Percentiles["50.000000"] < l.Min {
		t.Errorf("p50 %v below the minimum %v", l.Percentiles["50.000000"], l.Min)
	}
}

// The latency recipe asks fio for what it says to read: lat percentiles.
func TestLatencyRecipeAsksForLatPercentiles(t *testing.T) {
	for _, os := range []string{"linux", "windows"} {
		r, err := Recipe("latency", RecipeOptions{OS: os})
		if err != nil || !strings.Contains(r, " --lat_percentiles=1 ") || !strings.Contains(r, "lat (not clat)") {
			t.Errorf("%s latency recipe: %v\n%s", os, err, r)
		}
	}
}

// Two jobs fio ran under one name are told apart (name#1, name#2, in fio's
// order), each with its own options, in the JSON and the text form alike.
func TestSameNameJobs(t *testing.T) {
	for _, ext := range []string{".json", ".txt"} {
		data, _ := os.ReadFile(filepath.Join("testdata", "fio", "same_name_jobs"+ext))
		rep, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Jobs) != 2 {
			t.Fatalf("%s: %d jobs", ext, len(rep.Jobs))
		}
		a, b := rep.Jobs[0], rep.Jobs[1]
		if a.Name != "twin#1" || b.Name != "twin#2" || a.RW != "randread" || a.BS != 4096 || a.IODepth != 4 || a.Read == nil ||
			b.RW != "randwrite" || b.BS != 8192 || b.IODepth != 2 || b.Write == nil {
			t.Errorf("%s: jobs %+v, %+v", ext, a, b)
		}
		seen := map[string]bool{}
		for _, f := range Analyze(rep, AnalyzeOptions{}).Findings {
			if seen[f.ID+" "+f.Job] {
				t.Errorf("%s: two %s findings labelled %q", ext, f.ID, f.Job)
			}
			seen[f.ID+" "+f.Job] = true
		}
	}
	// A name used once keeps it, beside a repeated one.
	rep := &Report{Jobs: []Job{{Name: "a"}, {Name: "b"}, {Name: "a"}, {Name: "a#2"}}}
	rep.nameJobs()
	var names []string
	for _, j := range rep.Jobs {
		names = append(names, j.Name)
	}
	if got := strings.Join(names, " "); got != "a#1 b a#3 a#2" {
		t.Errorf("names %s", got)
	}
}

// --target-iops with --latency-ms size a recipe's iodepth by Little's law, as
// they size the job file's; one without the other is refused, naming the
// missing one, never ignored.
func TestRecipeDepthFromTarget(t *testing.T) {
	for _, tc := range []struct {
		kind string
		o    RecipeOptions
		want string // in the recipe, or in the error
	}{
		{"iops", RecipeOptions{TargetIOPS: 200000, LatencyMs: 0.5}, "--iodepth=100 "},
		{"iops", RecipeOptions{TargetIOPS: 200000, LatencyMs: 0.5}, "0.50 ms × 200000 IOPS = 100.0 outstanding I/Os"},
		{"throughput", RecipeOptions{TargetIOPS: 3000, LatencyMs: 2}, "--iodepth=6 "},
		{"throughput", RecipeOptions{IODepth: 8}, "--iodepth=8 "},
		{"iops", RecipeOptions{TargetIOPS: 1000}, "error: --target-iops needs --latency-ms"},
		{"iops", RecipeOptions{LatencyMs: 1}, "error: --latency-ms needs --target-iops"},
		{"iops", RecipeOptions{IODepth: 4, TargetIOPS: 1000, LatencyMs: 1}, "error: give --iodepth or --target-iops with --latency-ms, not both"},
		{"latency", RecipeOptions{TargetIOPS: 1000, LatencyMs: 1}, "error: the latency recipe keeps one I/O outstanding"},
		{"latency", RecipeOptions{IODepth: 4}, "error: the latency recipe keeps one I/O outstanding"},
	} {
		got, err := Recipe(tc.kind, tc.o)
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s %+v: %q, want %q", tc.kind, tc.o, got, tc.want)
		}
	}
}

// The targets are the volume's, shared by --clients: each client's figures are
// its share.
func TestAdvicePerClient(t *testing.T) {
	for _, tc := range []struct {
		clients            int
		outstanding, conns string
	}{
		{1, "400 outstanding I/Os per client", "4 TCP connections per client"},
		{4, "100 outstanding I/Os per client", "1 TCP connection per client"},
		{16, "25 outstanding I/Os per client", "1 TCP connection per client"},
	} {
		as, err := Advise(AdviseOptions{Protocol: "nfsv3", TargetIOPS: 400000, LatencyMs: 1, Clients: tc.clients})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, a := range as {
			got[a.ID] = a.Setting
		}
		if got["concurrency"] != tc.outstanding || got["connections"] != tc.conns {
			t.Errorf("%d clients: concurrency %q, connections %q; want %q, %q", tc.clients, got["concurrency"], got["connections"], tc.outstanding, tc.conns)
		}
	}
	// SMB multichannel is for a client that needs it: 1,000 MiB/s over 4 clients is 250 each.
	as, _ := Advise(AdviseOptions{Protocol: "smb", TargetMiB: 1000, Clients: 4})
	for _, a := range as {
		if a.ID == "smb-multichannel" {
			t.Errorf("250 MiB/s per client got %+v", a)
		}
	}
}

// The connections advice and the nconnect advice give one number of
// connections, whatever the load, kernel or protocol; an old kernel is not told
// that several mounts of one server make several connections (they share one);
// and without a target nothing is concluded about the load.
func TestAdviceConnectionsAgree(t *testing.T) {
	num := regexp.MustCompile(`(\d+) TCP connections? per client`)
	nconnect := regexp.MustCompile(`nconnect=(\d+)`)
	for _, proto := range []string{"nfsv3", "nfsv4.1"} {
		for _, kernel := range []string{"", "4.18", "6.1"} {
			for _, target := range []AdviseOptions{{}, {TargetIOPS: 1000}, {TargetIOPS: 100000}, {TargetIOPS: 700000}, {TargetMiB: 200}, {TargetMiB: 2000}} {
				for _, clients := range []int{1, 4} {
					o := target
					o.Protocol, o.Kernel, o.Clients = proto, kernel, clients
					as, err := Advise(o)
					if err != nil {
						t.Fatal(err)
					}
					var conns, nc string
					for _, a := range as {
						text := a.Setting + " " + a.Why + " " + a.Command
						switch a.ID {
						case "connections":
							if m := num.FindStringSubmatch(a.Setting); m != nil {
								conns = m[1]
							} else {
								t.Errorf("%+v: connections %q", o, a.Setting)
							}
						case "nconnect":
							nc = "1"
							if m := nconnect.FindStringSubmatch(text); m != nil {
								nc = m[1]
							}
						}
						if strings.Contains(text, "mount the volume") || (target == AdviseOptions{} && strings.Contains(text, "this load")) {
							t.Errorf("%+v: %s: %s", o, a.ID, text)
						}
					}
					if target == (AdviseOptions{}) {
						if conns != "" {
							t.Errorf("%+v: no target, yet %s connections", o, conns)
						}
						continue
					}
					if conns == "" || nc != conns {
						t.Errorf("%+v: connections %q, nconnect %q", o, conns, nc)
					}
				}
			}
		}
	}
}

// finding returns the analysis' finding id (the first), or a "missing" one.
func finding(a Analysis, id string) Finding {
	for _, f := range a.Findings {
		if f.ID == id {
			return f
		}
	}
	return Finding{ID: id, Status: "missing"}
}

// The limit holds wire bytes, not payload: 4 KiB writes paced at 3.5 MiB/s by a
// 4 MiB/s volume are at its ceiling (their headers fill the rest), while 1 MiB
// I/O at the same share of a limit is not.
func TestQoSCeilingCountsTheWire(t *testing.T) {
	data, err := os.ReadFile("testdata/fio/rate_4k_randwrite.json")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if f := finding(Analyze(rep, AnalyzeOptions{LimitMiBps: 4}), "qos-ceiling"); f.Status != "info" || !strings.Contains(f.Message, "QoS ceiling was the bottleneck") ||
		!strings.Contains(f.Message, "estimated") {
		t.Errorf("3.5 MiB/s of 4 KiB writes under a 4 MiB/s limit: %+v", f)
	}
	if f := finding(Analyze(rep, AnalyzeOptions{LimitMiBps: 5}), "qos-ceiling"); f.Status != "ok" {
		t.Errorf("3.5 MiB/s of 4 KiB writes under a 5 MiB/s limit: %+v", f)
	}
	big := &Report{Jobs: []Job{{Name: "j", BS: 1 << 20, IODepth: 8, Read: &Direction{IOPS: 3.5, BwBytes: 3.5 * (1 << 20)}}}}
	if f := finding(Analyze(big, AnalyzeOptions{LimitMiBps: 4}), "qos-ceiling"); f.Status != "ok" {
		t.Errorf("3.5 MiB/s of 1 MiB reads under a 4 MiB/s limit: %+v", f)
	}
}

// With the volume's metrics over the run, the time held at the limit decides,
// else the wire bytes Basin measured per payload byte; metrics that cannot be
// the run's (less payload than fio moved) are set aside.
func TestQoSCeilingFromVolumeMetrics(t *testing.T) {
	data, _ := os.ReadFile("testdata/fio/rate_4k_randwrite.json")
	rep, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	share := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name         string
		v            VolumeRun
		status, says string
	}{
		{"held the whole run", VolumeRun{WriteMiBps: 3.5, WireReadMiBps: 0.3, WireWriteMiBps: 3.8, AtLimitShare: share(1)}, "info", "held at its limit 100% of the run"},
		{"never held", VolumeRun{WriteMiBps: 3.5, WireReadMiBps: 0.3, WireWriteMiBps: 3.8, AtLimitShare: share(0)}, "ok", "held at its limit 0% of the run"},
		{"held in bursts", VolumeRun{WriteMiBps: 3.5, WireReadMiBps: 0.3, WireWriteMiBps: 3.8, AtLimitShare: share(0.2)}, "info", "bursts"},
		{"measured wire at the ceiling", VolumeRun{WriteMiBps: 3.5, WireReadMiBps: 0.4, WireWriteMiBps: 3.6}, "info", "1.14× payload on the wire (measured by Basin)"},
		{"measured wire below it", VolumeRun{WriteMiBps: 3.5, WireWriteMiBps: 3.55}, "ok", "1.01× payload on the wire (measured by Basin)"},
		{"other clients too", VolumeRun{ReadMiBps: 0.4, WriteMiBps: 3.5, WireReadMiBps: 0.8, WireWriteMiBps: 3.8, AtLimitShare: share(1)}, "info", "3.9 MiB/s"},
		{"another time", VolumeRun{WriteMiBps: 0.1, WireWriteMiBps: 0.2, AtLimitShare: share(0)}, "info", "not this run's"},
	} {
		f := finding(Analyze(rep, AnalyzeOptions{LimitMiBps: 4, Volume: &tc.v}), "qos-ceiling")
		if f.Status != tc.status || !strings.Contains(f.Message, tc.says) {
			t.Errorf("%s: %+v, want %s saying %q", tc.name, f, tc.status, tc.says)
		}
	}
}

// The estimate of the wire bytes per payload byte: NFS over TCP at MTU 1500.
func TestWireRatioEstimate(t *testing.T) {
	for _, tc := range []struct {
		bs       float64
		min, max float64
	}{
		{4096, 1.10, 1.18}, // measured 1.081 in the data direction alone (docs/metrics.md)
		{64 << 10, 1.04, 1.06},
		{1 << 20, 1.04, 1.06}, // measured 1.046 in the data direction alone
	} {
		if r := wirePerRequest(tc.bs) / tc.bs; r < tc.min || r > tc.max {
			t.Errorf("%v B: %.3f× payload, want %.2f–%.2f", tc.bs, r, tc.min, tc.max)
		}
	}
}
