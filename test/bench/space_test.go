package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run of some sections (-only space) keeps what the results file holds of the
// others, with their date; a run that measures one of them dates them anew.
func TestKeepUnmeasured(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	old := result{Date: "2026-11-23T01:16:46Z", Machine: "old machine", Rounds: 3, PerRound: 15,
		Millis: map[string]float64{"volumeCreate": 74.2}, NFS: []patternResult{{Pattern: "seq read"}},
		Metrics: &metricsResult{}, Space: &spaceResult{Date: "old space"}}
	data, _ := json.Marshal(old)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	spaceOnly := keepUnmeasured(path, result{Date: "now", Machine: "new machine", Rounds: 3, Millis: map[string]float64{},
		Space: &spaceResult{Date: "new space"}})
	if spaceOnly.Date != old.Date || spaceOnly.Machine != old.Machine || spaceOnly.Millis["volumeCreate"] != 74.2 ||
		len(spaceOnly.NFS) != 1 || spaceOnly.Metrics == nil {
		t.Errorf("a space-only run lost the other sections or their date: %+v", spaceOnly)
	}
	if spaceOnly.Space.Date != "new space" {
		t.Errorf("space = %q, want this run's", spaceOnly.Space.Date)
	}

	nfsRun := keepUnmeasured(path, result{Date: "now", Millis: map[string]float64{}, NFS: []patternResult{{Pattern: "a"}, {Pattern: "b"}}})
	if nfsRun.Date != "now" || len(nfsRun.NFS) != 2 || nfsRun.Space.Date != "old space" || nfsRun.Millis["volumeCreate"] != 74.2 {
		t.Errorf("an NFS run: %+v", nfsRun)
	}

	if got := keepUnmeasured(filepath.Join(t.TempDir(), "none.json"), result{Date: "now"}); got.Date != "now" {
		t.Errorf("without a results file: %+v", got)
	}
}

// Ratios pair the layouts within rounds: a round where the whole machine was
// slow moves both alike.
func TestSpaceRatiosPairRounds(t *testing.T) {
	r := spaceRow{Name: "w", Unit: "MiB/s", Before: []float64{100, 10, 100}, After: []float64{110, 11, 110}}
	for _, x := range r.ratios() {
		if x < 1.0999 || x > 1.1001 {
			t.Fatalf("ratios = %v, want 1.1 each", r.ratios())
		}
	}
	md := spaceResult{Date: "d", Rounds: 3, LoadAvg: []string{"1", "2"}, Data: []spaceRow{r}}.markdown()
	if !strings.Contains(md, "| w | 100 MiB/s (10–100) | 110 MiB/s (11–110) | **1.10** | 1.10–1.10 |") {
		t.Errorf("markdown:\n%s", md)
	}
}
