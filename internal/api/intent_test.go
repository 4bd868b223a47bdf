package api

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// A scheduler-style caller takes snapshots through the intent layer, with no HTTP
// in the path, and gets for bad input exactly the status and message the API
// answers for the same input.
func TestSnapshotIntentMatchesAPI(t *testing.T) {
	limits := model.DefaultLimits()
	limits.MaxSnapshotsPerVol = 2
	e := newEnv(t, func(o *Options) { o.Limits = limits })
	e.pool("pool1", 100, nil)
	e.volume("vol1", "pool1", 10, nil)
	e.volume("busy", "pool1", 10, nil)
	e.run("POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", nil)
	err := e.st.Update(context.Background(), func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, strings.TrimPrefix(loc, "/v1/")+"/volumes/busy")
		if err != nil {
			return err
		}
		v.State = model.StateUpdating
		return store.PutVolume(tx, v)
	})
	if err != nil {
		t.Fatal(err)
	}

	// The scheduler: its own intent layer over the same store, no api.Server.
	sched := intent.New(intent.Options{Limits: limits})
	ctx := context.Background()
	op, err := sched.CreateSnapshot(ctx, e.st, intent.SnapshotCreate{Project: "p1", Location: "us-east4", Volume: "vol1",
		ID: "hourly-1", Description: "taken by the scheduler", Labels: map[string]string{"by": "scheduler"}})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if op.Kind != model.OpSnapshotCreate || op.Target != strings.TrimPrefix(loc, "/v1/")+"/volumes/vol1/snapshots/hourly-1" {
		t.Fatalf("operation = %+v", op)
	}
	e.ctrl.Wake()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sn := e.ok("GET", loc+"/volumes/vol1/snapshots/hourly-1", nil)
		if sn["state"] == "READY" {
			if sn["description"] != "taken by the scheduler" {
				t.Errorf("snapshot = %v", sn)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot taken through the intent layer never became READY: %v", sn)
		}
		time.Sleep(10 * time.Millisecond)
	}

	long := strings.Repeat("x", 2049)
	for _, tc := range []struct {
		name, volume, id string
		desc             string
		labels           map[string]string
	}{
		{name: "missing id", volume: "vol1", id: ""},
		{name: "bad id", volume: "vol1", id: "1-bad"},
		{name: "id ending with hyphen", volume: "vol1", id: "bad-"},
		{name: "duplicate", volume: "vol1", id: "s1"},
		{name: "too many snapshots", volume: "vol1", id: "s3"},
		{name: "volume absent", volume: "nosuch", id: "s1"},
		{name: "volume malformed", volume: "-x", id: "s1"},
		{name: "volume not ready", volume: "busy", id: "s1"},
		{name: "description too long", volume: "vol1", id: "s4", desc: long},
		{name: "bad label key", volume: "vol1", id: "s4", labels: map[string]string{"Bad": "x"}},
		{name: "bad label value", volume: "vol1", id: "s4", labels: map[string]string{"ok": "UPPER"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{}
			if tc.desc != "" {
				body["description"] = tc.desc
			}
			if tc.labels != nil {
				body["labels"] = tc.labels
			}
			r := e.do("POST", loc+"/volumes/"+tc.volume+"/snapshots?snapshotId="+url.QueryEscape(tc.id), body)
			errObj, _ := r.body["error"].(map[string]any)
			if errObj == nil {
				t.Fatalf("API accepted: %s", r.raw)
			}
			_, err := sched.CreateSnapshot(ctx, e.st, intent.SnapshotCreate{Project: "p1", Location: "us-east4", Volume: tc.volume,
				ID: tc.id, Description: tc.desc, Labels: tc.labels})
			if err == nil {
				t.Fatal("intent layer accepted what the API refused")
			}
			status, code, _ := statusOf(err)
			if status != r.status || code != errObj["status"] || err.Error() != errObj["message"] {
				t.Errorf("intent: %d %s %q\n   API: %d %s %q", status, code, err.Error(), r.status, errObj["status"], errObj["message"])
			}
		})
	}
}

// One network's SMB service joins one Active Directory: a pool naming another AD
// than the pools already on its network is refused, naming activeDirectory.
// TestSeveralActiveDirectoriesPerNetwork: pools on one network may use different
// Active Directory policies (each gets a Samba instance of its own in the
// network's sandbox, serving only its own endpoints), in one project or several.
func TestSeveralActiveDirectoriesPerNetwork(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"ad1", "ad2"} {
		e.run("POST", loc+"/activeDirectories?activeDirectoryId="+id, map[string]any{"domain": id + ".example.com", "dns": "10.99.0.2",
			"netBiosPrefix": "nas", "username": "admin", "password": "pw"})
	}
	ad1, ad2 := "projects/p1/locations/us-east4/activeDirectories/ad1", "projects/p1/locations/us-east4/activeDirectories/ad2"
	e.pool("pool1", 100, map[string]any{"activeDirectory": ad1})
	e.pool("same", 100, map[string]any{"activeDirectory": ad1})
	e.pool("noad", 100, nil)
	e.pool("pool2", 100, map[string]any{"activeDirectory": ad2})
	e.run("PATCH", loc+"/storagePools/noad?updateMask=activeDirectory", map[string]any{"activeDirectory": ad2})
	for pool, want := range map[string]string{"pool1": ad1, "same": ad1, "pool2": ad2, "noad": ad2} {
		if got := e.ok("GET", loc+"/storagePools/"+pool, nil)["activeDirectory"]; got != want {
			t.Errorf("pool %s: activeDirectory = %v, want %s", pool, got, want)
		}
	}
	// Another project's policy on the same network.
	p2 := "/v1/projects/p2/locations/us-east4"
	e.run("POST", p2+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "p2.example.com", "dns": "10.99.0.2",
		"netBiosPrefix": "nas", "username": "admin", "password": "pw"})
	e.run("POST", p2+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100,
		"network": "projects/p2/global/networks/default", "activeDirectory": "projects/p2/locations/us-east4/activeDirectories/ad1"})
	// A pool still cannot name another project's policy.
	e.fails("POST", p2+"/storagePools?storagePoolId=pool2", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100,
		"network": "projects/p2/global/networks/default", "activeDirectory": ad1}, 400, "INVALID_ARGUMENT")
}
