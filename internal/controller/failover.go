package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/tick"
)

// Failover (Options.Failover): volumes whose storage other nodes reach too
// (CephFS) keep serving when their node is lost or drained. Three pieces:
//
//   - Each node holds a serving lease (serveLoop): a store lease of its own,
//     renewed every readBeat. A node that has not renewed it for
//     ServeLease − fenceMargin (fenceAfter) fences itself (Options.Fence: its endpoint
//     addresses go, its daemons stop) before the lease can lapse, so by the
//     time another node may take its volumes it serves nothing. Nodes' clocks
//     must agree to well within fenceMargin (NTP): the lease's expiry is
//     written with the renewing node's clock and read with the leader's.
//   - Every failover node moves hostings (moveHostings, every ServeLease/4,
//     right after a serving lease can lapse, at once after a drain: pace),
//     not only the controller lease's holder, whose own loss would otherwise
//     add its lease (30 s) to every failover: the plan is a function of what
//     the store holds, applied in one serialised transaction, so a second
//     node's pass right after the first finds nothing left to move. The
//     volumes of a node on a network, as one group, go to
//     another node that reaches the same storage and has the network when
//     their host is lost (its serving lease lapsed) or drained, and back to
//     their home node once it serves again (GivebackAfter after its start)
//     and is not drained. A model.Hosting records each move.
//   - Each node serves the volumes whose hosting names it (mine, runsHere)
//     and, when one moves away from it while it still serves, takes them out
//     of its data plane and acknowledges (release), after which the new host
//     starts. A move from a lost node needs no acknowledgement: it fenced
//     itself.

// Failover defaults.
const (
	DefaultServeLease    = 8 * time.Second
	DefaultGivebackAfter = 60 * time.Second
	// fenceMargin: a node fences itself this long before its serving lease
	// could lapse, counted from the start of its last renewal that committed.
	fenceMargin = 2 * time.Second
)

// fenceAfter is how long after the start of its last committed renewal a
// node fences itself: fenceMargin before its serving lease could lapse (a
// quarter of the lease when that is shorter, in tests).
func (c *Controller) fenceAfter() time.Duration {
	return c.opts.ServeLease - min(fenceMargin, c.opts.ServeLease/4)
}

// serveLeaseName names node's serving lease.
func serveLeaseName(node string) string { return "serve/" + node }

// servingAt reports whether node holds its serving lease at now, as tx reads it.
func servingAt(tx store.Tx, node string, now time.Time) (bool, error) {
	serving, _, err := servingUntil(tx, node, now)
	return serving, err
}

// servingUntil is servingAt with the lease's expiry, when it is held.
func servingUntil(tx store.Tx, node string, now time.Time) (bool, time.Time, error) {
	var l store.Lease
	err := tx.Get(store.KindLease, serveLeaseName(node), &l)
	if errors.Is(err, model.ErrNotFound) {
		return false, time.Time{}, nil
	}
	if err != nil || l.Holder != node || !now.Before(l.Expire) {
		return false, time.Time{}, err
	}
	return true, l.Expire, nil
}

// hostingState is what this node knows of the hostings, as last read.
type hostingState struct {
	mu       sync.Mutex
	read     bool // read once at least: before, a failover node serves nothing
	hostings map[string]*model.Hosting
	// lastRenew is when the last renewal of the serving lease that committed
	// started (monotonic); fenced is set once this node fenced itself.
	lastRenew time.Time
	fenced    atomic.Bool
	releasing map[string]bool // hostings being released now
	// kick asks serveLoop to read the hostings now: this node changed one.
	kick chan struct{}
	// plan asks failoverLoop to plan now: a node was drained or undrained.
	plan chan struct{}
	// lastDrain is when the last node drained was, as last read; zero if none.
	lastDrain time.Time
	// nextLapse is the earliest expiry of a serving lease held at the last
	// plan: a lost node's, unless renewed meanwhile.
	nextLapse time.Time
}

// readBeat is how often serveLoop renews the serving lease and reads the
// hostings: nodes learn of each other's moves and releases only there, so a
// drain's pause is a few of these. A renewal is one short transaction (an
// Update, serialised with every node's), the read a View.
const readBeat = 500 * time.Millisecond

// renewPace returns how long serveLoop waits before its next renewal.
func (c *Controller) renewPace() time.Duration {
	return min(readBeat, c.opts.ServeLease/4)
}

