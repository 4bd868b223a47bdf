// Package storagetest is the conformance suite of storage.Backend: one set of
// scenarios that the fake (storage/fake, no root) and every real backend
// (storage/btrfs, root) run, so the controller's tests on the fake hold for the
// real thing. Only tests import it.
//
// The suite reads and writes volume data through the mount points with the os
// package; a backend whose mount points are not real directories (the fake)
// implements Files instead. A backend that can stop a revert at a step as a crash
// would (Failpointer) also gets the crash scenarios.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/storage"
)

// Files is implemented by a backend whose volumes hold no real files (a model): the
// suite writes and reads data through it instead of the mount points.
type Files interface {
	WriteFile(key, name string, data []byte) error
	RemoveFile(key, name string) error
	ReadFile(key, name string) ([]byte, error)
	ReadSnapshotFile(key, snap, name string) ([]byte, error)
}

// Failpointer is implemented by a backend that can stop Revert after a step:
// fn is called with ("Revert", key, step) after each one, and an error from it
// stops Revert there, leaving what a crash at that point would. The steps are
// "unmounted" (the live data is unmounted), "set-aside" (moved aside, no live data)
// and "copied" (the snapshot's copy is live, the old data still aside).
type Failpointer interface {
	SetFailpoint(fn func(op, key, step string) error)
}

// SnapshotDirLister is implemented by a backend whose snapshot directory is not a
// real directory (the fake): the suite lists it through ListSnapshotDir.
type SnapshotDirLister interface {
	ListSnapshotDir(key string) ([]string, error)
}

// SetAsider is implemented by a backend that can tell whether a volume still holds
// a copy a revert set aside; the suite then checks that none lingers.
type SetAsider interface {
	SetAside(key string) bool
}

const mib = 1 << 20

// Run runs the suite; newBackend returns a started, empty backend and cleans it up
// with t.Cleanup. Where a backend's Capabilities say it differs from btrfs's
// model (usage known later and without snapshots, clones copied in the
// background), the suite asks what the weaker promise still holds.
func Run(t *testing.T, newBackend func(t *testing.T) storage.Backend) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"VolumeLifecycle", testVolumeLifecycle},
		{"Resize", testResize},
		{"Snapshots", testSnapshots},
		{"SnapshotDir", testSnapshotDir},
		{"Clone", testClone},
		{"Revert", testRevert},
		{"RevertCrash", testRevertCrash},
		{"Usage", testUsage},
		{"Inventory", testInventory},
		{"Health", testHealth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, &harness{t: t, b: newBackend(t), ctx: context.Background()})
		})
	}
}

type harness struct {
	t   *testing.T
	b   storage.Backend
	ctx context.Context
}

func (h *harness) ok(what string, err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
}

// volume makes a mounted volume.
func (h *harness) volume(key string, size int64) {
	h.t.Helper()
	h.ok("EnsureVolume", h.b.EnsureVolume(h.ctx, key, size, nil))
	h.ok("SetMode", h.b.SetMode(h.ctx, key, 0o777))
	h.ok("Mount", h.b.Mount(h.ctx, key))
}

func (h *harness) observe(key string) storage.VolumeStatus {
	h.t.Helper()
	st, err := h.b.ObserveVolume(h.ctx, key)
	h.ok("ObserveVolume "+key, err)
	all, err := h.b.ObserveVolumes(h.ctx)
	h.ok("ObserveVolumes", err)
	if got, ok := all[key]; st.Exists != ok || (ok && got != st) {
		h.t.Fatalf("ObserveVolumes says %+v (listed %v) of %s, ObserveVolume %+v", got, ok, key, st)
	}
	return st
}

func (h *harness) snapshots(key string) map[string]storage.SnapshotStatus {
	h.t.Helper()
	m, err := h.b.ObserveSnapshots(h.ctx, key)
	h.ok("ObserveSnapshots "+key, err)
	return m
}

func (h *harness) write(key, name string, data []byte) {
	h.t.Helper()
	h.ok("write "+name, h.writeErr(key, name, data))
}

