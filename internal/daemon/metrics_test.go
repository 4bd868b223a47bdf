package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/metrics"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// The sampler's targets are the stored volumes that have storage, with their
// endpoint, export and, when service levels are enforced, their limit.
func TestMetricsTargets(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	meta := func(id string) model.Meta { return model.Meta{Project: "p", Location: "l", ID: id} }
	if err := st.Update(ctx, func(tx store.Tx) error {
		errs := []error{
			store.PutPool(tx, &model.Pool{Meta: meta("manual"), ServiceLevel: model.LevelPremium, CapacityGib: 1024, QosType: model.QosManual}),
			store.PutVolume(tx, &model.Volume{Meta: meta("a"), StoragePool: "manual", CapacityGib: 100, ThroughputMibps: 42,
				Network: "default", Endpoint: "10.99.0.10", ExportID: 3, Key: "ka"}),
			store.PutVolume(tx, &model.Volume{Meta: meta("b"), StoragePool: "gone", CapacityGib: 100, Key: "kb"}),
			store.PutVolume(tx, &model.Volume{Meta: meta("c"), StoragePool: "manual", CapacityGib: 100}), // no storage yet
			store.PutPool(tx, &model.Pool{Meta: meta("smb"), ServiceLevel: model.LevelPremium, CapacityGib: 1024, QosType: model.QosManual,
				ActiveDirectory: "projects/p/locations/l/activeDirectories/ad1"}),
			store.PutVolume(tx, &model.Volume{Meta: meta("d"), StoragePool: "smb", CapacityGib: 100, ThroughputMibps: 8, ShareName: "Docs",
				Protocols: []model.Protocol{model.ProtocolNFSv3, model.ProtocolSMB}, Network: "default", Endpoint: "10.99.0.11", ExportID: 4, Key: "kd"}),
			store.PutVolume(tx, &model.Volume{Meta: meta("e"), StoragePool: "smb", CapacityGib: 100, ThroughputMibps: 8, ShareName: "nfsonly",
				Protocols: []model.Protocol{model.ProtocolNFSv3}, Network: "default", Endpoint: "10.99.0.12", ExportID: 5, Key: "ke"}),
		}
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, qos := range []bool{true, false} {
		got, err := metricsTargets{st: st, limits: model.DefaultLimits(), qos: qos}.Volumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		limit, limitSMB := 0.0, 0.0
		if qos {
			limit, limitSMB = 42<<20, 8<<20
		}
		want := []metrics.Volume{
			{Key: "ka", Name: "projects/p/locations/l/volumes/a", Project: "p", Location: "l", ID: "a", Pool: "manual", Network: "default",
				Endpoint: netip.MustParseAddr("10.99.0.10"), ExportID: 3, LimitBytesPerSec: limit},
			{Key: "kb", Name: "projects/p/locations/l/volumes/b", Project: "p", Location: "l", ID: "b", Pool: "gone"},
			{Key: "kd", Name: "projects/p/locations/l/volumes/d", Project: "p", Location: "l", ID: "d", Pool: "smb", Network: "default",
				Endpoint: netip.MustParseAddr("10.99.0.11"), ExportID: 4, LimitBytesPerSec: limitSMB,
				SMB: metrics.SMBShare{AD: "projects/p/locations/l/activeDirectories/ad1", Name: "Docs"}},
			{Key: "ke", Name: "projects/p/locations/l/volumes/e", Project: "p", Location: "l", ID: "e", Pool: "smb", Network: "default",
				Endpoint: netip.MustParseAddr("10.99.0.12"), ExportID: 5, LimitBytesPerSec: limitSMB},
		}
		if !slices.Equal(got, want) {
			t.Errorf("qos %v: targets\n%+v\nwant\n%+v", qos, got, want)
		}
	}
}

// /metrics answers the volumes' metrics and Basin's process in Prometheus' text
// format, and nothing else is served there.
func TestMetricsServer(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	if err := st.Update(ctx, func(tx store.Tx) error {
		return store.PutVolume(tx, &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: "a"}, StoragePool: "pool1", Key: "ka"})
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_790_000_000, 0)
	s := metrics.New(metrics.Options{Targets: metricsTargets{st: st}, Capacity: usageOf(7 << 20), Now: func() time.Time { return now }})
	for range 2 {
		now = now.Add(10 * time.Second)
		if err := s.Sample(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reg, _ := metricsRegistry()
	reg.MustRegister(s.Collector())
	srv := httptest.NewServer(newMetricsServer(reg, slog.New(slog.DiscardHandler)).Handler)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`basin_volume_used_bytes{location="l",pool="pool1",project="p",volume="a"} 7.340032e+06`,
		"process_resident_memory_bytes", "go_goroutines"} {
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("/metrics: %d, no %q in\n%s", res.StatusCode, want, body)
		}
	}
	for _, p := range []string{"/", "/v1/projects/p/locations/l/volumes", "/healthz"} {
		res, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Fatalf("GET %s on the metrics address: %d, want 404", p, res.StatusCode)
		}
	}
}

type usageOf int64

func (u usageOf) VolumeUsage(context.Context, string) (int64, int64, error) { return int64(u), 0, nil }

func openTestStore(t *testing.T) *store.SQLite {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
