package intent

import (
	"errors"
	"strings"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// place chooses the node a new volume lives on and its endpoint address there.
//
// One node (Options.Cluster false): this node, its configured network. Several
// nodes on one store: among the nodes whose heartbeat is recent and that have
// the pool's network, the one holding the fewest volumes (then the lowest ID)
// whose store has room for it; a clone goes to its source's node, where the
// snapshot is. Writes are serialised by the store, so two creates racing on two
// nodes see each other's choice. The endpoint is the lowest free address of the
// chosen node's range of the network: nodes on one L2 segment share a range,
// nodes on segments of their own each have theirs.
func (s *Service) place(tx store.Tx, r *reads, v *model.Volume) error {
	pool, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
	if err != nil {
		return err
	}
	v.Network = model.NetworkName(pool.Network)
	if !s.opts.Cluster {
		n, ok := s.Network(v.Network)
		if !ok {
			return model.Errorf(model.ErrFailedPrecondition, "network %q of pool %s is no longer configured", v.Network, pool.ID)
		}
		v.Node = s.opts.NodeID
		if err := s.allocateEndpoint(tx, v, n); err != nil {
			return err
		}
		return s.checkStoreRoom(tx, r, v.Node, v.CapacityGib, 0)
	}
	want := v.Node // a clone's: its source's node (resolveCloneSource)
	nodes, err := store.List[model.Node](tx, store.KindNode, "")
	if err != nil {
		return err
	}
	now := s.opts.Now()
	var (
		best      *model.Node
		bestNet   model.Network
		bestCount int
		down      []string
		full      []string
		drained   []string
	)
	for _, n := range nodes {
		if want != "" && n.ID != want {
			continue
		}
		nw, ok := n.Network(v.Network)
		if !ok {
			continue
		}
		if !n.Up(now) {
			down = append(down, n.ID)
			continue
		}
		if want == "" {
			// A drained node takes no new volume (basin nodes drain); a
			// clone still goes where its source is.
			var d model.Drain
			if err := tx.Get(store.KindDrain, n.ID, &d); err == nil {
				drained = append(drained, n.ID)
				continue
			} else if !errors.Is(err, model.ErrNotFound) {
				return err
			}
		}
		if s.opts.Capacity != nil {
			free, known := s.nodeFree(r, n)
			if known && s.allocation(v.CapacityGib) > free {
				full = append(full, n.ID)
				continue
			}
		}
		es, err := tx.Index(store.IdxVolumeNode, n.ID)
		if err != nil {
			return err
		}
		if best == nil || len(es) < bestCount {
			best, bestNet, bestCount = n, nw, len(es)
		}
	}
	if best == nil {
		switch {
		case want != "":
			return model.Errorf(model.ErrFailedPrecondition, "restoreParameters.sourceSnapshot: the snapshot is on node %q, which is down or has no room for %d GiB; a clone is made where its source is",
				want, v.CapacityGib)
		case len(full) > 0:
			return model.Errorf(model.ErrFailedPrecondition, "capacityGib: no Basin node serving network %q has %d GiB free for a volume (full: %s); delete volumes or ask the administrator",
				v.Network, v.CapacityGib, strings.Join(full, ", "))
		case len(drained) > 0:
			return model.Errorf(model.ErrUnavailable, "every Basin node serving network %q is drained (%s) or down; try again once one is undrained", v.Network, strings.Join(drained, ", "))
		case len(down) > 0:
			return model.Errorf(model.ErrUnavailable, "every Basin node serving network %q is down (%s); try again later", v.Network, strings.Join(down, ", "))
		}
		return model.Errorf(model.ErrFailedPrecondition, "no Basin node serves network %q of pool %s", v.Network, pool.ID)
	}
	v.Node = best.ID
	return s.allocateEndpoint(tx, v, bestNet)
}

// nodeFree is what node n's store may still give volumes: read now for this
// node, as of its last heartbeat for another (known false if it has not said).
func (s *Service) nodeFree(r *reads, n *model.Node) (free int64, known bool) {
	if n.ID == s.opts.NodeID && r.space != nil {
		return r.space.free, true
	}
	return n.FreeBytes, n.StoreBytes > 0
}

// remote reports whether node is another node of a cluster, whose store this
// node cannot read.
func (s *Service) remote(node string) bool {
	return s.opts.Cluster && node != s.opts.NodeID
}

// clusterStoreBytes is what the nodes' stores hold for volumes together, this
// node's read now (local), the others' as of their last heartbeat, down or not:
// pools commit against the cluster's space.
func (s *Service) clusterStoreBytes(tx store.Tx, local int64) (int64, error) {
	nodes, err := store.List[model.Node](tx, store.KindNode, "")
	if err != nil {
		return 0, err
	}
	total := local
	for _, n := range nodes {
		if n.ID != s.opts.NodeID {
			total += n.StoreBytes
		}
	}
	return total, nil
}
