package perf

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strings"
)

// Finding is one conclusion about a run.
type Finding struct {
	ID      string `json:"id"`
	Job     string `json:"job,omitempty"`
	Status  string `json:"status"` // ok, warn or info
	Message string `json:"message"`
}

// Analysis is a report and what it means.
type Analysis struct {
	Jobs     []Job     `json:"jobs"`
	Findings []Finding `json:"findings"`
}

// AnalyzeOptions carry what the fio output cannot say.
type AnalyzeOptions struct {
	// LimitMiBps is the volume's throughput limit on client payload (0 = unknown).
	LimitMiBps float64
	// Volume is what Basin measured of the volume over the run (nil = unknown).
	Volume *VolumeRun
}

// VolumeRun is a volume's metrics over a run (docs/metrics.md): payload and wire
// MiB/s per direction, and the share of the time traffic control held the volume
// at its limit (nil: not served, as without --qos).
type VolumeRun struct {
	ReadMiBps, WriteMiBps         float64
	WireReadMiBps, WireWriteMiBps float64
	AtLimitShare                  *float64
}

// Thresholds of the findings.
const (
	littleTolerance = 0.25 // measured IOPS within ±25 % of Little's law
	bwTolerance     = 0.05 // bandwidth within 5 % of IOPS × block size
	tailFactor      = 10.0 // p99.9 (or max) above 10× the mean is a long tail
	ceilingShare    = 0.90 // at ≥ 90 % of what the QoS limit lets through, the volume was the limit
	atLimitMost     = 0.5  // held at the limit half the run or more: the volume set the pace
	atLimitSome     = 0.05 // held at it some of the time: bursts met the ceiling
	volumeCoverage  = 0.75 // the volume's payload over the run is at least this share of fio's, or the metrics are another time's
)

// Analyze checks a run against the relations the services' guides teach.
func Analyze(rep *Report, o AnalyzeOptions) Analysis {
	a := Analysis{Jobs: rep.Jobs}
	for _, j := range rep.Jobs {
		a.Findings = append(a.Findings, littlesLaw(j))
		for _, d := range j.Directions() {
			a.Findings = append(a.Findings, iopsTimesBS(j, d.Name, d.Direction), latencyTail(j, d.Name, d.Direction))
		}
	}
	if o.LimitMiBps > 0 {
		a.Findings = append(a.Findings, qosCeiling(rep, o))
	}
	return a
}

// The wire bytes of NFS over TCP at MTU 1500, as traffic control counts them
// against a volume's limit (docs/architecture.md, "HTB's traps"): every segment
// carries segHeader bytes of headers (Ethernet 14, IPv4 20, TCP 20 and 12 of
// timestamps) for at most mss bytes of data, and every request an RPC call and an
// RPC reply, each rpcHeader bytes with NFS's arguments or attributes (100 to 200).
// wireAllowance is what Basin's classes allow per payload byte of the limit
// (`basin serve --qos-wire-overhead`, default 1.025).
const (
	segHeader     = 66
	mss           = 1448
	rpcHeader     = 150
	wireAllowance = 1.025
)

// wirePerRequest estimates the wire bytes of one request of bs payload bytes,
// both directions together (a volume's class counts both): the message with the
// data (a WRITE call or a READ reply) in as many segments as it fills, and the
// other (the READ call or the WRITE reply) in one. Acknowledgements are left out:
// most ride on replies or are coalesced (GRO). It gives 1.14× the payload at
// 4 KiB and 1.046× at 1 MiB; Basin measured 1.081× and 1.046× of the data's
// direction alone (docs/metrics.md).
func wirePerRequest(bs float64) float64 {
	data := bs + rpcHeader
	return data + math.Ceil(data/mss)*segHeader + rpcHeader + segHeader
}