func (h *harness) writeErr(key, name string, data []byte) error {
	if f, ok := h.b.(Files); ok {
		return f.WriteFile(key, name, data)
	}
	p := filepath.Join(h.b.MountPath(key), name)
	fl, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = fl.Write(data)
	if err == nil {
		err = fl.Sync()
	}
	if cerr := fl.Close(); err == nil {
		err = cerr
	}
	syscall.Sync() // usage counters follow committed transactions
	return err
}

func (h *harness) read(key, name string) ([]byte, error) {
	if f, ok := h.b.(Files); ok {
		return f.ReadFile(key, name)
	}
	return os.ReadFile(filepath.Join(h.b.MountPath(key), name))
}

func (h *harness) readSnapshot(key, snap, name string) ([]byte, error) {
	if f, ok := h.b.(Files); ok {
		return f.ReadSnapshotFile(key, snap, name)
	}
	return os.ReadFile(filepath.Join(h.b.SnapshotMountPath(key, snap), name))
}

func (h *harness) wantFile(key, name string, want []byte) {
	h.t.Helper()
	got, err := h.read(key, name)
	if err != nil {
		h.t.Fatalf("read %s of %s: %v", name, key, err)
	}
	if !bytes.Equal(got, want) {
		h.t.Fatalf("%s of %s holds %q, want %q", name, key, short(got), short(want))
	}
}

func (h *harness) wantNoFile(key, name string) {
	h.t.Helper()
	if _, err := h.read(key, name); !errors.Is(err, os.ErrNotExist) {
		h.t.Fatalf("%s of %s: got %v, want it absent", name, key, err)
	}
}

func (h *harness) noSetAside(key string) {
	h.t.Helper()
	if a, ok := h.b.(SetAsider); ok && a.SetAside(key) {
		h.t.Fatalf("volume %s still holds a set-aside copy", key)
	}
}

func short(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

func random(n int, seed uint64) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	b := make([]byte, n)
	r.Read(b)
	return b
}

// Every call is idempotent, observation agrees with what was asked, and data
// survives an unmount.
func testVolumeLifecycle(t *testing.T, h *harness) {
	if st := h.observe("v1"); st.Exists || st.Mounted {
		t.Fatalf("a volume never made: %+v", st)
	}
	for range 2 {
		h.ok("EnsureVolume", h.b.EnsureVolume(h.ctx, "v1", 256*mib, nil))
	}
	st := h.observe("v1")
	// A new volume holds its filesystem's metadata where usage counts it.
	minUsed := int64(1)
	if !h.b.Capabilities().ExactUsage {
		minUsed = 0
	}
	if !st.Exists || st.Mounted || st.CapacityBytes != 256*mib || st.UsedBytes < minUsed || st.UsedBytes > 16*mib {
		t.Fatalf("after EnsureVolume: %+v", st)
	}
	for _, mode := range []os.FileMode{0o770, 0o700, 0o2775 & os.ModePerm} {
		h.ok("SetMode", h.b.SetMode(h.ctx, "v1", mode))
		if st := h.observe("v1"); st.Mode != mode {
			t.Fatalf("mode %v after SetMode(%v)", st.Mode, mode)
		}
	}
	h.ok("SetMode", h.b.SetMode(h.ctx, "v1", 0o777))
	for range 2 {
		h.ok("Mount", h.b.Mount(h.ctx, "v1"))
	}
	if st := h.observe("v1"); !st.Exists || !st.Mounted {
		t.Fatalf("after Mount: %+v", st)
	}
	h.write("v1", "f", []byte("kept"))
	for range 2 {
		h.ok("Unmount", h.b.Unmount(h.ctx, "v1"))
	}
	if st := h.observe("v1"); !st.Exists || st.Mounted {
		t.Fatalf("after Unmount: %+v", st)
	}
	if _, err := h.read("v1", "f"); err == nil {
		t.Fatal("an unmounted volume's data is visible at its mount path")
	}
	h.ok("Mount", h.b.Mount(h.ctx, "v1"))
	h.wantFile("v1", "f", []byte("kept"))
	if h.b.MountPath("v1") == h.b.MountPath("v2") || h.b.MountPath("v1") == h.b.SnapshotMountPath("v1", "s1") {
		t.Fatal("mount paths collide")
	}
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s1"))
	h.ok("MountSnapshot", h.b.MountSnapshot(h.ctx, "v1", "s1"))
	for range 2 {
		h.ok("DeleteVolume", h.b.DeleteVolume(h.ctx, "v1"))
	}
	if st := h.observe("v1"); st.Exists || st.Mounted {
		t.Fatalf("after DeleteVolume: %+v", st)
	}
	if len(h.snapshots("v1")) != 0 {
		t.Fatal("snapshots outlive their volume")
	}
	inv, err := h.b.Inventory(h.ctx)
	h.ok("Inventory", err)
	if slices.Contains(inv.Volumes, "v1") || len(inv.Snapshots["v1"]) != 0 {
		t.Fatalf("inventory after delete: %+v", inv)
	}
	if err := h.b.Mount(h.ctx, "v1"); err == nil {
		t.Fatal("mounted a deleted volume")
	}
}

