package api

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Basin's own calls (the snapshot scheduler's) are audited as API calls are: in
// the project's audit log and the log file, with the status and code their
// outcome has on the wire.
func TestAuditSystemCall(t *testing.T) {
	var file lockedBuffer
	e := newEnv(t, func(o *Options) { o.AuditLog = &file })
	ctx := context.Background()
	e.api.AuditSystemCall(ctx, SystemCall{Principal: "basin:snapshot-scheduler", Project: "p1", Method: "netapp.snapshots.create",
		Resource: "projects/p1/locations/us-east4/volumes/v/snapshots/hourly-20261122-1400", RequestID: "operation-1"})
	e.api.AuditSystemCall(ctx, SystemCall{Principal: "basin:snapshot-scheduler", Project: "p1", Method: "netapp.snapshots.create",
		Resource: "projects/p1/locations/us-east4/volumes/v/snapshots/hourly-20261122-1500",
		Err:      model.Errorf(model.ErrFailedPrecondition, "volume v already has 255 snapshots")})
	list := e.ok("GET", "/v1/projects/p1/auditLogs", nil)
	entries, _ := list["entries"].([]any)
	got := map[string]map[string]any{}
	for _, x := range entries {
		m := x.(map[string]any)
		if m["principal"] == "basin:snapshot-scheduler" {
			got[m["resource"].(string)[strings.LastIndex(m["resource"].(string), "/")+1:]] = m
		}
	}
	if ok := got["hourly-20261122-1400"]; ok == nil || ok["outcome"] != "OK" || ok["status"] != 200.0 || ok["requestId"] != "operation-1" {
		t.Errorf("success entry %v", ok)
	}
	if bad := got["hourly-20261122-1500"]; bad == nil || bad["outcome"] != "FAILED_PRECONDITION" || bad["status"] != 400.0 {
		t.Errorf("failure entry %v", bad)
	}
	if n := strings.Count(file.String(), "basin:snapshot-scheduler"); n != 2 {
		t.Errorf("the audit log file has %d scheduler lines, want 2:\n%s", n, file.String())
	}
}

// A snapshot's provenance (the schedule that took it) is set by the scheduler
// alone: a create or an update through the API cannot set or clear it, and it is
// not shown on the wire.
func TestSnapshotProvenanceIsNotOnTheWire(t *testing.T) {
	e := newEnv(t)
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=manual", map[string]any{"schedule": "hourly", "scheduledFor": "2026-11-22T14:00:00Z"})
	name := strings.TrimPrefix(loc, "/v1/") + "/volumes/vol1/snapshots/"
	record := func(id string) *model.Snapshot {
		t.Helper()
		var sn *model.Snapshot
		if err := e.st.View(context.Background(), func(tx store.Tx) (err error) {
			sn, err = store.Get[model.Snapshot](tx, store.KindSnapshot, name+id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return sn
	}
	if sn := record("manual"); sn.Schedule != "" || !sn.ScheduledFor.IsZero() {
		t.Fatalf("a snapshot taken through the API carries a schedule: %+v", sn)
	}
	b := time.Date(2026, 11, 22, 14, 0, 0, 0, time.UTC)
	if _, err := e.api.Intents().CreateSnapshot(context.Background(), e.st, intent.SnapshotCreate{Project: "p1", Location: "us-east4",
		Volume: "vol1", ID: "hourly-20261122-1400", Schedule: model.ScheduleHourly, ScheduledFor: b}); err != nil {
		t.Fatal(err)
	}
	e.ctrl.Wake()
	deadline := time.Now().Add(10 * time.Second)
	for record("hourly-20261122-1400").State != model.StateReady {
		if time.Now().After(deadline) {
			t.Fatal("the scheduled snapshot never became READY")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.run("PATCH", loc+"/volumes/vol1/snapshots/hourly-20261122-1400?updateMask=labels,description",
		map[string]any{"labels": map[string]any{"a": "b"}, "description": "x", "schedule": ""})
	if sn := record("hourly-20261122-1400"); sn.Schedule != model.ScheduleHourly || !sn.ScheduledFor.Equal(b) {
		t.Fatalf("an update through the API changed a scheduled snapshot's provenance: %+v", sn)
	}
	raw, _ := json.Marshal(e.ok("GET", loc+"/volumes/vol1/snapshots/hourly-20261122-1400", nil))
	if strings.Contains(string(raw), "schedule") {
		t.Fatalf("the wire shows the provenance: %s", raw)
	}
	if _, err := e.api.Intents().CreateSnapshot(context.Background(), e.st, intent.SnapshotCreate{Project: "p1", Location: "us-east4",
		Volume: "vol1", ID: "x", Schedule: "yearly"}); err == nil {
		t.Fatal("a snapshot of an unknown schedule was recorded")
	}
}
