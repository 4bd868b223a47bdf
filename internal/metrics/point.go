package metrics

import (
	"math"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
)

// The values a Point stores, per interval. Everything else (block sizes,
// concurrency, read share, MiB/s) is derived from them when asked for.
const (
	readOps       = iota // reads per second
	writeOps             // writes per second
	metaOps              // metadata requests per second
	readBytes            // bytes read per second
	writeBytes           // bytes written per second
	readLatency          // average read latency, seconds
	writeLatency         // average write latency, seconds
	limitBytes           // throughput limit, bytes per second (NaN: none)
	atLimit              // 1 if the volume ran at its limit this interval, else 0
	usedBytes            // data and snapshots
	snapshotBytes        // bytes only snapshots hold
	clients              // distinct client addresses connected to the endpoint
	numStored
)

// Point is one volume's interval: its end time (Unix seconds) and the stored
// values, NaN where unknown (the first interval after a start or a failed read,
// a latency of no requests). float32 keeps the ring small: 7 significant digits
// are more than any chart shows.
type Point struct {
	T uint32
	V [numStored]float32
}

// nan32 is the stored "unknown".
var nan32 = float32(math.NaN())

// sample is what the sources said of a volume at one instant: cumulative counters
// and gauges, each with whether it could be read.
type sample struct {
	at     time.Time
	nfs    nfs.ExportIO
	nfsOK  bool
	qos    QoSCounters
	qosOK  bool
	used   int64
	snap   int64
	capOK  bool
	conns  int
	connOK bool
}

// atLimitFraction is how close to its limit a volume's payload throughput must
// come for the interval to count as spent at the limit.
const atLimitFraction = 0.95

// derive turns two samples of a volume into the interval's Point. Counters that
// went backwards, or a changed statistics epoch, mean Ganesha restarted or the
// export was added again: the interval then counts what the new counters hold
// (activity since the reset, at most the interval's), never a difference.
func derive(prev, cur sample, v Volume) Point {
	var p Point
	p.T = uint32(cur.at.Unix())
	for i := range p.V {
		p.V[i] = nan32
	}
	dt := cur.at.Sub(prev.at).Seconds()
	ioKnown := prev.nfsOK && cur.nfsOK && dt > 0
	if ioKnown {
		d := nfsDelta(prev.nfs, cur.nfs)
		p.V[readOps] = float32(float64(d.Read.Ops) / dt)
		p.V[writeOps] = float32(float64(d.Write.Ops) / dt)
		p.V[metaOps] = float32(float64(metadataOps(d)) / dt)
		p.V[readBytes] = float32(float64(d.Read.TransferredBytes) / dt)
		p.V[writeBytes] = float32(float64(d.Write.TransferredBytes) / dt)
		if d.Read.Ops > 0 {
			p.V[readLatency] = float32(float64(d.Read.LatencyNs) / float64(d.Read.Ops) / 1e9)
		}
		if d.Write.Ops > 0 {
			p.V[writeLatency] = float32(float64(d.Write.LatencyNs) / float64(d.Write.Ops) / 1e9)
		}
	}
	if v.LimitBytesPerSec > 0 {
		p.V[limitBytes] = float32(v.LimitBytesPerSec)
		at := false
		if ioKnown {
			at = float64(p.V[readBytes])+float64(p.V[writeBytes]) >= atLimitFraction*v.LimitBytesPerSec
		}
		if prev.qosOK && cur.qosOK && cur.qos.Overlimits > prev.qos.Overlimits {
			at = true
		}
		if ioKnown || (prev.qosOK && cur.qosOK) {
			p.V[atLimit] = 0
			if at {
				p.V[atLimit] = 1
			}
		}
	}
	if cur.capOK {
		p.V[usedBytes] = float32(cur.used)
		p.V[snapshotBytes] = float32(cur.snap)
	}
	if cur.connOK {
		p.V[clients] = float32(cur.conns)
	}
	return p
}

// metadataOps is how many of d's requests were neither reads nor writes.
func metadataOps(d nfs.ExportIO) uint64 {
	if d.Ops > d.Read.Ops+d.Write.Ops {
		return d.Ops - d.Read.Ops - d.Write.Ops
	}
	return 0
}

