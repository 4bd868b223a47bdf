package controller

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/qos"
)

func qosPool(id string, level model.ServiceLevel, qt model.QosType, gib int64) *model.Pool {
	return &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: id}, ServiceLevel: level, QosType: qt, CapacityGib: gib}
}

func qosVolume(id, pool string, gib int64, endpoint string) *model.Volume {
	return &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: id}, StoragePool: pool, CapacityGib: gib, Endpoint: endpoint}
}

func classes(t *testing.T, tr qos.Tree) map[string]qos.Class {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatalf("tree does not validate: %v\n%+v", err, tr)
	}
	m := map[string]qos.Class{}
	for _, c := range tr.Classes {
		m[c.Key] = c
	}
	return m
}

const mib = 1 << 20

func TestQoSTreeAutoLevels(t *testing.T) {
	pools := map[string]*model.Pool{}
	for _, p := range []*model.Pool{qosPool("std", model.LevelStandard, model.QosAuto, 10240),
		qosPool("prem", model.LevelPremium, model.QosAuto, 10240), qosPool("ext", model.LevelExtreme, model.QosAuto, 10240)} {
		pools[p.Name()] = p
	}
	in := QoSInput{Pools: pools, Limits: model.DefaultLimits(), Overhead: 1,
		Volumes: []*model.Volume{
			qosVolume("a", "std", 1024, "10.99.0.10"),  // 16 MiB/s
			qosVolume("b", "prem", 1024, "10.99.0.11"), // 64
			qosVolume("c", "ext", 2048, "10.99.0.12"),  // 256
			qosVolume("d", "std", 1, "10.99.0.13"),     // 16 KiB/s: the floor, 4
			qosVolume("e", "prem", 1024, ""),           // no endpoint: no class
		}}
	cs := classes(t, QoSTree(in))
	for id, want := range map[string]uint64{"a": 16 * mib, "b": 64 * mib, "c": 256 * mib, "d": 4 * mib} {
		c := cs["projects/p/locations/l/volumes/"+id]
		if c.Ceil != want || c.Rate != want || c.Parent != "projects/p/locations/l" || len(c.Addrs) != 1 {
			t.Errorf("volume %s: %+v, want rate = ceil = %d", id, c, want)
		}
	}
	if _, ok := cs["projects/p/locations/l/volumes/e"]; ok {
		t.Error("a volume without an endpoint has a class")
	}
	if p := cs["projects/p/locations/l"]; p.Rate != 340*mib || p.Ceil != 340*mib {
		t.Errorf("project without a cap: %+v", p)
	}
	// The wire overhead scales every rate.
	in.Overhead = 1.04
	if c := classes(t, QoSTree(in))["projects/p/locations/l/volumes/b"]; c.Ceil != uint64(math.Floor(64*mib*1.04)) {
		t.Errorf("with 4 %% overhead: ceil %d", c.Ceil)
	}
}

// Under a cap smaller than the sum, each volume is guaranteed a share of the cap
// in proportion to its limit and may borrow up to its limit.
func TestQoSTreeProjectCap(t *testing.T) {
	pool := qosPool("m", model.LevelPremium, model.QosManual, 102400)
	a, b := qosVolume("a", "m", 100, "10.99.0.10"), qosVolume("b", "m", 100, "10.99.0.11")
	a.ThroughputMibps, b.ThroughputMibps = 100, 50
	in := QoSInput{Pools: map[string]*model.Pool{pool.Name(): pool}, Limits: model.DefaultLimits(), Overhead: 1,
		Volumes: []*model.Volume{a, b}, Caps: map[string]float64{"projects/p/locations/l": 100}}
	cs := classes(t, QoSTree(in))
	if p := cs["projects/p/locations/l"]; p.Rate != 100*mib || p.Ceil != 100*mib {
		t.Errorf("project: %+v", p)
	}
	ca, cb := cs[a.Name()], cs[b.Name()]
	if ca.Ceil != 100*mib || cb.Ceil != 50*mib {
		t.Errorf("ceilings %d, %d", ca.Ceil, cb.Ceil)
	}
	if ca.Rate+cb.Rate > 100*mib || ca.Rate < 66*mib || cb.Rate < 33*mib {
		t.Errorf("shares %d, %d of a 100 MiB/s cap", ca.Rate, cb.Rate)
	}
	// A cap above the sum leaves each volume its whole limit.
	in.Caps["projects/p/locations/l"] = 1000
	cs = classes(t, QoSTree(in))
	if cs[a.Name()].Rate != 100*mib || cs["projects/p/locations/l"].Ceil != 1000*mib {
		t.Errorf("a large cap: %+v %+v", cs[a.Name()], cs["projects/p/locations/l"])
	}
}

// A Flex pool's volumes share its budget, each guaranteed a part in proportion to
// its capacity, each free to use all of it.
func TestQoSTreeFlexPool(t *testing.T) {
	pool := qosPool("f", model.LevelFlex, model.QosAuto, 10240) // 160 MiB/s
	a, b := qosVolume("a", "f", 1024, "10.99.0.10"), qosVolume("b", "f", 3072, "10.99.0.11")
	in := QoSInput{Pools: map[string]*model.Pool{pool.Name(): pool}, Limits: model.DefaultLimits(), Overhead: 1,
		Volumes: []*model.Volume{a, b}}
	cs := classes(t, QoSTree(in))
	pc := cs[pool.Name()]
	if pc.Ceil != 160*mib || pc.Parent != "projects/p/locations/l" {
		t.Fatalf("pool class %+v", pc)
	}
	ca, cb := cs[a.Name()], cs[b.Name()]
	if ca.Parent != pool.Name() || ca.Ceil != 160*mib || cb.Ceil != 160*mib || ca.Rate != 40*mib || cb.Rate != 120*mib {
		t.Errorf("volumes %+v %+v", ca, cb)
	}
}

// Whatever the mix, the tree validates (HTB's Σ rate ≤ parent rate included) and
// is the same for the same input in any order.
func TestQoSTreeAlwaysValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		pools := map[string]*model.Pool{}
		var vols []*model.Volume
		levels := []model.ServiceLevel{model.LevelStandard, model.LevelPremium, model.LevelExtreme, model.LevelFlex}
		for j := range 1 + r.IntN(4) {
			p := qosPool(fmt.Sprint("p", j), levels[r.IntN(4)], model.QosType(1+r.IntN(2)), 1+r.Int64N(1<<20))
			pools[p.Name()] = p
			for k := range r.IntN(20) {
				v := qosVolume(fmt.Sprintf("v%d-%d", j, k), p.ID, 1+r.Int64N(1<<17), fmt.Sprintf("10.99.%d.%d", j, 10+k))
				v.ThroughputMibps = float64(1 + r.IntN(4500))
				vols = append(vols, v)
			}
		}
		caps := map[string]float64{}
		if r.IntN(2) == 0 {
			caps["projects/p/locations/l"] = float64(1 + r.IntN(10000))
		}
		in := QoSInput{Pools: pools, Volumes: vols, Caps: caps, Limits: model.DefaultLimits(), Overhead: 1.04}
		tr := QoSTree(in)
		if err := tr.Validate(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		r.Shuffle(len(vols), func(a, b int) { vols[a], vols[b] = vols[b], vols[a] })
		if !QoSTree(in).Equal(tr) {
			t.Fatalf("case %d: another order gave another tree", i)
		}
	}
}
