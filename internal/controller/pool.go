package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/store"
)

// poolHandler runs storage pool operations. A pool is a record (capacity, service
// level, network); its volumes carry the data. A pool with an Active Directory
// policy makes its network's Samba instance for that policy join the domain; the
// last pool of a policy on a network to go (or to change policy) makes it leave.
type poolHandler struct{ c *Controller }

func (poolHandler) kinds() []model.OpKind {
	return []model.OpKind{model.OpPoolCreate, model.OpPoolUpdate, model.OpPoolDelete}
}
func (poolHandler) storeKind() string { return store.KindPool }

func (poolHandler) locks(_ store.Tx, op *model.Operation) (lockSet, error) {
	return lockSet{Exclusive: []string{op.Target}}, nil
}

func (h poolHandler) run(ctx context.Context, op *model.Operation) error {
	if err := h.c.stepPause(ctx); err != nil {
		return err
	}
	var p *model.Pool
	err := h.c.st.View(ctx, func(tx store.Tx) (err error) {
		p, err = store.Get[model.Pool](tx, store.KindPool, op.Target)
		return err
	})
	if op.Kind == model.OpPoolDelete {
		if errors.Is(err, model.ErrNotFound) {
			return h.c.finishDelete(ctx, op, store.KindPool)
		}
		if err != nil {
			return err
		}
		// The network's instances no other pool uses leave their domains
		// before the delete is done: a client that gives the network a pool
		// of another domain next (a network joins one domain) finds the
		// leave behind it. The pool takes no new volumes meanwhile (it is
		// being deleted). A leave that fails does not hold the delete up: the
		// next resync tries it again.
		if err := h.c.leaveUnused(ctx, model.NetworkName(p.Network), op.Target); err != nil {
			h.c.log.Warn("leave the domain", "network", model.NetworkName(p.Network), "err", err)
		}
		return h.c.finishDelete(ctx, op, store.KindPool)
	}
	if err != nil {
		return err
	}
	if p.ActiveDirectory != "" {
		if err := h.c.ensureMember(ctx, model.NetworkName(p.Network), p.ActiveDirectory); err != nil {
			return err
		}
	}
	if err := h.c.leaveUnused(ctx, model.NetworkName(p.Network), ""); err != nil {
		return err
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

// validateHandler runs storagePools:validateDirectoryService: the pool's Active
// Directory policy is checked against its domain from the pool's network (DCs
// through the policy's DNS servers and site, a bind as its user, the OU and the
// user's right to create computers there), without joining. It completes with
// Empty, or fails with the domain's reason in plain words; the pool and the
// policy are left as they are either way.
type validateHandler struct{ c *Controller }

func (validateHandler) kinds() []model.OpKind { return []model.OpKind{model.OpPoolValidateDirectory} }
func (validateHandler) storeKind() string     { return store.KindPool }

func (validateHandler) locks(_ store.Tx, op *model.Operation) (lockSet, error) {
	return lockSet{Shared: []string{op.Target}}, nil
}

func (h validateHandler) run(ctx context.Context, op *model.Operation) error {
	c := h.c
	var p *model.Pool
	var a *model.ActiveDirectory
	err := c.st.View(ctx, func(tx store.Tx) (err error) {
		if p, err = store.Get[model.Pool](tx, store.KindPool, op.Target); err != nil {
			return err
		}
		if p.ActiveDirectory == "" {
			return model.Errorf(model.ErrFailedPrecondition, "storage pool %s has no Active Directory policy to validate", p.ID)
		}
		a, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, p.ActiveDirectory)
		return err
	})
	if err != nil {
		return err
	}
	if c.opts.SMB == nil {
		return model.Errorf(model.ErrFailedPrecondition, "this server has no SMB data plane to validate Active Directory policies with")
	}
	network := model.NetworkName(p.Network)
	mb, err := membershipOf(a, a.Members[c.memberSlot(network)])
	if err != nil {
		return err
	}
	cred, err := c.credentialsOf(a)
	if err != nil {
		return err
	}
	defer clear(cred.Password)
	if err := c.opts.SMB.ValidateDomain(ctx, network, mb, cred); err != nil {
		var je *smb.JoinError
		if errors.As(err, &je) {
			return model.Errorf(model.ErrFailedPrecondition, "Active Directory policy %s (%s) from network %s: %s", a.ID, a.Domain, network, je.Error())
		}
		return fmt.Errorf("validate Active Directory policy %s: %w", a.ID, err)
	}
	return c.complete(ctx, op, func(store.Tx) (any, error) { return nil, nil })
}

func (validateHandler) undo(context.Context, *model.Operation) error { return nil }

// adHandler runs Active Directory policy operations. A policy is a record until a
// pool uses it (joins happen in pool operations); an update of a joined policy
// applies to its running Samba instances at once.
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
		_ = a // deleting a policy in use is refused by the API: no instance to leave
		return c.finishDelete(ctx, op, store.KindActiveDirectory)
	}
	if err != nil {
		return err
	}
	if op.Kind == model.OpADUpdate && c.opts.SMB != nil {
		// The instances that joined with it take the new settings (DNS servers,
		// site, AES, LDAP signing, local groups): each is joined again as
		// itself, which re-renders its configuration and has its running daemons
		// reload it (dataplane.Manager.JoinDomain).
		for slot := range a.Members {
			network, mine := c.slotNetwork(slot)
			if !mine {
				continue // another node's: its resync joins it again
			}
			c.smbMu.Lock()
			delete(c.smb.running, memberKey(network, a.Name()))
			c.smbMu.Unlock()
			if err := c.ensureMember(ctx, network, a.Name()); err != nil {
				return err
			}
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
