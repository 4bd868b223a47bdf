package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/store"
)

// .snapshot: a volume with snapshotDirectory served over NFS has a snapshot
// directory, exported read-only at /<share>/.snapshot — a small filesystem of the
// backend's listing the volume's mounted snapshots — and each READY snapshot is
// mounted read-only and exported at /<share>/.snapshot/<id>. With Basin's Ganesha
// (patch 0006), LOOKUP of ".snapshot" at the volume's root crosses into the
// directory's export and LOOKUP of <id> in it into the snapshot's, over NFSv3 and
// NFSv4 alike; both are also mountable by those paths. They get the volume's NFS
// versions and clients, with read-write access lowered to read-only.
// docs/architecture.md says why the snapshots are exports of their own.

// readOnly returns clients with read-write access lowered to read-only.
func readOnly(clients []nfs.Client) []nfs.Client {
	out := make([]nfs.Client, 0, len(clients))
	for _, cl := range clients {
		if cl.Access == nfs.AccessRW {
			cl.Access = nfs.AccessRO
		}
		out = append(out, cl)
	}
	return out
}

// snapshotDirExport is the export of v's snapshot directory, given v's export.
func (c *Controller) snapshotDirExport(v *model.Volume, volEx nfs.Export) nfs.Export {
	return nfs.Export{ID: v.SnapshotDirExportID, Path: c.be.SnapshotDirPath(v.Key), Pseudo: volEx.Pseudo + "/" + nfs.SnapshotDirName,
		Protocols: volEx.Protocols, Clients: readOnly(volEx.Clients), NoAttrCache: true}
}

// snapshotExport is snapshot s's export in v's snapshot directory.
// A backend whose volumes NFS serves from the cluster (storage.Attacher)
// serves their snapshots from it too.
func (c *Controller) snapshotExport(ctx context.Context, v *model.Volume, volEx nfs.Export, s *model.Snapshot) (nfs.Export, error) {
	ex := nfs.Export{ID: s.ExportID, Path: c.be.SnapshotMountPath(v.Key, s.ID), Pseudo: volEx.Pseudo + "/" + nfs.SnapshotDirName + "/" + s.ID,
		Protocols: volEx.Protocols, Clients: readOnly(volEx.Clients)}
	if at, ok := c.be.(storage.Attacher); ok {
		a, err := at.SnapshotAttachment(ctx, v.Key, s.ID)
		if err != nil {
			return ex, fmt.Errorf("snapshot %s: attachment: %w", s.ID, err)
		}
		ex.Path, ex.Ceph = a.Path, &nfs.CephFSAL{FS: a.FS, UserID: a.UserID, Secret: a.Secret}
	}
	return ex, nil
}

// syncSnapshotExports brings snapshot exports to what they should be: each of snaps
// (nil = all the volume's snapshots) that include accepts gets an export ID, is
// mounted read-only and exported while the volume is served over NFS with
// snapshotDirectory, its snapshot directory mounted and exported first; every
// other one is unexported, unmounted and gives its ID back, and then the snapshot
// directory of a volume that no longer has one goes too. include nil means "the
// READY snapshots". view (nil = observe now) is what the data plane holds; an
// export it shows as loaded is left alone.
func (c *Controller) syncSnapshotExports(ctx context.Context, v *model.Volume, snaps []*model.Snapshot, include func(*model.Snapshot) bool, view ExportView) error {
	return c.syncSnapshots(ctx, v, snaps, include, view, false)
}

// syncSnapshotExport is syncSnapshotExports for snapshot s alone, in s's own
// operation: it trusts a snapshot directory that holds an export ID to be up, as
// it trusts the volume's export (observing the sandbox to check costs as much as
// the sandbox holds, and the resync repairs what is not).
func (c *Controller) syncSnapshotExport(ctx context.Context, v *model.Volume, s *model.Snapshot, include func(*model.Snapshot) bool) error {
	return c.syncSnapshots(ctx, v, []*model.Snapshot{s}, include, nil, true)
}

