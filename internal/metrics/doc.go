// Package metrics samples every volume's performance and space every 10 seconds
// (docs/metrics.md), keeps a day of those samples in memory and 5-minute rollups in
// the store for 30 days, and answers queries over both.
//
// A tour:
//   - source.go: what the sampler reads, each behind a small interface: the
//     volumes to sample (Targets), Ganesha's per-export counters (NFSSource,
//     and NFSBatchSource to read a network's exports at once), SMB shares'
//     counters (SMBSource: smbd's profile, per share, dataplane.Manager.SMBIO),
//     space used and held by snapshots (CapacitySource), connected clients per
//     endpoint address (ClientSource), traffic-control class counters
//     (QoSSource: the qos driver's, per class). Clients, traffic control and SMB
//     are read once per network and pass (perNetwork).
//   - point.go: between and derive turn two samples into an interval's Point:
//     read, write and metadata requests per second, bytes per second, average
//     latency per direction (NFS and SMB together for a volume served over
//     both), the throughput limit and the share of the interval spent at it
//     (traffic control's estimate, qos.Between; without its counters, whether
//     the payload reached 95 % of the limit), wire bytes per second per
//     direction and dropped packets (traffic control), used and snapshot bytes,
//     clients. Counters that go backwards (Ganesha restarted, the export was
//     added again) count from zero, never as a negative or huge rate; traffic
//     control's that go back (its class made again) leave the wire unknown for
//     the interval. Metrics lists what the API serves, including what is derived
//     from the stored values on the way out: block size per direction,
//     concurrency by Little's law (requests per second × latency), the read
//     share.
//   - ring.go: a volume's last 24 h of Points.
//   - agg.go: a bucket's summary (count, min, max, weighted mean per value; the
//     mean latency is over requests, not intervals) and its encoding in the store.
//   - sampler.go: Sampler (Run, Sample, Flush, Query).
//   - state.go: what survives a restart, under Options.StateDir: a state file
//     rewritten atomically after every pass (each volume's last counter
//     readings, Prometheus totals and rollup in progress) and a journal of the
//     ring's Points (its last hour is read back). A start counts what the data
//     plane's daemons, which outlive Basin, counted while it was down, spread
//     over the intervals it spans, and goes on with the rollups in progress.
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
// pass costs at 10, 100 and 1,000 volumes. Ganesha keeps no per-export latency
// of metadata requests, so there is no metadata latency.
//
// SMB counters come from smbd's own profile, per process, summed per share by
// smb.Accountant in the data plane: a connection serving one share is that
// share's; one serving several cannot be split and counts for none (smb's
// package doc). The data plane saves each instance's Accountant and takes it up
// after a restart of Basin, so the sums go on under the same ShareIO.Since and
// are resumed like Ganesha's; sums of another Since make the interval unknown. Traffic control's come from the qos driver, two netlink dumps
// per network and pass: the classes' counters, and what each endpoint address
// sent (the split per direction, which HTB does not count).
//
// Memory: a Point is 64 bytes (a uint32 time and 15 float32 values), so a
// volume's ring holds 8,640 of them in 552,960 bytes (540 KiB) once a day old,
// plus about 600 bytes of other state; 1,000 volumes hold about 530 MiB after a
// day. A stored rollup is 422 bytes of data (one row per volume and 5 minutes:
// 8,640 rows per volume over 30 days, 3.6 MB per volume before SQLite's
// overhead). TestStateBytes checks the Point and rollup sizes stated here.
// The state file holds about 730 bytes per volume (68 more with an SMB share),
// and the journal 82 bytes per volume and pass (30 MB an hour at 1,000
// volumes; docs/metrics.md, "Across a restart").
// Rollups stored before the wire values existed decode with those unknown.
//
// Imported by the daemon only. It imports model (query types), store (rollup
// rows), and nfs, qos and smb (their counters' types and qos.Between), no other
// Basin package.
package metrics
