package perf

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// textSamples are fio's normal output as fio printed it (generate.sh), as Google
// Cloud NetApp Volumes' performance guide publishes it (gcnv_faq.txt: an excerpt
// of the sample on https://cloud.google.com/netapp/volumes/docs/performance/verify-performance,
// indented as the page shows it, with the two spaces after "write:" a copy of it
// carries), and in fio 2.x's format (fio2_randrw.txt: fio-2.2.10's layout, `read :
// io=…, bw=…, iops=…, runt=…`, KB meaning KiB, scaled latencies like 1877.7K).
var textSamples = []string{"randread_qd16", "two_jobs_mixed", "group_reporting", "latency_lat_pct", "same_name_jobs", "gcnv_faq", "fio2_randrw"}

// addTextSamples seeds a fuzz target with the text samples.
func addTextSamples(f *testing.F) {
	for _, name := range textSamples {
		b, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".txt"))
		f.Add(b)
	}
}

// spacings are what terminals, editors, web pages and mail do to fio's output.
var spacings = []struct {
	name string
	edit func(string) string
}{
	{"crlf", func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }},
	{"cr-only", func(s string) string { return strings.ReplaceAll(s, "\n", "\r") }},
	{"tabs", func(s string) string { return leadingSpaces.ReplaceAllString(strings.ReplaceAll(s, "  ", "\t"), "\t") }},
	{"doubled spaces", func(s string) string { return strings.ReplaceAll(s, " ", "  ") }},
	{"spaces around separators", func(s string) string {
		return strings.NewReplacer(":", " : ", "=", " = ", ",", " , ", "(", "( ", ")", " )").Replace(s)
	}},
	{"no optional spaces", func(s string) string {
		return optionalSpaces.ReplaceAllString(s, "$1")
	}},
	{"indented code block", func(s string) string { return "      " + strings.ReplaceAll(s, "\n", "\n      ") }},
	{"unindented", func(s string) string { return leadingBlanks.ReplaceAllString(s, "") }},
	{"line prefix of a paste site", func(s string) string { return "- " + strings.ReplaceAll(s, "\n", "\n- ") }},
	{"non-breaking spaces", func(s string) string { return strings.ReplaceAll(s, "  ", "\u00a0\u00a0") }},
	{"wrapped at 40 columns", func(s string) string { return wrap(s, 40) }},
	{"wrapped after slashes", func(s string) string { return strings.ReplaceAll(s, "/", "/\n") }},
	{"blank lines", func(s string) string { return strings.ReplaceAll(s, "\n", "\n\n") }},
}

var (
	leadingSpaces  = regexp.MustCompile(`(?m)^ +`)
	leadingBlanks  = regexp.MustCompile(`(?m)^[ \t]+`)
	optionalSpaces = regexp.MustCompile(`[ \t]*([:,=\[])[ \t]*`)
)

