package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// volumeHandler runs volume operations: create (empty or a clone), update, delete
// and revert.
type volumeHandler struct{ c *Controller }

func (volumeHandler) kinds() []model.OpKind {
	return []model.OpKind{model.OpVolumeCreate, model.OpVolumeUpdate, model.OpVolumeDelete, model.OpVolumeRevert}
}
func (volumeHandler) storeKind() string { return store.KindVolume }

// locks: the volume, and its pool shared (a pool's operation waits for its
// volumes' and they for it).
func (volumeHandler) locks(tx store.Tx, op *model.Operation) (lockSet, error) {
	ls := lockSet{Exclusive: []string{op.Target}}
	v, err := store.Get[model.Volume](tx, store.KindVolume, op.Target)
	if errors.Is(err, model.ErrNotFound) {
		return ls, nil
	}
	if err != nil {
		return ls, err
	}
	ls.Shared = []string{v.PoolName()}
	return ls, nil
}

func (h volumeHandler) run(ctx context.Context, op *model.Operation) error {
	switch op.Kind {
	case model.OpVolumeDelete:
		return h.c.volumeDelete(ctx, op)
	case model.OpVolumeRevert:
		return h.c.volumeRevert(ctx, op)
	}
	return h.c.volumeEnsure(ctx, op)
}

// undo takes down what a failed or cancelled create made, as a delete would: its
// snapshot directory's export, its export (and endpoint address) and share, and
// its storage; then it frees the export IDs it held. (Deleting the storage alone
// left the export loaded in Ganesha with its pseudo path and ID, so the next
// volume of that shareName, or given that ID, failed in step "export".)
func (h volumeHandler) undo(ctx context.Context, op *model.Operation) error {
	if op.Kind != model.OpVolumeCreate {
		return nil
	}
	c := h.c
	v, err := c.loadVolume(ctx, op.Target)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.takeDownSnapshotExports(ctx, v); err != nil {
		return err
	}
	obs, err := c.observe(ctx, v)
	if err != nil {
		return err
	}
	// The storage goes whatever was observed: a half-made image may not show.
	steps := slices.DeleteFunc(PlanVolumeDelete(obs), func(s Step) bool { return s.Op == StepDeleteVolume })
	if err := c.runSteps(ctx, nil, v, steps); err != nil {
		return err
	}
	if err := c.be.DeleteVolume(ctx, v.Key); err != nil {
		return err
	}
	return c.st.Update(ctx, func(tx store.Tx) error {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := releaseExportID(tx, cur.Name(), cur.ExportID); err != nil {
			return err
		}
		return releaseExportID(tx, snapshotDirHolder(cur), cur.SnapshotDirExportID)
	})
}

func (c *Controller) loadVolume(ctx context.Context, name string) (*model.Volume, error) {
	var v *model.Volume
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, name)
		return err
	})
	return v, err
}

// wantOf is the desired state of v; op (nil in a resync) may name a clone's source.
func (c *Controller) wantOf(v *model.Volume, op *model.Operation) VolumeWant {
	w := VolumeWant{CapacityBytes: v.CapacityGib << 30}
	if v.UnixPermissions != "" {
		if m, err := strconv.ParseUint(v.UnixPermissions, 8, 32); err == nil {
			w.Mode = fs.FileMode(m) & fs.ModePerm
		}
	}
	// Where NT ACLs decide, the root's mode is set by the volume's own create
	// and then left to them (ModeOnce): until its create is done (a create
	// resumed after a crash between making the volume and setting its mode
	// sets it still), no SMB client can have narrowed the root yet.
	creating := op != nil && op.Kind == model.OpVolumeCreate
	w.ModeOnce = v.NTACLs() && !creating
	w.ModeUntilShared = v.NTACLs() && creating
	_, w.Export = c.exportOf(v)
	w.Share = c.opts.SMB != nil && v.Endpoint != "" && slices.Contains(v.Protocols, model.ProtocolSMB)
	if creating && op.Params.SourceKey != "" {
		w.From = &storage.SnapshotRef{VolumeKey: op.Params.SourceKey, Snapshot: op.Params.SourceSnapshot}
		if v.NTACLs() && op.Params.SourceNTACLs {
			// A clone's root is the snapshot's, with the NT ACL it had: a
			// chmod would make Samba drop that ACL (Everyone: Full control).
			// (A snapshot of a volume of mode bits has no NT ACL on its
			// root: the clone's starts open, as a new volume's does.)
			w.Mode = 0
		}
	}
	return w
}