// Growing and shrinking change the capacity and keep the data; a shrink below what
// the volume holds is ErrTooSmall and changes nothing.
func testResize(t *testing.T, h *harness) {
	h.volume("v1", 384*mib)
	data := bytes.Repeat([]byte("basin"), 300*mib/5)
	h.write("v1", "big", data)
	h.ok("grow", h.b.Resize(h.ctx, "v1", 512*mib))
	if st := h.observe("v1"); st.CapacityBytes != 512*mib || !st.Mounted {
		t.Fatalf("after growing: %+v", st)
	}
	h.ok("grow again", h.b.Resize(h.ctx, "v1", 512*mib))
	if err := h.b.Resize(h.ctx, "v1", 256*mib); !errors.Is(err, storage.ErrTooSmall) {
		t.Fatalf("shrink below the data: got %v, want ErrTooSmall", err)
	}
	if st := h.observe("v1"); st.CapacityBytes != 512*mib {
		t.Fatalf("a refused shrink changed the capacity: %+v", st)
	}
	h.ok("shrink", h.b.Resize(h.ctx, "v1", 384*mib))
	if st := h.observe("v1"); st.CapacityBytes != 384*mib || !st.Mounted {
		t.Fatalf("after shrinking: %+v", st)
	}
	h.wantFile("v1", "big", data)
	if err := h.b.Resize(h.ctx, "nope", 256*mib); err == nil {
		t.Fatal("resized a volume that does not exist")
	}
}

