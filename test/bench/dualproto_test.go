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

// The SMB half: opens per second per volume and requested oplock, the levels
// granted, and the median of each round's dual / SMB-only ratio.
func TestDualMarkdownOpens(t *testing.T) {
	r := dualResult{Date: "2026-12-01T00:00:00Z", Rounds: 3, Files: 10,
		StatsPerSec: map[string][]float64{"nfs": {1}, "unix": {1}, "ntfs": {1}},
		ListMillis:  map[string][]float64{"nfs": {1}, "unix": {1}, "ntfs": {1}},
		Opens:       2000,
		OpensPerSec: map[string][]float64{"smb-batch": {1000, 800, 1200}, "dual-batch": {900, 400, 1200},
			"smb-none": {1000, 1000, 1000}, "dual-none": {950, 1000, 1050}},
		OpensGranted: map[string]string{"smb-batch": "9", "dual-batch": "9,9", "smb-none": "0", "dual-none": "0"}}
	md := r.markdown()
	for _, want := range []string{
		"| a batch oplock | 1000 (batch) | 900 (batch) | 0.90 |", // ratios 0.90, 0.50, 1.00
		"| no oplock | 1000 (none) | 1000 (none) | 1.00 |",
		"2000 opens of one 4 KiB file",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if r.OpensPerSec = nil; strings.Contains(r.markdown(), "opens/s") {
		t.Errorf("a result without the SMB half renders its table")
	}
}