// exportOf translates a volume and its export policy into Ganesha's terms; ok is false
// for volumes not served over NFS (or when there is no data plane).
func (c *Controller) exportOf(v *model.Volume) (ex nfs.Export, ok bool) {
	if c.dp == nil || v.Endpoint == "" {
		return ex, false
	}
	var versions []int
	if slices.Contains(v.Protocols, model.ProtocolNFSv3) {
		versions = append(versions, 3)
	}
	if slices.Contains(v.Protocols, model.ProtocolNFSv4) {
		versions = append(versions, 4)
	}
	if len(versions) == 0 {
		return ex, false
	}
	ex = nfs.Export{ID: v.ExportID, Path: c.be.MountPath(v.Key), Pseudo: "/" + v.ShareName, Protocols: versions}
	if slices.Contains(v.Protocols, model.ProtocolSMB) {
		// Samba changes the files behind Ganesha (ACLs, modes, owners):
		// NFS clients see each change at once, not when a cached copy
		// expires (60 s). docs/design-dual-protocol.md.
		ex.NoAttrCache = true
		ex.NTFS = v.NTACLs()
	}
	for _, r := range v.ExportRules {
		cls := clientOf(r, versions)
		if v.KerberosEnabled {
			for i := range cls {
				kerberosClient(&cls[i], r)
			}
		}
		ex.Clients = append(ex.Clients, cls...)
	}
	return ex, true
}

// servedExport is v's export as the data plane loads it: exportOf's, served
// from the cluster itself (FSAL_CEPH) when the backend says how
// (storage.Attacher). ok as exportOf's.
func (c *Controller) servedExport(ctx context.Context, v *model.Volume) (ex nfs.Export, ok bool, err error) {
	if ex, ok = c.exportOf(v); !ok {
		return ex, false, nil
	}
	at, attaches := c.be.(storage.Attacher)
	if !attaches {
		return ex, true, nil
	}
	a, err := at.Attachment(ctx, v.Key)
	if err != nil {
		return ex, true, fmt.Errorf("volume %s: attachment: %w", v.Name(), err)
	}
	ex.Path = a.Path
	ex.Ceph = &nfs.CephFSAL{FS: a.FS, UserID: a.UserID, Secret: a.Secret}
	return ex, true, nil
}

// clientOf renders one export rule; a rule for none of the volume's NFS versions
// renders nothing.
func clientOf(r model.ExportRule, volumeVersions []int) []nfs.Client {
	var cl nfs.Client
	for _, c := range strings.Split(deref(r.AllowedClients), ",") {
		if c = strings.TrimSpace(c); c != "" {
			cl.Clients = append(cl.Clients, c)
		}
	}
	if r.NFSv3 != nil && *r.NFSv3 && slices.Contains(volumeVersions, 3) {
		cl.Protocols = append(cl.Protocols, 3)
	}
	if r.NFSv4 != nil && *r.NFSv4 && slices.Contains(volumeVersions, 4) {
		cl.Protocols = append(cl.Protocols, 4)
	}
	if len(cl.Clients) == 0 || len(cl.Protocols) == 0 {
		return nil
	}
	cl.Access = nfs.AccessNone
	if r.AccessType != nil {
		switch *r.AccessType {
		case model.AccessReadOnly:
			cl.Access = nfs.AccessRO
		case model.AccessReadWrite:
			cl.Access = nfs.AccessRW
		}
	}
	// squashMode wins over hasRootAccess; absent both, root keeps root (upstream's
	// default for hasRootAccess is true).
	cl.Squash = nfs.NoRootSquash
	if r.HasRootAccess != nil && strings.EqualFold(*r.HasRootAccess, "false") {
		cl.Squash = nfs.RootSquash
	}
	if r.SquashMode != nil {
		switch *r.SquashMode {
		case model.SquashNoRoot:
			cl.Squash = nfs.NoRootSquash
		case model.SquashRoot:
			cl.Squash = nfs.RootSquash
		case model.SquashAll:
			cl.Squash = nfs.AllSquash
		}
	}
	if r.AnonUID != nil {
		cl.AnonUID = *r.AnonUID
	}
	return []nfs.Client{cl}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// observe reports a volume's storage and, when it is served over NFS, its export.
func (c *Controller) observe(ctx context.Context, v *model.Volume) (Observation, error) {
	st, err := c.be.ObserveVolume(ctx, v.Key)
	if err != nil {
		return Observation{}, err
	}
	o := Observation{VolumeStatus: st}
	// A volume without its attachment (no storage yet) is not exported.
	ex, ok, err := c.servedExport(ctx, v)
	if ok && err == nil && v.ExportID != 0 {
		addr, err := netip.ParseAddr(v.Endpoint)
		if err != nil {
			return o, fmt.Errorf("volume %s endpoint: %w", v.Name(), err)
		}
		view, err := c.dp.View(ctx, v.Network)
		if err != nil {
			return o, err
		}
		o.Exported = view.Exported(addr, ex)
	}
	list := func(ctx context.Context, network, ad string) (map[string]map[string]string, error) {
		return c.opts.SMB.SMBShares(ctx, network, ad)
	}
	if _, err := c.observeShare(ctx, v, &o, list); err != nil {
		return o, err
	}
	return o, nil
}

// stepPause waits StepDelay (fault injection: a crash test's window).
func (c *Controller) stepPause(ctx context.Context) error {
	if c.opts.StepDelay <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.opts.StepDelay):
		return nil
	}
}

