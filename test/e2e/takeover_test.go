package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// clusterStore opens the cluster's database beside its nodes, to read what
// the API does not show (leases, operations' owners and epochs).
func (cl *cluster) store(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenPostgres(context.Background(), cl.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func leaseHolder(t *testing.T, st store.Store, name string) string {
	t.Helper()
	var l store.Lease
	if err := st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindLease, name, &l) }); err != nil {
		t.Fatalf("lease %s: %v", name, err)
	}
	return l.Holder
}

func storedOp(t *testing.T, st store.Store, name string) (op model.Operation) {
	t.Helper()
	if err := st.View(context.Background(), func(tx store.Tx) error { return tx.Get(store.KindOperation, name, &op) }); err != nil {
		t.Fatalf("operation %s: %v", name, err)
	}
	return op
}

// waitUntil polls cond every 100 ms until it holds or limit passes.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// post starts a call that records an operation and returns the operation's
// name, without waiting for it.
func post(t *testing.T, c *client.Client, method, path string, body any) string {
	t.Helper()
	var op client.Object
	if err := c.Do(context.Background(), method, path, nil, body, &op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	name, _ := op["name"].(string)
	return name
}

// Three nodes; the one holding the controller lease (node1, started first)
// is killed with SIGKILL in the middle of a pool create it runs, while a volume
// create runs on another node and one on itself, and while snapshot schedules
// run (on a clock 180 times as fast: an hourly boundary every 20 s). Another
// node takes the pool create over within the lease (30 s) plus 10 s and
// finishes it once; the other node's volume create finishes once, untouched;
// the killed node's volumes read ERROR naming it and its volume create waits
// for it (its storage is there), finishing once it is back; one snapshot is
// taken per boundary throughout. Then the lease's new holder is paused
// (SIGSTOP) past its lease in the middle of another pool create: a third node
// finishes it, and once resumed the paused node's late writes are refused.
func TestClusterTakeover(t *testing.T) {
	env := []string{"BASIN_FAULT_STEP_DELAY=2s", "BASIN_TEST_SNAPSHOT_CLOCK_SPEED=180",
		"BASIN_TEST_SNAPSHOT_CLOCK_START=" + time.Now().UTC().Format(time.RFC3339Nano)}
	cl := startCluster(t, 3, env, "--store-size", "4G", "--thin-initial", "64M", "--sync-wait", "0")
	st := cl.store(t)
	ctx := context.Background()
	c2 := cl.clients[1]
	if h := leaseHolder(t, st, "controller"); h != "node1" {
		t.Fatalf("controller lease held by %q; want node1, started first", h)
	}
	mutate(t, c2, "POST", loc+"/storagePools?storagePoolId=pool0", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100",
		"network": "projects/p1/global/networks/default"})
	vol := func(id string, extra map[string]any) map[string]any {
		b := map[string]any{"shareName": id, "storagePool": "pool0", "capacityGib": "1", "protocols": []string{"NFSV3"}}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	zone := func(id string) string {
		var v client.Object
		if err := c2.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v); err != nil {
			t.Fatal(err)
		}
		z, _ := v["zone"].(string)
		return z
	}
	// Placement by fewest volumes, lowest ID first: vol-a on node1, vol-s on
	// node2; then vol-b on node3 and vol-c on node1.
	mutate(t, c2, "POST", loc+"/volumes?volumeId=vol-a", vol("vol-a", nil))
	mutate(t, c2, "POST", loc+"/volumes?volumeId=vol-s", vol("vol-s", map[string]any{
		"snapshotPolicy": map[string]any{"enabled": true, "hourlySchedule": map[string]any{"snapshotsToKeep": 100.0, "minute": 0.0}}}))
	if za, zs := zone("vol-a"), zone("vol-s"); za != "node1" || zs != "node2" {
		t.Fatalf("vol-a on %q, vol-s on %q; want node1, node2", za, zs)
	}

	pool1 := post(t, c2, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10",
		"network": "projects/p1/global/networks/default"})
	volB := post(t, c2, "POST", loc+"/volumes?volumeId=vol-b", vol("vol-b", nil))
	volC := post(t, c2, "POST", loc+"/volumes?volumeId=vol-c", vol("vol-c", nil))
	if zb, zc := zone("vol-b"), zone("vol-c"); zb != "node3" || zc != "node1" {
		t.Fatalf("vol-b on %q, vol-c on %q; want node3, node1", zb, zc)
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		p, b, c := storedOp(t, st, pool1), storedOp(t, st, volB), storedOp(t, st, volC)
		if p.Owner == "node1" && !p.Done && b.Owner == "node3" && !b.Done && c.Owner == "node1" && !c.Done {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("node1 and node3 claim their operations: pool1 %s done %v, vol-b %s done %v, vol-c %s done %v",
				p.Owner, p.Done, b.Owner, b.Done, c.Owner, c.Done)
		}
	}
	sched0 := leaseHolder(t, st, "snapshot-scheduler")
	before := len(scheduledSnapshots(t, st, "vol-s"))
	cl.nodes[0].stop(syscall.SIGKILL)
	killed := time.Now()
	t.Logf("node1 killed (it held the controller lease; the scheduler's: %s)", sched0)

	took := waitUntil(t, 60*time.Second, "another node finishes pool1's create", func() bool { return storedOp(t, st, pool1).Done })
	p := storedOp(t, st, pool1)
	t.Logf("pool1's create finished by %s %v after the kill (epoch %d)", p.Owner, took.Round(time.Millisecond), p.Epoch)
	// The lease lapses 30 s after node1's last renewal (≤ 30 s before the
	// kill); the taker looks every 5 s and pauses 2 s (the fault delay) first.
	if took > 30*time.Second+10*time.Second+2*time.Second {
		t.Errorf("pool1's create taken over %v after the kill; want within the lease (30 s) + 10 s", took)
	}
	if p.Owner == "node1" || p.Epoch != 2 || p.Error != nil {
		t.Errorf("pool1's create: owner %s, epoch %d, error %v; want another node, epoch 2, no error", p.Owner, p.Epoch, p.Error)
	}
	if h := leaseHolder(t, st, "controller"); h == "node1" {
		t.Errorf("controller lease still node1's after the takeover")
	}
	waitUntil(t, 60*time.Second, "vol-b's create on node3", func() bool { return storedOp(t, st, volB).Done })
	if b := storedOp(t, st, volB); b.Owner != "node3" || b.Epoch != 1 || b.Error != nil {
		t.Errorf("vol-b's create: owner %s, epoch %d, error %v; want node3 alone, no error", b.Owner, b.Epoch, b.Error)
	}
	// node1's volumes: shown unreachable once it is DOWN; its create waits.
	waitUntil(t, 45*time.Second-time.Since(killed)+5*time.Second, "vol-a reads ERROR naming node1", func() bool {
		var v client.Object
		c2.Do(ctx, "GET", loc+"/volumes/vol-a", nil, nil, &v)
		d, _ := v["stateDetails"].(string)
		return v["state"] == "ERROR" && strings.Contains(d, "node node1")
	})
	if c := storedOp(t, st, volC); c.Done || c.Owner != "node1" {
		t.Errorf("vol-c's create while node1 is down: done %v, owner %s; want it waiting for node1", c.Done, c.Owner)
	}

	// Snapshots keep coming, one per boundary, on a scheduler node that is alive.
	waitUntil(t, 90*time.Second, "two scheduled snapshots of vol-s after the kill", func() bool {
		return len(scheduledSnapshots(t, st, "vol-s")) >= before+2
	})
	checkOnePerBoundary(t, scheduledSnapshots(t, st, "vol-s"))

	// node1 back: its volume create finishes, once; vol-a reads READY again.
	cl.nodes[0].start(cl.args[0]...)
	waitUntil(t, 60*time.Second, "vol-c's create once node1 is back", func() bool { return storedOp(t, st, volC).Done })
	if c := storedOp(t, st, volC); c.Owner != "node1" || c.Error != nil {
		t.Errorf("vol-c's create: owner %s, error %v; want node1, no error", c.Owner, c.Error)
	}
	waitUntil(t, 10*time.Second, "vol-a READY again", func() bool {
		var v client.Object
		c2.Do(ctx, "GET", loc+"/volumes/vol-a", nil, nil, &v)
		return v["state"] == "READY"
	})

	// Paused past its lease: the controller lease's holder stops in the middle
	// of pool2's create; another node finishes it; resumed, the paused node's
	// writes are refused and it stops.
	holder := leaseHolder(t, st, "controller")
	hi := slices.Index(cl.ids, holder)
	caller := cl.clients[(hi+1)%3]
	pool2 := post(t, caller, "POST", loc+"/storagePools?storagePoolId=pool2", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10",
		"network": "projects/p1/global/networks/default"})
	waitUntil(t, 20*time.Second, holder+" claims pool2's create", func() bool { o := storedOp(t, st, pool2); return o.Owner == holder && !o.Done })
	paused := cl.nodes[hi]
	paused.cmd.Process.Signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			paused.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	waitUntil(t, 60*time.Second, "another node finishes pool2's create", func() bool { return storedOp(t, st, pool2).Done })
	done := storedOp(t, st, pool2)
	if done.Owner == holder || done.Epoch != 2 || done.Error != nil {
		t.Fatalf("pool2's create: owner %s, epoch %d, error %v; want another node than %s, epoch 2", done.Owner, done.Epoch, done.Error, holder)
	}
	paused.cmd.Process.Signal(syscall.SIGCONT)
	resumed = true
	waitUntil(t, 30*time.Second, holder+" finds its late writes refused", func() bool {
		return strings.Contains(paused.log.String(), "lost the operation's lease to another node")
	})
	if after := storedOp(t, st, pool2); after.Owner != done.Owner || after.Epoch != done.Epoch || !after.EndTime.Equal(done.EndTime) || after.Error != nil {
		t.Errorf("pool2's create after %s resumed: %+v; want it as %s left it", holder, after, done.Owner)
	}
	var pl client.Object
	if err := caller.Do(ctx, "GET", loc+"/storagePools/pool2", nil, nil, &pl); err != nil || pl["state"] != "READY" {
		t.Errorf("pool2 after the takeover: %v %v", pl["state"], err)
	}
}

