package main

import (
	"strings"
	"testing"
)

// The SMB table pairs each ratio within rounds: a round where the whole machine
// was slow moves both figures of a ratio alike and leaves it be.
func TestSMBMarkdownPairsRatiosByRound(t *testing.T) {
	// Round 2 is slow for everyone; Basin is at 0.9 of bare in every round.
	mib := func(v ...float64) [][2]float64 {
		var s [][2]float64
		for _, x := range v {
			s = append(s, [2]float64{x, x * 256})
		}
		return s
	}
	r := patternResult{Pattern: "seq read 1 MiB, qd 8", Samples: map[string][][2]float64{
		"basin-off": mib(900, 90, 900), "bare-off": mib(1000, 100, 1000),
		"basin-sign": mib(450, 45, 450), "bare-sign": mib(500, 50, 500),
		"basin-encrypt": mib(100, 1000, 500), "bare-encrypt": mib(200, 1250, 400),
	}}
	r.MiBps, r.IOPS = medians(r.Samples)
	if got := r.ratio("basin-off", "bare-off"); got != 0.9 {
		t.Errorf("basin/bare off = %v, want 0.9", got)
	}
	if got := r.ratio("basin-sign", "basin-off"); got != 0.5 {
		t.Errorf("basin sign/off = %v, want 0.5", got)
	}
	// Without samples (an older results file) the medians' ratio stands in.
	plain := patternResult{Pattern: r.Pattern, MiBps: map[string]float64{"a": 3, "b": 4}}
	if got := plain.ratio("a", "b"); got != 0.75 {
		t.Errorf("ratio without samples = %v, want 0.75", got)
	}
	md := smbMarkdown("2026-01-01T00:00:00Z", 3, []patternResult{r})
	for _, want := range []string{
		"| seq read 1 MiB, qd 8 | off | 900 MiB/s | 1000 MiB/s | 0.90 | 1.00 | 1.00 |",
		"| seq read 1 MiB, qd 8 | sign | 450 MiB/s | 500 MiB/s | 0.90 | 0.50 | 0.50 |",
		// The median of the rounds' ratios (0.5, 0.8, 1.25), not the medians'
		// ratio (500 / 400 = 1.25).
		"| seq read 1 MiB, qd 8 | encrypt | 500 MiB/s | 400 MiB/s | 0.80 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}
