package controller

import (
	"context"
	"errors"
	"net/netip"
	"slices"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
)

// snapshotExport is a snapshot's read-only export at /<share>/.snapshot/<id>: the
// volume's NFSv3 clients, with read-write access lowered to read-only. It is NFSv3
// only: for v4, Ganesha would need a junction at .snapshot inside the volume's own
// export, which its VFS FSAL refuses to cross into (NFS4ERR_XDEV), and it rejects the
// export. ok is false when the volume has no NFSv3 access to offer.
func (c *Controller) snapshotExport(v *model.Volume, volEx nfs.Export, s *model.Snapshot) (ex nfs.Export, ok bool) {
	if !slices.Contains(volEx.Protocols, 3) {
		return ex, false
	}
	ex = nfs.Export{ID: s.ExportID, Path: c.be.SnapshotMountPath(v.Key, s.ID),
		Pseudo: volEx.Pseudo + "/.snapshot/" + s.ID, Protocols: []int{3}}
	for _, cl := range volEx.Clients {
		if !slices.Contains(cl.Protocols, 3) {
			continue
		}
		cl.Protocols = []int{3}
		if cl.Access == nfs.AccessRW {
			cl.Access = nfs.AccessRO
		}
		ex.Clients = append(ex.Clients, cl)
	}
	return ex, true
}

// syncSnapshotExports brings snapshot exports to what they should be: each of snaps
// (nil = all the volume's snapshots) that include accepts gets an export ID, is
// mounted read-only and exported while the volume is served over NFS with
// snapshotDirectory; every other one is unexported, unmounted and gives its ID back.
// include nil means "the READY snapshots". view (nil = observe now) is what the
// data plane holds; an export it shows as loaded is left alone.
func (c *Controller) syncSnapshotExports(ctx context.Context, v *model.Volume, snaps []*model.Snapshot, include func(*model.Snapshot) bool, view ExportView) error {
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
	addr, _ := netip.ParseAddr(v.Endpoint)
	var errs []error
	for _, s := range snaps {
		if _, v3 := c.snapshotExport(v, volEx, s); c.dp != nil && served && v3 && v.SnapshotDirectory && include(s) {
			if s.ExportID != 0 { // without an ID it cannot be exported yet
				if view == nil {
					var err error
					if view, err = c.dp.View(ctx, v.Network); err != nil {
						return err
					}
				}
				if ex, _ := c.snapshotExport(v, volEx, s); view.Exported(addr, ex) {
					continue // converged: no store write, no command
				}
			}
			if err := c.ensureSnapshotExportID(ctx, s); err != nil {
				errs = append(errs, err)
				continue
			}
			ex, _ := c.snapshotExport(v, volEx, s)
			if err := c.be.MountSnapshot(ctx, v.Key, s.ID); err != nil {
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
	return errors.Join(errs...)
}

func none(*model.Snapshot) bool { return false }
