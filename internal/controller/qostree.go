package controller

import (
	"cmp"
	"math"
	"net/netip"
	"slices"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
)

// QoSInput is what a network's traffic-control tree is derived from: its
// volumes that have an endpoint, their pools, and each project's cap.
type QoSInput struct {
	Volumes []*model.Volume
	Pools   map[string]*model.Pool // by name
	// Caps are the projects' throughput caps in MiB/s by location name
	// (projects/p/locations/l); 0 or absent: none.
	Caps map[string]float64
	// PoolShare is the part of each Flex pool's budget this tree may use (by
	// pool name): a pool with volumes on several nodes is split between them
	// (nodeShares). Absent: all of it.
	PoolShare map[string]float64
	Limits    model.Limits
	// Overhead is wire bytes per byte of client payload (Ethernet, IP, TCP and RPC
	// headers and acks, ~4.5 % at MTU 1500): the tree's rates are on the wire, the
	// limits users buy on payload.
	Overhead float64
}

// QoSTree derives the HTB tree of one network (docs/architecture.md): a class per
// project and location holding its volumes, a class per Flex pool holding that
// pool's volumes, a leaf per volume classified by its endpoint address.
//
//   - A volume's limit is model.VolumeThroughputMibps: capacity × level in AUTO
//     pools, its throughputMibps in MANUAL ones; a Flex pool's limit is its
//     budget, which its volumes share (each may borrow all of it).
//   - Under a project cap smaller than the sum of its children's limits, each
//     child is guaranteed a share of the cap proportional to its limit (HTB
//     rate) and may borrow up to its own limit (ceil): all saturating, each gets
//     its share; alone, its limit. The project class's ceiling is the cap. With
//     no cap (or a larger one) each child is guaranteed its whole limit.
//   - HTB enforces a parent's ceiling only while the children's guaranteed rates sum
//     to no more than the parent's (docs/architecture.md, "HTB's traps, built in"):
//     shares are rounded down, so they never do.
//
// Keys are the resources' names; the result is deterministic.
func QoSTree(in QoSInput) qos.Tree {
	overhead := in.Overhead
	if overhead < 1 {
		overhead = 1
	}
	wire := func(mibps float64) uint64 {
		return max(uint64(math.Floor(mibps*(1<<20)*overhead)), minClassRate)
	}
	type child struct {
		class  qos.Class
		limit  uint64  // wire
		weight float64 // among siblings in a Flex pool: capacity
		kids   []child // a Flex pool's volumes
	}
	projects := map[string][]child{}
	flex := map[string]int{} // pool name → its class's index in projects[loc]
	vols := slices.Clone(in.Volumes)
	slices.SortFunc(vols, func(a, b *model.Volume) int { return cmp.Compare(a.Name(), b.Name()) })
	for _, v := range vols {
		addr, err := netip.ParseAddr(v.Endpoint)
		if err != nil {
			continue
		}
		p := in.Pools[v.PoolName()]
		if p == nil {
			continue
		}
		loc := model.LocationName(v.Project, v.Location)
		leaf := child{class: qos.Class{Key: v.Name(), Addrs: []netip.Addr{addr}},
			limit: wire(model.VolumeThroughputMibps(v, p, in.Limits)), weight: float64(max(v.CapacityGib, 1))}
		if p.ServiceLevel != model.LevelFlex || p.QosType == model.QosManual {
			projects[loc] = append(projects[loc], leaf)
			continue
		}
		i, ok := flex[p.Name()]
		if !ok {
			i = len(projects[loc])
			flex[p.Name()] = i
			budget := model.PoolBudgetMibps(p, in.Limits)
			if f, ok := in.PoolShare[p.Name()]; ok {
				budget *= f
			}
			projects[loc] = append(projects[loc], child{class: qos.Class{Key: p.Name()}, limit: wire(budget)})
		}
		projects[loc][i].kids = append(projects[loc][i].kids, leaf)
	}
	var t qos.Tree
	locs := make([]string, 0, len(projects))
	for loc := range projects {
		locs = append(locs, loc)
	}
	slices.Sort(locs)
	for _, loc := range locs {
		kids := projects[loc]
		var sum uint64
		for _, k := range kids {
			sum += k.limit
		}
		project := qos.Class{Key: loc, Rate: sum, Ceil: sum}
		if c := in.Caps[loc]; c > 0 {
			cp := wire(c)
			project.Ceil = cp
			project.Rate = min(sum, cp)
		}
		t.Classes = append(t.Classes, project)
		for _, k := range kids {
			k.class.Parent = loc
			k.class.Ceil = min(k.limit, project.Ceil)
			k.class.Rate = share(project.Rate, k.limit, sum)
			t.Classes = append(t.Classes, k.class)
			if len(k.kids) == 0 {
				continue
			}
			var weights float64
			for _, g := range k.kids {
				weights += g.weight
			}
			for _, g := range k.kids {
				g.class.Parent = k.class.Key
				g.class.Ceil = k.class.Ceil
				g.class.Rate = max(uint64(math.Floor(float64(k.class.Rate)*g.weight/weights)), 1)
				t.Classes = append(t.Classes, g.class)
			}
		}
	}
	return t
}

// minClassRate is the smallest rate a class is given (bytes per second).
const minClassRate = 8 << 10

// share is part×total/whole rounded down, at least 1 byte/s.
func share(total, part, whole uint64) uint64 {
	if whole == 0 || part >= whole {
		return max(min(total, part), 1)
	}
	return max(uint64(math.Floor(float64(total)*float64(part)/float64(whole))), 1)
}
