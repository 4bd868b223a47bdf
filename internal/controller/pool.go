package controller

import (
	"context"
	"errors"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// poolHandler runs storage pool operations. A pool is a record (capacity, service
// level, network); its volumes carry the data, so there is nothing to converge yet:
// QoS will hang its classes here.
type poolHandler struct{ c *Controller }

func (poolHandler) kinds() []model.OpKind {
	return []model.OpKind{model.OpPoolCreate, model.OpPoolUpdate, model.OpPoolDelete}
}
func (poolHandler) storeKind() string { return store.KindPool }

func (poolHandler) locks(_ store.Tx, op *model.Operation) (lockSet, error) {
	return lockSet{Exclusive: []string{op.Target}}, nil
}

func (h poolHandler) run(ctx context.Context, op *model.Operation) error {
	if op.Kind == model.OpPoolDelete {
		return h.c.finishDelete(ctx, op, store.KindPool)
	}
	return h.c.complete(ctx, op, func(tx store.Tx) (any, error) {
		p, err := store.Get[model.Pool](tx, store.KindPool, op.Target)
		if err != nil {
			return nil, err
		}
		p.State, p.Details = model.StateReady, ""
		return p, store.PutPool(tx, p)
	})
}

func (poolHandler) undo(context.Context, *model.Operation) error { return nil }

// adHandler runs Active Directory policy operations: joining and leaving happen
// through the Directory (the SMB data plane), which may take a minute; only this
// policy's operations wait for it.
type adHandler struct{ c *Controller }

func (adHandler) kinds() []model.OpKind {
	return []model.OpKind{model.OpADCreate, model.OpADUpdate, model.OpADDelete}
}
func (adHandler) storeKind() string { return store.KindActiveDirectory }

func (adHandler) locks(_ store.Tx, op *model.Operation) (lockSet, error) {
	return lockSet{Exclusive: []string{op.Target}}, nil
}

func (h adHandler) run(ctx context.Context, op *model.Operation) error {
	c := h.c
	var a *model.ActiveDirectory
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		a, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, op.Target)
		return err
	})
	if op.Kind == model.OpADDelete {
		if errors.Is(err, model.ErrNotFound) {
			return c.finishDelete(ctx, op, store.KindActiveDirectory)
		}
		if err != nil {
			return err
		}
		if c.opts.Directory != nil {
			if err := c.opts.Directory.Remove(ctx, a); err != nil {
				return err
			}
		}
		return c.finishDelete(ctx, op, store.KindActiveDirectory)
	}
	if err != nil {
		return err
	}
	if c.opts.Directory != nil {
		if err := c.opts.Directory.Ensure(ctx, a); err != nil {
			return err
		}
	}
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		cur, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, op.Target)
		if err != nil {
			return nil, err
		}
		cur.State, cur.Details = model.StateReady, ""
		return cur, store.PutAD(tx, cur)
	})
}

func (adHandler) undo(context.Context, *model.Operation) error { return nil }

func (c *Controller) finishDelete(ctx context.Context, op *model.Operation, kind string) error {
	return c.complete(ctx, op, func(tx store.Tx) (any, error) {
		return nil, tx.Delete(kind, op.Target)
	})
}