// Snapshots hold the data as it was; every call is idempotent.
func testSnapshots(t *testing.T, h *harness) {
	h.volume("v1", 256*mib)
	if len(h.snapshots("v1")) != 0 {
		t.Fatal("a new volume has snapshots")
	}
	h.write("v1", "f", []byte("v1"))
	for range 2 {
		h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s1"))
	}
	h.write("v1", "f", []byte("v2"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s-2"))
	snaps := h.snapshots("v1")
	if len(snaps) != 2 || !snaps["s1"].Exists || snaps["s1"].Mounted || !snaps["s-2"].Exists {
		t.Fatalf("snapshots: %+v", snaps)
	}
	for range 2 {
		h.ok("MountSnapshot", h.b.MountSnapshot(h.ctx, "v1", "s1"))
	}
	if !h.snapshots("v1")["s1"].Mounted || h.snapshots("v1")["s-2"].Mounted {
		t.Fatalf("after MountSnapshot: %+v", h.snapshots("v1"))
	}
	if got, err := h.readSnapshot("v1", "s1", "f"); err != nil || string(got) != "v1" {
		t.Fatalf("snapshot s1 reads %q, %v; want v1", got, err)
	}
	h.wantFile("v1", "f", []byte("v2"))
	for range 2 {
		h.ok("UnmountSnapshot", h.b.UnmountSnapshot(h.ctx, "v1", "s1"))
	}
	if h.snapshots("v1")["s1"].Mounted {
		t.Fatal("still mounted after UnmountSnapshot")
	}
	if _, err := h.readSnapshot("v1", "s1", "f"); err == nil {
		t.Fatal("an unmounted snapshot is readable at its mount path")
	}
	if err := h.b.MountSnapshot(h.ctx, "v1", "nope"); err == nil {
		t.Fatal("mounted a snapshot that does not exist")
	}
	h.ok("UnmountSnapshot of one never mounted", h.b.UnmountSnapshot(h.ctx, "v1", "s-2"))
	// Deleting a mounted snapshot unmounts it first.
	h.ok("MountSnapshot", h.b.MountSnapshot(h.ctx, "v1", "s1"))
	for range 2 {
		h.ok("DeleteSnapshot", h.b.DeleteSnapshot(h.ctx, "v1", "s1"))
	}
	if snaps := h.snapshots("v1"); len(snaps) != 1 || !snaps["s-2"].Exists {
		t.Fatalf("after DeleteSnapshot: %+v", snaps)
	}
	if _, err := h.readSnapshot("v1", "s1", "f"); err == nil {
		t.Fatal("a deleted snapshot is still readable")
	}
	h.ok("DeleteSnapshot of a missing volume", h.b.DeleteSnapshot(h.ctx, "nope", "s1"))
	if len(h.snapshots("nope")) != 0 {
		t.Fatal("a missing volume has snapshots")
	}
	if err := h.b.EnsureSnapshot(h.ctx, "nope", "s1"); err == nil {
		t.Fatal("snapshotted a volume that does not exist")
	}
}

// listSnapshotDir lists a volume's snapshot directory (an error if it is not
// mounted).
func (h *harness) listSnapshotDir(key string) ([]string, error) {
	if l, ok := h.b.(SnapshotDirLister); ok {
		return l.ListSnapshotDir(key)
	}
	dir := h.b.SnapshotDirPath(key)
	if mounted, err := mountinfo.IsMountPoint(dir); err != nil || !mounted {
		return nil, fmt.Errorf("%s is not mounted (%v)", dir, err)
	}
	ents, err := os.ReadDir(dir)
	names := []string{}
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

func (h *harness) wantSnapshotDir(key string, want ...string) {
	h.t.Helper()
	got, err := h.listSnapshotDir(key)
	if err != nil {
		h.t.Fatalf("snapshot directory of %s: %v", key, err)
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		h.t.Fatalf("snapshot directory of %s lists %v, want %v", key, got, want)
	}
}

// The snapshot directory lists exactly the mounted snapshots, follows their
// mounts, is read-only where it is mounted, and goes with its volume.
func testSnapshotDir(t *testing.T, h *harness) {
	h.volume("v1", 256*mib)
	h.write("v1", "f", []byte("v1"))
	for _, s := range []string{"s1", "s2", "s3"} {
		h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", s))
	}
	h.ok("MountSnapshot", h.b.MountSnapshot(h.ctx, "v1", "s1"))
	if _, err := h.listSnapshotDir("v1"); err == nil {
		t.Fatal("a snapshot directory never mounted can be listed")
	}
	for range 2 {
		h.ok("MountSnapshotDir", h.b.MountSnapshotDir(h.ctx, "v1"))
	}
	h.wantSnapshotDir("v1", "s1")
	h.ok("MountSnapshot", h.b.MountSnapshot(h.ctx, "v1", "s2"))
	h.ok("MountSnapshot again", h.b.MountSnapshot(h.ctx, "v1", "s2"))
	h.wantSnapshotDir("v1", "s1", "s2")
	h.ok("UnmountSnapshot", h.b.UnmountSnapshot(h.ctx, "v1", "s1"))
	h.wantSnapshotDir("v1", "s2")
	h.ok("DeleteSnapshot", h.b.DeleteSnapshot(h.ctx, "v1", "s2"))
	h.wantSnapshotDir("v1")
	h.ok("MountSnapshot", h.b.MountSnapshot(h.ctx, "v1", "s3"))
	h.wantSnapshotDir("v1", "s3")
	if _, ok := h.b.(SnapshotDirLister); !ok {
		if err := os.Mkdir(filepath.Join(h.b.SnapshotDirPath("v1"), "intruder"), 0o755); !errors.Is(err, syscall.EROFS) {
			t.Fatalf("mkdir in the snapshot directory: %v, want EROFS", err)
		}
	}
	for range 2 {
		h.ok("UnmountSnapshotDir", h.b.UnmountSnapshotDir(h.ctx, "v1"))
	}
	if _, err := h.listSnapshotDir("v1"); err == nil {
		t.Fatal("the snapshot directory is still there")
	}
	// Mounted again, it lists what is mounted then.
	h.ok("MountSnapshotDir", h.b.MountSnapshotDir(h.ctx, "v1"))
	h.wantSnapshotDir("v1", "s3")
	h.ok("DeleteVolume", h.b.DeleteVolume(h.ctx, "v1"))
	if _, err := h.listSnapshotDir("v1"); err == nil {
		t.Fatal("the snapshot directory outlived its volume")
	}
	if err := h.b.MountSnapshotDir(h.ctx, "v1"); err == nil {
		t.Fatal("mounted the snapshot directory of a volume that does not exist")
	}
}

// A clone is a writable, independent copy of a snapshot, of its own size, with no
// snapshots of its own.
func testClone(t *testing.T, h *harness) {
	h.volume("src", 256*mib)
	h.write("src", "f", []byte("snapshot data"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "src", "s1"))
	h.write("src", "f", []byte("later data"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "src", "s2"))
	from := &storage.SnapshotRef{VolumeKey: "src", Snapshot: "s1"}
	for range 2 {
		h.ok("EnsureVolume clone", h.clone("cl", 512*mib, from))
	}
	if st := h.observe("cl"); !st.Exists || st.Mounted || st.CapacityBytes != 512*mib {
		t.Fatalf("clone: %+v", st)
	}
	h.ok("Mount", h.b.Mount(h.ctx, "cl"))
	h.wantFile("cl", "f", []byte("snapshot data"))
	h.write("cl", "g", []byte("clone only"))
	h.wantNoFile("src", "g")
	h.wantFile("src", "f", []byte("later data"))
	if len(h.snapshots("cl")) != 0 {
		t.Fatalf("the clone has snapshots: %v", h.snapshots("cl"))
	}
	if err := h.clone("cl2", 256*mib, &storage.SnapshotRef{VolumeKey: "src", Snapshot: "nope"}); err == nil {
		t.Fatal("cloned a snapshot that does not exist")
	}
	if st := h.observe("cl2"); st.Exists {
		t.Fatalf("a failed clone left a volume: %+v", st)
	}
	testCloneDeletedWhileCopied(t, h)
	// The clone outlives its source.
	h.ok("DeleteVolume", h.b.DeleteVolume(h.ctx, "src"))
	h.wantFile("cl", "f", []byte("snapshot data"))
	h.ok("EnsureSnapshot of a clone", h.b.EnsureSnapshot(h.ctx, "cl", "s1"))
}

// A clone being copied in the background can be deleted at once (a cancelled
// clone operation removes it), leaving nothing; while it is copied, its
// progress names no more than the snapshot holds.
func testCloneDeletedWhileCopied(t *testing.T, h *harness) {
	if !h.b.Capabilities().AsyncClone {
		return
	}
	data := make([]byte, 64*mib)
	for i := range data {
		data[i] = byte(i*7 + i>>12) // not a run of zeros a copy could skip
	}
	h.write("src", "big", data)
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "src", "big"))
	from := &storage.SnapshotRef{VolumeKey: "src", Snapshot: "big"}
	err := h.b.EnsureVolume(h.ctx, "cl3", 256*mib, from)
	if !errors.Is(err, storage.ErrInProgress) {
		t.Fatalf("a clone of %d MiB: %v, want it in progress", len(data)>>20, err)
	}
	var p *storage.Progress
	if errors.As(err, &p) {
		t.Logf("a clone's progress at once: %d of %d bytes", p.Done, p.Total)
		if p.Done < 0 || p.Total < 0 || p.Done > p.Total || p.Total > 2*int64(len(data)) {
			t.Errorf("a clone of a %d-byte snapshot reports %d of %d bytes copied", len(data), p.Done, p.Total)
		}
	}
	h.ok("DeleteVolume of a clone being copied", h.b.DeleteVolume(h.ctx, "cl3"))
	if st := h.observe("cl3"); st.Exists {
		t.Fatalf("a clone deleted while copied is left: %+v", st)
	}
	inv, err := h.b.Inventory(h.ctx)
	h.ok("Inventory", err)
	if slices.Contains(inv.Volumes, "cl3") {
		t.Fatalf("a clone deleted while copied is in the inventory: %v", inv.Volumes)
	}
	h.ok("DeleteSnapshot", h.b.DeleteSnapshot(h.ctx, "src", "big"))
}

// clone is EnsureVolume from a snapshot, asked again while a backend that copies
// in the background says it is in progress (for at most two minutes).
func (h *harness) clone(key string, size int64, from *storage.SnapshotRef) error {
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		err := h.b.EnsureVolume(h.ctx, key, size, from)
		if !errors.Is(err, storage.ErrInProgress) {
			return err
		}
		if !h.b.Capabilities().AsyncClone {
			return fmt.Errorf("ErrInProgress from a backend without AsyncClone: %w", err)
		}
		if time.Now().After(end) {
			return err
		}
	}
}

