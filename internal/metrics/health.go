package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Health is Basin's own health on /metrics: API requests (a histogram of their
// durations by method, route pattern and status code) and gRPC calls (by
// method and code), operations finished by
// kind and outcome, data-plane daemon restarts by daemon and reason, and NFS
// requests stuck in Ganesha (found, and stuck now). Every label takes values
// from a bounded set: route patterns come from the API's route table, never from
// request paths. The daemon hands its methods to the API, the controller and the
// data plane as hooks; the controller's queue is a gauge of its own
// (QueueGauge).
type Health struct {
	requests   *prometheus.HistogramVec
	calls      *prometheus.HistogramVec
	operations *prometheus.CounterVec
	restarts   *prometheus.CounterVec
	stuckFound prometheus.Counter

	mu         sync.Mutex
	stuckByNet map[string]int // network → requests stuck now
}

// requestBuckets span a cached GET (a fraction of a millisecond) to a mutating
// call that waited its --sync-wait for its operation (seconds), in seconds.
var requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// NewHealth registers Basin's health metrics on reg.
func NewHealth(reg prometheus.Registerer) *Health {
	h := &Health{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "basin_api_request_duration_seconds",
			Help:    "Time to answer API requests, by method, route pattern (the route table's, or \"unmatched\") and status code.",
			Buckets: requestBuckets}, []string{"method", "route", "code"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "basin_grpc_request_duration_seconds",
			Help:    "Time to answer the API's gRPC calls, by full method name and canonical status code (OK, NOT_FOUND, …).",
			Buckets: requestBuckets}, []string{"method", "code"}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "basin_operations_total",
			Help: "Operations finished, by kind (volume.create, …; \"unknown\" for a kind this Basin does not run) and outcome (done, failed, cancelled)."}, []string{"kind", "outcome"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "basin_dataplane_daemon_restarts_total",
			Help: "Data-plane daemons started again, by daemon (ganesha, smbd, winbindd, …) and reason (exited: it crashed, failed to start or was not ready in time; wedged: it served nothing and was killed; dependency: a daemon it depends on restarted)."},
			[]string{"daemon", "reason"}),
		stuckFound: prometheus.NewCounter(prometheus.CounterOpts{Name: "basin_nfs_stuck_requests_total",
			Help: "NFS requests found in flight for longer than the stuck-request bound (--nfs-stuck-after), each counted once."}),
		stuckByNet: map[string]int{},
	}
	stuckNow := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "basin_nfs_stuck_requests",
		Help: "NFS requests in flight for longer than the stuck-request bound now, as of each network's last look."},
		func() float64 {
			h.mu.Lock()
			defer h.mu.Unlock()
			n := 0
			for _, v := range h.stuckByNet {
				n += v
			}
			return float64(n)
		})
	reg.MustRegister(h.requests, h.calls, h.operations, h.restarts, h.stuckFound, stuckNow)
	return h
}

// methods are the HTTP methods kept as they are in the method label; any other
// is "OTHER" (the API answers them all, so the label stays bounded).
var methods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true}

// ObserveRequest records one API request: route is the pattern of the route it
// matched (or "unmatched"), code the status answered.
func (h *Health) ObserveRequest(method, route string, code int, d time.Duration) {
	if !methods[method] {
		method = "OTHER"
	}
	h.requests.WithLabelValues(method, route, strconv.Itoa(code)).Observe(d.Seconds())
}

// ObserveCall records one gRPC call: method is its full method name (one
// of the services' methods: gRPC refuses a method no service has before any
// is observed), code the canonical code answered.
func (h *Health) ObserveCall(method, code string, d time.Duration) {
	h.calls.WithLabelValues(method, code).Observe(d.Seconds())
}

// Outcomes of an operation.
const (
	OutcomeDone      = "done"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
)

// OperationDone records a finished operation of kind with outcome (OutcomeDone,
// OutcomeFailed or OutcomeCancelled).
func (h *Health) OperationDone(kind, outcome string) {
	h.operations.WithLabelValues(kind, outcome).Inc()
}

// DaemonRestarted records that the data plane starts daemon again, and why
// ("exited", "wedged" or "dependency").
func (h *Health) DaemonRestarted(daemon, reason string) {
	h.restarts.WithLabelValues(daemon, reason).Inc()
}

// NFSStuckRequests records a look of network's Ganesha watchdog: found requests
// stuck since its last look, and stuck requests stuck now.
func (h *Health) NFSStuckRequests(network string, found, stuck int) {
	h.stuckFound.Add(float64(found))
	h.mu.Lock()
	defer h.mu.Unlock()
	if stuck == 0 {
		delete(h.stuckByNet, network)
	} else {
		h.stuckByNet[network] = stuck
	}
}

// QueueGauge is the controller's queue depth as a gauge: depth returns the
// unfinished operations not running on a worker yet.
func QueueGauge(depth func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "basin_controller_queue_depth",
		Help: "Unfinished operations waiting for a worker (the controller's queue)."},
		func() float64 { return float64(depth()) })
}

// VolumesInErrorGauge is how many volumes are in ERROR, by reason, as a gauge
// (basin_volumes_in_error): count returns the number per reason, and every one of
// reasons is exposed, zero included, so that an alert on a reason has a series to
// watch before it first happens.
func VolumesInErrorGauge(reasons []string, count func() map[string]int) prometheus.Collector {
	return &volumesInError{reasons: reasons, count: count,
		desc: prometheus.NewDesc("basin_volumes_in_error",
			"Volumes in ERROR, by reason: read_only or io_errors (the volume's filesystem turned read-only, or its device reported I/O errors), "+
				"store_read_only or store_io_errors (the same of the node's volume store, which fails every volume in it), operation_failed (an operation on it failed).",
			[]string{"reason"}, nil)}
}

type volumesInError struct {
	reasons []string
	count   func() map[string]int
	desc    *prometheus.Desc
}

func (v *volumesInError) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

func (v *volumesInError) Collect(ch chan<- prometheus.Metric) {
	n := v.count()
	for _, r := range v.reasons {
		ch <- prometheus.MustNewConstMetric(v.desc, prometheus.GaugeValue, float64(n[r]), r)
	}
}
