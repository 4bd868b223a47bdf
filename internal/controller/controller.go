// Package controller carries out operations: the API (through package intent)
// records intent (a resource in a transitional state plus an Operation) and the
// controller converges the data plane to it, then writes the result.
//
// Each resource kind has a handler (pool.go, volume.go, snapshot.go) whose planning
// is pure (plan.go) and whose steps carry their arguments. A scheduler hands
// operations to a pool of workers, at most one operation per resource at a time and
// in the order they were created (locks.go): a volume's operation waits for its
// pool's, a snapshot's for its volume's, and an operation on one resource never
// waits for work on unrelated ones.
//
// Crash safety: every step is idempotent and plans are recomputed from what the
// backend observes, so an operation interrupted at any point is simply run again on
// the next start. Beside the workers, a resync (reconcile.go) periodically
// re-applies the desired state of every idle volume, refreshes usage and, at
// start, deletes what a cut-short create left; it never takes down what serves
// on an observation it cannot confirm. A health loop (health.go) observes
// whether the storage can still be trusted with writes: volumes whose storage
// fails are shown in ERROR and the node is not ready.
//
// Imported by the daemon only.
package controller

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// Options configures a Controller.
type Options struct {
	// NodeID names this node as the owner of the operations it runs; "" =
	// "local".
	NodeID string
	// OpLease is how long a claim on an operation lasts unless renewed (every
	// OpLease/3 while it runs, and at every progress write); another node may
	// take over an operation whose lease lapsed. 0 = 30 s.
	OpLease time.Duration
	// Cluster: several nodes share the store; this one serves and repairs only
	// the volumes placed on it and runs only their operations (cluster.go).
	Cluster bool
	// Failover (a cluster whose volumes are on storage every node reaches):
	// this node holds a serving lease and fences itself when it cannot renew
	// it, serves the volumes of lost and drained nodes moved to it, and moves
	// them (failover.go).
	Failover bool
	// ServeLease is how long a node's serving lease lasts unless renewed
	// (every 500 ms at most); a node fences itself 2 s before it could lapse.
	// 0 = DefaultServeLease.
	ServeLease time.Duration
	// GivebackAfter: volumes moved off a node go back to it once it has run
	// this long, serving lease held and not drained. 0 = DefaultGivebackAfter.
	GivebackAfter time.Duration
	// FenceAddrs are this node's model.Node.FenceAddrs: at start, once no
	// move away from it waits to be released, they are let back into the
	// storage (failover.go, rejoin).
	FenceAddrs []string
	// Fence takes this node's data plane down at once (its endpoint
	// addresses first), with why: it may no longer hold its serving lease. It
	// must not block on the store. After it the node serves nothing until it
	// is started again.
	Fence func(why string)
	// Standby, with Failover, runs once this node serves its own volumes
	// again, before it is ready: it readies the data plane for volumes that
	// may move here (the daemon starts a sandbox on every network).
	Standby func(ctx context.Context)
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
	// Workers is how many operations run at once (and how many volumes a resync
	// re-applies at once); default 8.
	Workers int
	// ResumeWait bounds how long readiness waits for the operations a previous run
	// left unfinished; default 30 s.
	ResumeWait time.Duration
	// DataPlane serves volumes over NFS; nil = storage only.
	DataPlane DataPlane
	// SMB runs the networks' Samba instances, joined to the pools' Active
	// Directories; nil = SMB volumes are recorded, not served.
	SMB SMB
	// Secrets opens the Active Directory passwords SMB joins with.
	Secrets Secrets
	// Kerberos serves Kerberos volumes over NFS as the pool's Active
	// Directory machine; nil (or SMB nil) = their exports admit Kerberos
	// flavors only, with no Kerberos identity to accept them: no client.
	Kerberos Kerberos
	// QoS holds volumes to their service levels with traffic control; nil = no
	// enforcement.
	QoS *QoS
	// StepDelay pauses before every step. It is fault injection for crash tests
	// (a window in which to kill the process mid-operation); zero in production.
	StepDelay time.Duration
	// HealthInterval is how often the storage's health is observed (health.go);
	// default 10 s.
	HealthInterval time.Duration
	// OnHealthChange, if set, records a volume going into ERROR because its
	// storage failed, or back (the daemon writes an audit entry). A change it
	// returns an error for is handed to it again after the next health pass.
	OnHealthChange func(ctx context.Context, ch HealthChange) error
	// OperationDone, if set, is called when an operation has finished and its
	// result is stored, with its kind ("unknown" for a kind no handler runs) and
	// outcome: "done", "failed" or "cancelled" (internal/metrics.Health). An
	// operation interrupted by shutdown has not finished.
	OperationDone func(kind model.OpKind, outcome string)
	// SpaceNoted, if set, is called after a resync pass wrote a volume's state
	// details from its space note (storage.VolumeStatus.SpaceNote): note is the
	// new one, "" when it cleared.
	SpaceNoted func(ctx context.Context, v *model.Volume, note string)
}

