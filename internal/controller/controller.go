// Package controller carries out operations: the API records intent (a resource in a
// transitional state plus an Operation) and the controller converges the data plane
// to it, then writes the result. Planning is pure (plan.go); this file applies plans.
//
// Crash safety: every step is idempotent and plans are recomputed from what the
// backend observes, so an operation interrupted at any point is simply run again on
// the next start. At start, and periodically, the controller also re-applies the
// desired state of every ready volume, refreshes usage, and deletes storage that no
// record accounts for.
//
// Imported by the daemon only.
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// Options configures a Controller.
type Options struct {
	Store   store.Store
	Backend storage.Backend
	Logger  *slog.Logger
	// Now returns the current time; nil = time.Now.
	Now func() time.Time
	// Resync is how often desired state is re-applied and usage refreshed; default 30 s.
	Resync time.Duration
	// Retention is how long finished operations are kept; default 7 days.
	Retention time.Duration
	// AuditRetention is how long audit entries are kept; default 90 days.
	AuditRetention time.Duration
	// StepAttempts is how often a failing step is tried before the operation fails;
	// default 3.
	StepAttempts int
	// DataPlane serves volumes over NFS; nil = storage only.
	DataPlane DataPlane
	// StepDelay pauses before every step. It is fault injection for crash tests
	// (a window in which to kill the process mid-operation); zero in production.
	StepDelay time.Duration
}

// DataPlane is what the controller needs of the NFS data plane (package dataplane).
type DataPlane interface {
	Export(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) error
	Unexport(ctx context.Context, network string, addr netip.Addr, id uint64) error
	Exported(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) (bool, error)
}

// Controller runs operations one at a time, in the order they were created.
type Controller struct {
	opts  Options
	st    store.Store
	be    storage.Backend
	dp    DataPlane
	log   *slog.Logger
	wake  chan struct{}
	mu    sync.Mutex
	subs  map[string][]chan struct{}
	ready chan struct{}
}

// New returns a Controller; Run starts it.
func New(opts Options) *Controller {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Resync == 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.Retention == 0 {
		opts.Retention = 7 * 24 * time.Hour
	}
	if opts.AuditRetention == 0 {
		opts.AuditRetention = 90 * 24 * time.Hour
	}
	if opts.StepAttempts == 0 {
		opts.StepAttempts = 3
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Controller{opts: opts, st: opts.Store, be: opts.Backend, dp: opts.DataPlane, log: log,
		wake: make(chan struct{}, 1), subs: map[string][]chan struct{}{}, ready: make(chan struct{})}
}

// Wake asks the controller to look for new operations. It never blocks.
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Ready is closed once the first reconcile after start has finished.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// WaitDone waits until operation name is done or ctx ends, and reports which.
func (c *Controller) WaitDone(ctx context.Context, name string) bool {
	ch := make(chan struct{})
	c.mu.Lock()
	c.subs[name] = append(c.subs[name], ch)
	c.mu.Unlock()
	// It may have finished before we subscribed.
	var op model.Operation
	if err := c.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, name, &op) }); err == nil && op.Done {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Controller) notify(name string) {
	c.mu.Lock()
	subs := c.subs[name]
	delete(c.subs, name)
	c.mu.Unlock()
	for _, ch := range subs {
		close(ch)
	}
}

// Run resumes unfinished operations, reconciles, then serves operations until ctx
// ends. It returns nil on cancellation.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.resync(ctx, true); err != nil && ctx.Err() == nil {
		c.log.Error("initial reconcile", "err", err)
	}
	c.processPending(ctx)
	close(c.ready)
	tick := time.NewTicker(c.opts.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-tick.C:
			if err := c.resync(ctx, false); err != nil && ctx.Err() == nil {
				c.log.Warn("reconcile", "err", err)
			}
		}
		c.processPending(ctx)
	}
}

// processPending runs every unfinished operation once, oldest first. An operation
// that could not finish (its failure could not be recorded) is tried again on the next
// wake or resync, never in a tight loop.
func (c *Controller) processPending(ctx context.Context) {
	{
		var pending []*model.Operation
		err := c.st.View(ctx, func(tx store.Tx) error {
			ops, err := store.List[model.Operation](tx, store.KindOperation, "")
			for _, o := range ops {
				if !o.Done {
					pending = append(pending, o)
				}
			}
			return err
		})
		if err != nil {
			c.log.Error("list operations", "err", err)
			return
		}
		if len(pending) == 0 {
			return
		}
		slices.SortStableFunc(pending, func(a, b *model.Operation) int { return a.CreateTime.Compare(b.CreateTime) })
		for _, op := range pending {
			if ctx.Err() != nil {
				return
			}
			c.execute(ctx, op)
		}
	}
}

