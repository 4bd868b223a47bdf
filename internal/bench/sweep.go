package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// SweepPoint is one measurement of a sweep.
type SweepPoint struct {
	Pattern   string  `json:"pattern"`
	ReadShare int     `json:"readPercent"`
	IOPS      float64 `json:"iops"`
	MiBps     float64 `json:"mibps"`
}

// SweepPatterns are the scale-out charts of the services' documents: 4 KiB random
// and 64 KiB sequential I/O.
var SweepPatterns = []struct {
	Name string
	RW   string
	BS   int64
}{{"4 KiB random", "randrw", 4 << 10}, {"64 KiB sequential", "rw", 64 << 10}}

// Sweep runs base at every read share from 100 % to 0 % in 10 % steps, for both
// patterns, and returns the points in order.
func Sweep(ctx context.Context, e Engine, base Job, progress io.Writer) ([]SweepPoint, error) {
	var out []SweepPoint
	for _, p := range SweepPatterns {
		for share := 100; share >= 0; share -= 10 {
			j := base
			j.BS, j.RWMixRead = p.BS, share
			random := p.RW == "randrw"
			switch {
			case share == 100:
				j.RW = map[bool]string{true: "randread", false: "read"}[random]
			case share == 0:
				j.RW = map[bool]string{true: "randwrite", false: "write"}[random]
			default:
				j.RW = p.RW
			}
			res, err := Run(ctx, e, j, nil)
			if err != nil {
				return nil, fmt.Errorf("%s at %d%% reads: %w", p.Name, share, err)
			}
			pt := SweepPoint{Pattern: p.Name, ReadShare: share}
			jr := res.Jobs[0]
			for _, d := range []*dirStats{jr.Read, jr.Write} {
				if d != nil {
					pt.IOPS += float64(d.ios) / jr.Elapsed.Seconds()
					pt.MiBps += float64(d.bytes) / jr.Elapsed.Seconds() / (1 << 20)
				}
			}
			if progress != nil {
				fmt.Fprintf(progress, "%s, %3d%% reads: %.0f IOPS, %.1f MiB/s\n", p.Name, share, pt.IOPS, pt.MiBps)
			}
			out = append(out, pt)
		}
	}
	return out, nil
}

// WriteSweepTable prints the points as a table.
func WriteSweepTable(w io.Writer, pts []SweepPoint) {
	fmt.Fprintf(w, "%-18s %6s %12s %10s\n", "PATTERN", "READ%", "IOPS", "MiB/s")
	for _, p := range pts {
		fmt.Fprintf(w, "%-18s %6d %12.0f %10.1f\n", p.Pattern, p.ReadShare, p.IOPS, p.MiBps)
	}
}

// WriteSweepSVG draws one chart per pattern: IOPS (4 KiB) or MiB/s (64 KiB) against
// the read share, 100 % on the left as in the services' charts.
func WriteSweepSVG(w io.Writer, pts []SweepPoint, title string) error {
	const width, height, pad, gap = 520, 300, 50, 30
	var b strings.Builder
	total := len(SweepPatterns) * (height + gap)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, total+20)
	fmt.Fprintf(&b, `<text x="%d" y="14" font-size="13" font-weight="bold">%s</text>`+"\n", pad, escape(title))
	for i, pat := range SweepPatterns {
		y0 := 20 + i*(height+gap)
		var series []SweepPoint
		for _, p := range pts {
			if p.Pattern == pat.Name {
				series = append(series, p)
			}
		}
		value := func(p SweepPoint) float64 {
			if pat.BS >= 64<<10 {
				return p.MiBps
			}
			return p.IOPS
		}
		unit := map[bool]string{true: "MiB/s", false: "IOPS"}[pat.BS >= 64<<10]
		top := 1.0
		for _, p := range series {
			top = max(top, value(p))
		}
		top *= 1.1
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s (%s)</text>`+"\n", pad, y0+16, escape(pat.Name), unit)
		x := func(share int) float64 { return pad + float64(100-share)/100*(width-2*pad) }
		y := func(v float64) float64 { return float64(y0+height-pad) - v/top*float64(height-2*pad-10) }
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", pad, y0+height-pad, width-pad, y0+height-pad)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", pad, y0+30, pad, y0+height-pad)
		for s := 100; s >= 0; s -= 20 {
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%d%%</text>`+"\n", x(s), y0+height-pad+15, s)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">read share</text>`+"\n", width/2, y0+height-pad+30)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%.0f</text>`+"\n", pad-4, y(top/1.1)+4, top/1.1)
		var poly []string
		for _, p := range series {
			poly = append(poly, fmt.Sprintf("%.1f,%.1f", x(p.ReadShare), y(value(p))))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="steelblue"/>`+"\n", x(p.ReadShare), y(value(p)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="steelblue" stroke-width="2" points="%s"/>`+"\n", strings.Join(poly, " "))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
