package intent

import (
	"context"
	"fmt"
	"math"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

const gib = int64(1) << 30

// checkPoolCommit refuses a pool create or growth (to pl.CapacityGib, from prevGib;
// 0 for a create) that would take Σ capacity of every pool on this node, in every
// project and location, past OvercommitRatio × the store's size. The answer gives
// the node's size and ratio, never what other projects hold; the log has the sums.
func (s *Service) checkPoolCommit(ctx context.Context, tx store.Tx, pl *model.Pool, prevGib int64) error {
	if s.opts.Capacity == nil || pl.CapacityGib <= prevGib {
		return nil
	}
	size, _, err := s.opts.Capacity.StoreSpace(ctx)
	if err != nil {
		return fmt.Errorf("read store space: %w", err)
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
			"(its store holds %d GiB and pools may commit %g times that in all); ask the administrator", pl.CapacityGib-prevGib, size/gib, s.opts.OvercommitRatio)
	}
	return nil
}

// checkStoreReserve refuses what takes store space (a volume create or growth, a
// clone, a snapshot) while the store has less than the reserve free.
func (s *Service) checkStoreReserve(ctx context.Context) error {
	if s.opts.Capacity == nil || s.opts.StoreReserveBytes <= 0 {
		return nil
	}
	_, free, err := s.opts.Capacity.StoreSpace(ctx)
	if err != nil {
		return fmt.Errorf("read store space: %w", err)
	}
	if free < s.opts.StoreReserveBytes {
		s.log.Warn("store below its free-space reserve", "free_bytes", free, "reserve_bytes", s.opts.StoreReserveBytes)
		return model.Errorf(model.ErrFailedPrecondition, "this Basin node's store has less than its %s reserve free: no volume can be created or grown, "+
			"and no snapshot taken, until space is freed (delete snapshots or volumes, or ask the administrator)", gibString(s.opts.StoreReserveBytes))
	}
	return nil
}

// checkShrink refuses to shrink a volume below what it and its snapshots use now, as
// the store reports it (v.UsedBytes is only the last observation).
func (s *Service) checkShrink(ctx context.Context, v *model.Volume) error {
	used := v.UsedBytes
	if s.opts.Capacity != nil {
		var err error
		if used, err = s.opts.Capacity.VolumeUsedBytes(ctx, v.Key); err != nil {
			return fmt.Errorf("read usage of volume %s: %w", v.Name(), err)
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