// errCancelled ends an operation whose cancellation was honoured.
var errCancelled = errors.New("Operation was cancelled")

func (c *Controller) execute(ctx context.Context, op *model.Operation) {
	log := c.log.With("operation", op.ID, "kind", op.Kind, "target", op.Target)
	log.Debug("run operation")
	err := c.apply(ctx, op)
	if ctx.Err() != nil {
		// Shutting down: leave the operation unfinished; the next start resumes it.
		log.Info("operation interrupted; will resume", "err", err)
		return
	}
	if err != nil {
		log.Warn("operation failed", "err", err)
		if ferr := c.fail(ctx, op, err); ferr != nil {
			log.Error("record failure", "err", ferr)
			return
		}
	}
	c.notify(op.Name())
}

// apply dispatches on the operation kind; on success the operation is finished and
// stored.
func (c *Controller) apply(ctx context.Context, op *model.Operation) error {
	switch op.Kind {
	case model.OpPoolCreate, model.OpPoolUpdate:
		return c.finishPool(ctx, op)
	case model.OpPoolDelete:
		return c.finishDelete(ctx, op, store.KindPool)
	case model.OpADCreate, model.OpADUpdate:
		return c.finishAD(ctx, op)
	case model.OpADDelete:
		return c.finishDelete(ctx, op, store.KindActiveDirectory)
	case model.OpVolumeCreate, model.OpVolumeUpdate:
		return c.volumeEnsure(ctx, op)
	case model.OpVolumeDelete:
		return c.volumeDelete(ctx, op)
	case model.OpVolumeRevert:
		return c.volumeRevert(ctx, op)
	case model.OpSnapshotCreate, model.OpSnapshotUpdate:
		return c.snapshotEnsure(ctx, op)
	case model.OpSnapshotDelete:
		return c.snapshotDelete(ctx, op)
	}
	return fmt.Errorf("unknown operation kind %q", op.Kind)
}

// cancelled reports whether cancellation of op has been requested. Callers honour it
// for creates at any point before completion (they roll back) and for other kinds
// only before their first storage step ran.
func (c *Controller) cancelled(ctx context.Context, op *model.Operation) bool {
	var cur model.Operation
	if err := c.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &cur) }); err != nil {
		return false
	}
	op.RequestedCancellation = cur.RequestedCancellation
	return cur.RequestedCancellation
}

func (c *Controller) markStarted(ctx context.Context, op *model.Operation, msg string) error {
	if op.Params == nil {
		op.Params = map[string]string{}
	}
	op.Params["started"] = "1"
	op.StatusMessage = msg
	return c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		op.RequestedCancellation = cur.RequestedCancellation
		return store.PutOperation(tx, op)
	})
}

// complete finishes op successfully with resp (nil = Empty) in the same transaction
// as mutate.
func (c *Controller) complete(ctx context.Context, op *model.Operation, mutate func(tx store.Tx) (any, error)) error {
	err := c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		resp, err := mutate(tx)
		if err != nil {
			return err
		}
		cur.Done, cur.EndTime, cur.StatusMessage = true, c.opts.Now().UTC(), ""
		cur.Params = op.Params
		if resp != nil {
			b, err := json.Marshal(resp)
			if err != nil {
				return err
			}
			cur.Response = b
		}
		*op = cur
		return store.PutOperation(tx, &cur)
	})
	return err
}

// statusOf turns an operation's failure into what its caller sees: Basin's own
// words for what the caller can act on, and otherwise a generic message naming the
// step and the operation. The cause itself (commands, paths, stderr) is logged with
// the operation's ID by execute, never shown.
func statusOf(op *model.Operation, cause error) *model.Status {
	switch {
	case errors.Is(cause, errCancelled):
		return &model.Status{Code: 1, Message: errCancelled.Error()}
	case errors.Is(cause, storage.ErrTooSmall):
		return &model.Status{Code: 9, Message: "capacityGib: the volume's data and snapshots do not fit in the capacity asked for"}
	}
	if msg, ok := model.UserMessage(cause); ok {
		code := int32(13)
		switch {
		case errors.Is(cause, model.ErrFailedPrecondition):
			code = 9
		case errors.Is(cause, model.ErrResourceExhausted):
			code = 8
		case errors.Is(cause, model.ErrInvalid):
			code = 3
		case errors.Is(cause, model.ErrNotFound):
			code = 5
		}
		return &model.Status{Code: code, Message: msg}
	}
	where := ""
	var se *stepError
	if errors.As(cause, &se) {
		where = fmt.Sprintf(" in step %q", se.step)
	}
	return &model.Status{Code: 13, Message: fmt.Sprintf("internal error%s of operation %s; the server log has the details", where, op.ID)}
}

