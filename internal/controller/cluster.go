package controller

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/tick"
)

// Several nodes on one store (Options.Cluster): each volume is placed on one
// node (model.Volume.Node, chosen by intent), where its storage is. That node's
// controller runs the volume's operations and its snapshots', repairs it,
// serves it and shapes its traffic; the others leave it alone. Operations on
// pools and Active Directory policies are cluster-scope: the node holding the
// controller lease (leaderLoop) runs them, each under its own operation lease
// as well (fence.go), so a holder that lost both cannot finish one twice.

// controllerLease is the store lease (store.TakeLease) of cluster-scope work.
const controllerLease = "controller"

// leaderLoop takes or renews the controller lease now and every OpLease/3
// until ctx ends: a holder that stops renewing (killed, paused, cut off) loses
// it OpLease after its last renewal, and another node takes it at its next
// try. Taking it wakes the scheduler: cluster-scope operations may wait.
func (c *Controller) leaderLoop(ctx context.Context, first chan<- struct{}) {
	try := func() {
		var held bool
		err := c.st.Update(ctx, func(tx store.Tx) (err error) {
			_, held, err = store.TakeLease(tx, controllerLease, c.opts.NodeID, c.opts.Now(), c.opts.OpLease)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("controller lease", "err", err)
			}
			held = false
		}
		if was := c.leader.Swap(held); was != held {
			c.log.Info("controller lease", "held", held)
			if held {
				c.Wake()
			}
		}
	}
	try()
	close(first)
	tick.Every(ctx, c.opts.OpLease/3, try)
	c.releaseLeadership()
}

// releaseLeadership gives the controller lease up on a clean stop, so that
// another node takes cluster-scope work at its next try instead of after the
// lease lapses. A node killed gives nothing up: the lease lapses.
func (c *Controller) releaseLeadership() {
	if !c.leader.Swap(false) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.st.Update(ctx, func(tx store.Tx) error {
		var l store.Lease
		if err := tx.Get(store.KindLease, controllerLease, &l); err != nil {
			return err
		}
		if l.Holder != c.opts.NodeID {
			return nil
		}
		l.Expire = c.opts.Now()
		return tx.Put(store.KindLease, controllerLease, "", l)
	})
	if err != nil {
		c.log.Warn("give the controller lease up", "err", err)
	}
}

// mine reports whether volume v is this node's to serve and repair.
func (c *Controller) mine(v *model.Volume) bool {
	return !c.opts.Cluster || c.serving(v.Network, v.Node)
}

// mineOnly returns the volumes of vols that are this node's.
func (c *Controller) mineOnly(vols []*model.Volume) []*model.Volume {
	if !c.opts.Cluster {
		return vols
	}
	out := vols[:0:0]
	for _, v := range vols {
		if c.mine(v) {
			out = append(out, v)
		}
	}
	return out
}

// runsHere reports whether this node may run op: every operation when it is
// the only node; a volume's or snapshot's only on the node serving the volume
// (its own node, or another while it is moved there: failover.go); the
// others (pools', Active Directory policies') while it holds the controller
// lease.
func (c *Controller) runsHere(tx store.Tx, op *model.Operation) (bool, error) {
	if !c.opts.Cluster {
		return true, nil
	}
	kind := string(op.Kind)
	if !strings.HasPrefix(kind, "volume.") && !strings.HasPrefix(kind, "snapshot.") {
		return c.leader.Load(), nil
	}
	volume, _, _ := strings.Cut(op.Target, "/snapshots/") // a snapshot's volume, or the volume
	v, err := store.Get[model.Volume](tx, store.KindVolume, volume)
	if err != nil {
		if errors.Is(err, model.ErrNotFound) {
			return true, nil // gone: whoever runs it finds so and finishes it
		}
		return false, err
	}
	return c.servesIn(tx, v.Network, v.Node)
}

// adopt places on this node the volumes that have no node yet (made before
// volumes were placed): every one when this is the only node; in a cluster,
// those whose storage this node holds, and no other. It runs before the first
// resync.
func (c *Controller) adopt(ctx context.Context) error {
	var unplaced []*model.Volume
	err := c.st.View(ctx, func(tx store.Tx) error {
		vols, err := store.List[model.Volume](tx, store.KindVolume, "")
		for _, v := range vols {
			if v.Node == "" {
				unplaced = append(unplaced, v)
			}
		}
		return err
	})
	if err != nil || len(unplaced) == 0 {
		return err
	}
	var here map[string]bool
	if c.opts.Cluster {
		observed, err := c.be.ObserveVolumes(ctx)
		if err != nil {
			return err
		}
		here = map[string]bool{}
		for k, st := range observed {
			here[k] = st.Exists
		}
	}
	n := 0
	err = c.st.Update(ctx, func(tx store.Tx) error {
		for _, u := range unplaced {
			if here != nil && !here[u.Key] {
				continue
			}
			v, err := store.Get[model.Volume](tx, store.KindVolume, u.Name())
			if errors.Is(err, model.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if v.Node != "" {
				continue
			}
			v.Node = c.opts.NodeID
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil && n > 0 {
		c.log.Info("placed on this node the volumes made before placement", "volumes", n, "node", c.opts.NodeID)
	}
	return err
}
