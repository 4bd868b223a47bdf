package metrics

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Basin's health series, as exposed: requests by method, route and code in
// seconds (a method outside the standard ones is OTHER), operations by kind and
// outcome, restarts by daemon and reason, the queue depth as it is now.
func TestHealth(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := NewHealth(reg)
	depth := 3
	reg.MustRegister(QueueGauge(func() int { return depth }))

	route := "/v1/projects/{project}/locations/{location}/volumes/{volume}"
	h.ObserveRequest("GET", route, 200, 2*time.Millisecond)
	h.ObserveRequest("GET", route, 200, 40*time.Millisecond)
	h.ObserveRequest("DELETE", route, 404, 300*time.Microsecond)
	h.ObserveRequest("BREW", "unmatched", 404, time.Millisecond)
	getVolume := "/google.cloud.netapp.v1.NetApp/GetVolume"
	h.ObserveCall(getVolume, "OK", 3*time.Millisecond)
	h.ObserveCall(getVolume, "OK", time.Millisecond)
	h.ObserveCall(getVolume, "NOT_FOUND", time.Millisecond)
	h.OperationDone("volume.create", OutcomeDone)
	h.OperationDone("volume.create", OutcomeDone)
	h.OperationDone("volume.update", OutcomeFailed)
	h.OperationDone("snapshot.create", OutcomeCancelled)
	h.DaemonRestarted("ganesha", "exited")
	h.DaemonRestarted("ganesha", "dependency")
	h.DaemonRestarted("smbd", "exited")
	h.DaemonRestarted("smbd", "exited")
	h.DaemonRestarted("ganesha", "wedged")
	h.NFSStuckRequests("default", 2, 2)
	h.NFSStuckRequests("other", 1, 1)
	h.NFSStuckRequests("default", 1, 3)
	h.NFSStuckRequests("other", 0, 0) // its Ganesha restarted

	want := `
# HELP basin_controller_queue_depth Unfinished operations waiting for a worker (the controller's queue).
# TYPE basin_controller_queue_depth gauge
basin_controller_queue_depth 3
# HELP basin_dataplane_daemon_restarts_total Data-plane daemons started again, by daemon (ganesha, smbd, winbindd, …) and reason (exited: it crashed, failed to start or was not ready in time; wedged: it served nothing and was killed; dependency: a daemon it depends on restarted).
# TYPE basin_dataplane_daemon_restarts_total counter
basin_dataplane_daemon_restarts_total{daemon="ganesha",reason="dependency"} 1
basin_dataplane_daemon_restarts_total{daemon="ganesha",reason="exited"} 1
basin_dataplane_daemon_restarts_total{daemon="ganesha",reason="wedged"} 1
basin_dataplane_daemon_restarts_total{daemon="smbd",reason="exited"} 2
# HELP basin_nfs_stuck_requests NFS requests in flight for longer than the stuck-request bound now, as of each network's last look.
# TYPE basin_nfs_stuck_requests gauge
basin_nfs_stuck_requests 3
# HELP basin_nfs_stuck_requests_total NFS requests found in flight for longer than the stuck-request bound (--nfs-stuck-after), each counted once.
# TYPE basin_nfs_stuck_requests_total counter
basin_nfs_stuck_requests_total 4
# HELP basin_operations_total Operations finished, by kind (volume.create, …; "unknown" for a kind this Basin does not run) and outcome (done, failed, cancelled).
# TYPE basin_operations_total counter
basin_operations_total{kind="snapshot.create",outcome="cancelled"} 1
basin_operations_total{kind="volume.create",outcome="done"} 2
basin_operations_total{kind="volume.update",outcome="failed"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "basin_controller_queue_depth",
		"basin_dataplane_daemon_restarts_total", "basin_operations_total", "basin_nfs_stuck_requests", "basin_nfs_stuck_requests_total"); err != nil {
		t.Fatal(err)
	}
	depth = 0
	if got := testutil.ToFloat64(QueueGauge(func() int { return depth })); got != 0 {
		t.Fatalf("queue depth %v after it emptied", got)
	}

	// Requests: one histogram per method, route and code, in seconds.
	if n := testutil.CollectAndCount(h.requests); n != 3 {
		t.Fatalf("%d request series, want 3 (GET 200, DELETE 404, OTHER 404)", n)
	}
	n, sum, buckets := requestSeries(t, reg, "GET", route, "200")
	if n != 2 || sum != 0.042 || len(buckets) != len(requestBuckets) {
		t.Fatalf("GET 200: %d requests summing %v s in %d buckets, want 2, 0.042 and %d", n, sum, len(buckets), len(requestBuckets))
	}
	for le, got := range buckets {
		want := uint64(0)
		switch {
		case le >= 0.04:
			want = 2
		case le >= 0.002:
			want = 1
		}
		if got != want {
			t.Fatalf("bucket le=%v holds %d, want %d", le, got, want)
		}
	}
	if n, _, _ := requestSeries(t, reg, "OTHER", "unmatched", "404"); n != 1 {
		t.Fatal("the request with an unknown method is not counted as OTHER")
	}

	// gRPC calls: a histogram of their own, by method and code.
	if n := testutil.CollectAndCount(h.calls); n != 2 {
		t.Fatalf("%d gRPC call series, want 2 (GetVolume OK, GetVolume NOT_FOUND)", n)
	}
	if n, sum, _ := histogramSeries(t, reg, "basin_grpc_request_duration_seconds", map[string]string{"method": getVolume, "code": "OK"}); n != 2 || sum != 0.004 {
		t.Fatalf("GetVolume OK: %d calls summing %v s, want 2 and 0.004", n, sum)
	}
}

// requestSeries returns the exposed request histogram with these label values
// (method, route, code): its count, sum and cumulative bucket counts by bound.
func requestSeries(t *testing.T, reg prometheus.Gatherer, labels ...string) (uint64, float64, map[float64]uint64) {
	t.Helper()
	return histogramSeries(t, reg, "basin_api_request_duration_seconds", map[string]string{"method": labels[0], "route": labels[1], "code": labels[2]})
}

// histogramSeries returns the exposed histogram name with these labels: its count, sum
// and cumulative bucket counts by bound.
func histogramSeries(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (uint64, float64, map[float64]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if !maps.Equal(got, labels) {
				continue
			}
			h := m.GetHistogram()
			buckets := map[float64]uint64{}
			for _, b := range h.GetBucket() {
				buckets[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			return h.GetSampleCount(), h.GetSampleSum(), buckets
		}
	}
	t.Fatalf("no request series %v", labels)
	return 0, 0, nil
}

// Volumes in ERROR, one series per reason, zero included; a pedantic registry
// accepts the collector.
func TestVolumesInErrorGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	counts := map[string]int{"read_only": 2}
	reg.MustRegister(VolumesInErrorGauge([]string{"read_only", "io_errors"}, func() map[string]int { return counts }))
	want := func(ro, io int) string {
		return fmt.Sprintf(`
# HELP basin_volumes_in_error Volumes in ERROR, by reason: read_only or io_errors (the volume's filesystem turned read-only, or its device reported I/O errors), store_read_only or store_io_errors (the same of the node's volume store, which fails every volume in it), operation_failed (an operation on it failed).
# TYPE basin_volumes_in_error gauge
basin_volumes_in_error{reason="io_errors"} %d
basin_volumes_in_error{reason="read_only"} %d
`, io, ro)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(2, 0)), "basin_volumes_in_error"); err != nil {
		t.Fatal(err)
	}
	counts = map[string]int{"io_errors": 1}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0, 1)), "basin_volumes_in_error"); err != nil {
		t.Fatal(err)
	}
}
