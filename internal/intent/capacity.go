package intent

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

const gib = int64(1) << 30

// reads are what a write's checks need from the storage backend (the store's
// space, a volume's usage), read outside the write transaction, never inside
// it: on PostgreSQL every node's writes wait while one runs. A check that needs
// a value not read yet fails with needRead; withReads reads it and runs the
// write again, so a write that needs none reads none.
type reads struct {
	space *storeSpace
	usage *usageRead
}

type storeSpace struct{ size, free int64 }

type usageRead struct {
	key  string
	used int64
}

// needRead: the write needs the store's space (key "") or volume key's usage.
type needRead struct{ key string }

func (e *needRead) Error() string { return "a storage read is needed first: " + e.key }

func (r *reads) storeSpace() (storeSpace, error) {
	if r.space == nil {
		return storeSpace{}, &needRead{}
	}
	return *r.space, nil
}

func (r *reads) usedBytes(key string) (int64, error) {
	if r.usage == nil || r.usage.key != key {
		return 0, &needRead{key: key}
	}
	return r.usage.used, nil
}

// withReads runs write until it no longer asks for a read (at most one of each
// kind), reading what it asks for in between, outside any transaction. Only
// writes that read their target afresh in each transaction may run again (the
// updates); a create, whose closure fills in the caller's resource (its
// endpoint), reads the store's space first (spaceFirst) and runs once.
func (s *Service) withReads(ctx context.Context, spaceFirst bool, write func(r *reads) (*model.Operation, error)) (*model.Operation, error) {
	r := &reads{}
	readSpace := func() error {
		size, free, err := s.opts.Capacity.StoreSpace(ctx)
		if err != nil {
			return fmt.Errorf("read store space: %w", err)
		}
		r.space = &storeSpace{size: size, free: free}
		return nil
	}
	if spaceFirst && s.opts.Capacity != nil {
		if err := readSpace(); err != nil {
			return nil, err
		}
	}
	for range 3 {
		op, err := write(r)
		var need *needRead
		if !errors.As(err, &need) {
			return op, err
		}
		if spaceFirst {
			return nil, fmt.Errorf("intent: a create asked for a storage read: %w", err)
		}
		if need.key == "" {
			if err := readSpace(); err != nil {
				return nil, err
			}
			continue
		}
		used, err := s.opts.Capacity.VolumeUsedBytes(ctx, need.key)
		if err != nil {
			return nil, fmt.Errorf("read usage of volume %s: %w", need.key, err)
		}
		r.usage = &usageRead{key: need.key, used: used}
	}
	return nil, errors.New("intent: storage reads did not settle")
}

// checkPoolCommit refuses a pool create or growth (to pl.CapacityGib, from prevGib;
// 0 for a create) that would take Σ capacity of every pool on this node, in every
// project and location, past OvercommitRatio × the store's size. The answer gives
// the node's size and ratio, never what other projects hold; the log has the sums.
func (s *Service) checkPoolCommit(tx store.Tx, r *reads, pl *model.Pool, prevGib int64) error {
	if s.opts.Capacity == nil || pl.CapacityGib <= prevGib {
		return nil
	}
	// What pools may commit at a ratio of 1: the store's size less its own
	// overhead and what it keeps (its metadata, its reserve).
	sp, err := r.storeSpace()
	if err != nil {
		return err
	}
	size := sp.size
	if s.opts.Cluster {
		if size, err = s.clusterStoreBytes(tx, size); err != nil {
			return err
		}
	}
	others, err := store.PoolsCapacityGib(tx)
	if err != nil {
		return err
	}
	if stored, err := store.Get[model.Pool](tx, store.KindPool, pl.Name()); err == nil {
		others -= stored.CapacityGib
	}
	limitGib := int64(math.Floor(s.opts.OvercommitRatio * float64(size) / float64(gib)))
	if others+pl.CapacityGib > limitGib {
		s.log.Info("pool capacity refused: node store overcommitted", "pool", pl.Name(), "capacity_gib", pl.CapacityGib,
			"other_pools_gib", others, "limit_gib", limitGib, "store_bytes", size, "overcommit_ratio", s.opts.OvercommitRatio)
		return model.Errorf(model.ErrFailedPrecondition, "capacityGib: this Basin node cannot commit %d GiB more to storage pools "+
			"(its store holds %s for volumes and pools may commit %g times that in all); ask the administrator", pl.CapacityGib-prevGib, gibString(size), s.opts.OvercommitRatio)
	}
	return nil
}

// allocation is what a volume of capacityGib takes from the store when it is
// made (all of it, unless the backend provisions thin).
func (s *Service) allocation(capacityGib int64) int64 {
	if a, ok := s.opts.Capacity.(Allocator); ok {
		return a.Allocation(capacityGib * gib)
	}
	return capacityGib * gib
}

// checkStoreRoom refuses a volume create, clone or growth (from prevGib; 0 for a
// create) that the store cannot give the space it takes now: the backend keeps
// space promised to other volumes, its reserve and clones' debt, and refuses too,
// so this check only spares the caller an operation that would fail. A snapshot
// needs none: it lives in its volume's own space.
//
// The store read is this node's; a volume on another node (a cluster) is checked
// against what that node said its store had free at its last heartbeat, and its
// own backend refuses what it cannot give.
func (s *Service) checkStoreRoom(tx store.Tx, r *reads, node string, capacityGib, prevGib int64) error {
	if s.opts.Capacity == nil {
		return nil
	}
	need := s.allocation(capacityGib)
	if prevGib > 0 {
		need -= s.allocation(prevGib)
	}
	if need <= 0 {
		return nil
	}
	var free int64
	if s.remote(node) {
		n, err := store.Get[model.Node](tx, store.KindNode, node)
		if err != nil || n.StoreBytes == 0 {
			return nil // not said yet: the node's backend decides
		}
		free = n.FreeBytes
	} else {
		sp, err := r.storeSpace()
		if err != nil {
			return err
		}
		free = sp.free
	}
	if need > free {
		s.log.Warn("store has no room for a volume", "need_bytes", need, "free_bytes", free)
		return model.Errorf(model.ErrFailedPrecondition, "capacityGib: this Basin node's store has %s free for volumes, less than the %s this needs; "+
			"delete volumes or ask the administrator", gibString(free), gibString(need))
	}
	return nil
}

// checkShrink refuses to shrink a volume below what it and its snapshots use now, as
// the store reports it (v.UsedBytes is only the last observation).
func (s *Service) checkShrink(r *reads, v *model.Volume) error {
	used := v.UsedBytes
	if s.opts.Capacity != nil && !s.remote(v.Node) {
		var err error
		if used, err = r.usedBytes(v.Key); err != nil {
			return err
		}
	}
	if v.CapacityGib*gib < used {
		return model.Errorf(model.ErrFailedPrecondition, "capacityGib: the volume and its snapshots use %d GiB; it cannot shrink to %d GiB", ceilGiB(used), v.CapacityGib)
	}
	return nil
}

func ceilGiB(b int64) int64 {
	if b <= 0 {
		return 0
	}
	return (b + gib - 1) >> 30
}

func gibString(b int64) string {
	if b%gib == 0 {
		return fmt.Sprintf("%d GiB", b/gib)
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/float64(gib))
}
