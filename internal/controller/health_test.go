package controller

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// changeLog collects what OnHealthChange is handed; fail makes it refuse.
type changeLog struct {
	mu      sync.Mutex
	changes []HealthChange
	fail    error
}

func (l *changeLog) record(_ context.Context, ch HealthChange) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.changes = append(l.changes, ch)
	return nil
}

func (l *changeLog) take() []HealthChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.changes
	l.changes = nil
	return out
}

// A volume whose filesystem turns read-only, or whose device reports I/O
// errors, is in ERROR with words for its users until it is healthy again; a
// failing store puts every volume in ERROR with its own words. Each change is
// handed to OnHealthChange once, in order, and one it could not record is handed
// again after the next pass. Nothing is unexported.
func TestStorageHealthTransitions(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	ctx := context.Background()
	var logged bytes.Buffer
	changes := &changeLog{}
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour, OnHealthChange: changes.record,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	vols := servedVolumes(t, h, c, 3)
	v0, v1 := vols[0], vols[1]
	c.healthPass(ctx)
	if why := c.NotReady(); why != "" || c.VolumeFault(v0.Key) != "" || len(changes.take()) != 0 {
		t.Fatalf("healthy storage: not ready %q, fault %q", why, c.VolumeFault(v0.Key))
	}
	wantCounts := func(want map[string]int) {
		t.Helper()
		got := c.VolumesInError()
		for _, r := range ErrorReasons {
			if got[r] != want[r] {
				t.Fatalf("volumes in error %v, want %v", got, want)
			}
		}
	}
	wantChange := func(vol, reason string) {
		t.Helper()
		got := changes.take()
		if len(got) != 1 || got[0].Volume != vol || got[0].Reason != reason || got[0].Project != "p" || (reason != "") != (got[0].Details != "") {
			t.Fatalf("changes %+v, want one of %s to %q", got, vol, reason)
		}
	}

	h.be.SetFault(v0.Key, storage.Fault{Reason: storage.FaultReadOnly, Detail: "/var/lib/basin/fs/" + v0.Key + " is read-only"})
	c.healthPass(ctx)
	if got := c.VolumeFault(v0.Key); !strings.Contains(got, "read-only") || c.VolumeFault(v1.Key) != "" {
		t.Fatalf("read-only volume: %q; healthy one: %q", got, c.VolumeFault(v1.Key))
	}
	if why := c.NotReady(); !strings.Contains(why, "1 volume") {
		t.Fatalf("not ready %q", why)
	}
	wantCounts(map[string]int{ReasonReadOnly: 1})
	wantChange(v0.Name(), ReasonReadOnly)
	if !strings.Contains(logged.String(), "/var/lib/basin/fs/"+v0.Key) {
		t.Errorf("the server log lacks what was observed:\n%s", logged.String())
	}
	c.healthPass(ctx)
	if got := changes.take(); len(got) != 0 {
		t.Fatalf("a fault that lasts is recorded again: %+v", got)
	}

	h.be.SetFault(v1.Key, storage.Fault{Reason: storage.FaultIOErrors, Detail: "write_errs 3"})
	c.healthPass(ctx)
	if got := c.VolumeFault(v1.Key); !strings.Contains(got, "I/O errors") {
		t.Fatalf("volume with I/O errors: %q", got)
	}
	wantCounts(map[string]int{ReasonReadOnly: 1, ReasonIOErrors: 1})
	wantChange(v1.Name(), ReasonIOErrors)

	// The store fails: every volume is in ERROR for it, whatever its own state.
	h.be.SetStoreFault(storage.Fault{Reason: storage.FaultReadOnly, Detail: "/var/lib/basin/store is read-only"})
	c.healthPass(ctx)
	for _, v := range vols {
		if got := c.VolumeFault(v.Key); !strings.Contains(got, "volume store") {
			t.Fatalf("volume %s in a read-only store: %q", v.ID, got)
		}
	}
	if why := c.NotReady(); why != "the volume store is read-only" {
		t.Fatalf("not ready %q", why)
	}
	wantCounts(map[string]int{ReasonStoreReadOnly: 3})
	if got := changes.take(); len(got) != 3 {
		t.Fatalf("store failing: %d changes, want 3", len(got))
	}

	// Repaired, while the audit cannot be written: the changes wait for a pass
	// that can.
	h.be.SetStoreFault(storage.Fault{})
	h.be.SetFault(v0.Key, storage.Fault{})
	h.be.SetFault(v1.Key, storage.Fault{})
	changes.fail = errors.New("database or disk is full")
	c.healthPass(ctx)
	if why := c.NotReady(); why != "" || c.VolumeFault(v0.Key) != "" {
		t.Fatalf("repaired: not ready %q, fault %q", why, c.VolumeFault(v0.Key))
	}
	wantCounts(nil)
	changes.fail = nil
	c.healthPass(ctx)
	got := changes.take()
	if len(got) != 3 {
		t.Fatalf("after the repair, %d changes recorded, want 3: %+v", len(got), got)
	}
	for _, ch := range got {
		if ch.Reason != "" || ch.Details != "" {
			t.Fatalf("recovery recorded as %+v", ch)
		}
	}
	if n := len(dp.Exports()); n != 3 {
		t.Fatalf("%d of 3 exports left", n)
	}
}