// qosCeiling: was the volume's limit the bottleneck? The limit is on payload but
// enforced on the wire, so small requests reach it with less payload: what the
// limit lets through is limit × wireAllowance ÷ (wire bytes per payload byte).
// The volume's metrics over the run answer better: the share of the time it was
// held at its limit, else the wire bytes per payload byte Basin measured; without
// them the ratio is estimated from the block sizes.
func qosCeiling(rep *Report, o AnalyzeOptions) Finding {
	f := Finding{ID: "qos-ceiling"}
	var payload, wire float64 // bytes/s
	for _, j := range rep.Jobs {
		for _, d := range j.Directions() {
			payload += d.BwBytes
			if d.IOPS > 0 && d.BwBytes > 0 {
				wire += d.IOPS * wirePerRequest(d.BwBytes/d.IOPS)
			}
		}
	}
	mibps := payload / (1 << 20)
	ratio, how := 1.0, "no I/O to estimate the wire bytes from"
	if payload > 0 {
		ratio, how = wire/payload, "estimated from the block size for NFS over TCP at MTU 1500"
	}
	var note string
	v := o.Volume
	if v != nil && v.ReadMiBps+v.WriteMiBps < volumeCoverage*mibps {
		note = fmt.Sprintf("; Basin's metrics of the volume (%.1f MiB/s) are not this run's, set aside", v.ReadMiBps+v.WriteMiBps)
		v = nil
	}
	if v != nil {
		mibps = v.ReadMiBps + v.WriteMiBps // other clients share the ceiling too
		if w := v.WireReadMiBps + v.WireWriteMiBps; w > 0 {
			ratio, how = w/mibps, "measured by Basin"
		}
	}
	through := o.LimitMiBps * wireAllowance / ratio
	pace := fmt.Sprintf("%.1f MiB/s is %.0f%% of the %.1f MiB/s of payload the volume's %.1f MiB/s limit lets through at %.2f× payload on the wire (%s)",
		mibps, 100*mibps/through, through, o.LimitMiBps, ratio, how)
	if v != nil && v.AtLimitShare != nil {
		held := *v.AtLimitShare
		pace = fmt.Sprintf("the volume was held at its limit %.0f%% of the run (atLimitShare %.2f); %s", 100*held, held, pace)
		switch {
		case held >= atLimitMost:
			f.Status, f.Message = "info", pace+": the volume's QoS ceiling was the bottleneck; a larger volume or a higher service level raises it"
		case held >= atLimitSome:
			f.Status, f.Message = "info", pace+": bursts met the volume's QoS ceiling; between them the client or the workload set the pace"
		default:
			f.Status, f.Message = "ok", pace+": the client or the workload, not the volume's service level, set the pace"
		}
		return f
	}
	f.Status, f.Message = "ok", pace+note+": the client or the workload, not the volume's service level, set the pace"
	if mibps >= ceilingShare*through {
		f.Status, f.Message = "info", pace+note+": the volume's QoS ceiling was the bottleneck; a larger volume or a higher service level raises it"
	}
	return f
}

// littlesLaw: IOPS = outstanding I/Os / mean latency (outstanding = iodepth × jobs).
func littlesLaw(j Job) Finding {
	f := Finding{ID: "littles-law", Job: j.Name}
	var iops, latWeighted float64
	for _, d := range j.Directions() {
		iops += d.IOPS
		latWeighted += d.IOPS * d.Lat.Mean
	}
	if iops == 0 || latWeighted == 0 {
		f.Status, f.Message = "info", "no latency or IOPS to check Little's law against"
		return f
	}
	meanLatS := latWeighted / iops / 1e9
	outstanding := float64(max(j.IODepth, 1) * max(j.NumJobs, 1))
	expected := outstanding / meanLatS
	ratio := iops / expected
	f.Message = fmt.Sprintf("%.0f IOPS measured; iodepth %d × %d job(s) / %.3f ms mean latency predicts %.0f (ratio %.2f)",
		iops, max(j.IODepth, 1), max(j.NumJobs, 1), meanLatS*1e3, expected, ratio)
	switch {
	case math.Abs(ratio-1) <= littleTolerance:
		f.Status = "ok"
	case ratio < 1:
		f.Status = "warn"
		f.Message += ": fewer I/Os were in flight than configured (a synchronous engine, submission limits, or think time)"
	default:
		f.Status = "warn"
		f.Message += ": more than the configured depth completed per latency period (caching or merged I/O)"
	}
	return f
}

