package controller

import (
	"context"
	"errors"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Operations are claimed before they run, so that nodes sharing a store never
// run one twice, and every write made while one runs is fenced, so that a node
// that lost its claim (paused past its lease, cut off from the database) cannot
// overwrite or undo what the node that took over did:
//
//   - claim: in one transaction, an unfinished operation that nobody holds,
//     this node holds, or whose holder's lease lapsed is taken: Owner = this
//     node, Epoch + 1, a lease of OpLease from now.
//   - holdLease renews the lease every OpLease/3 while the operation runs (and
//     saveProgress renews it at every step); a renewal refused means another
//     node took over, and the run's context is cancelled.
//   - fencedStore: every Update made with the run's context first checks, in
//     the same transaction, that the operation's Owner and Epoch are still
//     this run's, or fails with errFenced; fail checks before undoing.
//
// Kubernetes' leader election and etcd's leases work alike: the lease bounds
// how long a lost node can believe it still holds, and the epoch (a fencing
// token) makes its late writes fail even when it does not know yet.

// errFenced: the operation is no longer this run's (another node claimed it).
var errFenced = errors.New("operation claimed by another node")

type fenceKey struct{}

// fence is what a run holds: the operation and the claim.
type fence struct {
	op    string
	owner string
	epoch int64
}

func withFence(ctx context.Context, op *model.Operation) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence{op: op.Name(), owner: op.Owner, epoch: op.Epoch})
}

func fenceOf(ctx context.Context) (fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(fence)
	return f, ok
}

// check fails with errFenced unless the stored operation is still f's.
func (f fence) check(tx store.Tx) error {
	var cur model.Operation
	if err := tx.Get(store.KindOperation, f.op, &cur); err != nil {
		return err
	}
	if cur.Owner != f.owner || cur.Epoch != f.epoch {
		return errFenced
	}
	return nil
}

// fencedStore checks the fence of an Update's context (if any) in the Update's
// own transaction before the caller's function runs.
type fencedStore struct{ store.Store }

func (s fencedStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	f, ok := fenceOf(ctx)
	if !ok {
		return s.Store.Update(ctx, fn)
	}
	return s.Store.Update(ctx, func(tx store.Tx) error {
		if err := f.check(tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// checkFence fails with errFenced if ctx's run no longer holds its operation.
func (c *Controller) checkFence(ctx context.Context) error {
	f, ok := fenceOf(ctx)
	if !ok {
		return nil
	}
	return c.st.View(ctx, f.check)
}

// ownedElsewhere reports whether another node holds op and its lease runs.
func (c *Controller) ownedElsewhere(op *model.Operation) bool {
	return op.Owner != "" && op.Owner != c.opts.NodeID && c.opts.Now().Before(op.LeaseExpireTime)
}

// claim takes op for this node if it is unfinished and free (see above),
// updating op; it reports whether it did.
func (c *Controller) claim(ctx context.Context, op *model.Operation) (bool, error) {
	claimed := false
	err := c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		if cur.Done || c.ownedElsewhere(&cur) {
			return nil
		}
		cur.Owner, cur.Epoch, cur.LeaseExpireTime = c.opts.NodeID, cur.Epoch+1, c.opts.Now().UTC().Add(c.opts.OpLease)
		if err := store.PutOperation(tx, &cur); err != nil {
			return err
		}
		*op, claimed = cur, true
		return nil
	})
	return claimed, err
}

// holdLease renews op's lease every OpLease/3 until stop is called; the
// context it returns (carrying the fence) is cancelled if a renewal finds the
// operation claimed by another node.
func (c *Controller) holdLease(ctx context.Context, op *model.Operation) (_ context.Context, stop func()) {
	ctx = withFence(ctx, op)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(c.opts.OpLease / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			err := c.st.Update(ctx, func(tx store.Tx) error {
				var cur model.Operation
				if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
					return err
				}
				cur.LeaseExpireTime = c.opts.Now().UTC().Add(c.opts.OpLease)
				return store.PutOperation(tx, &cur)
			})
			if errors.Is(err, errFenced) {
				cancel()
				return
			}
		}
	}()
	return runCtx, func() { close(done); cancel() }
}