// The words a faulted volume shows its users name no host path, device or
// storage key, whatever the backend observed (the log has that).
func TestFaultWordsAreUserSafe(t *testing.T) {
	h := newHarness(t)
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(h.withDataPlane()), Resync: time.Hour})
	v := servedVolumes(t, h, c, 1)[0]
	ctx := context.Background()
	for _, f := range []storage.Fault{{Reason: storage.FaultReadOnly}, {Reason: storage.FaultIOErrors}} {
		for _, store := range []bool{false, true} {
			detail := "/var/lib/basin/fs/" + v.Key + " on /dev/loop7"
			h.be.SetFault(v.Key, storage.Fault{})
			h.be.SetStoreFault(storage.Fault{})
			f.Detail = detail
			if store {
				h.be.SetStoreFault(f)
			} else {
				h.be.SetFault(v.Key, f)
			}
			c.healthPass(ctx)
			for _, s := range []string{c.VolumeFault(v.Key), c.NotReady()} {
				if s == "" {
					t.Fatalf("%+v (store %v) not reported", f, store)
				}
				for _, leak := range []string{"/var", "/dev", "loop", v.Key} {
					if strings.Contains(s, leak) {
						t.Errorf("%q shows %q", s, leak)
					}
				}
			}
		}
	}
}

// The health pass needs neither the database nor a working resync: with the
// database unreadable from the start it still sees a failing store and volume
// (the API, which reads the records itself, shows them), and the controller is
// not ready.
func TestStorageHealthWithoutTheDatabase(t *testing.T) {
	h := newHarness(t)
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(h.withDataPlane()), Resync: time.Hour})
	v := servedVolumes(t, h, c, 1)[0]
	broken := New(Options{Store: &failingStore{Store: h.st, readErr: errors.New("disk I/O error"), writeErr: errors.New("disk I/O error")},
		Backend: h.be, Resync: time.Hour})
	h.be.SetFault(v.Key, storage.Fault{Reason: storage.FaultReadOnly})
	broken.healthPass(context.Background())
	if broken.VolumeFault(v.Key) == "" || broken.NotReady() == "" {
		t.Fatalf("fault %q, not ready %q", broken.VolumeFault(v.Key), broken.NotReady())
	}
}

// A controller starting onto failing storage is not ready once it says it is
// ready to run: the first health pass comes before.
func TestRestartOntoFailingStorage(t *testing.T) {
	h := newHarness(t)
	h.be.SetStoreFault(storage.Fault{Reason: storage.FaultIOErrors})
	c := h.start(t)
	if why := c.NotReady(); why != "the volume store reports I/O errors" {
		t.Fatalf("not ready %q", why)
	}
}

// An operation that fails on a volume whose storage is failing says so (code 9,
// the fault's words) rather than naming a step.
func TestOperationOnFailingStorageSaysSo(t *testing.T) {
	h := newHarness(t)
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(h.withDataPlane()), Resync: time.Hour, StepAttempts: 1})
	v := servedVolumes(t, h, c, 1)[0]
	h.be.SetFault(v.Key, storage.Fault{Reason: storage.FaultReadOnly})
	c.healthPass(context.Background())
	sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", CreateTime: t0.Add(time.Hour), State: model.StateCreating}, Volume: v.ID}
	op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), t0.Add(time.Hour)), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) })
	if op.Error == nil || op.Error.Code != 9 || !strings.Contains(op.Error.Message, "read-only") || strings.Contains(op.Error.Message, "/") {
		t.Fatalf("snapshot of a read-only volume: %+v", op.Error)
	}
}