// stepError is a step's failure.
type stepError struct {
	step Step
	err  error
}

func (e *stepError) Error() string { return string(e.step) + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// fail finishes op with an error. Creates roll back what they made and remove the
// resource; other kinds leave the resource in ERROR (or restore it, if cancelled
// before starting).
func (c *Controller) fail(ctx context.Context, op *model.Operation, cause error) error {
	st := statusOf(op, cause)
	switch op.Kind {
	case model.OpVolumeCreate:
		if err := c.rollbackVolume(ctx, op); err != nil {
			return err
		}
	case model.OpSnapshotCreate:
		if err := c.rollbackSnapshot(ctx, op); err != nil {
			return err
		}
	}
	return c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		// A cancelled operation, or a shrink that did not fit (refused before any
		// change), leaves the resource as it was.
		restore := errors.Is(cause, errCancelled) || errors.Is(cause, storage.ErrTooSmall)
		if err := c.markFailedTarget(tx, &cur, st, restore); err != nil {
			return err
		}
		cur.Done, cur.EndTime, cur.Error, cur.StatusMessage = true, c.opts.Now().UTC(), st, ""
		return store.PutOperation(tx, &cur)
	})
}

func (c *Controller) markFailedTarget(tx store.Tx, op *model.Operation, st *model.Status, restore bool) error {
	kind := kindOf(op.Kind)
	switch op.Kind {
	case model.OpVolumeCreate, model.OpSnapshotCreate:
		return tx.Delete(kind, op.Target)
	case model.OpPoolCreate, model.OpADCreate:
		return tx.Delete(kind, op.Target)
	}
	if restore && op.Prev != nil {
		// Restore the resource as it was before the operation.
		return putRaw(tx, kind, op.Target, op.Prev)
	}
	return setState(tx, kind, op.Target, model.StateError, st.Message)
}

func kindOf(k model.OpKind) string {
	switch k {
	case model.OpPoolCreate, model.OpPoolUpdate, model.OpPoolDelete:
		return store.KindPool
	case model.OpVolumeCreate, model.OpVolumeUpdate, model.OpVolumeDelete, model.OpVolumeRevert:
		return store.KindVolume
	case model.OpSnapshotCreate, model.OpSnapshotUpdate, model.OpSnapshotDelete:
		return store.KindSnapshot
	}
	return store.KindActiveDirectory
}

// putRaw stores a resource document given as model JSON, keeping its parent.
func putRaw(tx store.Tx, kind, name string, raw []byte) error {
	switch kind {
	case store.KindPool:
		var p model.Pool
		if err := json.Unmarshal(raw, &p); err != nil {
			return err
		}
		return store.PutPool(tx, &p)
	case store.KindVolume:
		var v model.Volume
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		return store.PutVolume(tx, &v)
	case store.KindSnapshot:
		var s model.Snapshot
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		return store.PutSnapshot(tx, &s)
	case store.KindActiveDirectory:
		var a model.ActiveDirectory
		if err := json.Unmarshal(raw, &a); err != nil {
			return err
		}
		return store.PutAD(tx, &a)
	}
	return fmt.Errorf("put %s %s: unknown kind", kind, name)
}

// setState sets a stored resource's state and details, whatever its kind.
func setState(tx store.Tx, kind, name string, state model.State, details string) error {
	var doc map[string]json.RawMessage
	if err := tx.Get(kind, name, &doc); err != nil {
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		return err
	}
	doc["state"], _ = json.Marshal(state)
	doc["stateDetails"], _ = json.Marshal(details)
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return putRaw(tx, kind, name, raw)
}

func (c *Controller) finishPool(ctx context.Context, op *model.Operation) error {
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		p, err := store.Get[model.Pool](tx, store.KindPool, op.Target)
		if err != nil {
			return nil, err
		}
		p.State, p.Details = model.StateReady, ""
		return p, store.PutPool(tx, p)
	})
}

func (c *Controller) finishAD(ctx context.Context, op *model.Operation) error {
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, op.Target)
		if err != nil {
			return nil, err
		}
		a.State, a.Details = model.StateReady, ""
		return a, store.PutAD(tx, a)
	})
}

