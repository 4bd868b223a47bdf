package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Counters are sums of intervals: they keep growing across a Ganesha restart
// (whose counters start again from zero), in base units, labelled by project,
// location, pool and volume.
func TestCollector(t *testing.T) {
	h := newHarness(t, nil)
	v := v1
	v.Project, v.Location, v.Pool, v.ID = "p", "l", "pool1", "v1"
	h.vols.vols = []Volume{v}
	h.g.load(7, 5000, 5000, 5000, 4096, time.Millisecond, time.Millisecond) // before Basin looked: not counted
	h.tick(t)
	// From its first sample on, a volume's counters are there, at zero: a
	// rate() whose window holds the series' start then counts its first
	// interval (a series appearing with that count would lose it).
	first := `
# HELP basin_volume_read_bytes_total Bytes clients read (payload, NFS and SMB).
# TYPE basin_volume_read_bytes_total counter
basin_volume_read_bytes_total{location="l",pool="pool1",project="p",volume="v1"} 0
`
	if err := testutil.CollectAndCompare(h.s.Collector(), strings.NewReader(first), "basin_volume_read_bytes_total"); err != nil {
		t.Fatalf("after the first sample: %v", err)
	}
	h.g.load(7, 1000, 10, 30, 1<<20, 2*time.Millisecond, 4*time.Millisecond) // 100 MiB/s: at the limit
	h.tick(t)
	h.g.restart(h.clk.t.Add(time.Second))
	h.g.load(7, 10, 0, 5, 4096, time.Millisecond, 0)
	h.tick(t)
	// Traffic control's counters from here on: its estimate of the time at
	// the limit replaces the payload's (a quarter of the next interval).
	h.tc.add(v.Name, 0, 0, 0, 0, 100*mib)
	h.tick(t)
	h.tc.add(v.Name, 200*mib, 50*mib, 4, 10000, 100*mib)
	h.tick(t)

	want := `
# HELP basin_volume_at_limit_seconds_total Seconds the volume spent held at its throughput limit (traffic control's estimate; without its counters, sampling intervals whose payload reached 95% of the limit).
# TYPE basin_volume_at_limit_seconds_total counter
basin_volume_at_limit_seconds_total{location="l",pool="pool1",project="p",volume="v1"} 12.5
# HELP basin_volume_clients Distinct client addresses connected to the volume's endpoint (NFS and SMB).
# TYPE basin_volume_clients gauge
basin_volume_clients{location="l",pool="pool1",project="p",volume="v1"} 3
# HELP basin_volume_dropped_packets_total Packets the volume's traffic-control class dropped (its queue full).
# TYPE basin_volume_dropped_packets_total counter
basin_volume_dropped_packets_total{location="l",pool="pool1",project="p",volume="v1"} 4
# HELP basin_volume_metadata_ops_total Requests that were neither reads nor writes (NFSv4: compounds; SMB: opens, closes, listings, attributes, locks, ioctls, flushes, notifications, lease breaks).
# TYPE basin_volume_metadata_ops_total counter
basin_volume_metadata_ops_total{location="l",pool="pool1",project="p",volume="v1"} 35
# HELP basin_volume_read_bytes_total Bytes clients read (payload, NFS and SMB).
# TYPE basin_volume_read_bytes_total counter
basin_volume_read_bytes_total{location="l",pool="pool1",project="p",volume="v1"} 1.04861696e+09
# HELP basin_volume_read_latency_seconds_total Summed latency of reads; divide its rate by read_ops_total's for the mean.
# TYPE basin_volume_read_latency_seconds_total counter
basin_volume_read_latency_seconds_total{location="l",pool="pool1",project="p",volume="v1"} 2.01
# HELP basin_volume_read_ops_total Read requests served (NFS and SMB).
# TYPE basin_volume_read_ops_total counter
basin_volume_read_ops_total{location="l",pool="pool1",project="p",volume="v1"} 1010
# HELP basin_volume_snapshot_bytes Bytes only the volume's snapshots hold.
# TYPE basin_volume_snapshot_bytes gauge
basin_volume_snapshot_bytes{location="l",pool="pool1",project="p",volume="v1"} 1.073741824e+09
# HELP basin_volume_throughput_limit_bytes_per_second The throughput the volume is held to (reads and writes together).
# TYPE basin_volume_throughput_limit_bytes_per_second gauge
basin_volume_throughput_limit_bytes_per_second{location="l",pool="pool1",project="p",volume="v1"} 1.048576e+08
# HELP basin_volume_used_bytes Bytes used by the volume's data and snapshots.
# TYPE basin_volume_used_bytes gauge
basin_volume_used_bytes{location="l",pool="pool1",project="p",volume="v1"} 5.36870912e+09
# HELP basin_volume_wire_read_bytes_total Bytes the volume's endpoint sent (read data, replies, acknowledgements) as traffic control counts them: Ethernet, IP and TCP headers included.
# TYPE basin_volume_wire_read_bytes_total counter
basin_volume_wire_read_bytes_total{location="l",pool="pool1",project="p",volume="v1"} 2.097152e+08
# HELP basin_volume_wire_written_bytes_total Bytes the volume's endpoint received (written data, requests, acknowledgements) as traffic control counts them: Ethernet, IP and TCP headers included.
# TYPE basin_volume_wire_written_bytes_total counter
basin_volume_wire_written_bytes_total{location="l",pool="pool1",project="p",volume="v1"} 5.24288e+07
# HELP basin_volume_write_latency_seconds_total Summed latency of writes; divide its rate by write_ops_total's for the mean.
# TYPE basin_volume_write_latency_seconds_total counter
basin_volume_write_latency_seconds_total{location="l",pool="pool1",project="p",volume="v1"} 0.04
# HELP basin_volume_write_ops_total Write requests served (NFS and SMB).
# TYPE basin_volume_write_ops_total counter
basin_volume_write_ops_total{location="l",pool="pool1",project="p",volume="v1"} 10
# HELP basin_volume_written_bytes_total Bytes clients wrote (payload, NFS and SMB).
# TYPE basin_volume_written_bytes_total counter
basin_volume_written_bytes_total{location="l",pool="pool1",project="p",volume="v1"} 1.048576e+07
`
	if err := testutil.CollectAndCompare(h.s.Collector(), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(registryWith(t, h.s.Collector())); err != nil || n != 15 {
		t.Fatalf("%d series, %v; want 15 (one per metric for the one volume)", n, err)
	}
}

func registryWith(t *testing.T, c Collector) *prometheus.Registry {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	if err := r.Register(c); err != nil {
		t.Fatal(err)
	}
	return r
}
