package controller

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Every finished operation is reported once with its kind and outcome: done,
// failed, cancelled; one of a kind no handler runs as "unknown" (its kind is
// not a label value). An operation interrupted by shutdown is not reported.
func TestOperationDoneReportsOutcomes(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	got := map[string]int{}
	c := New(Options{Store: h.st, Backend: h.be, Resync: time.Hour, StepAttempts: 1,
		OperationDone: func(kind model.OpKind, outcome string) {
			mu.Lock()
			got[string(kind)+" "+outcome]++
			mu.Unlock()
		}})
	ctx := context.Background()
	create := func(id string, at time.Time, cancel bool) *model.Operation {
		v := newVolume(id)
		op := newOp(model.OpVolumeCreate, v.Name(), at)
		op.RequestedCancellation = cancel
		return h.run(t, c, op, func(tx store.Tx) error { return store.PutVolume(tx, v) })
	}
	if op := create("vol1", t0, false); op.Error != nil {
		t.Fatalf("create: %+v", op.Error)
	}
	h.be.Fail("Mount", errors.New("mount failed"))
	if op := create("vol2", t0.Add(time.Second), false); op.Error == nil {
		t.Fatal("the create with a failing mount did not fail")
	}
	h.be.Fail("Mount", nil)
	if op := create("vol3", t0.Add(2*time.Second), true); op.Error == nil || op.Error.Code != 1 {
		t.Fatalf("cancelled create: %+v", op.Error)
	}
	unknown := newOp("quota.create", "projects/p/locations/l/quotas/q", t0.Add(3*time.Second))
	h.seed(t, func(tx store.Tx) error { return store.PutOperation(tx, unknown) })
	c.schedule(ctx)

	want := map[string]int{"volume.create done": 1, "volume.create failed": 1, "volume.create cancelled": 1, "unknown failed": 1}
	mu.Lock()
	defer mu.Unlock()
	if !maps.Equal(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
}

// QueueDepth counts the unfinished operations waiting for a worker: two updates
// queued behind their volume's create while it runs, none once all are done.
func TestQueueDepth(t *testing.T) {
	h := newHarness(t)
	release := h.be.Block("EnsureVolume")
	defer release()
	c := h.startWith(t, Options{Workers: 8})
	if n := c.QueueDepth(); n != 0 {
		t.Fatalf("idle: queue depth %d", n)
	}
	v := newVolume("va")
	var last string
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
		for i, kind := range []model.OpKind{model.OpVolumeCreate, model.OpVolumeUpdate, model.OpVolumeUpdate} {
			op := newOp(kind, v.Name(), t0.Add(time.Duration(i)*time.Second))
			if err := store.PutOperation(tx, op); err != nil {
				return err
			}
			last = op.Name()
		}
		return nil
	})
	c.Wake()
	waitFor(t, "two operations queued behind the create", func() bool { return c.QueueDepth() == 2 })
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !c.WaitDone(ctx, last) {
		t.Fatal("the last update did not finish")
	}
	waitFor(t, "an empty queue", func() bool { return c.QueueDepth() == 0 })
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