// iopsTimesBS: bandwidth = IOPS × block size.
func iopsTimesBS(j Job, dir string, d *Direction) Finding {
	f := Finding{ID: "iops-times-bs", Job: j.Name + " " + dir}
	want := d.IOPS * float64(j.BS)
	if want == 0 || d.BwBytes == 0 {
		f.Status, f.Message = "info", "no bandwidth or block size to compare"
		return f
	}
	dev := math.Abs(d.BwBytes-want) / want
	f.Message = fmt.Sprintf("%.1f MiB/s = %.0f IOPS × %d B within %.1f%%", d.BwBytes/(1<<20), d.IOPS, j.BS, 100*dev)
	f.Status = "ok"
	if dev > bwTolerance {
		f.Status = "warn"
		f.Message = fmt.Sprintf("%.1f MiB/s differs by %.0f%% from %.0f IOPS × %d B: block sizes varied (bssplit, ranges) or I/Os were short",
			d.BwBytes/(1<<20), 100*dev, d.IOPS, j.BS)
	}
	return f
}

// latencyTail: a p99.9 (or max) far above the mean means a few I/Os waited long.
func latencyTail(j Job, dir string, d *Direction) Finding {
	f := Finding{ID: "latency-tail", Job: j.Name + " " + dir}
	if d.Lat.Mean == 0 {
		f.Status, f.Message = "info", "no latency reported"
		return f
	}
	tail, label := d.Lat.Percentiles["99.900000"], strings.TrimSpace(d.Lat.PercentilesOf+" p99.9")
	if tail == 0 {
		tail, label = d.Lat.Max, strings.TrimSpace(d.Lat.Of+" max")
	}
	factor := tail / d.Lat.Mean
	f.Message = fmt.Sprintf("%s %.3f ms is %.1f× the %s %.3f ms", label, tail/1e6, factor, strings.TrimSpace(d.Lat.Of+" mean"), d.Lat.Mean/1e6)
	f.Status = "ok"
	if factor > tailFactor {
		f.Status = "warn"
		f.Message += ": a long tail (queueing, throttling, or background work on the server); look at p99/p99.99 and at the volume's limit"
	}
	return f
}

// WriteText prints an analysis the way fio's summary reads.
func WriteText(w io.Writer, a Analysis) {
	for _, j := range a.Jobs {
		fmt.Fprintf(w, "%s: rw=%s, bs=%d, iodepth=%d, jobs=%d\n", j.Name, j.RW, j.BS, j.IODepth, j.NumJobs)
		for _, d := range j.Directions() {
			// Each figure under the name of the latency it is (lat or clat), never one under the other's.
			fmt.Fprintf(w, "  %5s: IOPS=%.0f, BW=%.1fMiB/s, io=%.1fMiB, %s mean=%.3fms min=%.3fms max=%.3fms stdev=%.3fms\n", d.Name,
				d.IOPS, d.BwBytes/(1<<20), float64(d.IOBytes)/(1<<20), cmp.Or(d.Lat.Of, "lat"), d.Lat.Mean/1e6, d.Lat.Min/1e6, d.Lat.Max/1e6, d.Lat.Stddev/1e6)
			if len(d.Lat.Percentiles) > 0 {
				var parts []string
				for _, k := range sortedKeys(d.Lat.Percentiles) {
					switch k {
					case "50.000000", "90.000000", "99.000000", "99.900000", "99.990000":
						parts = append(parts, fmt.Sprintf("p%s=%.3fms", strings.TrimRight(strings.TrimRight(k, "0"), "."), d.Lat.Percentiles[k]/1e6))
					}
				}
				fmt.Fprintf(w, "         %s: %s\n", strings.TrimSpace(d.Lat.PercentilesOf+" percentiles"), strings.Join(parts, " "))
			}
		}
	}
	fmt.Fprintln(w, "\nFindings:")
	for _, f := range a.Findings {
		job := ""
		if f.Job != "" {
			job = " [" + f.Job + "]"
		}
		fmt.Fprintf(w, "  %-4s %s%s: %s\n", strings.ToUpper(f.Status), f.ID, job, f.Message)
	}
}