// runSteps applies steps to volume v, retrying each a few times.
func (c *Controller) runSteps(ctx context.Context, op *model.Operation, v *model.Volume, steps []Step) error {
	for _, s := range steps {
		if err := c.stepPause(ctx); err != nil {
			return err
		}
		var err error
		start := time.Now()
		for attempt := range c.opts.StepAttempts {
			if err = c.waitInProgress(ctx, op, v, s); err == nil || ctx.Err() != nil || errors.As(err, new(*parkError)) {
				break
			}
			c.log.Warn("step failed", "volume", v.Name(), "step", s, "attempt", attempt+1, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
			}
		}
		if err != nil {
			return &stepError{step: s, err: err}
		}
		c.log.Debug("step done", "volume", v.Name(), "step", s.Op, "took", time.Since(start))
	}
	return nil
}

// inProgressWait is the longest wait between two askings of a step in
// progress (a clone the backend copies in the background).
const inProgressWait = 5 * time.Second

// firstInProgressWait is the first: a small clone is whole at once.
const firstInProgressWait = 200 * time.Millisecond

// waitInProgress applies a step. While the backend answers that it is in
// progress (storage.ErrInProgress: a clone copied in the background), an
// operation's step records how far it is in the operation's status and parks
// the operation (a *parkError): its worker is free for other work, its locks
// stay held, and the scheduler runs it again after a wait that grows with
// each asking, up to inProgressWait; the steps before are idempotent, so the
// operation starts over. Without an operation (a resync, an undo) it waits
// in place. Being in progress is not a failed attempt.
func (c *Controller) waitInProgress(ctx context.Context, op *model.Operation, v *model.Volume, s Step) error {
	wait := firstInProgressWait
	for {
		err := c.step(ctx, op, v, s)
		if !errors.Is(err, storage.ErrInProgress) {
			return err
		}
		if op != nil {
			// Saved each time: it renews the operation's lease past the wait.
			if err := c.saveProgress(ctx, op, progressMessage(err)); err != nil {
				return err
			}
			return &parkError{wait: c.nextParkWait(op.Name())}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, inProgressWait)
	}
}

// progressMessage is an operation's status while its clone is copied: how
// much of the snapshot's data is copied, as far as the backend can tell.
func progressMessage(err error) string {
	const msg = "copying the snapshot's data"
	var p *storage.Progress
	if !errors.As(err, &p) || p.Total <= 0 {
		return msg
	}
	if p.Done <= 0 {
		return fmt.Sprintf("%s (%s)", msg, gib(p.Total))
	}
	return fmt.Sprintf("%s: %s of %s (%d%%)", msg, gib(min(p.Done, p.Total)), gib(p.Total), min(p.Done, p.Total)*100/p.Total)
}

