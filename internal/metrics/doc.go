// Package metrics samples every volume's performance and space every 10 seconds
// (DESIGN.md §7), keeps a day of those samples in memory and 5-minute rollups in
// the store for 30 days, and answers queries over both.
//
// A tour:
//   - source.go: what the sampler reads, each behind a small interface: the
//     volumes to sample (Targets), Ganesha's per-export counters (NFSSource,
//     and NFSBatchSource to read a network's exports at once),
//     space used and held by snapshots (CapacitySource), connected clients per
//     endpoint address (ClientSource), traffic-control counters (QoSSource, not
//     implemented yet).
//   - point.go: derive turns two samples into an interval's Point: read, write
//     and metadata requests per second, bytes per second, average latency per
//     direction, the throughput limit and whether the interval ran at it, used
//     and snapshot bytes, clients. Counters that go backwards (Ganesha restarted,
//     the export was added again) count from zero, never as a negative or huge
//     rate. Metrics lists what the API serves, including what is derived from the
//     stored values on the way out: block size per direction, concurrency by
//     Little's law (requests per second × latency), the read share.
//   - ring.go: a volume's last 24 h of Points.
//   - agg.go: a bucket's summary (count, min, max, weighted mean per value; the
//     mean latency is over requests, not intervals) and its encoding in the store.
//   - sampler.go: Sampler (Run, Sample, Flush, Query).
//   - aggregate.go: QueryAggregate, a pool's or a project's volumes combined:
//     rates, space, clients and limits summed, latency over all their requests,
//     the most throttled volume's atLimitShare.
//   - prometheus.go: Collector, every volume's series for Prometheus.
//   - health.go: Health, Basin's own health for Prometheus (API requests,
//     operations, daemon restarts, the controller's queue), counted through
//     hooks the daemon hands to the API, the controller and the data plane.
//   - clients.go: NetnsClients, connected clients per endpoint address from a
//     sandbox's TCP tables (NFS and SMB ports; little-endian hosts).
//
// Ganesha's counters come from nfs.DBus.ExportsIO through the data plane (an
// NFSBatchSource), once per network and pass: every export's I/O of every NFS
// version in one call (GetNFSIO) and each export's request count (NFSv3 calls
// and NFSv4 compounds), so metadata requests are requests that are neither reads
// nor writes. If that read fails, each volume is read on its own
// (nfs.DBus.ExportIO, five calls). docs/metrics.md "Sampling cost" has what a
// pass costs at 10, 100 and 1,000 volumes. Ganesha keeps no per-export latency of metadata requests, so there
// is no metadata latency.
//
// Memory: a Point is 52 bytes (a uint32 time and 12 float32 values), so a
// volume's ring holds 8,640 of them in 449,280 bytes (439 KiB) once a day old,
// plus about 600 bytes of other state; 1,000 volumes hold about 430 MiB after a
// day. A stored rollup is 338 bytes of data (one row per volume and 5 minutes:
// 8,640 rows per volume over 30 days, 2.9 MB per volume before SQLite's
// overhead). TestStateBytes checks the Point and rollup sizes stated here.
//
// Imported by the daemon only. It imports model (query types), store (rollup
// rows) and nfs (its counters' type), no other Basin package.
package metrics