// DataPlane is what the controller needs of the NFS data plane (package dataplane).
type DataPlane interface {
	Export(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) error
	Unexport(ctx context.Context, network string, addr netip.Addr, id uint64) error
	// Release is Unexport for a volume moving to another node: its clients'
	// connections are reset as its address goes.
	Release(ctx context.Context, network string, addr netip.Addr, id uint64) error
	// View observes a network's sandbox once (its addresses, loaded exports and the
	// mounts under them), for any number of Exported questions.
	View(ctx context.Context, network string) (ExportView, error)
}

// ExportView is one observation of a network's sandbox.
type ExportView interface {
	// Exported reports whether ex is loaded as rendered, onto the volume now
	// mounted on its path, and reachable on addr (the zero Addr: any address).
	Exported(addr netip.Addr, ex nfs.Export) bool
}

// dataPlaneOf is a data plane whose View returns its own type of view.
type dataPlaneOf[V ExportView] interface {
	Export(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) error
	Unexport(ctx context.Context, network string, addr netip.Addr, id uint64) error
	Release(ctx context.Context, network string, addr netip.Addr, id uint64) error
	View(ctx context.Context, network string) (V, error)
}

// AdaptDataPlane turns a data plane whose View returns a concrete view type (such
// as *dataplane.View) into a DataPlane.
func AdaptDataPlane[V ExportView](d dataPlaneOf[V]) DataPlane { return adapted[V]{d} }

type adapted[V ExportView] struct{ dataPlaneOf[V] }

func (a adapted[V]) View(ctx context.Context, network string) (ExportView, error) {
	return a.dataPlaneOf.View(ctx, network)
}