// gib formats bytes as GiB with two decimals (MiB below 1 GiB).
func gib(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// step applies one step. Everything it needs is in the step and the volume; op is
// nil in a resync, and only the revert's marker step uses it.
func (c *Controller) step(ctx context.Context, op *model.Operation, v *model.Volume, s Step) error {
	if (s.Op == StepExport || s.Op == StepShare) && c.failover.fenced.Load() {
		// A pass or an operation already under way when the node fenced
		// itself must not bring an endpoint back (failover.go).
		return errors.New("this node fenced itself: it serves nothing until it is started again")
	}
	switch s.Op {
	case StepCreateVolume:
		return c.be.EnsureVolume(ctx, v.Key, s.Bytes, s.From)
	case StepResize:
		return c.be.Resize(ctx, v.Key, s.Bytes)
	case StepSetMode:
		return c.be.SetMode(ctx, v.Key, s.Mode)
	case StepMount:
		return c.be.Mount(ctx, v.Key)
	case StepUnmount:
		return c.be.Unmount(ctx, v.Key)
	case StepDeleteVolume:
		return c.be.DeleteVolume(ctx, v.Key)
	case StepRevert:
		return c.be.Revert(ctx, v.Key, s.Snapshot)
	case StepMarkReverted:
		if op == nil {
			return errors.New("mark-reverted outside an operation")
		}
		op.Params.Reverted = true
		return c.saveProgress(ctx, op, "reverted; cleaning up")
	case StepDeleteNewer:
		return c.deleteNewerSnapshots(ctx, v, s.Snapshot)
	case StepExport:
		if _, ok := c.exportOf(v); !ok {
			return nil
		}
		if err := c.ensureVolumeExportID(ctx, v); err != nil {
			return err
		}
		ad, host, err := c.ensureKerberos(ctx, v)
		if err != nil {
			return err
		}
		ex, _, err := c.servedExport(ctx, v)
		if err != nil {
			return err
		}
		addr, err := netip.ParseAddr(v.Endpoint)
		if err != nil {
			return err
		}
		if err := c.dp.Export(ctx, v.Network, addr, ex); err != nil {
			return err
		}
		return c.kerberosExported(ctx, v, ad, host, addr)
	case StepUnexport:
		return c.takeOff(ctx, v, false)
	case StepShare:
		return c.share(ctx, v)
	case StepUnshare:
		return c.unshare(ctx, v)
	}
	return fmt.Errorf("unknown step %q", s.Op)
}

// takeOff takes volume v's endpoint address and export off this node's data
// plane: released (its clients' connections reset) when it moves to another
// node, else unexported (a delete, a revert, a remount). An SMB-only volume
// has no export (ExportID 0): its address alone goes; else it stayed on
// this node's eth0, after a move as well as the next host's.
func (c *Controller) takeOff(ctx context.Context, v *model.Volume, release bool) error {
	if c.dp == nil || v.Endpoint == "" {
		return nil
	}
	addr, err := netip.ParseAddr(v.Endpoint)
	if err != nil {
		return err
	}
	off := c.dp.Unexport
	if release {
		off = c.dp.Release
	}
	if err := off(ctx, v.Network, addr, v.ExportID); err != nil {
		return err
	}
	c.kerberosUnexported(ctx, v, addr)
	return nil
}

func (c *Controller) volumeEnsure(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if err != nil {
		return err
	}
	if c.cancelled(ctx, op) && (op.Kind == model.OpVolumeCreate || !op.Params.Started) {
		return errCancelled
	}
	obs, err := c.observe(ctx, v)
	if err != nil {
		return err
	}
	steps := PlanVolume(c.wantOf(v, op), obs)
	if op.Kind == model.OpVolumeUpdate && len(steps) > 0 {
		if err := c.markStarted(ctx, op, "applying"); err != nil {
			return err
		}
	}
	if err := c.runSteps(ctx, op, v, steps); err != nil {
		return err
	}
	if op.Kind == model.OpVolumeCreate && c.cancelled(ctx, op) {
		return errCancelled
	}
	if err := c.syncSnapshotExports(ctx, v, nil, nil, nil); err != nil {
		return err
	}
	return c.finishVolume(ctx, op, v)
}

// finishVolume completes op with its volume READY and its usage as observed now.
func (c *Controller) finishVolume(ctx context.Context, op *model.Operation, v *model.Volume) error {
	u, err := c.be.Usage(ctx, v.Key)
	if err != nil {
		return err
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, op.Target)
		if err != nil {
			return nil, err
		}
		cur.State, cur.Details, cur.UsedBytes = model.StateReady, "", u.UsedBytes
		return cur, store.PutVolume(tx, cur)
	})
}