// nfsDelta is cur − prev, or cur itself if the counters were reset in between.
func nfsDelta(prev, cur nfs.ExportIO) nfs.ExportIO {
	reset := !cur.Since.Equal(prev.Since) || cur.Ops < prev.Ops
	for _, pair := range [][2]nfs.IOStats{{prev.Read, cur.Read}, {prev.Write, cur.Write}} {
		a, b := pair[0], pair[1]
		if b.Ops < a.Ops || b.TransferredBytes < a.TransferredBytes || b.RequestedBytes < a.RequestedBytes ||
			b.LatencyNs < a.LatencyNs || b.Errors < a.Errors {
			reset = true
		}
	}
	if reset {
		return cur
	}
	sub := func(a, b nfs.IOStats) nfs.IOStats {
		return nfs.IOStats{RequestedBytes: b.RequestedBytes - a.RequestedBytes, TransferredBytes: b.TransferredBytes - a.TransferredBytes,
			Ops: b.Ops - a.Ops, Errors: b.Errors - a.Errors, LatencyNs: b.LatencyNs - a.LatencyNs}
	}
	return nfs.ExportIO{Read: sub(prev.Read, cur.Read), Write: sub(prev.Write, cur.Write), Ops: cur.Ops - prev.Ops, Since: cur.Since}
}

// Metric is one series the API serves: its name, its unit and how it is
// computed from an interval's (or a bucket's mean) stored values. Stored
// metrics (stored ≥ 0) also have a minimum and maximum over a bucket.
type Metric struct {
	Name   string
	Unit   string
	stored int
	value  func(v *[numStored]float64) float64
}

const mib = 1 << 20

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// scaled returns a stored value times k.
func scaled(i int, k float64) func(v *[numStored]float64) float64 {
	return func(v *[numStored]float64) float64 { return v[i] * k }
}

// Metrics lists every metric, in the order the API returns them.
var Metrics = []Metric{
	{"readIops", "1/s", readOps, scaled(readOps, 1)},
	{"writeIops", "1/s", writeOps, scaled(writeOps, 1)},
	{"metadataIops", "1/s", metaOps, scaled(metaOps, 1)},
	{"readMibps", "MiB/s", readBytes, scaled(readBytes, 1.0/mib)},
	{"writeMibps", "MiB/s", writeBytes, scaled(writeBytes, 1.0/mib)},
	{"readLatencyMs", "ms", readLatency, scaled(readLatency, 1e3)},
	{"writeLatencyMs", "ms", writeLatency, scaled(writeLatency, 1e3)},
	{"readBlockKib", "KiB", -1, func(v *[numStored]float64) float64 { return ratio(v[readBytes], v[readOps]) / 1024 }},
	{"writeBlockKib", "KiB", -1, func(v *[numStored]float64) float64 { return ratio(v[writeBytes], v[writeOps]) / 1024 }},
	// Little's law: requests in flight = arrival rate × time in the system.
	{"concurrency", "1", -1, func(v *[numStored]float64) float64 {
		c := 0.0
		known := false
		for _, k := range [][2]int{{readOps, readLatency}, {writeOps, writeLatency}} {
			if !math.IsNaN(v[k[0]]) && v[k[0]] > 0 && !math.IsNaN(v[k[1]]) {
				c += v[k[0]] * v[k[1]]
				known = true
			} else if !math.IsNaN(v[k[0]]) {
				known = true
			}
		}
		if !known {
			return math.NaN()
		}
		return c
	}},
	{"readShare", "1", -1, func(v *[numStored]float64) float64 { return ratio(v[readOps], v[readOps]+v[writeOps]) }},
	{"throughputLimitMibps", "MiB/s", limitBytes, scaled(limitBytes, 1.0/mib)},
	{"atLimitShare", "1", atLimit, scaled(atLimit, 1)},
	{"usedBytes", "By", usedBytes, scaled(usedBytes, 1)},
	{"snapshotBytes", "By", snapshotBytes, scaled(snapshotBytes, 1)},
	{"clients", "1", clients, scaled(clients, 1)},
}

// metricByName finds a metric.
func metricByName(name string) (Metric, bool) {
	for _, m := range Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}
