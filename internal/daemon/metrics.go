package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/basin-nas/basin/internal/connlimit"
	"github.com/basin-nas/basin/internal/controller"
	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/metrics"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// metricsTargets lists the stored volumes for the metrics sampler, with their
// SMB share (its pool's AD connection and the share name) and the throughput
// each is held to when traffic control enforces service levels.
type metricsTargets struct {
	st store.Store
	// node, if set, is this node's ID in a cluster: it samples only the
	// volumes placed on it.
	node   string
	limits model.Limits
	qos    bool // service levels are enforced: volumes have a limit
}

func (m metricsTargets) Volumes(ctx context.Context) ([]metrics.Volume, error) {
	var out []metrics.Volume
	err := m.st.View(ctx, func(tx store.Tx) error {
		vols, err := store.List[model.Volume](tx, store.KindVolume, "")
		if err != nil {
			return err
		}
		pools := map[string]*model.Pool{}
		out = make([]metrics.Volume, 0, len(vols))
		for _, v := range vols {
			if v.Key == "" || (m.node != "" && v.Node != m.node) {
				continue
			}
			mv := metrics.Volume{Key: v.Key, Name: v.Name(), Project: v.Project, Location: v.Location, ID: v.ID, Pool: v.StoragePool, Network: v.Network, ExportID: v.ExportID}
			mv.Endpoint, _ = netip.ParseAddr(v.Endpoint) // none yet: the zero Addr
			p, ok := pools[v.PoolName()]
			if !ok {
				p, err = store.Get[model.Pool](tx, store.KindPool, v.PoolName())
				if err != nil {
					p = nil // a pool being deleted: no limit, no share
				}
				pools[v.PoolName()] = p
			}
			if p != nil && m.qos {
				mv.LimitBytesPerSec = model.VolumeThroughputMibps(v, p, m.limits) * (1 << 20)
			}
			if p != nil && p.ActiveDirectory != "" && slices.Contains(v.Protocols, model.ProtocolSMB) {
				mv.SMB = metrics.SMBShare{AD: p.ActiveDirectory, Name: v.ShareName}
			}
			out = append(out, mv)
		}
		return nil
	})
	return out, err
}

// qosCounters reads a network's traffic-control counters from the driver, on
// the network's link (none: no sandbox yet, nothing to read).
type qosCounters struct {
	driver qos.Driver
	link   func(network string) (qos.Link, bool)
}

func (q qosCounters) QoSCounters(ctx context.Context, network string) (map[string]qos.Counters, error) {
	l, ok := q.link(network)
	if !ok {
		return nil, fmt.Errorf("network %s has no link", network)
	}
	return q.driver.Counters(ctx, l)
}

// smbIO reads a network's SMB I/O from the data plane, keyed for the sampler.
type smbIO struct{ dp *dataplane.Manager }

func (s smbIO) SMBIO(ctx context.Context, network string) (map[metrics.SMBShare]smb.ShareIO, error) {
	byAD, err := s.dp.SMBIO(ctx, network)
	out := map[metrics.SMBShare]smb.ShareIO{}
	for ad, shares := range byAD {
		for name, io := range shares {
			out[metrics.SMBShare{AD: ad, Name: name}] = io
		}
	}
	return out, err
}

// backendUsage reads a volume's space from the storage backend: used bytes
// (data and snapshots) and the bytes only its snapshots hold.
type backendUsage struct{ be storage.Backend }

func (b backendUsage) VolumeUsage(ctx context.Context, key string) (int64, int64, error) {
	u, err := b.be.Usage(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	var snap int64
	for _, n := range u.SnapshotExclusive {
		snap += n
	}
	return u.UsedBytes, snap, nil
}

// registerController puts the controller's gauges on reg: its queue and the
// volumes in ERROR by reason.
func registerController(reg prometheus.Registerer, ctrl *controller.Controller) {
	reg.MustRegister(metrics.QueueGauge(ctrl.QueueDepth), metrics.VolumesInErrorGauge(controller.ErrorReasons, ctrl.VolumesInError))
}

// metricsRegistry holds what /metrics exposes: Basin's health (API requests,
// operations, daemon restarts; the daemon adds the controller's queue and every
// volume's metrics once it has built them) and its process (Go runtime, CPU,
// memory, open files). The health hooks are wired whether or not /metrics is
// served: they only count.
func metricsRegistry() (*prometheus.Registry, *metrics.Health) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, metrics.NewHealth(reg)
}

// connCollector exposes the API listener's connection counts.
func connCollector(ln *connlimit.Listener) prometheus.Collector {
	return connStats{ln: ln,
		open: prometheus.NewDesc("basin_api_connections", "API connections open now.", nil, nil),
		closed: prometheus.NewDesc("basin_api_connections_closed_total",
			"API connections closed to make room for a new one (reason source: at the client's own cap, --http-max-conns-per-source; total: at --http-max-conns), or refused at once (refused: every connection at the cap was busy with a request).",
			[]string{"reason"}, nil)}
}

type connStats struct {
	ln           *connlimit.Listener
	open, closed *prometheus.Desc
}

func (c connStats) Describe(ch chan<- *prometheus.Desc) { ch <- c.open; ch <- c.closed }

func (c connStats) Collect(ch chan<- prometheus.Metric) {
	s := c.ln.Stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue, float64(s.EvictedSource), "source")
	ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue, float64(s.EvictedTotal), "total")
	ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue, float64(s.Refused), "refused")
}

// operationDone is the controller's OperationDone hook counting into h.
func operationDone(h *metrics.Health) func(model.OpKind, string) {
	return func(kind model.OpKind, outcome string) { h.OperationDone(string(kind), outcome) }
}

// newMetricsServer serves Prometheus' /metrics, and nothing else, on a listener
// of its own (--metrics-listen), without authentication: what it shows (volume
// and project IDs, their load) is for a monitoring network, not for tenants.
func newMetricsServer(reg *prometheus.Registry, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), Timeout: 10 * time.Second, MaxRequestsInFlight: 4}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
}
