package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
)

// TestScheduledSnapshots runs an hourly schedule against real storage with a
// real clock, sped up (a test-only setting: an hour passes in 10 s): snapshots
// named after their boundaries appear through the API and in .snapshot,
// each holding the volume as it was then; the schedule keeps its two newest,
// never touching a snapshot taken on request (though named like its own); a
// disabled policy takes no more; each scheduled create and delete is in the
// audit log as Basin's own call. Beside it, a volume at its snapshot limit fails
// its scheduled snapshots visibly (stateDetails, audit log) without stopping the
// other's.
func TestScheduledSnapshots(t *testing.T) {
	s := newServer(t, "BASIN_TEST_SNAPSHOT_CLOCK_SPEED=360")
	s.start("--max-snapshots", "4")
	c := s.client()
	nfsPool(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "snapshotDirectory": true, "unixPermissions": "0777",
		"exportPolicy":   map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, false, "true")}},
		"snapshotPolicy": map[string]any{"enabled": true, "hourlySchedule": map[string]any{"snapshotsToKeep": 2.0, "minute": 0.0}}})
	const manual = "hourly-20200101-0000"
	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId="+manual, map[string]any{})
	// A second volume, at its snapshot limit (4) with snapshots taken on request:
	// its schedule fails, visibly, and vol1's runs on.
	mutate(t, c, "POST", loc+"/volumes?volumeId=full", map[string]any{"shareName": "full", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, false, "true")}},
		"snapshotPolicy": map[string]any{"enabled": true, "hourlySchedule": map[string]any{"snapshotsToKeep": 1.0}}})
	for i := range 4 {
		mutate(t, c, "POST", fmt.Sprintf("%s/volumes/full/snapshots?snapshotId=m%d", loc, i), map[string]any{})
	}
	v3 := mount3(t, ctx, s.host(201), endpoint(t, c, "vol1"), "/vol1")

	scheduled := func() []string {
		t.Helper()
		var list struct {
			Snapshots []client.Object `json:"snapshots"`
		}
		if err := c.Do(ctx, "GET", loc+"/volumes/vol1/snapshots", nil, nil, &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		found := false
		for _, sn := range list.Snapshots {
			id := sn["name"].(string)[strings.LastIndex(sn["name"].(string), "/")+1:]
			if id == manual {
				found = true
				continue
			}
			if !strings.HasPrefix(id, "hourly-") {
				t.Fatalf("unexpected snapshot %s", id)
			}
			b, err := time.Parse("20060102-1504", strings.TrimPrefix(id, "hourly-"))
			if err != nil || b.Minute() != 0 {
				t.Fatalf("snapshot %s is not named after an hourly boundary at minute 0", id)
			}
			names = append(names, id)
		}
		if !found {
			t.Fatalf("the snapshot taken on request is gone: %v", list.Snapshots)
		}
		slices.Sort(names)
		return names
	}
	// Watch five boundaries go by (about 50 s), writing the time all along.
	seen := map[string]bool{}
	kept := 0
	for start := time.Now(); len(seen) < 5; time.Sleep(500 * time.Millisecond) {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("only %d scheduled snapshots in 2 minutes (an hour is 10 s): %v", len(seen), seen)
		}
		if err := writePath(ctx, v3, "now", time.Now().Format(time.RFC3339Nano)); err != nil {
			t.Fatal(err)
		}
		names := scheduled()
		if len(names) > 3 {
			t.Fatalf("%d scheduled snapshots at once, keeping 2 (one more only until the next pass): %v", len(names), names)
		}
		for _, n := range names {
			seen[n] = true
		}
		all := slices.Sorted(func(yield func(string) bool) {
			for n := range seen {
				if !yield(n) {
					return
				}
			}
		})
		if len(names) == 2 && slices.Equal(names, all[len(all)-2:]) {
			kept++ // retention has run: the two newest, exactly
		}
	}
	if kept == 0 {
		t.Fatal("never saw exactly the two newest scheduled snapshots kept")
	}
	// Real snapshots of the volume as it was at different times, in .snapshot.
	names := scheduled()
	var contents []string
	for _, n := range names {
		got, err := readPath(ctx, v3, ".snapshot/"+n+"/now")
		if err != nil {
			t.Fatalf(".snapshot/%s/now: %v", n, err)
		}
		contents = append(contents, got)
	}
	if len(contents) >= 2 && contents[0] == contents[1] {
		t.Fatalf("two scheduled snapshots hold the same moment: %v", contents)
	}

	var full client.Object
	if err := c.Do(ctx, "GET", loc+"/volumes/full", nil, nil, &full); err != nil {
		t.Fatal(err)
	}
	if d, _ := full["stateDetails"].(string); full["state"] != "READY" || !strings.HasPrefix(d, "Scheduled snapshot hourly-") ||
		!strings.Contains(d, "failed: volume full already has 4 snapshots") {
		t.Fatalf("the volume at its limit: state %v, details %q", full["state"], d)
	}

	// Turned off, the schedule takes no more.
	mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=snapshotPolicy", map[string]any{"snapshotPolicy": map[string]any{"enabled": false,
		"hourlySchedule": map[string]any{"snapshotsToKeep": 2.0}}})
	time.Sleep(time.Second) // a snapshot recorded just before settles
	before := scheduled()
	time.Sleep(12 * time.Second) // more than an hour of the scheduler's clock
	if after := scheduled(); !slices.Equal(after, before) {
		t.Fatalf("scheduled snapshots after the policy was disabled: %v, before %v", after, before)
	}

	// The audit log has the scheduler's creates and deletes, as its own calls.
	var audit struct {
		Entries []client.Object `json:"entries"`
	}
	if err := c.Do(ctx, "GET", "/v1/projects/p1/auditLogs?pageSize=1000", nil, nil, &audit); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range audit.Entries {
		if e["principal"] == "basin:snapshot-scheduler" && e["outcome"] == "OK" {
			count[fmt.Sprint(e["method"])]++
		}
		if e["principal"] == "basin:snapshot-scheduler" && e["outcome"] == "FAILED_PRECONDITION" &&
			strings.Contains(fmt.Sprint(e["resource"]), "/volumes/full/snapshots/hourly-") {
			count["failed"]++
		}
	}
	if count["failed"] == 0 {
		t.Fatalf("audit log: no failure of the volume at its limit: %v", count)
	}
	if count["netapp.snapshots.create"] < len(seen) || count["netapp.snapshots.delete"] < len(seen)-3 {
		t.Fatalf("audit log: %v scheduler calls for %d snapshots taken", count, len(seen))
	}
	t.Logf("scheduled snapshots seen: %d; audit: %v", len(seen), count)
	s.stop(syscall.SIGTERM)
}