// Controller runs operations on a pool of workers.
type Controller struct {
	opts     Options
	st       store.Store
	be       storage.Backend
	dp       DataPlane
	log      *slog.Logger
	handlers map[model.OpKind]handler
	locks    *lockTable
	wake     chan struct{}
	changed  chan struct{} // another node wrote an operation (Changed)
	leader   atomic.Bool   // holds the controller lease (cluster.go)
	failover hostingState  // failover.go
	// resyncKick asks the resync loop for a pass now.
	resyncKick chan struct{}
	mu         sync.Mutex
	subs       map[string][]chan struct{}
	running    map[string]bool // operations on a worker, by name
	// parkedOps wait between two runs for storage work in progress, holding
	// their locks; parkWait is each one's last wait (park.go).
	parkedOps map[string]parked
	parkWait  map[string]time.Duration
	smbMu     sync.Mutex // joins and leaves, one at a time
	smb       smbState
	krb       krbState
	ready     chan struct{}
	wg        sync.WaitGroup
	qos       qosState
	qosApply  sync.Mutex // one ApplyQoS at a time
	// queued is how many unfinished operations the last schedule left waiting.
	queued atomic.Int64
	health healthState // health.go
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
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = 10 * time.Second
	}
	if opts.ResumeWait == 0 {
		opts.ResumeWait = 30 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.NodeID == "" {
		opts.NodeID = "local"
	}
	if opts.OpLease <= 0 {
		opts.OpLease = 30 * time.Second
	}
	if opts.ServeLease <= 0 {
		opts.ServeLease = DefaultServeLease
	}
	if opts.GivebackAfter <= 0 {
		opts.GivebackAfter = DefaultGivebackAfter
	}
	opts.Failover = opts.Failover && opts.Cluster
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{opts: opts, st: fencedStore{opts.Store}, be: opts.Backend, dp: opts.DataPlane, log: log, qos: qosState{kick: make(chan struct{}, 1)},
		locks: newLockTable(), wake: make(chan struct{}, 1), resyncKick: make(chan struct{}, 1), failover: hostingState{kick: make(chan struct{}, 1), plan: make(chan struct{}, 1)}, changed: make(chan struct{}, 1), subs: map[string][]chan struct{}{},
		running: map[string]bool{}, parkedOps: map[string]parked{}, parkWait: map[string]time.Duration{}, ready: make(chan struct{}), smb: smbState{running: map[string]bool{}, joinedAs: map[string]string{}}}
	c.handlers = map[model.OpKind]handler{}
	for _, h := range []handler{poolHandler{c}, validateHandler{c}, adHandler{c}, volumeHandler{c}, snapshotHandler{c}} {
		for _, k := range h.kinds() {
			c.handlers[k] = h
		}
	}
	return c
}

// Wake asks the controller to look for new operations. It never blocks.
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Changed tells the controller that an operation was recorded, progressed or
// finished elsewhere (another node, store.Postgres.Listen), or settings
// changed: it looks for work, answers the WaitDone callers whose operation is
// done, and derives its traffic tree again (a volume or a cap on another node
// changes this node's share). It never blocks.
func (c *Controller) Changed() {
	c.Wake()
	c.KickQoS()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// watchOthers, in a cluster, answers WaitDone callers whose operation another
// node finished, on Changed and every few seconds (a notification lost while
// the listener reconnected), and schedules on the same beat: an operation whose
// owner stopped renewing its lease is taken over once the lease lapses, which
// no notification announces.
func (c *Controller) watchOthers(ctx context.Context) {
	tick := time.NewTicker(min(5*time.Second, c.opts.OpLease/3))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.Wake()
		case <-c.changed:
		}
		c.mu.Lock()
		names := make([]string, 0, len(c.subs))
		for name := range c.subs {
			names = append(names, name)
		}
		c.mu.Unlock()
		if len(names) == 0 {
			continue
		}
		var done []string
		err := c.st.View(ctx, func(tx store.Tx) error {
			for _, name := range names {
				var op model.Operation
				if err := tx.Get(store.KindOperation, name, &op); err == nil && op.Done {
					done = append(done, name)
				}
			}
			return nil
		})
		if err != nil {
			continue
		}
		for _, name := range done {
			c.notify(name)
		}
	}
}

// QueueDepth returns how many unfinished operations wait for a worker (held back
// by a busy resource or all workers busy), as of the last scheduling pass: a new
// operation wakes the controller, a finished one schedules again.
func (c *Controller) QueueDepth() int { return int(c.queued.Load()) }

// Ready is closed once the first reconcile after start has finished and the
// operations left unfinished by the previous run have been run.
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

