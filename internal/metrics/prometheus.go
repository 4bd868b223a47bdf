package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes every sampled volume to Prometheus, in base units: counters
// (_total) of requests, bytes, summed latency, seconds at the limit, wire bytes
// per direction and dropped packets since the Sampler first saw the volume
// (going on across restarts with a saved state, Options.StateDir), and
// gauges of the last interval's space, clients and limit. Labels are project, location, pool and volume (its ID): one series
// per volume and metric. Register it on the Registerer the daemon serves.
type Collector struct{ s *Sampler }

// Collector returns the Sampler's Prometheus collector.
func (s *Sampler) Collector() Collector { return Collector{s} }

var _ prometheus.Collector = Collector{}

var volumeLabels = []string{"project", "location", "pool", "volume"}

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("basin_volume_"+name, help, volumeLabels, nil)
}

var (
	descOps = map[string]*prometheus.Desc{
		"read":     desc("read_ops_total", "Read requests served (NFS and SMB)."),
		"write":    desc("write_ops_total", "Write requests served (NFS and SMB)."),
		"metadata": desc("metadata_ops_total", "Requests that were neither reads nor writes (NFSv4: compounds; SMB: opens, closes, listings, attributes, locks, ioctls, flushes, notifications, lease breaks)."),
	}
	descReadBytes    = desc("read_bytes_total", "Bytes clients read (payload, NFS and SMB).")
	descWriteBytes   = desc("written_bytes_total", "Bytes clients wrote (payload, NFS and SMB).")
	descReadLatency  = desc("read_latency_seconds_total", "Summed latency of reads; divide its rate by read_ops_total's for the mean.")
	descWriteLatency = desc("write_latency_seconds_total", "Summed latency of writes; divide its rate by write_ops_total's for the mean.")
	descAtLimit      = desc("at_limit_seconds_total", "Seconds the volume spent held at its throughput limit (traffic control's estimate; without its counters, sampling intervals whose payload reached 95% of the limit).")
	descLimit        = desc("throughput_limit_bytes_per_second", "The throughput the volume is held to (reads and writes together).")
	descUsed         = desc("used_bytes", "Bytes used by the volume's data and snapshots.")
	descSnapshot     = desc("snapshot_bytes", "Bytes only the volume's snapshots hold.")
	descClients      = desc("clients", "Distinct client addresses connected to the volume's endpoint (NFS and SMB).")
	descWireRead     = desc("wire_read_bytes_total", "Bytes the volume's endpoint sent (read data, replies, acknowledgements) as traffic control counts them: Ethernet, IP and TCP headers included.")
	descWireWrite    = desc("wire_written_bytes_total", "Bytes the volume's endpoint received (written data, requests, acknowledgements) as traffic control counts them: Ethernet, IP and TCP headers included.")
	descDrops        = desc("dropped_packets_total", "Packets the volume's traffic-control class dropped (its queue full).")
)

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descOps {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descReadBytes, descWriteBytes, descReadLatency, descWriteLatency, descAtLimit,
		descLimit, descUsed, descSnapshot, descClients, descWireRead, descWireWrite, descDrops} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, sr := range c.s.series {
		v := sr.vol
		if v.Key == "" {
			continue // taken up from a saved state, not listed yet: no labels
		}
		labels := []string{v.Project, v.Location, v.Pool, v.ID}
		emit := func(d *prometheus.Desc, t prometheus.ValueType, val float64) {
			if !math.IsNaN(val) {
				ch <- prometheus.MustNewConstMetric(d, t, val, labels...)
			}
		}
		t := sr.totals
		if t.haveIO {
			emit(descOps["read"], prometheus.CounterValue, float64(t.io.readOps))
			emit(descOps["write"], prometheus.CounterValue, float64(t.io.writeOps))
			emit(descOps["metadata"], prometheus.CounterValue, float64(t.io.metaOps))
			emit(descReadBytes, prometheus.CounterValue, float64(t.io.readBytes))
			emit(descWriteBytes, prometheus.CounterValue, float64(t.io.writeBytes))
			emit(descReadLatency, prometheus.CounterValue, float64(t.io.readNs)/1e9)
			emit(descWriteLatency, prometheus.CounterValue, float64(t.io.writeNs)/1e9)
		}
		if t.haveWire {
			emit(descWireRead, prometheus.CounterValue, t.wireRead)
			emit(descWireWrite, prometheus.CounterValue, t.wireWrite)
			emit(descDrops, prometheus.CounterValue, t.drops)
		}
		if v.LimitBytesPerSec > 0 {
			emit(descLimit, prometheus.GaugeValue, v.LimitBytesPerSec)
			emit(descAtLimit, prometheus.CounterValue, t.atLimitSeconds)
		}
		last, ok := sr.ring.last()
		if !ok {
			continue
		}
		emit(descUsed, prometheus.GaugeValue, float64(last.V[usedBytes]))
		emit(descSnapshot, prometheus.GaugeValue, float64(last.V[snapshotBytes]))
		emit(descClients, prometheus.GaugeValue, float64(last.V[clients]))
	}
}
