package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/store"
)

// Export IDs. Ganesha's Export_Id is 16 bits and 0 is its pseudo root, so every
// export Basin loads holds an ID in 1..nfs.MaxExportID from a table in the store: one
// document per ID in use, naming its holder (a volume or snapshot resource name).
// IDs are handed out next-fit — the first free one after the last handed out,
// wrapping — so a freed ID is reused as late as possible, and released once the
// export is unloaded: a snapshot holds one only while its directory is exported, a
// volume from its first export until it is deleted, its snapshot directory (held
// as "<volume>/.snapshot") only while exported.

type exportIDDoc struct {
	Holder string `json:"holder"`
}

type exportIDCursor struct {
	Last uint64 `json:"last"`
}

func exportIDName(id uint64) string { return strconv.FormatUint(id, 10) }

// holdsExportID reports whether holder holds id.
func holdsExportID(tx store.Tx, holder string, id uint64) (bool, error) {
	if id < 1 || id > nfs.MaxExportID {
		return false, nil
	}
	var d exportIDDoc
	err := tx.Get(store.KindExportID, exportIDName(id), &d)
	if err == nil {
		return d.Holder == holder, nil
	}
	if isNotFound(err) {
		return false, nil
	}
	return false, err
}

// allocExportID returns the ID holder holds, cur, if it does; otherwise it hands
// out a free one.
func allocExportID(tx store.Tx, holder string, cur uint64) (uint64, error) {
	if ok, err := holdsExportID(tx, holder, cur); err != nil || ok {
		return cur, err
	}
	var c exportIDCursor
	if err := tx.Get(store.KindExportIDCursor, "last", &c); err != nil && !isNotFound(err) {
		return 0, err
	}
	for i := uint64(1); i <= nfs.MaxExportID; i++ {
		id := (c.Last+i-1)%nfs.MaxExportID + 1
		var d exportIDDoc
		err := tx.Get(store.KindExportID, exportIDName(id), &d)
		if err == nil {
			continue
		}
		if !isNotFound(err) {
			return 0, err
		}
		if err := tx.Insert(store.KindExportID, exportIDName(id), "", exportIDDoc{Holder: holder}); err != nil {
			return 0, err
		}
		return id, tx.Put(store.KindExportIDCursor, "last", "", exportIDCursor{Last: id})
	}
	return 0, model.Errorf(model.ErrResourceExhausted, "all %d NFS export IDs are in use", nfs.MaxExportID)
}

// releaseExportID frees id if holder holds it.
func releaseExportID(tx store.Tx, holder string, id uint64) error {
	ok, err := holdsExportID(tx, holder, id)
	if err != nil || !ok {
		return err
	}
	return tx.Delete(store.KindExportID, exportIDName(id))
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, model.ErrNotFound) }

// exportIDHolder is a stored resource that can hold an export ID: a volume or a
// snapshot.
type exportIDHolder interface {
	model.Volume | model.Snapshot
}

// holdExportID makes sure the resource kind/name holds an export ID for holder
// (its own name, or the name of what else of it is exported: its snapshot
// directory), allocating and recording one if needed, and returns it. exportID
// points into the record.
func holdExportID[T exportIDHolder](ctx context.Context, st store.Store, kind, name, holder string, exportID func(*T) *uint64, put func(store.Tx, *T) error) (uint64, error) {
	var id uint64
	err := st.Update(ctx, func(tx store.Tx) error {
		cur, err := store.Get[T](tx, kind, name)
		if err != nil {
			return err
		}
		held := exportID(cur)
		if id, err = allocExportID(tx, holder, *held); err != nil || id == *held {
			return err
		}
		*held = id
		return put(tx, cur)
	})
	return id, err
}

// ensureVolumeExportID makes sure v holds an export ID and sets v.ExportID.
func (c *Controller) ensureVolumeExportID(ctx context.Context, v *model.Volume) (err error) {
	v.ExportID, err = holdExportID(ctx, c.st, store.KindVolume, v.Name(), v.Name(), func(v *model.Volume) *uint64 { return &v.ExportID }, store.PutVolume)
	return err
}

// ensureSnapshotExportID makes sure s holds an export ID and sets s.ExportID.
func (c *Controller) ensureSnapshotExportID(ctx context.Context, s *model.Snapshot) (err error) {
	s.ExportID, err = holdExportID(ctx, c.st, store.KindSnapshot, s.Name(), s.Name(), func(s *model.Snapshot) *uint64 { return &s.ExportID }, store.PutSnapshot)
	return err
}

// dropExportID frees the export ID id that holder holds and clears it in the
// record kind/name (which may be gone), once the export is unloaded.
func dropExportID[T exportIDHolder](ctx context.Context, st store.Store, kind, name, holder string, id uint64, exportID func(*T) *uint64, put func(store.Tx, *T) error) error {
	err := st.Update(ctx, func(tx store.Tx) error {
		if err := releaseExportID(tx, holder, id); err != nil {
			return err
		}
		cur, err := store.Get[T](tx, kind, name)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		*exportID(cur) = 0
		return put(tx, cur)
	})
	if err != nil {
		return fmt.Errorf("release export id %d of %s: %w", id, holder, err)
	}
	return nil
}

// releaseSnapshotExportID frees a snapshot's export ID once its export is unloaded.
func (c *Controller) releaseSnapshotExportID(ctx context.Context, s *model.Snapshot) error {
	if s.ExportID == 0 {
		return nil
	}
	if err := dropExportID(ctx, c.st, store.KindSnapshot, s.Name(), s.Name(), s.ExportID, func(s *model.Snapshot) *uint64 { return &s.ExportID }, store.PutSnapshot); err != nil {
		return err
	}
	s.ExportID = 0
	return nil
}
