package daemon

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/basin-nas/basin/internal/metrics"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// The sampler's targets are the stored volumes that have storage, with their
// endpoint, export and, when service levels are enforced, their limit.
func TestMetricsTargets(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	meta := func(id string) model.Meta { return model.Meta{Project: "p", Location: "l", ID: id} }
	if err := st.Update(ctx, func(tx store.Tx) error {
		errs := []error{
			store.PutPool(tx, &model.Pool{Meta: meta("manual"), ServiceLevel: model.LevelPremium, CapacityGib: 1024, QosType: model.QosManual}),
			store.PutVolume(tx, &model.Volume{Meta: meta("a"), StoragePool: "manual", CapacityGib: 100, ThroughputMibps: 42,
				Network: "default", Endpoint: "10.99.0.10", ExportID: 3, Key: "ka"}),
			store.PutVolume(tx, &model.Volume{Meta: meta("b"), StoragePool: "gone", CapacityGib: 100, Key: "kb"}),
			store.PutVolume(tx, &model.Volume{Meta: meta("c"), StoragePool: "manual", CapacityGib: 100}), // no storage yet
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
		limit := 0.0
		if qos {
			limit = 42 << 20
		}
		want := []metrics.Volume{
			{Key: "ka", Name: "projects/p/locations/l/volumes/a", Pool: "manual", Network: "default",
				Endpoint: netip.MustParseAddr("10.99.0.10"), ExportID: 3, LimitBytesPerSec: limit},
			{Key: "kb", Name: "projects/p/locations/l/volumes/b", Pool: "gone"},
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("qos %v: targets\n%+v\nwant\n%+v", qos, got, want)
		}
	}
}
