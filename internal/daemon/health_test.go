package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/controller"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/fake"
)

// Wired as Run wires them, the API's requests, the controller's operations and
// its queue show on /metrics: a pool create is one POST on the pools' route
// pattern and one pool.create done.
func TestHealthMetricsWiring(t *testing.T) {
	st := openTestStore(t)
	reg, health := metricsRegistry()
	be := fake.New()
	be.SetStoreFault(storage.Fault{Reason: storage.FaultReadOnly}) // no volume yet: none in ERROR
	ctrl := controller.New(controller.Options{Store: st, Backend: be, Resync: time.Hour, OperationDone: operationDone(health)})
	registerController(reg, ctrl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-ctrl.Ready()
	apiSrv := api.New(api.Options{Store: st, Operations: ctrl, ObserveRequest: health.ObserveRequest})
	t.Cleanup(func() { apiSrv.Close() })
	srv := httptest.NewServer(newMux(apiSrv))
	t.Cleanup(srv.Close)

	body, _ := json.Marshal(map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100", "network": "projects/p/global/networks/default"})
	res, err := http.Post(srv.URL+"/v1/projects/p/locations/local/storagePools?storagePoolId=pool1", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var op struct{ Name string }
	json.NewDecoder(res.Body).Decode(&op)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || op.Name == "" {
		t.Fatalf("create pool: %d, operation %q", res.StatusCode, op.Name)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if !ctrl.WaitDone(wctx, op.Name) {
		t.Fatal("the pool create did not finish")
	}

	metricsSrv := httptest.NewServer(newMetricsServer(reg, slog.New(slog.DiscardHandler)).Handler)
	t.Cleanup(metricsSrv.Close)
	var text string
	want := []string{
		`basin_api_request_duration_seconds_count{code="200",method="POST",route="/v1/projects/{project}/locations/{location}/storagePools"} 1`,
		`basin_operations_total{kind="pool.create",outcome="done"} 1`,
		`basin_controller_queue_depth 0`,
		`basin_volumes_in_error{reason="store_read_only"} 0`,
		`basin_volumes_in_error{reason="operation_failed"} 0`,
	}
	// The request is observed once its answer is written: poll for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := http.Get(metricsSrv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		text = string(b)
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", missing, text)
		}
	}
}
