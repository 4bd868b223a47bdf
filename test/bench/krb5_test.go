package main

import (
	"strings"
	"testing"
)

// The krb5 table: the four flavors' rates, each flavor's ratio to sys paired
// by round, and the CPU rows.
func TestKrb5Markdown(t *testing.T) {
	iops := func(v ...float64) [][2]float64 {
		var s [][2]float64
		for _, x := range v {
			s = append(s, [2]float64{x / 256, x})
		}
		return s
	}
	r := krb5Result{patternResult: patternResult{Pattern: "rand read 4 KiB, qd 16", Samples: map[string][][2]float64{
		"sys": iops(1000, 500, 1000), "krb5": iops(900, 450, 900), "krb5i": iops(800, 400, 800), "krb5p": iops(500, 250, 500),
	}}, ClientCores: map[string]float64{"sys": 0.5, "krb5": 0.6, "krb5i": 0.8, "krb5p": 1.2},
		ServerCores: map[string]float64{"sys": 0.7, "krb5": 0.8, "krb5i": 0.9, "krb5p": 0.75}}
	r.MiBps, r.IOPS = medians(r.Samples)
	md := krb5Markdown(&krb5Section{Date: "2026-01-01T00:00:00Z", Machine: "2 cores", Rounds: 3, Patterns: []krb5Result{r}})
	for _, want := range []string{
		"| rand read 4 KiB, qd 16 | 1000 IOPS | 900 IOPS | 800 IOPS | 500 IOPS | 0.90 | 0.80 | 0.50 |",
		"| rand read 4 KiB, qd 16 | 0.50 / 0.70 | 0.60 / 0.80 | 0.80 / 0.90 | 1.20 / 0.75 |",
		"3 rounds",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}
