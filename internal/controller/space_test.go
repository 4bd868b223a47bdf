package controller

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// A volume whose filesystem cannot be given what it was promised (thin
// provisioning on a full store) says so in its state details, written by the
// resync and reported through SpaceNoted; the details clear when it can grow
// again, and details of another's (the snapshot scheduler's) are left alone.
func TestSpaceNotesBecomeStateDetails(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var noted []string
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour, SpaceNoted: func(_ context.Context, v *model.Volume, note string) {
		mu.Lock()
		defer mu.Unlock()
		noted = append(noted, v.ID+": "+note)
	}})
	ctx := context.Background()
	at := t0
	for _, id := range []string{"thin", "sched"} {
		v := newVolume(id)
		at = at.Add(time.Second)
		if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), at), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
			t.Fatalf("create %s: %+v", id, op.Error)
		}
	}
	details := func(id string) string {
		t.Helper()
		return h.volume(t, newVolume(id).Name()).Details
	}
	h.seed(t, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, newVolume("sched").Name())
		if err != nil {
			return err
		}
		v.Details = "Scheduled snapshot hourly-x failed: the volume is full"
		return store.PutVolume(tx, v)
	})
	const note = "thin provisioning: this volume can hold 1 GiB of its 2 GiB capacity now"
	h.be.SetSpaceNote("kthin", note)
	h.be.SetSpaceNote("ksched", note)
	must(t, c.resync(ctx, false))
	if got := details("thin"); got != spaceDetailsPrefix+note {
		t.Errorf("thin volume's details %q, want the space note", got)
	}
	if got := details("sched"); got != "Scheduled snapshot hourly-x failed: the volume is full" {
		t.Errorf("the scheduler's details were replaced: %q", got)
	}
	must(t, c.resync(ctx, false)) // unchanged: nothing written or noted again
	h.be.SetSpaceNote("kthin", "")
	must(t, c.resync(ctx, false))
	if got := details("thin"); got != "" {
		t.Errorf("details %q after the volume could grow again", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"thin: " + note, "thin: "}; len(noted) != 2 || noted[0] != want[0] || noted[1] != want[1] {
		t.Errorf("SpaceNoted calls %q, want %q", noted, want)
	}
}

// A growth the store has no room for fails its operation with a plain
// FAILED_PRECONDITION and leaves the volume as it was, READY.
func TestGrowthWithoutRoomLeavesTheVolume(t *testing.T) {
	h := newHarness(t)
	h.be.StoreSize = 3 << 30
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour})
	v := newVolume("vol1")
	if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), t0), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
		t.Fatalf("create: %+v", op.Error)
	}
	var prev []byte
	h.seed(t, func(tx store.Tx) error {
		cur, _ := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		prev, _ = json.Marshal(cur)
		cur.CapacityGib, cur.State = 4, model.StateUpdating
		return store.PutVolume(tx, cur)
	})
	upd := newOp(model.OpVolumeUpdate, v.Name(), t0.Add(time.Minute))
	upd.Prev = prev
	op := h.run(t, c, upd, nil)
	if op.Error == nil || op.Error.Code != 9 || !strings.Contains(op.Error.Message, "capacityGib") || !strings.Contains(op.Error.Message, "store") {
		t.Fatalf("growth past the store: %+v, want FAILED_PRECONDITION naming the store", op.Error)
	}
	if cur := h.volume(t, v.Name()); cur.State != model.StateReady || cur.CapacityGib != 2 {
		t.Fatalf("after a refused growth the volume is %s with %d GiB; want READY with 2", cur.State, cur.CapacityGib)
	}
	if h.be.State().Sizes[v.Key] != 2<<30 {
		t.Fatal("the filesystem was resized")
	}
}