func (c *Controller) syncSnapshots(ctx context.Context, v *model.Volume, snaps []*model.Snapshot, include func(*model.Snapshot) bool, view ExportView, trustDir bool) error {
	if c.dp == nil && c.opts.SMB == nil {
		return nil
	}
	if include == nil {
		include = func(s *model.Snapshot) bool { return s.State == model.StateReady }
	}
	if snaps == nil {
		var err error
		if snaps, err = c.snapshotsOf(ctx, v); err != nil {
			return err
		}
	}
	volEx, served := c.exportOf(v)
	dir := c.dp != nil && served && v.SnapshotDirectory
	addr, _ := netip.ParseAddr(v.Endpoint)
	observe := func() (ExportView, error) {
		if view == nil {
			var err error
			view, err = c.dp.View(ctx, v.Network)
			return view, err
		}
		return view, nil
	}
	if dir && !(trustDir && v.SnapshotDirExportID != 0) {
		if err := c.ensureSnapshotDir(ctx, v, volEx, addr, observe); err != nil {
			return err
		}
	}
	var errs []error
	for _, s := range snaps {
		if dir && include(s) {
			if s.ExportID != 0 { // without an ID it cannot be exported yet
				view, err := observe()
				if err != nil {
					return err
				}
				if ex, err := c.snapshotExport(ctx, v, volEx, s); err == nil && view.Exported(addr, ex) {
					continue // converged: no store write, no command
				}
			}
			if err := c.ensureSnapshotExportID(ctx, s); err != nil {
				errs = append(errs, err)
				continue
			}
			// Mounted first, which lists it in the snapshot directory: Ganesha
			// finds its entry there as it loads the export.
			if err := c.be.MountSnapshot(ctx, v.Key, s.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			ex, err := c.snapshotExport(ctx, v, volEx, s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, c.dp.Export(ctx, v.Network, addr, ex))
			continue
		}
		// An SMB share showing previous versions needs the snapshot mounted too
		// (its entry in the share's snapshot directory leads to the mount).
		smbWants := c.opts.SMB != nil && smbShowsSnapshots(v) && include(s)
		if s.ExportID == 0 {
			// Never put up, or already taken down: an ID is held from before the
			// mount until after the unmount.
			switch {
			case smbWants:
				errs = append(errs, c.be.MountSnapshot(ctx, v.Key, s.ID))
			case !include(s) && smbShowsSnapshots(v):
				errs = append(errs, c.be.UnmountSnapshot(ctx, v.Key, s.ID))
			}
			continue
		}
		// Taken down in the order it was put up: export, mount, then its ID, so the
		// ID is free only once nothing uses it.
		if err := c.dp.Unexport(ctx, v.Network, netip.Addr{}, s.ExportID); err != nil {
			errs = append(errs, err)
			continue
		}
		if !smbWants {
			if err := c.be.UnmountSnapshot(ctx, v.Key, s.ID); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		errs = append(errs, c.releaseSnapshotExportID(ctx, s))
	}
	err := errors.Join(errs...)
	if !dir && err == nil {
		return c.removeSnapshotDir(ctx, v)
	}
	return err
}

// takeDownSnapshotExports takes down every snapshot export of v and then its
// snapshot directory, before a revert or a delete.
func (c *Controller) takeDownSnapshotExports(ctx context.Context, v *model.Volume) error {
	if err := c.syncSnapshotExports(ctx, v, nil, none, nil); err != nil {
		return err
	}
	return c.removeSnapshotDir(ctx, v)
}

// ensureSnapshotDir mounts and exports v's snapshot directory, unless the data
// plane shows it exported as it should be.
func (c *Controller) ensureSnapshotDir(ctx context.Context, v *model.Volume, volEx nfs.Export, addr netip.Addr, observe func() (ExportView, error)) error {
	if v.SnapshotDirExportID != 0 {
		view, err := observe()
		if err != nil {
			return err
		}
		if view.Exported(addr, c.snapshotDirExport(v, volEx)) {
			return nil
		}
	}
	id, err := holdExportID(ctx, c.st, store.KindVolume, v.Name(), snapshotDirHolder(v), func(v *model.Volume) *uint64 { return &v.SnapshotDirExportID }, store.PutVolume)
	if err != nil {
		return err
	}
	v.SnapshotDirExportID = id
	if err := c.be.MountSnapshotDir(ctx, v.Key); err != nil {
		return err
	}
	return c.dp.Export(ctx, v.Network, addr, c.snapshotDirExport(v, volEx))
}

// removeSnapshotDir unexports and unmounts v's snapshot directory and gives its
// export ID back, in that order; a volume holding no ID for it has nothing to do.
func (c *Controller) removeSnapshotDir(ctx context.Context, v *model.Volume) error {
	if v.SnapshotDirExportID == 0 {
		return nil
	}
	if c.dp != nil {
		if err := c.dp.Unexport(ctx, v.Network, netip.Addr{}, v.SnapshotDirExportID); err != nil {
			return err
		}
	}
	if err := c.be.UnmountSnapshotDir(ctx, v.Key); err != nil {
		return err
	}
	if err := dropExportID(ctx, c.st, store.KindVolume, v.Name(), snapshotDirHolder(v), v.SnapshotDirExportID,
		func(v *model.Volume) *uint64 { return &v.SnapshotDirExportID }, store.PutVolume); err != nil {
		return err
	}
	v.SnapshotDirExportID = 0
	return nil
}

// snapshotDirHolder names v's snapshot directory in the export ID table.
func snapshotDirHolder(v *model.Volume) string { return v.Name() + "/" + nfs.SnapshotDirName }

func none(*model.Snapshot) bool { return false }