// lapseMargin is how long after a serving lease's expiry failoverLoop plans:
// the lease of a node lost right then is found lapsed at once, not at the
// next beat (up to ServeLease/4 later).
const lapseMargin = 20 * time.Millisecond

// pace returns how long failoverLoop waits before its next plan: ServeLease/4,
// or less when a serving lease can lapse before. A plan is an Update that
// reads every volume, serialised with every node's Updates; a drain is
// planned at once instead (MoveVolumes), and so is a lost node's release
// (fenceLost runs right after the plan that found it lost).
func (c *Controller) pace() time.Duration {
	c.failover.mu.Lock()
	defer c.failover.mu.Unlock()
	beat := c.opts.ServeLease / 4
	if l := c.failover.nextLapse; !l.IsZero() {
		beat = min(beat, max(l.Sub(c.opts.Now())+lapseMargin, lapseMargin))
	}
	return beat
}

// MoveVolumes has this node plan the hostings now (failoverLoop): the API
// calls it when it drained or undrained a node. It never blocks.
func (c *Controller) MoveVolumes() {
	select {
	case c.failover.plan <- struct{}{}:
	default:
	}
}

// serving reports whether this node serves the volumes of home on network.
func (c *Controller) serving(network, home string) bool {
	if !c.opts.Failover {
		return home == c.opts.NodeID
	}
	if c.failover.fenced.Load() {
		return false
	}
	c.failover.mu.Lock()
	defer c.failover.mu.Unlock()
	if !c.failover.read {
		return false
	}
	if h := c.failover.hostings[model.HostingName(network, home)]; h != nil {
		return h.ServesFor(c.opts.NodeID)
	}
	return home == c.opts.NodeID
}

// servesIn is serving as the store says in tx.
func (c *Controller) servesIn(tx store.Tx, network, home string) (bool, error) {
	if !c.opts.Failover {
		return home == c.opts.NodeID, nil
	}
	if c.failover.fenced.Load() {
		return false, nil
	}
	h, err := store.Get[model.Hosting](tx, store.KindHosting, model.HostingName(network, home))
	if errors.Is(err, model.ErrNotFound) {
		return home == c.opts.NodeID, nil
	}
	if err != nil {
		return false, err
	}
	return h.ServesFor(c.opts.NodeID), nil
}

// Fenced reports whether this node fenced itself (its serving lease could
// have lapsed): it serves nothing until it is started again.
func (c *Controller) Fenced() bool { return c.failover.fenced.Load() }

// serveLoop renews this node's serving lease and reads the hostings now and
// every readBeat until ctx ends, and fences the node once a renewal has
// not committed for ServeLease − fenceMargin (watched every 100 ms, so a
// renewal that hangs does not hold the fence back).
func (c *Controller) serveLoop(ctx context.Context, first chan<- struct{}) {
	renew := func() {
		if c.failover.fenced.Load() {
			return // a fenced node serves nothing: it must not look alive
		}
		start := time.Now()
		var hs []*model.Hosting
		var lastDrain time.Time
		err := c.st.Update(ctx, func(tx store.Tx) (err error) {
			_, _, err = store.TakeLease(tx, serveLeaseName(c.opts.NodeID), c.opts.NodeID, c.opts.Now(), c.opts.ServeLease)
			return err
		})
		if err == nil {
			err = c.st.View(ctx, func(tx store.Tx) error {
				drains, err := store.List[model.Drain](tx, store.KindDrain, "")
				if err != nil {
					return err
				}
				lastDrain = time.Time{}
				for _, d := range drains {
					if d.Since.After(lastDrain) {
						lastDrain = d.Since
					}
				}
				hs, err = store.List[model.Hosting](tx, store.KindHosting, "")
				return err
			})
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("renew the serving lease", "err", err)
			}
			return
		}
		c.failover.mu.Lock()
		// A renewal that commits after the lease could have lapsed (this
		// process paused, the database slow) must not count: another node
		// may have taken the volumes meanwhile.
		late := !c.failover.lastRenew.IsZero() && time.Since(c.failover.lastRenew) > c.fenceAfter()
		if !late {
			c.failover.lastRenew = start
		}
		changed := c.setHostingsLocked(hs)
		drained := lastDrain.After(c.failover.lastDrain)
		c.failover.lastDrain = lastDrain
		c.failover.mu.Unlock()
		if drained {
			c.MoveVolumes() // a node was drained since the last renewal: plan now
		}
		if late {
			c.fence("a renewal of the serving lease committed after it could have lapsed")
			return
		}
		if changed {
			c.hostingsChanged(ctx)
		} else {
			c.startReleases(ctx)
		}
	}
	renew()
	close(first)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Every(ctx, 100*time.Millisecond, func() {
			c.failover.mu.Lock()
			last := c.failover.lastRenew
			c.failover.mu.Unlock()
			if !last.IsZero() && time.Since(last) > c.fenceAfter() {
				c.fence(fmt.Sprintf("the serving lease was last renewed %s ago", time.Since(last).Round(time.Millisecond)))
			}
		})
	}()
	// Kicked when this node moved or released a hosting.
	tick.Paced(ctx, c.renewPace, c.failover.kick, renew)
	<-done
	// On a clean stop the lease is left to lapse: the daemon took the data
	// plane down first, and another node takes the volumes once it lapses.
}