// Run reconciles, resumes unfinished operations, then serves operations until ctx
// ends, with the periodic resync beside the workers. It returns nil on
// cancellation, once every worker has stopped.
func (c *Controller) Run(ctx context.Context) error {
	defer c.wg.Wait()
	if c.opts.Cluster {
		first := make(chan struct{})
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.leaderLoop(ctx, first)
		}()
		<-first // resumed cluster-scope work runs on the holder only
	}
	if c.opts.Failover {
		first := make(chan struct{})
		c.wg.Add(2)
		go func() {
			defer c.wg.Done()
			c.serveLoop(ctx, first)
		}()
		go func() {
			defer c.wg.Done()
			c.failoverLoop(ctx)
		}()
		<-first // what this node serves is known before its first resync
		c.rejoin(ctx)
	}
	if err := c.adopt(ctx); err != nil && ctx.Err() == nil {
		c.log.Error("place unplaced volumes", "err", err)
	}
	if err := c.resync(ctx, true); err != nil && ctx.Err() == nil {
		c.log.Error("initial reconcile", "err", err)
	}
	c.resumeAll(ctx)
	if c.opts.Failover && c.opts.Standby != nil {
		// After this node's own volumes are served again, before ready: a
		// node ready takes moves at full speed.
		c.opts.Standby(ctx)
	}
	c.healthPass(ctx) // before ready: a restart onto failing storage is not ready
	close(c.ready)
	c.wg.Add(3)
	go func() {
		defer c.wg.Done()
		c.resyncLoop(ctx)
	}()
	if c.opts.Cluster {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.watchOthers(ctx)
		}()
	}
	go func() {
		defer c.wg.Done()
		c.healthLoop(ctx)
	}()
	go func() {
		defer c.wg.Done()
		c.qosLoop(ctx)
	}()
	c.KickQoS()
	for {
		c.schedule(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		}
	}
}

// resumeAll runs the operations the previous run left unfinished, and returns
// once they are done (or cannot finish now: their failure could not be recorded),
// or after ResumeWait: a slow one (a directory join) keeps running on its worker
// but does not hold readiness.
func (c *Controller) resumeAll(ctx context.Context) {
	deadline := time.After(c.opts.ResumeWait)
	for ctx.Err() == nil {
		c.schedule(ctx)
		c.mu.Lock()
		busy := len(c.running)
		c.mu.Unlock()
		if busy == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-c.wake:
		case <-deadline:
			return
		}
	}
}

func (c *Controller) resyncLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.resyncKick: // failover.go: volumes moved to or from this node
		}
		if err := c.resync(ctx, false); err != nil && ctx.Err() == nil {
			c.log.Warn("reconcile", "err", err)
		}
	}
}

