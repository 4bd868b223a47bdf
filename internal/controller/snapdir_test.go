package controller

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	dpfake "github.com/basin-nas/basin/internal/dataplane/fake"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/store"
)

// exportsByPseudo lists the loaded exports by pseudo path.
func exportsByPseudo(dp *dpfake.DataPlane) map[string]nfs.Export {
	out := map[string]nfs.Export{}
	for _, e := range dp.Exports() {
		out[e.Export.Pseudo] = e.Export
	}
	return out
}

func pseudos(dp *dpfake.DataPlane) []string {
	var out []string
	for p := range exportsByPseudo(dp) {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// nfsVolume is a volume served over the NFS versions given on 10.99.0.10,
// read-write to 10.99.0.0/24, with snapshotDirectory as dir.
func nfsVolume(id string, dir bool, versions ...model.Protocol) *model.Volume {
	v := newVolume(id)
	v.Protocols = versions
	v.Endpoint, v.Network = "10.99.0.10", "default"
	v.SnapshotDirectory = dir
	r := model.ExportRule{AllowedClients: ptr("10.99.0.0/24"), AccessType: ptr(model.AccessReadWrite)}
	for _, p := range versions {
		switch p {
		case model.ProtocolNFSv3:
			r.NFSv3 = ptr(true)
		case model.ProtocolNFSv4:
			r.NFSv4 = ptr(true)
		}
	}
	v.ExportRules = []model.ExportRule{r}
	return v
}

// A volume's .snapshot follows its snapshots and its snapshotDirectory: the
// snapshot directory is exported before the snapshots under it (NFSv3 and NFSv4,
// as the volume is, read-only, its attributes never cached), lists exactly the
// snapshots exported, and goes, export, mount and ID, when the option is turned
// off, the volume reverted (to come back after) or deleted.
func TestSnapshotDirectoryFollowsSnapshots(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	ctx := context.Background()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	v := nfsVolume("vol1", true, model.ProtocolNFSv3, model.ProtocolNFSv4)
	at := t0
	step := func(kind model.OpKind, target string, seed func(tx store.Tx) error) {
		t.Helper()
		at = at.Add(time.Second)
		if op := h.run(t, c, newOp(kind, target, at), seed); op.Error != nil {
			t.Fatalf("%s %s: %+v", kind, target, op.Error)
		}
		checkExports(t, h, dp)
	}
	snapshot := func(id string) {
		t.Helper()
		sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: id, CreateTime: at.Add(time.Second), State: model.StateCreating}, Volume: v.ID}
		step(model.OpSnapshotCreate, sn.Name(), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) })
	}
	update := func(mutate func(v *model.Volume), kind model.OpKind) {
		t.Helper()
		h.seed(t, func(tx store.Tx) error {
			cur, _ := store.Get[model.Volume](tx, store.KindVolume, v.Name())
			mutate(cur)
			return store.PutVolume(tx, cur)
		})
		step(kind, v.Name(), nil)
	}
	listed := func(want ...string) {
		t.Helper()
		got, err := h.be.ListSnapshotDir(v.Key)
		if want == nil {
			if err == nil {
				t.Fatalf("snapshot directory mounted, listing %v; want none", got)
			}
			return
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("snapshot directory lists %v (%v), want %v", got, err, want)
		}
	}
	step(model.OpVolumeCreate, v.Name(), func(tx store.Tx) error { return store.PutVolume(tx, v) })
	if got := pseudos(dp); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot"}) {
		t.Fatalf("exports %v", got)
	}
	listed([]string{}...)
	dir := exportsByPseudo(dp)["/vol1/.snapshot"]
	if !dir.NoAttrCache || !slices.Equal(dir.Protocols, []int{3, 4}) || dir.Path != h.be.SnapshotDirPath(v.Key) ||
		len(dir.Clients) != 1 || dir.Clients[0].Access != nfs.AccessRO || !slices.Equal(dir.Clients[0].Protocols, []int{3, 4}) {
		t.Fatalf("snapshot directory export %+v", dir)
	}
	snapshot("s1")
	// A snapshot's operation does not observe the whole sandbox (which costs as
	// much as the sandbox holds) to check the directory it is mounted in.
	views := dp.Views()
	snapshot("s2")
	if d := dp.Views() - views; d != 0 {
		t.Errorf("a snapshot create observed the sandbox %d times", d)
	}
	if got := pseudos(dp); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1", "/vol1/.snapshot/s2"}) {
		t.Fatalf("exports %v", got)
	}
	listed("s1", "s2")
	s1 := exportsByPseudo(dp)["/vol1/.snapshot/s1"]
	if s1.NoAttrCache || !slices.Equal(s1.Protocols, []int{3, 4}) || s1.Clients[0].Access != nfs.AccessRO || s1.Path != h.be.SnapshotMountPath(v.Key, "s1") {
		t.Fatalf("snapshot export %+v", s1)
	}
	// The directory is loaded before any snapshot under it.
	hist := dp.History()
	if i, j := slices.Index(hist, "export /vol1/.snapshot"), slices.Index(hist, "export /vol1/.snapshot/s1"); i < 0 || j < i {
		t.Fatalf("export order %v", hist)
	}
	snap2 := model.LocationName("p", "l") + "/volumes/vol1/snapshots/s2"
	h.seed(t, func(tx store.Tx) error {
		cur, _ := store.Get[model.Snapshot](tx, store.KindSnapshot, snap2)
		cur.State = model.StateDeleting
		return store.PutSnapshot(tx, cur)
	})
	step(model.OpSnapshotDelete, snap2, nil)
	listed("s1")
	if got := pseudos(dp); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1"}) {
		t.Fatalf("exports after a delete %v", got)
	}

	// Off: snapshot exports first, then the directory; its ID is given back.
	update(func(v *model.Volume) { v.SnapshotDirectory, v.State = false, model.StateUpdating }, model.OpVolumeUpdate)
	if got := pseudos(dp); !slices.Equal(got, []string{"/vol1"}) {
		t.Fatalf("exports with the option off %v", got)
	}
	listed()
	hist = dp.History()
	if i, j := slices.Index(hist, "unexport /vol1/.snapshot/s1"), slices.Index(hist, "unexport /vol1/.snapshot"); i < 0 || j < i {
		t.Fatalf("unexport order %v", hist)
	}
	cur := h.volume(t, v.Name())
	if cur.SnapshotDirExportID != 0 {
		t.Fatalf("the snapshot directory keeps export id %d", cur.SnapshotDirExportID)
	}
	update(func(v *model.Volume) { v.SnapshotDirectory, v.State = true, model.StateUpdating }, model.OpVolumeUpdate)
	if got := pseudos(dp); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1"}) {
		t.Fatalf("exports with the option on again %v", got)
	}
	listed("s1")

	// A revert takes .snapshot down with the newer snapshot, and puts it back.
	snapshot("s3")
	listed("s1", "s3")
	t.Run("revert", func(t *testing.T) {
		at = at.Add(time.Second)
		op := newOp(model.OpVolumeRevert, v.Name(), at)
		op.Params.Snapshot = "s1"
		h.seed(t, func(tx store.Tx) error {
			cur, _ := store.Get[model.Volume](tx, store.KindVolume, v.Name())
			cur.State = model.StateRestoring
			return store.PutVolume(tx, cur)
		})
		if op := h.run(t, c, op, nil); op.Error != nil {
			t.Fatalf("revert: %+v", op.Error)
		}
		checkExports(t, h, dp)
		if got := pseudos(dp); !slices.Equal(got, []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1"}) {
			t.Fatalf("exports after the revert %v", got)
		}
		listed("s1")
	})

	// Deleted: nothing of it is left loaded, mounted or holding an ID.
	update(func(v *model.Volume) { v.State = model.StateDeleting }, model.OpVolumeDelete)
	if got := pseudos(dp); len(got) != 0 {
		t.Fatalf("exports after the delete %v", got)
	}
	if st := h.be.State(); len(st.SnapshotDirs) != 0 || len(st.SnapshotMounts) != 0 {
		t.Fatalf("backend after the delete %+v", st)
	}
	h.st.View(ctx, func(tx store.Tx) error {
		if raws, _ := tx.List(store.KindExportID, ""); len(raws) != 0 {
			t.Errorf("%d export IDs held after the delete", len(raws))
		}
		return nil
	})
}