func (c *Controller) finishDelete(ctx context.Context, op *model.Operation, kind string) error {
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		return nil, tx.Delete(kind, op.Target)
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

func (c *Controller) wantOf(v *model.Volume) VolumeWant {
	w := VolumeWant{CapacityBytes: v.CapacityGib << 30}
	if v.UnixPermissions != "" {
		if m, err := strconv.ParseUint(v.UnixPermissions, 8, 32); err == nil {
			w.Mode = fs.FileMode(m) & fs.ModePerm
		}
	}
	_, w.Export = c.exportOf(v)
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
	for _, r := range v.ExportRules {
		ex.Clients = append(ex.Clients, clientOf(r, versions)...)
	}
	return ex, true
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
func (c *Controller) observe(ctx context.Context, v *model.Volume, retireTag string) (Observation, error) {
	st, err := c.be.Volume(ctx, v.Key, retireTag)
	if err != nil {
		return Observation{}, err
	}
	o := Observation{VolumeStatus: st}
	if ex, ok := c.exportOf(v); ok && v.ExportID != 0 {
		addr, err := netip.ParseAddr(v.Endpoint)
		if err != nil {
			return o, fmt.Errorf("volume %s endpoint: %w", v.Name(), err)
		}
		if o.Exported, err = c.dp.Exported(ctx, v.Network, addr, ex); err != nil {
			return o, err
		}
	}
	return o, nil
}

// runSteps applies steps to volume v, retrying each a few times.
func (c *Controller) runSteps(ctx context.Context, op *model.Operation, v *model.Volume, steps []Step) error {
	for _, s := range steps {
		if c.opts.StepDelay > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.opts.StepDelay):
			}
		}
		var err error
		for attempt := range c.opts.StepAttempts {
			if err = c.step(ctx, op, v, s); err == nil || ctx.Err() != nil {
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
	}
	return nil
}

func (c *Controller) step(ctx context.Context, op *model.Operation, v *model.Volume, s Step) error {
	switch s {
	case StepResize:
		return c.be.Resize(ctx, v.Key, c.wantOf(v).CapacityBytes)
	case StepCreateVolume:
		var from *storage.SnapshotRef
		if op != nil && op.Kind == model.OpVolumeCreate && op.Params["sourceKey"] != "" {
			from = &storage.SnapshotRef{VolumeKey: op.Params["sourceKey"], Snapshot: op.Params["sourceSnapshot"]}
		}
		return c.be.CreateVolume(ctx, v.Key, c.wantOf(v).CapacityBytes, from)
	case StepSetMode:
		return c.be.SetMode(ctx, v.Key, c.wantOf(v).Mode)
	case StepMount:
		return c.be.Mount(ctx, v.Key)
	case StepDeleteVolume:
		return c.be.DeleteVolume(ctx, v.Key)
	case StepRetire:
		return c.be.Retire(ctx, v.Key, op.ID)
	case StepRestore:
		return c.be.Restore(ctx, v.Key, op.Params["snapshot"])
	case StepMarkSwapped:
		op.Params["swapped"] = "1"
		return c.markStarted(ctx, op, "reverted; cleaning up")
	case StepPurgeRetired:
		return c.be.PurgeRetired(ctx, v.Key, op.ID)
	case StepDeleteNewer:
		return c.deleteNewerSnapshots(ctx, v, op.Params["snapshot"])
	case StepExport:
		if _, ok := c.exportOf(v); !ok {
			return nil
		}
		if err := c.ensureVolumeExportID(ctx, v); err != nil {
			return err
		}
		ex, _ := c.exportOf(v)
		addr, err := netip.ParseAddr(v.Endpoint)
		if err != nil {
			return err
		}
		return c.dp.Export(ctx, v.Network, addr, ex)
	case StepUnexport:
		if c.dp == nil || v.Endpoint == "" || v.ExportID == 0 {
			return nil
		}
		addr, err := netip.ParseAddr(v.Endpoint)
		if err != nil {
			return err
		}
		return c.dp.Unexport(ctx, v.Network, addr, v.ExportID)
	}
	return fmt.Errorf("unknown step %q", s)
}

func (c *Controller) volumeEnsure(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if err != nil {
		return err
	}
	if c.cancelled(ctx, op) && (op.Kind == model.OpVolumeCreate || op.Params["started"] == "") {
		return errCancelled
	}
	obs, err := c.observe(ctx, v, "")
	if err != nil {
		return err
	}
	steps := PlanVolume(c.wantOf(v), obs)
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
	if err := c.syncSnapshotExports(ctx, v, nil); err != nil {
		return err
	}
	return c.finishVolume(ctx, op, v)
}

// finishVolume completes op with its volume READY and its usage as observed now.
func (c *Controller) finishVolume(ctx context.Context, op *model.Operation, v *model.Volume) error {
	obs, err := c.be.Volume(ctx, v.Key, "")
	if err != nil {
		return err
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, op.Target)
		if err != nil {
			return nil, err
		}
		cur.State, cur.Details, cur.UsedBytes = model.StateReady, "", obs.UsedBytes
		return cur, store.PutVolume(tx, cur)
	})
}

