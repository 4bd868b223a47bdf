package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/store"
)

// QoS is how the controller holds volumes to their service levels
// (docs/architecture.md): it derives each network's traffic-control tree from the
// store (QoSTree) and has the driver apply the difference. The tree is re-derived
// after every operation, every resync pass and every change of a project's settings,
// so it follows desired state; a rebuilt sandbox (new namespace, no tree) gets its
// tree back within a pass.
type QoS struct {
	Driver qos.Driver
	// Link returns the link a network's traffic crosses, when its sandbox runs.
	Link func(network string) (qos.Link, bool)
	// Networks lists the configured networks.
	Networks func() []string
	// Overhead is wire bytes per payload byte (QoSInput.Overhead); default 1.025.
	Overhead float64
	// DefaultCapMibps is the cap of a project with no settings of its own
	// (0: none).
	DefaultCapMibps float64
	// Limits are the API's (throughput floor and cap per volume).
	Limits model.Limits
}

// qosState coalesces requests to re-apply trees: a burst of operations costs one
// derivation per network.
type qosState struct {
	mu    sync.Mutex
	dirty bool
	kick  chan struct{}
}

// KickQoS asks for every network's tree to be derived and applied again soon;
// it never waits.
func (c *Controller) KickQoS() {
	if c.opts.QoS == nil {
		return
	}
	c.qos.mu.Lock()
	c.qos.dirty = true
	c.qos.mu.Unlock()
	select {
	case c.qos.kick <- struct{}{}:
	default:
	}
}

// qosLoop applies trees when kicked, until ctx ends.
func (c *Controller) qosLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.qos.kick:
		}
		c.qos.mu.Lock()
		dirty := c.qos.dirty
		c.qos.dirty = false
		c.qos.mu.Unlock()
		if !dirty {
			continue
		}
		if err := c.ApplyQoS(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("traffic control", "err", err)
			// Try again shortly; a resync pass would too.
			time.AfterFunc(time.Second, c.KickQoS)
		}
	}
}

// ApplyQoS derives every network's tree from the store and applies it to the
// network's link (skipping networks whose sandbox is not running).
func (c *Controller) ApplyQoS(ctx context.Context) error {
	q := c.opts.QoS
	if q == nil {
		return nil
	}
	c.qosApply.Lock()
	defer c.qosApply.Unlock()
	var all []*model.Volume
	pools := map[string]*model.Pool{}
	caps := map[string]float64{}
	err := c.st.View(ctx, func(tx store.Tx) error {
		var err error
		if all, err = store.List[model.Volume](tx, store.KindVolume, ""); err != nil {
			return err
		}
		ps, err := store.List[model.Pool](tx, store.KindPool, "")
		if err != nil {
			return err
		}
		for _, p := range ps {
			pools[p.Name()] = p
			loc := model.LocationName(p.Project, p.Location)
			if _, ok := caps[loc]; !ok {
				caps[loc] = q.DefaultCapMibps
			}
		}
		return c.projectCaps(tx, caps)
	})
	if err != nil {
		return err
	}
	vols := c.mineOnly(all)
	var poolShare map[string]float64
	if c.opts.Cluster {
		poolShare = nodeShares(all, vols, pools, caps, q.Limits)
	}
	byNet := map[string][]*model.Volume{}
	for _, v := range vols {
		if v.Endpoint != "" {
			byNet[v.Network] = append(byNet[v.Network], v)
		}
	}
	overhead := q.Overhead
	if overhead == 0 {
		overhead = 1.025
	}
	var errs []error
	for _, network := range q.Networks() {
		link, ok := q.Link(network)
		if !ok {
			continue
		}
		t := QoSTree(QoSInput{Volumes: byNet[network], Pools: pools, Caps: caps, PoolShare: poolShare, Limits: q.Limits, Overhead: overhead})
		if err := q.Driver.Apply(ctx, link, t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nodeShares splits the limits that volumes on several nodes share between the
// nodes, so that they add up to the limit: each project's cap (scaled in caps)
// and each Flex pool's budget (the share returned, by pool name) go to each
// node in proportion to its volumes' part (their limits under a cap, their
// capacity in a Flex pool, as QoSTree weighs them). Every node computes the
// same split from the same records. A node's part is static: a project whose
// volumes on one node are idle does not lend their share to another node.
func nodeShares(all, mine []*model.Volume, pools map[string]*model.Pool, caps map[string]float64, lim model.Limits) map[string]float64 {
	type part struct{ mine, all float64 }
	locs := map[string]*part{}
	flex := map[string]*part{}
	isMine := map[string]bool{}
	for _, v := range mine {
		isMine[v.Name()] = true
	}
	for _, v := range all {
		p := pools[v.PoolName()]
		if p == nil || v.Endpoint == "" {
			continue
		}
		loc := model.LocationName(v.Project, v.Location)
		if locs[loc] == nil {
			locs[loc] = &part{}
		}
		lv := model.VolumeThroughputMibps(v, p, lim)
		w := float64(max(v.CapacityGib, 1))
		if p.ServiceLevel == model.LevelFlex && p.QosType != model.QosManual {
			if flex[p.Name()] == nil {
				flex[p.Name()] = &part{}
			}
			flex[p.Name()].all += w
			if isMine[v.Name()] {
				flex[p.Name()].mine += w
			}
			// Under the cap the pool counts by its budget's share (below).
			continue
		}
		locs[loc].all += lv
		if isMine[v.Name()] {
			locs[loc].mine += lv
		}
	}
	shares := map[string]float64{}
	for name, f := range flex {
		p := pools[name]
		shares[name] = f.mine / f.all
		budget := model.PoolBudgetMibps(p, lim)
		loc := model.LocationName(p.Project, p.Location)
		locs[loc].all += budget
		locs[loc].mine += budget * shares[name]
	}
	for loc, pt := range locs {
		if caps[loc] > 0 && pt.all > 0 {
			caps[loc] *= pt.mine / pt.all
		}
	}
	return shares
}

// projectCaps sets the cap of every project and location that has settings of
// its own.
func (c *Controller) projectCaps(tx store.Tx, caps map[string]float64) error {
	settings, err := store.List[model.Settings](tx, store.KindSettings, "")
	if err != nil {
		return err
	}
	for _, s := range settings {
		caps[model.LocationName(s.Project, s.Location)] = s.EffectiveThroughputCapMibps(c.opts.QoS.DefaultCapMibps)
	}
	return nil
}