// rejoin lets this node's clients back into the storage at start, once no
// move away from it is waiting to be released: another node that found it
// lost may be about to cut those clients off (fenceLost), and must do so
// before, not after, this node's new clients connect. A move this node is to
// release itself (it serves again) it releases in hostingsChanged. Bounded:
// after rejoinWait it goes on, saying so.
func (c *Controller) rejoin(ctx context.Context) {
	const rejoinWait = 30 * time.Second
	deadline := time.Now().Add(rejoinWait)
	for ctx.Err() == nil {
		var waiting []string
		err := c.st.View(ctx, func(tx store.Tx) error {
			hs, err := store.List[model.Hosting](tx, store.KindHosting, "")
			for _, h := range hs {
				if h.From == c.opts.NodeID && !h.Released {
					waiting = append(waiting, model.HostingName(h.Network, h.Home))
				}
			}
			return err
		})
		if err == nil && len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			c.log.Warn("moves away from this node are still not released; letting its clients back into the storage anyway", "hostings", waiting, "err", err)
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if len(c.opts.FenceAddrs) == 0 {
		return
	}
	f, ok := c.be.(storage.ClientFencer)
	if !ok {
		return
	}
	if err := f.UnfenceClients(ctx, c.opts.FenceAddrs); err != nil && ctx.Err() == nil {
		c.log.Error("let this node's clients back into the storage", "addrs", c.opts.FenceAddrs, "err", err)
	}
}

// setHostingsLocked records hs as the hostings and reports whether what this
// node serves or must release changed.
func (c *Controller) setHostingsLocked(hs []*model.Hosting) bool {
	m := make(map[string]*model.Hosting, len(hs))
	for _, h := range hs {
		m[model.HostingName(h.Network, h.Home)] = h
	}
	changed := !c.failover.read || len(m) != len(c.failover.hostings)
	for k, h := range m {
		if o := c.failover.hostings[k]; o == nil || o.Epoch != h.Epoch || o.Released != h.Released {
			changed = true
		}
	}
	c.failover.hostings, c.failover.read = m, true
	return changed
}

// fence stops this node serving, once: from now on it serves nothing and runs
// no volume's operation, and Options.Fence takes its endpoints down.
func (c *Controller) fence(why string) {
	if c.failover.fenced.Swap(true) {
		return
	}
	c.log.Error("fencing this node: it stops serving every volume, since another node may take them over", "why", why)
	if c.opts.Fence != nil {
		c.opts.Fence(why)
	}
}

// hostingsChanged runs when what this node serves changed: it releases what
// moved away from it, and re-applies its volumes (what moved to it) at once
// rather than at the next resync.
func (c *Controller) hostingsChanged(ctx context.Context) {
	c.startReleases(ctx)
	c.Wake()
	c.KickQoS()
	c.kickResync()
}

// startReleases releases, each in a goroutine of its own, the moves away from
// this node that wait for it and are not being released now. Every renewal
// runs it, so a release that failed (or found the move changed under it) is
// tried again at the next.
func (c *Controller) startReleases(ctx context.Context) {
	c.failover.mu.Lock()
	var release []*model.Hosting
	for k, h := range c.failover.hostings {
		if h.From == c.opts.NodeID && !h.Released && h.Host != c.opts.NodeID && !c.failover.releasing[k] {
			if c.failover.releasing == nil {
				c.failover.releasing = map[string]bool{}
			}
			c.failover.releasing[k] = true
			release = append(release, h)
		}
	}
	c.failover.mu.Unlock()
	for _, h := range release {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer func() {
				c.failover.mu.Lock()
				delete(c.failover.releasing, model.HostingName(h.Network, h.Home))
				c.failover.mu.Unlock()
			}()
			if err := c.release(ctx, h); err != nil && ctx.Err() == nil {
				c.log.Warn("release volumes moving to another node", "network", h.Network, "home", h.Home, "to", h.Host, "err", err)
			}
		}()
	}
}