// Revert makes the snapshot's data live, leaves the live data unmounted, keeps
// every snapshot, and can be repeated.
func testRevert(t *testing.T, h *harness) {
	h.volume("v1", 256*mib)
	h.write("v1", "f", []byte("v1"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s1"))
	h.write("v1", "f", []byte("v2"))
	h.write("v1", "g", []byte("x"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s2"))
	if err := h.b.Revert(h.ctx, "v1", "nope"); err == nil {
		t.Fatal("reverted to a snapshot that does not exist")
	}
	h.ok("Mount", h.b.Mount(h.ctx, "v1"))
	h.wantFile("v1", "f", []byte("v2"))

	h.ok("Revert", h.b.Revert(h.ctx, "v1", "s1"))
	st := h.observe("v1")
	if !st.Exists || st.Mounted || st.CapacityBytes != 256*mib {
		t.Fatalf("after Revert: %+v (want existing, unmounted, same capacity)", st)
	}
	h.noSetAside("v1")
	h.ok("Mount", h.b.Mount(h.ctx, "v1"))
	h.wantFile("v1", "f", []byte("v1"))
	h.wantNoFile("v1", "g")
	if snaps := h.snapshots("v1"); len(snaps) != 2 {
		t.Fatalf("snapshots after Revert: %+v", snaps)
	}
	// Again with nothing written in between: the same result.
	h.ok("Revert again", h.b.Revert(h.ctx, "v1", "s1"))
	h.ok("Mount", h.b.Mount(h.ctx, "v1"))
	h.wantFile("v1", "f", []byte("v1"))
	// Forward to a later snapshot.
	h.ok("Revert to s2", h.b.Revert(h.ctx, "v1", "s2"))
	h.ok("Mount", h.b.Mount(h.ctx, "v1"))
	h.wantFile("v1", "f", []byte("v2"))
	h.wantFile("v1", "g", []byte("x"))
	h.write("v1", "g", []byte("writable"))
	h.noSetAside("v1")
}

// A revert stopped after any step finishes when called again; a Mount instead puts
// the old data back if the snapshot's copy was not live yet, so nothing is lost.
func testRevertCrash(t *testing.T, h *harness) {
	fp, ok := h.b.(Failpointer)
	if !ok {
		t.Skip("the backend cannot stop a revert at a step")
	}
	var steps []string
	fp.SetFailpoint(func(op, key, step string) error {
		steps = append(steps, step)
		return nil
	})
	h.volume("rec", 256*mib)
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "rec", "s1"))
	h.ok("Revert", h.b.Revert(h.ctx, "rec", "s1"))
	if want := []string{"unmounted", "set-aside", "copied"}; !slices.Equal(steps, want) {
		t.Fatalf("revert steps %v, want %v", steps, want)
	}
	crash := errors.New("crash")
	for i, step := range steps {
		for _, then := range []string{"Revert", "Mount"} {
			key := fmt.Sprintf("c%d%s", i, then)
			t.Run(step+"/"+then, func(t *testing.T) {
				h := &harness{t: t, b: h.b, ctx: h.ctx}
				fp.SetFailpoint(nil)
				h.volume(key, 256*mib)
				h.write(key, "f", []byte("old"))
				h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, key, "s1"))
				h.write(key, "f", []byte("new"))
				fp.SetFailpoint(func(op, k, s string) error {
					if s == step {
						return crash
					}
					return nil
				})
				if err := h.b.Revert(h.ctx, key, "s1"); !errors.Is(err, crash) {
					t.Fatalf("Revert stopped at %s: %v", step, err)
				}
				fp.SetFailpoint(nil)
				switch then {
				case "Revert":
					h.ok("Revert resumed", h.b.Revert(h.ctx, key, "s1"))
					h.noSetAside(key)
					h.ok("Mount", h.b.Mount(h.ctx, key))
					h.wantFile(key, "f", []byte("old"))
				case "Mount":
					h.ok("Mount", h.b.Mount(h.ctx, key))
					want := "new" // put back as it was
					if step == "copied" {
						want = "old" // the snapshot's copy was already live
					}
					h.wantFile(key, "f", []byte(want))
					if st := h.observe(key); !st.Exists || !st.Mounted {
						t.Fatalf("after Mount: %+v", st)
					}
					// A later revert still works and leaves nothing aside.
					h.ok("Revert", h.b.Revert(h.ctx, key, "s1"))
					h.noSetAside(key)
					h.ok("Mount", h.b.Mount(h.ctx, key))
					h.wantFile(key, "f", []byte("old"))
				}
				h.ok("DeleteVolume", h.b.DeleteVolume(h.ctx, key))
			})
		}
	}
	// EnsureVolume on a volume whose live data was set aside puts it back too,
	// rather than failing or making it anew.
	fp.SetFailpoint(func(op, k, s string) error {
		if s == "set-aside" {
			return crash
		}
		return nil
	})
	h.ok("Mount", h.b.Mount(h.ctx, "rec"))
	h.write("rec", "f", []byte("kept"))
	if err := h.b.Revert(h.ctx, "rec", "s1"); !errors.Is(err, crash) {
		t.Fatalf("Revert: %v", err)
	}
	fp.SetFailpoint(nil)
	h.ok("EnsureVolume", h.b.EnsureVolume(h.ctx, "rec", 256*mib, nil))
	h.ok("Mount", h.b.Mount(h.ctx, "rec"))
	h.wantFile("rec", "f", []byte("kept"))
}

