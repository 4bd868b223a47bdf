package controller

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	dpfake "github.com/basin-nas/basin/internal/dataplane/fake"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/storage/btrfs"
	"github.com/basin-nas/basin/internal/store"
)

// forkCounter counts the processes the backend starts.
type forkCounter struct {
	mu sync.Mutex
	n  int
}

func (f *forkCounter) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return runner.Exec{}.Run(ctx, name, args...)
}

func (f *forkCounter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// A reconcile pass over 200 real volumes (each its own btrfs on a loop device) with
// a snapshot each, served with their snapshot directories, forks no process in the
// backend and observes the network once (a real View runs no process and lists
// addresses once, whatever the number of exports: dataplane's TestViewListsOnce).
func TestReconcilePassForksNothingPerVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mounts)")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("needs btrfs-progs")
	}
	ctx := context.Background()
	forks := &forkCounter{}
	// Thin, with small first filesystems: 200 volumes of 1 GiB on a 32 GiB store
	// (allocated in full on the host).
	be := btrfs.New(btrfs.Options{DataDir: t.TempDir(), ImageSize: 32 << 30, Thin: true, ThinInitial: 128 << 20, Runner: forks})
	if err := be.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Stop(context.Background()) })
	h := newHarness(t)
	dp := dpfake.New()
	c := New(Options{Store: h.st, Backend: be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	const n = 200
	at := t0
	for i := range n {
		v := newVolume(fmt.Sprintf("vol%03d", i))
		v.CapacityGib = 1
		v.Protocols = []model.Protocol{model.ProtocolNFSv3}
		v.Endpoint, v.Network = fmt.Sprintf("10.99.%d.%d", 1+i/200, 10+i%200), "default"
		v.SnapshotDirectory = true
		v.ExportRules = []model.ExportRule{{AllowedClients: ptr("10.99.0.0/16"), AccessType: ptr(model.AccessReadWrite), NFSv3: ptr(true)}}
		at = at.Add(time.Second)
		if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), at), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
			t.Fatalf("create %d: %+v", i, op.Error)
		}
		at = at.Add(time.Second)
		sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", CreateTime: at, State: model.StateCreating}, Volume: v.ID}
		if op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), at), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) }); op.Error != nil {
			t.Fatalf("snapshot %d: %+v", i, op.Error)
		}
	}
	if got := len(dp.Exports()); got != 3*n { // each volume, its snapshot directory and its snapshot
		t.Fatalf("%d exports loaded, want %d", got, 3*n)
	}
	// The first pass may refresh usage the creates left stale; the second is the
	// steady state. Both fork nothing.
	for pass := range 2 {
		forksBefore, viewsBefore, history := forks.count(), dp.Views(), len(dp.History())
		if err := c.resync(ctx, false); err != nil {
			t.Fatal(err)
		}
		if d := forks.count() - forksBefore; d != 0 {
			t.Errorf("pass %d over %d volumes forked %d processes in the backend, want 0", pass, n, d)
		}
		if d := dp.Views() - viewsBefore; d != 1 {
			t.Errorf("pass %d observed the network %d times, want once", pass, d)
		}
		if d := len(dp.History()) - history; d != 0 {
			t.Errorf("pass %d changed %d exports of converged volumes", pass, d)
		}
	}
}