// release takes the volumes of h out of this node's data plane (NFS exports,
// snapshot exports, SMB shares), each under its lock so no operation of this
// node is half-way through one, and then acknowledges h's epoch: the new host
// starts serving them.
func (c *Controller) release(ctx context.Context, h *model.Hosting) error {
	var vols []*model.Volume
	err := c.st.View(ctx, func(tx store.Tx) error {
		all, err := store.List[model.Volume](tx, store.KindVolume, "")
		for _, v := range all {
			if v.Network == h.Network && v.Node == h.Home {
				vols = append(vols, v)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		ls := lockSet{Exclusive: []string{v.Name()}}
		for !c.locks.tryAcquire(ls) { // an operation or a resync holds it: let it finish
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		err := c.unserve(ctx, v)
		c.locks.release(ls)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.Name(), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	acked := false
	err = c.st.Update(ctx, func(tx store.Tx) error {
		acked = false
		cur, err := store.Get[model.Hosting](tx, store.KindHosting, model.HostingName(h.Network, h.Home))
		if err != nil {
			return err
		}
		if cur.Epoch != h.Epoch || cur.From != c.opts.NodeID || cur.Released {
			return nil // moved again meanwhile: the next renewal releases the new move
		}
		cur.Released, acked = true, true
		return tx.Put(store.KindHosting, model.HostingName(h.Network, h.Home), "", cur)
	})
	if err == nil && acked {
		c.kickServe()
		c.log.Info("released volumes to another node", "network", h.Network, "home", h.Home, "to", h.Host, "volumes", len(vols))
	}
	return err
}

// unserve takes volume v out of this node's data plane. Its export goes first
// (DataPlane.Release): that takes its endpoint address off first, resetting
// its clients' connections, so no client of the volume or of its snapshot
// exports, which share the address, meets an export already gone
// (NFS3ERR_STALE); clients reconnect to the new host instead.
func (c *Controller) unserve(ctx context.Context, v *model.Volume) error {
	if err := c.takeOff(ctx, v, true); err != nil {
		return err
	}
	if err := c.takeDownSnapshotExports(ctx, v); err != nil {
		return err
	}
	return c.unshare(ctx, v) // nothing for a volume without a share
}

// failoverLoop moves hostings at the pace pace sets (at once when
// MoveVolumes asks) until ctx ends, and releases the moves away from lost
// nodes.
func (c *Controller) failoverLoop(ctx context.Context) {
	tick.Paced(ctx, c.pace, c.failover.plan, func() {
		if c.failover.fenced.Load() {
			return
		}
		if err := c.moveHostings(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("move volumes between nodes", "err", err)
		}
		if err := c.fenceLost(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("cut a lost node off the storage", "err", err)
		}
	})
}

// fenceLost releases each move away from a node that lost its serving lease
// (it fenced itself, but the storage may still count its clients' locks and
// caching rights, which would hold the new host up: on CephFS until the MDS
// times the sessions out, 5 minutes measured): the lost node's FenceAddrs
// are cut off the storage first (storage.ClientFencer), then the move is
// released. Any failover node may do it; doing it twice is harmless.
func (c *Controller) fenceLost(ctx context.Context) error {
	type lost struct {
		h     *model.Hosting
		addrs []string
	}
	var todo []lost
	err := c.st.View(ctx, func(tx store.Tx) error {
		hs, err := store.List[model.Hosting](tx, store.KindHosting, "")
		if err != nil {
			return err
		}
		now := c.opts.Now()
		for _, h := range hs {
			if h.Released {
				continue
			}
			if serving, err := servingAt(tx, h.From, now); err != nil {
				return err
			} else if serving {
				continue // From serves: it releases itself
			}
			n, err := store.Get[model.Node](tx, store.KindNode, h.From)
			if err != nil && !errors.Is(err, model.ErrNotFound) {
				return err
			}
			var addrs []string
			if n != nil {
				addrs = n.FenceAddrs
			}
			todo = append(todo, lost{h, addrs})
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range todo {
		if len(l.addrs) > 0 {
			f, ok := c.be.(storage.ClientFencer)
			if !ok {
				errs = append(errs, fmt.Errorf("node %s has addresses to cut off, but the storage cannot", l.h.From))
				continue
			}
			begin := time.Now()
			if err := f.FenceClients(ctx, l.addrs); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", l.h.From, err))
				continue
			}
			c.log.Info("cut a lost node's clients off the storage", "node", l.h.From, "addrs", l.addrs,
				"took", time.Since(begin).Round(time.Millisecond))
		}
		back := false
		err := c.st.Update(ctx, func(tx store.Tx) error {
			back = false
			// The node may have come back while its clients were being cut
			// off: then it releases the move itself, and the cut is undone
			// below (its rejoin may have let them in before the cut landed).
			serving, err := servingAt(tx, l.h.From, c.opts.Now())
			if err != nil || serving {
				back = serving
				return err
			}
			name := model.HostingName(l.h.Network, l.h.Home)
			cur, err := store.Get[model.Hosting](tx, store.KindHosting, name)
			if err != nil || cur.Epoch != l.h.Epoch || cur.Released {
				return err
			}
			cur.Released = true
			return tx.Put(store.KindHosting, name, "", cur)
		})
		if err == nil && back && len(l.addrs) > 0 {
			if f, ok := c.be.(storage.ClientFencer); ok {
				err = f.UnfenceClients(ctx, l.addrs)
				c.log.Info("a node came back while its clients were cut off the storage: let them in again", "node", l.h.From, "err", err)
			}
		}
		errs = append(errs, err)
		c.kickServe()
	}
	return errors.Join(errs...)
}

// kickServe has serveLoop read the hostings now. It never blocks.
func (c *Controller) kickServe() {
	select {
	case c.failover.kick <- struct{}{}:
	default:
	}
}

// moveHostings applies planHostings to the store in one transaction.
func (c *Controller) moveHostings(ctx context.Context) error {
	var moved []*model.Hosting
	var nextLapse time.Time
	err := c.st.Update(ctx, func(tx store.Tx) error {
		moved = nil
		in, err := readHostingInput(tx, c.opts.Now(), c.opts.GivebackAfter)
		if err != nil {
			return err
		}
		nextLapse = in.nextLapse
		for _, h := range planHostings(in) {
			if err := tx.Put(store.KindHosting, model.HostingName(h.Network, h.Home), "", h); err != nil {
				return err
			}
			moved = append(moved, h)
		}
		return nil
	})
	if err != nil {
		nextLapse = time.Time{} // the beat after a failed plan, not a spin
	}
	c.failover.mu.Lock()
	c.failover.nextLapse = nextLapse
	c.failover.mu.Unlock()
	if len(moved) > 0 {
		c.kickServe()
	}
	for _, h := range moved {
		c.log.Info("volumes move between nodes", "network", h.Network, "home", h.Home, "host", h.Host, "from", h.From,
			"reason", h.Reason, "released", h.Released, "epoch", h.Epoch)
	}
	return err
}

// hostingInput is what planHostings decides from.
type hostingInput struct {
	now           time.Time
	givebackAfter time.Duration
	nodes         map[string]*model.Node
	serving       map[string]bool // node → its serving lease is held now
	nextLapse     time.Time       // the earliest expiry of a serving lease held now
	drained       map[string]bool
	hostings      map[string]*model.Hosting
	groups        map[string]*hostingGroup // model.HostingName → its volumes
}

// hostingGroup is the volumes of one node on one network.
type hostingGroup struct {
	network, home string
	volumes       int
}

// readHostingInput reads in tx what planHostings needs.
func readHostingInput(tx store.Tx, now time.Time, givebackAfter time.Duration) (hostingInput, error) {
	in := hostingInput{now: now, givebackAfter: givebackAfter, nodes: map[string]*model.Node{}, serving: map[string]bool{},
		drained: map[string]bool{}, hostings: map[string]*model.Hosting{}, groups: map[string]*hostingGroup{}}
	nodes, err := store.List[model.Node](tx, store.KindNode, "")
	if err != nil {
		return in, err
	}
	for _, n := range nodes {
		in.nodes[n.ID] = n
		var until time.Time
		if in.serving[n.ID], until, err = servingUntil(tx, n.ID, now); err != nil {
			return in, err
		}
		if in.serving[n.ID] && (in.nextLapse.IsZero() || until.Before(in.nextLapse)) {
			in.nextLapse = until
		}
	}
	drains, err := store.List[model.Drain](tx, store.KindDrain, "")
	if err != nil {
		return in, err
	}
	for _, d := range drains {
		in.drained[d.Node] = true
	}
	hs, err := store.List[model.Hosting](tx, store.KindHosting, "")
	if err != nil {
		return in, err
	}
	for _, h := range hs {
		in.hostings[model.HostingName(h.Network, h.Home)] = h
	}
	vols, err := store.List[model.Volume](tx, store.KindVolume, "")
	if err != nil {
		return in, err
	}
	for _, v := range vols {
		if v.Node == "" || v.Network == "" {
			continue
		}
		k := model.HostingName(v.Network, v.Node)
		g := in.groups[k]
		if g == nil {
			g = &hostingGroup{network: v.Network, home: v.Node}
			in.groups[k] = g
		}
		g.volumes++
	}
	return in, nil
}

// planHostings returns the hostings to write: for each group of volumes whose
// home node's storage is shared, who should serve it now.
//
//   - Its home node, when that holds its serving lease, is not drained, and has
//     run for givebackAfter (a node just back does not take its volumes at once:
//     it may flap).
//   - Else its host, while that holds its serving lease and is not drained.
//   - Else the node with the fewest volumes among those that hold their serving
//     lease, are not drained, reach the same storage and have the network.
//
// Every move waits for its release (Released false): by the old host, which
// still serves, or for a lost one (which fenced itself) by fenceLost, once its
// clients are cut off the storage. No node fit: the group stays where it is,
// unserved.
func planHostings(in hostingInput) []*model.Hosting {
	load := map[string]int{}
	cur := func(k string, g *hostingGroup) *model.Hosting {
		if h := in.hostings[k]; h != nil {
			return h
		}
		return &model.Hosting{Network: g.network, Home: g.home, Host: g.home, Released: true}
	}
	keys := make([]string, 0, len(in.groups))
	for k, g := range in.groups {
		keys = append(keys, k)
		load[cur(k, g).Host] += g.volumes
	}
	slices.Sort(keys)
	var out []*model.Hosting
	for _, k := range keys {
		g := in.groups[k]
		h := cur(k, g)
		home := in.nodes[g.home]
		if home == nil || home.SharedStorage == "" {
			continue
		}
		fits := func(id string) bool {
			n := in.nodes[id]
			if n == nil || !in.serving[id] || in.drained[id] || n.SharedStorage != home.SharedStorage {
				return false
			}
			_, ok := n.Network(g.network)
			return ok
		}
		want, reason := h.Host, h.Reason
		switch {
		case h.Host != g.home && fits(g.home) && in.now.Sub(home.StartTime) >= in.givebackAfter:
			want, reason = g.home, model.HostingHome
		case fits(h.Host):
		default:
			var ids []string
			for id := range in.nodes {
				if id != h.Host && fits(id) {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				break
			}
			slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(load[a], load[b]), strings.Compare(a, b)) })
			want, reason = ids[0], model.HostingLost
			if in.drained[h.Host] && in.serving[h.Host] {
				reason = model.HostingDrained
			}
		}
		if want == h.Host {
			continue
		}
		// Released later: by From, once it has taken the volumes out of its
		// data plane, or, when From was lost, by whoever cuts its clients off
		// the storage first (fenceLost).
		n := &model.Hosting{Network: g.network, Home: g.home, Host: want, From: h.Host, Epoch: h.Epoch + 1, Reason: reason, Since: in.now}
		if !h.Released {
			// The current host never started: the one to wait for is still
			// the host before it.
			n.From = h.From
		}
		if n.From == want {
			// Back to the host that was letting go and has not: it never
			// stopped serving (a drain undone before its release).
			n.From, n.Released = "", true
		}
		load[h.Host] -= g.volumes
		load[want] += g.volumes
		out = append(out, n)
	}
	return out
}

// kickResync asks for a resync pass now (what moved to this node is served
// without waiting for the next one).
func (c *Controller) kickResync() {
	select {
	case c.resyncKick <- struct{}{}:
	default:
	}
}