// Usage counts data and snapshots, each snapshot's exclusive bytes, and agrees
// with observation.
func testUsage(t *testing.T, h *harness) {
	h.volume("v1", 256*mib)
	u0, err := h.b.Usage(h.ctx, "v1")
	h.ok("Usage", err)
	if len(u0.SnapshotExclusive) != 0 {
		t.Fatalf("snapshot usage of a volume without snapshots: %v", u0.SnapshotExclusive)
	}
	h.write("v1", "f", random(8*mib, 2))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s1"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s2"))
	h.write("v1", "f", random(8*mib, 3)) // s1 and s2 now share the old 8 MiB
	h.ok("DeleteSnapshot", h.b.DeleteSnapshot(h.ctx, "v1", "s2"))
	h.write("v1", "g", random(1*mib, 4))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "v1", "s3"))
	u, err := h.b.Usage(h.ctx, "v1")
	h.ok("Usage", err)
	if h.b.Capabilities().ExactUsage {
		if d := u.UsedBytes - u0.UsedBytes; d < 16*mib || d > 24*mib {
			t.Fatalf("used grew %d bytes for 9 MiB live and 8 MiB held by a snapshot", d)
		}
		if x := u.SnapshotExclusive["s1"]; x < 8*mib || x > 9*mib {
			t.Fatalf("s1 holds %d bytes alone, want ~8 MiB", x)
		}
		if x := u.SnapshotExclusive["s3"]; x > 1*mib/2 {
			t.Fatalf("s3 holds %d bytes alone, want ~0 (it shares everything with live)", x)
		}
	} else {
		// The live data alone, right within 30 s (and then steady).
		for end := time.Now().Add(30 * time.Second); u.UsedBytes-u0.UsedBytes != 9*mib && time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			u, err = h.b.Usage(h.ctx, "v1")
			h.ok("Usage", err)
		}
		if d := u.UsedBytes - u0.UsedBytes; d != 9*mib {
			t.Fatalf("used grew %d bytes for 9 MiB of live data", d)
		}
	}
	if len(u.SnapshotExclusive) != 2 {
		t.Fatalf("snapshot usage %v, want s1 and s3", u.SnapshotExclusive)
	}
	snaps := h.snapshots("v1")
	for n, x := range u.SnapshotExclusive {
		if snaps[n].ExclusiveBytes != x {
			t.Fatalf("ObserveSnapshots says %s holds %d alone, Usage %d", n, snaps[n].ExclusiveBytes, x)
		}
	}
	if st := h.observe("v1"); st.UsedBytes != u.UsedBytes {
		t.Fatalf("ObserveVolume says %d used, Usage %d", st.UsedBytes, u.UsedBytes)
	}
	if _, err := h.b.Usage(h.ctx, "nope"); err == nil {
		t.Fatal("usage of a volume that does not exist")
	}
	size, free, err := h.b.StoreSpace(h.ctx)
	h.ok("StoreSpace", err)
	if size <= 0 || free < 0 || free > size {
		t.Fatalf("StoreSpace = %d, %d", size, free)
	}
}