// schedule starts every unfinished operation that may run now: oldest first, at
// most Workers at once, none whose resources are held by running work or claimed
// by an older waiting operation. It reads only unfinished operations (an index),
// never the finished ones kept for their callers.
func (c *Controller) schedule(ctx context.Context) {
	type cand struct {
		op     *model.Operation
		h      handler
		locks  lockSet
		parked bool // its locks are held already
	}
	var cands []cand
	var unknown []*model.Operation
	err := c.st.View(ctx, func(tx store.Tx) error {
		pending, err := store.PendingOperations(tx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		now := time.Now() // parking waits in real time (park.go)
		unfinished := make(map[string]bool, len(pending))
		for _, op := range pending {
			unfinished[op.Name()] = true
			p, isParked := c.parkedOps[op.Name()]
			if c.running[op.Name()] {
				continue
			}
			if c.ownedElsewhere(op) {
				c.unparkLocked(op.Name())
				continue
			}
			if here, err := c.runsHere(tx, op); err != nil {
				return err
			} else if !here {
				c.unparkLocked(op.Name())
				continue // the volume's node runs it
			}
			if isParked {
				if now.Before(p.until) {
					continue
				}
				cands = append(cands, cand{op, c.handlers[op.Kind], p.locks, true})
				continue
			}
			h, ok := c.handlers[op.Kind]
			if !ok {
				unknown = append(unknown, op)
				continue
			}
			ls, err := h.locks(tx, op)
			if err != nil {
				return err
			}
			cands = append(cands, cand{op, h, ls, false})
		}
		for name := range c.parkedOps {
			if !unfinished[name] { // finished meanwhile (by another node)
				c.unparkLocked(name)
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("list operations", "err", err)
		}
		return
	}
	for _, op := range unknown {
		// Never guessed at: an operation no handler knows fails, and its target
		// is left as it is.
		c.log.Error("operation of unknown kind", "operation", op.ID, "kind", op.Kind)
		if err := c.finishUnknown(ctx, op); err != nil {
			c.log.Error("record failure", "operation", op.ID, "err", err)
		}
	}
	var waiting claims
	started := 0
	defer func() { c.queued.Store(int64(len(cands) - started)) }()
	for _, cd := range cands {
		c.mu.Lock()
		full := len(c.running) >= c.opts.Workers
		c.mu.Unlock()
		if full || ctx.Err() != nil {
			return
		}
		if !cd.parked && (waiting.conflicts(cd.locks) || !c.locks.tryAcquire(cd.locks)) {
			waiting.add(cd.locks)
			continue
		}
		c.mu.Lock()
		delete(c.parkedOps, cd.op.Name())
		c.running[cd.op.Name()] = true
		c.mu.Unlock()
		started++
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			finished, wait := c.execute(ctx, cd.h, cd.op)
			if wait > 0 {
				c.park(cd.op.Name(), cd.locks, wait)
				return
			}
			c.locks.release(cd.locks)
			if !finished && ctx.Err() == nil {
				// Not even its failure could be recorded: try again later, never
				// in a tight loop.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			c.mu.Lock()
			delete(c.running, cd.op.Name())
			delete(c.parkWait, cd.op.Name())
			c.mu.Unlock()
			c.Wake()
		}()
	}
}

// execute claims and runs op. finished is false if not even its failure could
// be recorded; park above 0 if it waits that long for storage work in
// progress (park.go).
func (c *Controller) execute(ctx context.Context, h handler, op *model.Operation) (finished bool, park time.Duration) {
	log := c.log.With("operation", op.ID, "kind", op.Kind, "target", op.Target)
	claimed, err := c.claim(ctx, op)
	if err != nil || !claimed {
		if err != nil && ctx.Err() == nil {
			log.Error("claim operation", "err", err)
		}
		return err == nil, 0 // not ours (another node runs it, or it is done)
	}
	runCtx, lost := c.holdLease(ctx, op)
	defer lost()
	log.Debug("run operation", "epoch", op.Epoch)
	start := time.Now()
	err = h.run(runCtx, op)
	log.Debug("operation ran", "took", time.Since(start), "err", err)
	if ctx.Err() != nil {
		// Shutting down: leave the operation unfinished; the next start resumes it.
		log.Info("operation interrupted; will resume", "err", err)
		return false, 0
	}
	if err != nil && (errors.Is(err, errFenced) || runCtx.Err() != nil) {
		// Another node took it over: it finishes it; nothing here is undone.
		log.Warn("lost the operation's lease to another node; stopped", "err", err)
		return true, 0
	}
	if pe := (*parkError)(nil); errors.As(err, &pe) {
		log.Debug("operation parked", "wait", pe.wait, "status", op.StatusMessage)
		return true, pe.wait
	}
	outcome := "done"
	if err != nil {
		log.Warn("operation failed", "err", err)
		// Under the run's fence: a node that lost the operation undoes nothing.
		if ferr := c.fail(runCtx, h, op, err); ferr != nil {
			if errors.Is(ferr, errFenced) {
				log.Warn("lost the operation's lease to another node; its failure not recorded, nothing undone")
				return true, 0
			}
			log.Error("record failure", "err", ferr)
			return false, 0
		}
		outcome = "failed"
		if errors.Is(err, errCancelled) {
			outcome = "cancelled"
		}
	}
	c.operationDone(op.Kind, outcome)
	c.notify(op.Name())
	c.KickQoS() // what it changed may change a network's tree
	return true, 0
}

// operationDone reports a finished operation to Options.OperationDone.
func (c *Controller) operationDone(kind model.OpKind, outcome string) {
	if c.opts.OperationDone != nil {
		c.opts.OperationDone(kind, outcome)
	}
}
