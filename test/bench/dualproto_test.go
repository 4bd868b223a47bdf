package main

import (
	"strings"
	"testing"
)

// The section's table: medians per volume kind, and the ratios to the
// NFS-only volume's.
func TestDualMarkdown(t *testing.T) {
	r := dualResult{Date: "2026-12-01T00:00:00Z", Rounds: 3, Files: 2000,
		StatsPerSec: map[string][]float64{"nfs": {1000, 900, 1100}, "unix": {500, 400, 600}, "ntfs": {450, 450, 450}},
		ListMillis:  map[string][]float64{"nfs": {10, 20, 30}, "unix": {40, 40, 40}, "ntfs": {30, 50, 40}}}
	md := r.markdown()
	for _, want := range []string{
		"| NFS-only (attributes cached) | 1000 | 1.00 | 20.0 ms | 1.00 |",
		"| [SMB, NFSV3], UNIX (uncached) | 500 | 0.50 | 40.0 ms | 2.00 |",
		"| [SMB, NFSV3], NTFS (uncached) | 450 | 0.45 | 40.0 ms | 2.00 |",
		"Medians of 3 rounds",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
