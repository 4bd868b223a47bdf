package api

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares v's JSON (as the server writes it, indented for review) with
// testdata/golden/name.json.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	json.Indent(&buf, raw, "", "  ")
	buf.WriteByte('\n')
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("%s differs from golden file:\n got: %s\nwant: %s", name, buf.String(), want)
	}
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)

func ptr[T any](v T) *T { return &v }

func goldenFixtures() (*model.Pool, *model.Pool, *model.Volume, *model.Volume, *model.Snapshot, *model.ActiveDirectory) {
	meta := func(id string) model.Meta {
		return model.Meta{Project: "p1", Location: "us-east4", ID: id, CreateTime: t0, State: model.StateReady}
	}
	pool := &model.Pool{Meta: meta("pool1"), ServiceLevel: model.LevelPremium, CapacityGib: 2048, Network: "projects/p1/global/networks/default",
		QosType: model.QosAuto, ActiveDirectory: "projects/p1/locations/us-east4/activeDirectories/ad1"}
	pool.Labels, pool.Desc = map[string]string{"env": "dev"}, "premium pool"
	manual := &model.Pool{Meta: meta("manual"), ServiceLevel: model.LevelExtreme, CapacityGib: 4096, Network: "projects/p1/global/networks/default", QosType: model.QosManual}
	vol := &model.Volume{Meta: meta("vol1"), ShareName: "vol1", StoragePool: "pool1", CapacityGib: 1500, HasExportPolicy: true,
		ExportRules: []model.ExportRule{{AllowedClients: ptr("10.99.0.0/24,10.99.1.5"), HasRootAccess: ptr("false"), AccessType: ptr(int32(2)),
			NFSv3: ptr(true), NFSv4: ptr(false), SquashMode: ptr(int32(2)), AnonUID: ptr(int64(65534))}},
		Protocols: []model.Protocol{model.ProtocolNFSv3, model.ProtocolNFSv4}, UnixPermissions: "0770", SnapshotDirectory: true,
		SnapshotPolicy: &model.SnapshotPolicy{Enabled: ptr(true), Daily: &model.Schedule{SnapshotsToKeep: ptr(7.0), Minute: ptr(0.0), Hour: ptr(1.0)}},
		SecurityStyle:  2, RestrictedActions: []int32{1}, UsedBytes: 3<<30 + 1, Key: "vkey",
		Network: "default", Endpoint: "10.99.0.12", ExportID: 3}
	vol.Labels = map[string]string{"team": "storage"}
	clone := &model.Volume{Meta: meta("clone1"), ShareName: "clone1", StoragePool: "manual", CapacityGib: 100, Protocols: []model.Protocol{model.ProtocolNFSv3},
		ThroughputMibps: 12.5, SecurityStyle: 2, SourceSnapshot: "projects/p1/locations/us-east4/volumes/vol1/snapshots/snap1", Key: "vkey2"}
	clone.State = model.StateCreating
	snap := &model.Snapshot{Meta: meta("snap1"), Volume: "vol1", UsedBytes: 16384}
	snap.Desc = "before upgrade"
	ad := &model.ActiveDirectory{Meta: meta("ad1"), Domain: "corp.example.com", DNS: "10.0.0.2,10.0.0.3", NetBiosPrefix: "nas",
		Username: "admin", PasswordSealed: "sealed:v1:must-never-appear", AesEncryption: true, Site: "Default-First-Site-Name"}
	return pool, manual, vol, clone, snap, ad
}

// TestGoldenJSON pins the wire form of every resource, list, operation shape,
// location and error body.
func TestGoldenJSON(t *testing.T) {
	s := New(Options{})
	pool, manual, vol, clone, snap, ad := goldenFixtures()
	golden(t, "storage_pool", s.poolToWire(pool, &poolStats{capacityGib: 1500, count: 1}))
	golden(t, "storage_pool_manual", s.poolToWire(manual, &poolStats{capacityGib: 100, count: 1, throughput: 12.5}))
	golden(t, "volume", s.volumeToWire(vol, pool))
	golden(t, "volume_clone_creating", s.volumeToWire(clone, manual))
	golden(t, "snapshot", snapshotToWire(snap))
	golden(t, "active_directory", adToWire(ad, true))
	golden(t, "location", s.location(parent{project: "p1", location: "us-east4"}))
	golden(t, "list_locations", apiv1.ListLocationsResponse{Locations: []apiv1.Location{s.location(parent{"p1", "us-east4"})}})
	golden(t, "list_volumes_page", apiv1.ListVolumesResponse{Volumes: []apiv1.Volume{s.volumeToWire(vol, pool)}, NextPageToken: "tok"})
	golden(t, "list_empty", apiv1.ListStoragePoolsResponse{})
}

func TestGoldenOperations(t *testing.T) {
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := New(Options{Store: st})
	pool, _, vol, _, _, _ := goldenFixtures()
	if err := st.Update(context.Background(), func(tx store.Tx) error {
		if err := store.PutPool(tx, pool); err != nil {
			return err
		}
		return store.PutVolume(tx, vol)
	}); err != nil {
		t.Fatal(err)
	}
	base := model.Operation{Project: "p1", Location: "us-east4", ID: "operation-1735787045123-5f0c1a2b3c4d-9e8f7a6b",
		Kind: model.OpVolumeCreate, Target: vol.Name(), CreateTime: t0}
	running := base
	running.StatusMessage = "creating"
	respJSON, _ := json.Marshal(vol)
	done := base
	done.Done, done.EndTime, done.Response = true, t0.Add(2*time.Second), respJSON
	failed := base
	failed.Done, failed.EndTime, failed.RequestedCancellation = true, t0.Add(time.Second), true
	failed.Error = &model.Status{Code: 1, Message: "Operation was cancelled"}
	deleted := base
	deleted.Kind, deleted.Done, deleted.EndTime = model.OpVolumeDelete, true, t0.Add(time.Second)
	poolOp := base
	poolJSON, _ := json.Marshal(pool)
	poolOp.Kind, poolOp.Target, poolOp.Done, poolOp.EndTime, poolOp.Response = model.OpPoolCreate, pool.Name(), true, t0.Add(time.Second), poolJSON
	for name, op := range map[string]model.Operation{"operation_running": running, "operation_done_volume": done,
		"operation_cancelled": failed, "operation_done_delete": deleted, "operation_done_pool": poolOp} {
		w, err := s.operationToWire(context.Background(), &op)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, name, w)
	}
}

func TestGoldenErrors(t *testing.T) {
	s := New(Options{})
	for name, err := range map[string]error{
		"error_not_found": model.Errorf(model.ErrNotFound, "Resource 'projects/p1/locations/us-east4/storagePools/nope' was not found"),
		"error_invalid":   model.Invalid("capacityGib", "is required and must be positive"),
		"error_internal":  os.ErrPermission,
	} {
		rec := httptest.NewRecorder()
		rq := &request{w: rec, r: httptest.NewRequest("GET", "/v1/x", nil), id: "req123"}
		s.writeError(rq, err)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=UTF-8" {
			t.Errorf("content type %q", ct)
		}
		var v any
		json.Unmarshal(rec.Body.Bytes(), &v)
		golden(t, name, v)
	}
}

func TestGoldenSettings(t *testing.T) {
	set := &model.Settings{Project: "p1", Location: "us-east4", ThroughputCapMibps: 312.5, UpdateTime: t0}
	golden(t, "settings", settingsToWire(set))
	golden(t, "settings_default", settingsToWire(&model.Settings{Project: "p1", Location: "us-east4"}))
}
