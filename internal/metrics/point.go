package metrics

import (
	"math"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/smb"
)

// The values a Point stores, per interval. Everything else (block sizes,
// concurrency, read share, MiB/s) is derived from them when asked for.
const (
	readOps        = iota // reads per second
	writeOps              // writes per second
	metaOps               // metadata requests per second
	readBytes             // bytes read per second
	writeBytes            // bytes written per second
	readLatency           // average read latency, seconds
	writeLatency          // average write latency, seconds
	limitBytes            // throughput limit, bytes per second (NaN: none)
	atLimit               // 1 if the volume ran at its limit this interval, else 0
	usedBytes             // data and snapshots
	snapshotBytes         // bytes only snapshots hold
	clients               // distinct client addresses connected to the endpoint
	wireReadBytes         // wire bytes per second the endpoint sent (reads, replies, acknowledgements)
	wireWriteBytes        // wire bytes per second it received
	droppedPackets        // packets per second the volume's traffic-control class dropped
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
	smb    smb.ShareIO
	smbOK  bool
	qos    qos.Counters
	qosOK  bool
	used   int64
	snap   int64
	capOK  bool
	conns  int
	connOK bool

	// nfsExport is the export nfs was read from: another export's counters
	// (the volume exported again while Basin was down) are not comparable.
	nfsExport uint64
}

// atLimitFraction is how close to its limit a volume's payload throughput must
// come for an interval to count as spent at the limit, when traffic control's
// counters are not there to say (qos.Interval.AtCeiling).
const atLimitFraction = 0.95

// ioDelta is an interval's requests, payload bytes and summed latency, over NFS
// and SMB together.
type ioDelta struct {
	readOps, writeOps, metaOps uint64
	readBytes, writeBytes      uint64
	readNs, writeNs            uint64
}

// delta is what an interval counted, for the Point and the volume's totals.
type delta struct {
	dt     float64 // seconds
	io     ioDelta
	ioOK   bool
	wire   qos.Interval
	wireOK bool
}

// between is what happened to a volume from prev to cur: its I/O, known when
// each protocol it is served over (NFS with an export, SMB with a share) was
// read at both ends (NFS from the same export), and its traffic-control
// class's interval, when read at both ends with no reset between.
func between(prev, cur sample, v Volume) delta {
	d := delta{dt: cur.at.Sub(prev.at).Seconds()}
	if d.dt <= 0 {
		return d
	}
	d.ioOK = v.ExportID != 0 || v.SMB.Name != ""
	if v.ExportID != 0 {
		if prev.nfsOK && cur.nfsOK && prev.nfsExport == cur.nfsExport {
			n := nfsDelta(prev.nfs, cur.nfs)
			d.io.readOps, d.io.writeOps, d.io.metaOps = n.Read.Ops, n.Write.Ops, metadataOps(n)
			d.io.readBytes, d.io.writeBytes = n.Read.TransferredBytes, n.Write.TransferredBytes
			d.io.readNs, d.io.writeNs = n.Read.LatencyNs, n.Write.LatencyNs
		} else {
			d.ioOK = false
		}
	}
	if v.SMB.Name != "" {
		if s, ok := smbDelta(prev, cur); ok {
			d.io.readOps += s.Reads
			d.io.writeOps += s.Writes
			d.io.metaOps += s.Other
			d.io.readBytes += s.ReadBytes
			d.io.writeBytes += s.WriteBytes
			d.io.readNs += s.ReadNs
			d.io.writeNs += s.WriteNs
		} else {
			d.ioOK = false
		}
	}
	if !d.ioOK {
		d.io = ioDelta{}
	}
	if prev.qosOK && cur.qosOK {
		d.wire, d.wireOK = qos.Between(prev.qos, cur.qos, cur.at.Sub(prev.at))
	}
	return d
}