// volume reads a volume's record.
func (h *harness) volume(t *testing.T, name string) *model.Volume {
	t.Helper()
	var v *model.Volume
	if err := h.st.View(context.Background(), func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, name)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// After a restart (volumes unmounted, a new sandbox holding no export) one
// resync pass brings .snapshot back whole: the directory before its snapshots,
// even for a volume the pass had to mount and export again.
func TestResyncRestoresSnapshotDirectory(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	ctx := context.Background()
	c := New(Options{Store: h.st, Backend: h.be, DataPlane: AdaptDataPlane(dp), Resync: time.Hour})
	v := nfsVolume("vol1", true, model.ProtocolNFSv3)
	if op := h.run(t, c, newOp(model.OpVolumeCreate, v.Name(), t0), func(tx store.Tx) error { return store.PutVolume(tx, v) }); op.Error != nil {
		t.Fatal(op.Error)
	}
	sn := &model.Snapshot{Meta: model.Meta{Project: "p", Location: "l", ID: "s1", CreateTime: t0.Add(time.Second), State: model.StateCreating}, Volume: v.ID}
	if op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), t0.Add(time.Second)), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) }); op.Error != nil {
		t.Fatal(op.Error)
	}
	want := []string{"/vol1", "/vol1/.snapshot", "/vol1/.snapshot/s1"}
	if got := pseudos(dp); !slices.Equal(got, want) {
		t.Fatalf("exports %v", got)
	}
	// The restart: nothing exported, nothing mounted.
	for id := range dp.Exports() {
		dp.Unexport(ctx, "default", netip.Addr{}, id)
	}
	for _, f := range []func() error{
		func() error { return h.be.UnmountSnapshot(ctx, v.Key, "s1") },
		func() error { return h.be.UnmountSnapshotDir(ctx, v.Key) },
		func() error { return h.be.Unmount(ctx, v.Key) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	history := len(dp.History())
	if err := c.resync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := pseudos(dp); !slices.Equal(got, want) {
		t.Fatalf("exports after one resync pass %v, want %v", got, want)
	}
	if got, err := h.be.ListSnapshotDir(v.Key); err != nil || !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("snapshot directory %v %v", got, err)
	}
	hist := dp.History()[history:]
	if i, j := slices.Index(hist, "export /vol1/.snapshot"), slices.Index(hist, "export /vol1/.snapshot/s1"); i < 0 || j < i {
		t.Fatalf("export order %v", hist)
	}
}