func (c *Controller) rollbackVolume(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.be.DeleteVolume(ctx, v.Key)
}

func (c *Controller) volumeDelete(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if errors.Is(err, model.ErrNotFound) {
		return c.complete(ctx, op, func(tx store.Tx) (any, error) { return nil, nil })
	}
	if err != nil {
		return err
	}
	if c.cancelled(ctx, op) && op.Params["started"] == "" {
		return errCancelled
	}
	if err := c.markStarted(ctx, op, "deleting"); err != nil {
		return err
	}
	if err := c.syncSnapshotExports(ctx, v, none); err != nil {
		return err
	}
	obs, err := c.observe(ctx, v, "")
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
		return nil, tx.Delete(store.KindVolume, v.Name())
	})
}

func (c *Controller) volumeRevert(ctx context.Context, op *model.Operation) error {
	v, err := c.loadVolume(ctx, op.Target)
	if err != nil {
		return err
	}
	if c.cancelled(ctx, op) && op.Params["started"] == "" {
		return errCancelled
	}
	if err := c.markStarted(ctx, op, "reverting"); err != nil {
		return err
	}
	// Snapshot exports go first: newer snapshots are about to be deleted.
	if err := c.syncSnapshotExports(ctx, v, none); err != nil {
		return err
	}
	obs, err := c.observe(ctx, v, op.ID)
	if err != nil {
		return err
	}
	steps := PlanRevert(op.Params["swapped"] == "1", c.wantOf(v), obs)
	if err := c.runSteps(ctx, op, v, steps); err != nil {
		return err
	}
	if err := c.syncSnapshotExports(ctx, v, nil); err != nil {
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

func (c *Controller) snapshotParent(ctx context.Context, op *model.Operation) (*model.Snapshot, *model.Volume, error) {
	var s *model.Snapshot
	var v *model.Volume
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if s, err = store.Get[model.Snapshot](tx, store.KindSnapshot, op.Target); err != nil {
			return err
		}
		v, err = store.Get[model.Volume](tx, store.KindVolume, s.VolumeName())
		return err
	})
	return s, v, err
}

func (c *Controller) snapshotEnsure(ctx context.Context, op *model.Operation) error {
	s, v, err := c.snapshotParent(ctx, op)
	if err != nil {
		return err
	}
	if op.Kind == model.OpSnapshotCreate {
		if c.cancelled(ctx, op) {
			return errCancelled
		}
		if err := c.be.CreateSnapshot(ctx, v.Key, s.ID); err != nil {
			return err
		}
		if err := c.syncSnapshotExports(ctx, v, func(o *model.Snapshot) bool { return o.State == model.StateReady || o.ID == s.ID }); err != nil {
			return err
		}
	}
	obs, err := c.be.Snapshot(ctx, v.Key, s.ID)
	if err != nil {
		return err
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		cur, err := store.Get[model.Snapshot](tx, store.KindSnapshot, op.Target)
		if err != nil {
			return nil, err
		}
		cur.State, cur.Details, cur.UsedBytes = model.StateReady, "", float64(obs.ExclusiveBytes)
		return cur, store.PutSnapshot(tx, cur)
	})
}

func (c *Controller) rollbackSnapshot(ctx context.Context, op *model.Operation) error {
	s, v, err := c.snapshotParent(ctx, op)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.be.DeleteSnapshot(ctx, v.Key, s.ID)
}

func (c *Controller) snapshotDelete(ctx context.Context, op *model.Operation) error {
	s, v, err := c.snapshotParent(ctx, op)
	if errors.Is(err, model.ErrNotFound) {
		return c.complete(ctx, op, func(tx store.Tx) (any, error) { return nil, deleteSnapshotRecord(tx, op.Target) })
	}
	if err != nil {
		return err
	}
	if err := c.syncSnapshotExports(ctx, v, func(o *model.Snapshot) bool { return o.State == model.StateReady && o.ID != s.ID }); err != nil {
		return err
	}
	if err := c.be.DeleteSnapshot(ctx, v.Key, s.ID); err != nil {
		return err
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) { return nil, deleteSnapshotRecord(tx, op.Target) })
}

// deleteSnapshotRecord deletes a snapshot's record and frees the export ID it may
// still hold.
func deleteSnapshotRecord(tx store.Tx, name string) error {
	cur, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := releaseExportID(tx, name, cur.ExportID); err != nil {
		return err
	}
	return tx.Delete(store.KindSnapshot, name)
}
