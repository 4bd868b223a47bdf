package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes every sampled volume to Prometheus, in base units: counters
// (_total) of requests, bytes, summed latency and seconds at the limit since the
// Sampler first saw the volume, and gauges of the last interval's space, clients
// and limit. Labels are project, location, pool and volume (its ID): one series
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
		"read":     desc("read_ops_total", "NFS read requests served."),
		"write":    desc("write_ops_total", "NFS write requests served."),
		"metadata": desc("metadata_ops_total", "NFS requests that were neither reads nor writes (NFSv4: compounds)."),
	}
	descReadBytes    = desc("read_bytes_total", "Bytes NFS clients read.")
	descWriteBytes   = desc("written_bytes_total", "Bytes NFS clients wrote.")
	descReadLatency  = desc("read_latency_seconds_total", "Summed latency of NFS reads; divide its rate by read_ops_total's for the mean.")
	descWriteLatency = desc("write_latency_seconds_total", "Summed latency of NFS writes; divide its rate by write_ops_total's for the mean.")
	descAtLimit      = desc("at_limit_seconds_total", "Seconds of sampling intervals whose payload throughput reached 95% of the volume's limit.")
	descLimit        = desc("throughput_limit_bytes_per_second", "The throughput the volume is held to (reads and writes together).")
	descUsed         = desc("used_bytes", "Bytes used by the volume's data and snapshots.")
	descSnapshot     = desc("snapshot_bytes", "Bytes only the volume's snapshots hold.")
	descClients      = desc("clients", "Distinct client addresses connected to the volume's endpoint (NFS and SMB).")
)

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descOps {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descReadBytes, descWriteBytes, descReadLatency, descWriteLatency, descAtLimit,
		descLimit, descUsed, descSnapshot, descClients} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, sr := range c.s.series {
		v := sr.vol
		labels := []string{v.Project, v.Location, v.Pool, v.ID}
		emit := func(d *prometheus.Desc, t prometheus.ValueType, val float64) {
			if !math.IsNaN(val) {
				ch <- prometheus.MustNewConstMetric(d, t, val, labels...)
			}
		}
		t := sr.totals
		if t.haveIO {
			emit(descOps["read"], prometheus.CounterValue, float64(t.read.ops))
			emit(descOps["write"], prometheus.CounterValue, float64(t.write.ops))
			emit(descOps["metadata"], prometheus.CounterValue, float64(t.metaOps))
			emit(descReadBytes, prometheus.CounterValue, float64(t.read.bytes))
			emit(descWriteBytes, prometheus.CounterValue, float64(t.write.bytes))
			emit(descReadLatency, prometheus.CounterValue, float64(t.read.latencyNs)/1e9)
			emit(descWriteLatency, prometheus.CounterValue, float64(t.write.latencyNs)/1e9)
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