// derive turns an interval of a volume into its Point. Counters that went
// backwards, or a changed statistics epoch, mean Ganesha restarted or the export
// was added again: the interval then counts what the new counters hold (activity
// since the reset, at most the interval's), never a difference.
//
// The share of the interval at the limit is traffic control's (the share its
// class spent held at its ceiling, qos.Interval.AtCeiling) when its counters
// were read; otherwise 1 when the payload throughput reached 95 % of the limit,
// else 0.
func derive(d delta, at time.Time, v Volume) Point {
	var p Point
	p.T = uint32(at.Unix())
	for i := range p.V {
		p.V[i] = nan32
	}
	rate := func(n uint64) float32 { return float32(float64(n) / d.dt) }
	if d.ioOK {
		p.V[readOps], p.V[writeOps], p.V[metaOps] = rate(d.io.readOps), rate(d.io.writeOps), rate(d.io.metaOps)
		p.V[readBytes], p.V[writeBytes] = rate(d.io.readBytes), rate(d.io.writeBytes)
		if d.io.readOps > 0 {
			p.V[readLatency] = float32(float64(d.io.readNs) / float64(d.io.readOps) / 1e9)
		}
		if d.io.writeOps > 0 {
			p.V[writeLatency] = float32(float64(d.io.writeNs) / float64(d.io.writeOps) / 1e9)
		}
	}
	if d.wireOK {
		p.V[wireReadBytes] = float32(d.wire.Sent / d.dt)
		p.V[wireWriteBytes] = float32(d.wire.Received / d.dt)
		p.V[droppedPackets] = float32(d.wire.Drops / d.dt)
	}
	if v.LimitBytesPerSec > 0 {
		p.V[limitBytes] = float32(v.LimitBytesPerSec)
		switch {
		case d.wireOK:
			p.V[atLimit] = float32(d.wire.AtCeiling)
		case d.ioOK:
			p.V[atLimit] = 0
			if float64(p.V[readBytes])+float64(p.V[writeBytes]) >= atLimitFraction*v.LimitBytesPerSec {
				p.V[atLimit] = 1
			}
		}
	}
	return p
}

// gauges adds what cur says of space and clients to p.
func (cur sample) gauges(p *Point) {
	if cur.capOK {
		p.V[usedBytes] = float32(cur.used)
		p.V[snapshotBytes] = float32(cur.snap)
	}
	if cur.connOK {
		p.V[clients] = float32(cur.conns)
	}
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

// smbDelta is a share's SMB I/O from prev to cur; ok is false when it is
// unknown: not read at both ends, or counted by two different Accountants
// (their Since differs: the data plane started the sums again, and a new
// Accountant's first read counts whole processes that served before it, so
// neither a difference nor its sums would be the interval's). Counters that
// went back under the same Since are a saved state older than the reading
// (the data plane's save failed and so did its removal): unknown too. A source
// that says no Since (the zero time) started again when they went back: the
// interval counts what they hold.
func smbDelta(prev, cur sample) (smb.ShareIO, bool) {
	if !prev.smbOK || !cur.smbOK || !prev.smb.Since.Equal(cur.smb.Since) {
		return smb.ShareIO{}, false
	}
	p, c := prev.smb, cur.smb
	a := []uint64{p.Reads, p.Writes, p.Other, p.ReadBytes, p.WriteBytes, p.ReadNs, p.WriteNs}
	b := []uint64{c.Reads, c.Writes, c.Other, c.ReadBytes, c.WriteBytes, c.ReadNs, c.WriteNs}
	for i := range a {
		if b[i] < a[i] {
			return c, c.Since.IsZero()
		}
	}
	return smb.ShareIO{Reads: c.Reads - p.Reads, Writes: c.Writes - p.Writes, Other: c.Other - p.Other,
		ReadBytes: c.ReadBytes - p.ReadBytes, WriteBytes: c.WriteBytes - p.WriteBytes,
		ReadNs: c.ReadNs - p.ReadNs, WriteNs: c.WriteNs - p.WriteNs}, true
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
	{"wireReadMibps", "MiB/s", wireReadBytes, scaled(wireReadBytes, 1.0/mib)},
	{"wireWriteMibps", "MiB/s", wireWriteBytes, scaled(wireWriteBytes, 1.0/mib)},
	{"droppedPacketsPerSec", "1/s", droppedPackets, scaled(droppedPackets, 1)},
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