// wrap breaks every line longer than width at its last space before width, as a
// mail client or a narrow terminal copy does.
func wrap(s string, width int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for len(line) > width {
			i := strings.LastIndex(line[:width], " ")
			if i <= 0 {
				break
			}
			out = append(out, line[:i])
			line = "   " + line[i+1:]
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// Every spacing of every sample reads exactly as the sample does.
func TestParseTextSpacing(t *testing.T) {
	for _, name := range textSamples {
		data, err := os.ReadFile(filepath.Join("testdata", "fio", name+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseText(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, sp := range spacings {
			t.Run(name+"/"+sp.name, func(t *testing.T) {
				edited := sp.edit(string(data))
				if edited == string(data) {
					t.Fatalf("the edit changed nothing")
				}
				got, err := Parse([]byte(edited))
				if err != nil {
					t.Fatalf("%v\n%s", err, edited)
				}
				if !reflect.DeepEqual(got, want) {
					g, _ := json.MarshalIndent(got, "", " ")
					w, _ := json.MarshalIndent(want, "", " ")
					t.Fatalf("got\n%s\nwant\n%s", g, w)
				}
			})
		}
	}
}

// The published sample and the fio 2.x output, parsed and analysed: golden files,
// and the numbers the samples print checked one by one.
func TestParsePublishedAndLegacyText(t *testing.T) {
	for name, limit := range map[string]float64{"gcnv_faq": 8, "fio2_randrw": 40} {
		data, _ := os.ReadFile(filepath.Join("testdata", "fio", name+".txt"))
		rep, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, _ := json.MarshalIndent(rep, "", "  ")
		golden(t, name+".report.json", append(out, '\n'))
		var text bytes.Buffer
		WriteText(&text, Analyze(rep, AnalyzeOptions{LimitMiBps: limit}))
		golden(t, name+".analysis.txt", text.Bytes())
	}

	data, _ := os.ReadFile("testdata/fio/gcnv_faq.txt")
	rep, _ := Parse(data)
	want := Job{Name: "cvs", RW: "randwrite", BS: 4096, IODepth: 1, NumJobs: 1}
	j := rep.Jobs[0]
	if len(rep.Jobs) != 1 || rep.FioVersion != "fio-3.28" || j.Name != want.Name || j.RW != want.RW || j.BS != want.BS || j.IODepth != 1 || j.NumJobs != 1 || j.Read != nil {
		t.Fatalf("published sample: %s %+v", rep.FioVersion, rep.Jobs)
	}
	w := j.Write
	if w.IOPS != 1999 || w.BwBytes != 7999*1024 || w.IOBytes != 469<<20 || w.RuntimeMs != 60001 ||
		w.Lat.Mean != 495960 || w.Lat.Min != 382000 || w.Lat.Max != 28001000 || w.Lat.Percentiles["99.900000"] != 807000 || len(w.Lat.Percentiles) != 17 {
		t.Fatalf("published sample's write: %+v", *w)
	}
	// The guide's own reading: one I/O in flight at ~0.5 ms gives ~2,000 IOPS.
	for _, f := range Analyze(rep, AnalyzeOptions{}).Findings {
		if f.Status != "ok" {
			t.Errorf("published sample: %+v", f)
		}
	}

	data, _ = os.ReadFile("testdata/fio/fio2_randrw.txt")
	rep, _ = Parse(data)
	j = rep.Jobs[0]
	if len(rep.Jobs) != 1 || rep.FioVersion != "fio-2.2.10" || j.NumJobs != 4 || j.IODepth != 32 || j.BS != 4096 || j.RW != "randrw" {
		t.Fatalf("fio 2 sample: %s %+v", rep.FioVersion, rep.Jobs)
	}
	if r := j.Read; r.IOPS != 4915 || r.BwBytes != 19660*1024 || r.IOBytes != 786432*1024 || r.RuntimeMs != 40000 ||
		r.Lat.Max != 1877.8e6 || r.Lat.Mean != 13021.4e3 || r.Lat.Percentiles["99.990000"] != 265e6 {
		t.Fatalf("fio 2 sample's read: %+v", *r)
	}
	if w := j.Write; w.IOPS != 4889 || w.Lat.Percentiles["99.500000"] != 51e6 {
		t.Fatalf("fio 2 sample's write: %+v", *w)
	}
}

// With lat_percentiles=1 fio prints total-latency percentiles too; they are the
// ones kept, as from JSON.
func TestParseTextLatPercentilesWin(t *testing.T) {
	in := "j: (groupid=0, jobs=1): err= 0\n  read: IOPS=1000, BW=3906KiB/s (4000kB/s)(3906KiB/1000msec)\n" +
		"    clat (usec): min=10, max=20, avg=15, stdev=1\n    clat percentiles (usec):\n     | 50.00th=[ 15], 99.90th=[ 19]\n" +
		"     lat percentiles (usec):\n     | 50.00th=[ 16], 99.90th=[ 20]\n"
	rep, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Jobs[0].Read.Lat; l.Percentiles["99.900000"] != 20000 || l.Mean != 15000 {
		t.Fatalf("latency %+v: want lat percentiles and clat's mean (no lat line)", l)
	}
}

// FuzzParseTextSpacing: whatever the input, parsing never panics, and re-spacing
// it (CRLF, tabs, doubled spaces, indentation) never changes what it reads as.
func FuzzParseTextSpacing(f *testing.F) {
	addTextSamples(f)
	f.Add([]byte("x:(groupid=0,jobs=1)\nwrite:IOPS=1k,BW=4MiB/s(4MB/s)(4MiB/1000msec)\nlat (usec):min=1,max=2K,avg=1,stdev=0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := ParseText(data)
		for _, sp := range spacings {
			switch sp.name {
			case "crlf", "doubled spaces", "indented code block", "non-breaking spaces":
			default:
				continue // edits that may change what arbitrary input means
			}
			got, err := ParseText([]byte(sp.edit(string(data))))
			if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s changed the reading:\n%+v (%v)\nvs\n%+v (%v)", sp.name, got, err, want, werr)
			}
		}
	})
}