// scheduledSnapshots returns the snapshots of volume id the scheduler took, by
// boundary.
func scheduledSnapshots(t *testing.T, st store.Store, id string) []*model.Snapshot {
	t.Helper()
	var out []*model.Snapshot
	if err := st.View(context.Background(), func(tx store.Tx) error {
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, loc[len("/v1/"):]+"/volumes/"+id)
		for _, sn := range snaps {
			if sn.Schedule != "" {
				out = append(out, sn)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, func(a, b *model.Snapshot) int { return a.ScheduledFor.Compare(b.ScheduledFor) })
	return out
}

// checkOnePerBoundary: one snapshot per hourly boundary, none skipped.
func checkOnePerBoundary(t *testing.T, snaps []*model.Snapshot) {
	t.Helper()
	var got []string
	for i, sn := range snaps {
		got = append(got, sn.ScheduledFor.Format("15:04"))
		if i > 0 && sn.ScheduledFor.Sub(snaps[i-1].ScheduledFor) != time.Hour {
			t.Errorf("scheduled snapshots %s then %s: want one per hourly boundary, none twice or skipped", snaps[i-1].ScheduledFor, sn.ScheduledFor)
		}
	}
	t.Logf("scheduled snapshots of vol-s: %s", strings.Join(got, " "))
}
