package e2e

import (
	"slices"
	"testing"
	"time"
)

// TestParseTorture: results, reasons and times from smbtorture's subunit
// output, as smbtorture 4.17 writes it (a clock line after each "test:" line
// and before each result); a subtest that runs twice is counted twice.
func TestParseTorture(t *testing.T) {
	out := `smbtorture 4.17.12-Debian
Using seed 1764672000
test: request
time: 2026-12-02 11:00:00.250000
time: 2026-12-02 11:00:00.750000
success: request
test: breaking3
time: 2026-12-02 11:00:01.000000
time: 2026-12-02 11:00:36.500000
failure: breaking3 [
(../../source4/torture/smb2/lease.c:1234) break_info.count was 0, expected 1
]
test: request
time: 2026-12-02 11:00:37.000000
time: 2026-12-02 11:00:38.000000
skip: request [
not twice
]
`
	results, reasons, took := parseTorture("smb2.lease", out)
	wantResults := map[string]string{"smb2.lease.request": "success", "smb2.lease.breaking3": "failure", "smb2.lease.request#2": "skip"}
	if len(results) != len(wantResults) {
		t.Errorf("results %v, want %v", results, wantResults)
	}
	for name, want := range wantResults {
		if results[name] != want {
			t.Errorf("%s: %q, want %q", name, results[name], want)
		}
	}
	if got := reasons["smb2.lease.breaking3"]; got != "(../../source4/torture/smb2/lease.c:1234) break_info.count was 0, expected 1\n" {
		t.Errorf("reason of breaking3: %q", got)
	}
	if got := reasons["smb2.lease.request#2"]; got != "not twice\n" {
		t.Errorf("reason of request#2: %q", got)
	}
	wantTook := map[string]time.Duration{"smb2.lease.request": 500 * time.Millisecond, "smb2.lease.breaking3": 35500 * time.Millisecond,
		"smb2.lease.request#2": time.Second}
	for name, want := range wantTook {
		if took[name] != want {
			t.Errorf("%s took %v, want %v", name, took[name], want)
		}
	}
	if got, want := slowest(took, 2), "smb2.lease.breaking3 35.5s, smb2.lease.request#2 1s"; got != want {
		t.Errorf("slowest: %q, want %q", got, want)
	}
}

// TestTortureLanes: smb2.lease in two lanes (its slow subtests, the others as
// smbtorture lists them), the other suites in one, in order.
func TestTortureLanes(t *testing.T) {
	lanes := tortureLanes([]string{"smb2.session", "smb2.lease", "smb2.durable-open"})
	list := func(suite string) ([]string, error) {
		return []string{"request", "break", "timeout", "oplock", "unlink"}, nil
	}
	var got [][]string
	for _, lane := range lanes {
		var names []string
		for _, r := range lane {
			tests, err := r.tests(list)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tests...)
		}
		got = append(got, names)
	}
	want := [][]string{{"smb2.session", "smb2.durable-open"}, {"smb2.lease.timeout", "smb2.lease.oplock", "smb2.lease.break"},
		{"smb2.lease.request", "smb2.lease.unlink"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("lanes %q, want %q", got, want)
	}
}