// startTakingDown begins a delete or a revert of v: a cancellation asked for before
// its first storage step is honoured, then it is marked started, the volume's
// snapshot exports are taken down, and the volume is observed.
func (c *Controller) startTakingDown(ctx context.Context, op *model.Operation, v *model.Volume, msg string) (Observation, error) {
	if c.cancelled(ctx, op) && !op.Params.Started {
		return Observation{}, errCancelled
	}
	if err := c.markStarted(ctx, op, msg); err != nil {
		return Observation{}, err
	}
	if err := c.takeDownSnapshotExports(ctx, v); err != nil {
		return Observation{}, err
	}
	return c.observe(ctx, v)
}

func (c *Controller) volumeDelete(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if errors.Is(err, model.ErrNotFound) {
		return c.complete(ctx, op, func(tx store.Tx) (any, error) { return nil, nil })
	}
	if err != nil {
		return err
	}
	obs, err := c.startTakingDown(ctx, op, v, "deleting")
	if err != nil {
		return err
	}
	if err := c.runSteps(ctx, op, v, PlanVolumeDelete(obs)); err != nil {
		return err
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, v.Name())
		if err != nil {
			return nil, err
		}
		for _, s := range snaps {
			if err := releaseExportID(tx, s.Name(), s.ExportID); err != nil {
				return nil, err
			}
			if err := tx.Delete(store.KindSnapshot, s.Name()); err != nil {
				return nil, err
			}
		}
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if err != nil {
			return nil, err
		}
		if err := releaseExportID(tx, v.Name(), cur.ExportID); err != nil {
			return nil, err
		}
		if err := releaseExportID(tx, snapshotDirHolder(cur), cur.SnapshotDirExportID); err != nil {
			return nil, err
		}
		return nil, tx.Delete(store.KindVolume, v.Name())
	})
}

func (c *Controller) volumeRevert(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if err != nil {
		return err
	}
	// Snapshot exports go first: newer snapshots are about to be deleted.
	obs, err := c.startTakingDown(ctx, op, v, "reverting")
	if err != nil {
		return err
	}
	steps := PlanRevert(op.Params.Reverted, op.Params.Snapshot, c.wantOf(v, nil), obs)
	if err := c.runSteps(ctx, op, v, steps); err != nil {
		return err
	}
	if err := c.syncSnapshotExports(ctx, v, nil, nil, nil); err != nil {
		return err
	}
	return c.finishVolume(ctx, op, v)
}

// deleteNewerSnapshots removes the snapshots taken after the one reverted to
// (upstream semantics), storage first, then records.
func (c *Controller) deleteNewerSnapshots(ctx context.Context, v *model.Volume, target string) error {
	snaps, err := c.snapshotsOf(ctx, v)
	if err != nil {
		return err
	}
	var pivot *model.Snapshot
	for _, s := range snaps {
		if s.ID == target {
			pivot = s
		}
	}
	if pivot == nil {
		return model.Errorf(model.ErrFailedPrecondition, "snapshot %q no longer exists", target)
	}
	for _, s := range snaps {
		if !s.CreateTime.After(pivot.CreateTime) {
			continue
		}
		if err := c.be.DeleteSnapshot(ctx, v.Key, s.ID); err != nil {
			return err
		}
		if err := c.st.Update(ctx, func(tx store.Tx) error { return deleteSnapshotRecord(tx, s.Name()) }); err != nil {
			return err
		}
	}
	return nil
}

// snapshotsOf lists a volume's snapshot records.
func (c *Controller) snapshotsOf(ctx context.Context, v *model.Volume) ([]*model.Snapshot, error) {
	var snaps []*model.Snapshot
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		snaps, err = store.List[model.Snapshot](tx, store.KindSnapshot, v.Name())
		return err
	})
	return snaps, err
}
