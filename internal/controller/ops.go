package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// handler carries out the operations of one resource kind.
type handler interface {
	// kinds lists the operation kinds it runs.
	kinds() []model.OpKind
	// storeKind is the store kind of its targets.
	storeKind() string
	// locks names what op works on (see lockSet), read inside tx.
	locks(tx store.Tx, op *model.Operation) (lockSet, error)
	// run drives op to completion and stores it done.
	run(ctx context.Context, op *model.Operation) error
	// undo removes what a failed create made, before the failure is recorded.
	undo(ctx context.Context, op *model.Operation) error
}

// errCancelled ends an operation whose cancellation was honoured.
var errCancelled = errors.New("Operation was cancelled")

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

// saveProgress stores op's params (its progress markers) and status message,
// renewing this node's lease on it (fenced: see fence.go).
func (c *Controller) saveProgress(ctx context.Context, op *model.Operation, msg string) error {
	op.StatusMessage = msg
	op.LeaseExpireTime = c.opts.Now().UTC().Add(c.opts.OpLease)
	return c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		op.RequestedCancellation = cur.RequestedCancellation
		return store.PutOperation(tx, op)
	})
}

// markStarted records that op ran its first storage step.
func (c *Controller) markStarted(ctx context.Context, op *model.Operation, msg string) error {
	op.Params.Started = true
	return c.saveProgress(ctx, op, msg)
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
	case errors.Is(cause, storage.ErrNoSpace):
		return &model.Status{Code: 8, Message: "the volume is full: there is no room left in it for the snapshot"}
	case errors.Is(cause, storage.ErrStoreFull):
		return &model.Status{Code: 9, Message: "capacityGib: this Basin node's store has no room left for it (space promised to other volumes is kept for them); " +
			"delete volumes or ask the administrator"}
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
		where = fmt.Sprintf(" in step %q", se.step.Op)
	}
	return &model.Status{Code: 13, Message: fmt.Sprintf("internal error%s of operation %s; the server log has the details", where, op.ID)}
}

// stepError is a step's failure.
type stepError struct {
	step Step
	err  error
}

func (e *stepError) Error() string { return e.step.String() + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// fail finishes op with an error. Creates roll back what they made and remove the
// resource; other kinds leave the resource in ERROR (or restore it, if cancelled
// before starting).
func (c *Controller) fail(ctx context.Context, h handler, op *model.Operation, cause error) error {
	st := statusOf(op, cause)
	if st.Code == 13 {
		// An internal error on a volume whose storage is failing is most likely
		// that failure: say so rather than name a step.
		if words := c.storageFaultOf(ctx, op); words != "" {
			st = &model.Status{Code: 9, Message: "The operation could not finish: the volume's storage is failing. " + words}
		}
	}
	// Never undo what another node may have finished since: only while this
	// node still holds the operation.
	if err := c.checkFence(ctx); err != nil {
		return err
	}
	if err := h.undo(ctx, op); err != nil {
		return err
	}
	return c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		// A cancelled operation, a shrink that did not fit or a growth the store
		// had no room for (both refused before any change) leaves the resource as
		// it was.
		restore := errors.Is(cause, errCancelled) || errors.Is(cause, storage.ErrTooSmall) || errors.Is(cause, storage.ErrStoreFull)
		if err := markFailedTarget(tx, h.storeKind(), &cur, st, restore); err != nil {
			return err
		}
		cur.Done, cur.EndTime, cur.Error, cur.StatusMessage = true, c.opts.Now().UTC(), st, ""
		return store.PutOperation(tx, &cur)
	})
}

// storageFaultOf returns the words of the storage failure of the volume op is
// on (its target, or its target snapshot's volume), if the last health pass
// saw one; "" otherwise.
func (c *Controller) storageFaultOf(ctx context.Context, op *model.Operation) string {
	name, _, _ := strings.Cut(op.Target, "/snapshots/")
	if !strings.Contains(name, "/volumes/") {
		return ""
	}
	v, err := c.loadVolume(ctx, name)
	if err != nil {
		return ""
	}
	return c.VolumeFault(v.Key)
}

// finishUnknown fails an operation no handler runs (written by a newer Basin, or
// corrupt), touching nothing else.
func (c *Controller) finishUnknown(ctx context.Context, op *model.Operation) error {
	st := &model.Status{Code: 12, Message: fmt.Sprintf("operation kind %q is not supported by this server", op.Kind)}
	err := c.st.Update(ctx, func(tx store.Tx) error {
		var cur model.Operation
		if err := tx.Get(store.KindOperation, op.Name(), &cur); err != nil {
			return err
		}
		cur.Done, cur.EndTime, cur.Error, cur.StatusMessage = true, c.opts.Now().UTC(), st, ""
		return store.PutOperation(tx, &cur)
	})
	if err == nil {
		c.operationDone("unknown", "failed") // its kind is anyone's: not a label value
		c.notify(op.Name())
	}
	return err
}

func isCreate(k model.OpKind) bool {
	switch k {
	case model.OpPoolCreate, model.OpVolumeCreate, model.OpSnapshotCreate, model.OpADCreate:
		return true
	}
	return false
}

func markFailedTarget(tx store.Tx, kind string, op *model.Operation, st *model.Status, restore bool) error {
	if op.Kind == model.OpPoolValidateDirectory {
		return nil // a check: its failure is the answer, not the pool's state
	}
	if isCreate(op.Kind) {
		return tx.Delete(kind, op.Target)
	}
	if restore && op.Prev != nil {
		// Restore the resource as it was before the operation.
		return putRaw(tx, kind, op.Target, op.Prev)
	}
	return setState(tx, kind, op.Target, model.StateError, st.Message)
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