// The inventory lists every volume and its snapshots.
func testInventory(t *testing.T, h *harness) {
	inv, err := h.b.Inventory(h.ctx)
	h.ok("Inventory", err)
	if len(inv.Volumes) != 0 {
		t.Fatalf("an empty store holds %v", inv.Volumes)
	}
	h.volume("va", 256*mib)
	h.ok("EnsureVolume", h.b.EnsureVolume(h.ctx, "vb", 256*mib, nil))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "va", "s1"))
	h.ok("EnsureSnapshot", h.b.EnsureSnapshot(h.ctx, "va", "s2"))
	inv, err = h.b.Inventory(h.ctx)
	h.ok("Inventory", err)
	vols := slices.Sorted(slices.Values(inv.Volumes))
	snaps := slices.Sorted(slices.Values(inv.Snapshots["va"]))
	if !slices.Equal(vols, []string{"va", "vb"}) || !slices.Equal(snaps, []string{"s1", "s2"}) || len(inv.Snapshots["vb"]) != 0 {
		t.Fatalf("inventory %+v", inv)
	}
	if !inv.Complete["va"] || !inv.Complete["vb"] {
		t.Fatalf("whole volumes not listed as complete: %+v", inv)
	}
	all, err := h.b.ObserveVolumes(h.ctx)
	h.ok("ObserveVolumes", err)
	if len(all) != 2 || !all["va"].Mounted || all["vb"].Mounted {
		t.Fatalf("ObserveVolumes %+v", all)
	}
}

// A healthy store and its volumes, mounted or not, are reported healthy; every
// open volume is reported.
func testHealth(t *testing.T, h *harness) {
	h.volume("va", 256*mib)
	h.ok("EnsureVolume", h.b.EnsureVolume(h.ctx, "vb", 256*mib, nil))
	h.write("va", "f", random(mib, 1))
	hl, err := h.b.ObserveHealth(h.ctx)
	h.ok("ObserveHealth", err)
	if !hl.Store.OK() {
		t.Fatalf("a healthy store is reported %+v", hl.Store)
	}
	for _, k := range []string{"va", "vb"} {
		f, ok := hl.Volumes[k]
		if !ok || !f.OK() {
			t.Fatalf("volume %s: %+v (reported: %v)", k, f, ok)
		}
	}
}
