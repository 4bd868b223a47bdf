package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var volumeFields = fieldRules{
	mutable: []string{"storagePool", "capacityGib", "exportPolicy", "smbSettings", "unixPermissions", "labels", "description",
		"snapshotPolicy", "snapReserve", "snapshotDirectory", "restrictedActions", "throughputMibps", "backupConfig", "tieringPolicy"},
	immutable: []string{"shareName", "protocols", "securityStyle", "kerberosEnabled", "restoreParameters", "largeCapacity",
		"multipleEndpoints", "kmsConfig", "hybridReplicationParameters", "cacheParameters", "blockDevices", "largeCapacityConfig"},
	output: []string{"state", "stateDetails", "createTime", "psaRange", "network", "serviceLevel", "mountOptions", "usedGib",
		"ldapEnabled", "activeDirectory", "encryptionType", "hasReplication", "replicaZone", "zone", "coldTierSizeGib",
		"hotTierSizeUsedGib", "cloneDetails"},
}

func (s *Server) listVolumes(rq *request, p parent) {
	out, err := s.listVolumesQ(rq.ctx, p, rq.q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

// listVolumesQ lists the volumes of p with the list query q (pageSize, pageToken,
// filter, orderBy).
func (s *Server) listVolumesQ(ctx context.Context, p parent, q url.Values) (apiv1.ListVolumesResponse, error) {
	lq, err := parseListQuery[apiv1.Volume](q, p.name()+"/volumes", "name")
	if err != nil {
		return apiv1.ListVolumesResponse{}, err
	}
	var out []apiv1.Volume
	var next string
	err = s.st.View(ctx, func(tx store.Tx) error {
		if lq.byName() {
			var names []string
			for _, lp := range s.locationsOf(p) {
				n, err := tx.Names(store.KindVolume, lp.name())
				if err != nil {
					return err
				}
				names = append(names, n...)
			}
			pools := map[string]*model.Pool{}
			out, next, err = pageByName(lq, names, func(name string) (apiv1.Volume, error) {
				v, err := store.Get[model.Volume](tx, store.KindVolume, name)
				if err != nil {
					return apiv1.Volume{}, err
				}
				pl, seen := pools[v.PoolName()]
				if !seen {
					pl, err = store.Get[model.Pool](tx, store.KindPool, v.PoolName())
					if err != nil && !errors.Is(err, model.ErrNotFound) {
						return apiv1.Volume{}, err
					}
					pools[v.PoolName()] = pl
				}
				return s.volumeToWire(v, pl), nil
			})
			return err
		}
		var items []apiv1.Volume
		for _, lp := range s.locationsOf(p) {
			vols, err := store.List[model.Volume](tx, store.KindVolume, lp.name())
			if err != nil {
				return err
			}
			pools, err := store.List[model.Pool](tx, store.KindPool, lp.name())
			if err != nil {
				return err
			}
			byName := map[string]*model.Pool{}
			for _, pl := range pools {
				byName[pl.Name()] = pl
			}
			for _, v := range vols {
				items = append(items, s.volumeToWire(v, byName[v.PoolName()]))
			}
		}
		out, next, err = page(lq, items, func(x apiv1.Volume) string { return x.Name })
		return err
	})
	if err != nil {
		return apiv1.ListVolumesResponse{}, err
	}
	return apiv1.ListVolumesResponse{Volumes: out, NextPageToken: next}, nil
}

func (s *Server) getVolume(rq *request, p parent, id string) {
	w, err := s.getVolumeW(rq.ctx, p, id)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// getVolumeW returns the volume id of p.
func (s *Server) getVolumeW(ctx context.Context, p parent, id string) (apiv1.Volume, error) {
	if err := checkPathID("Volume", id); err != nil {
		return apiv1.Volume{}, err
	}
	var w apiv1.Volume
	err := s.st.View(ctx, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, p.name()+"/volumes/"+id)
		if err != nil {
			return err
		}
		w, err = s.renderVolume(tx, v)
		return err
	})
	return w, err
}

// volumeFromWire copies the named fields of a request body onto v, rejecting the
// features Basin does not offer.
func volumeFromWire(w *apiv1.Volume, v *model.Volume, fields []string) error {
	for _, f := range fields {
		switch f {
		case "shareName":
			v.ShareName = w.ShareName
		case "storagePool":
			v.StoragePool = w.StoragePool
		case "capacityGib":
			v.CapacityGib = int64(w.CapacityGib)
		case "exportPolicy":
			v.HasExportPolicy = w.ExportPolicy != nil
			v.ExportRules = nil
			if w.ExportPolicy != nil {
				v.ExportRules = exportRulesFromWire(w.ExportPolicy.Rules)
			}
		case "protocols":
			v.Protocols = nil
			for _, p := range w.Protocols {
				v.Protocols = append(v.Protocols, model.Protocol(p))
			}
		case "smbSettings":
			v.SMBSettings = nil
			for _, x := range w.SmbSettings {
				v.SMBSettings = append(v.SMBSettings, int32(x))
			}
		case "unixPermissions":
			v.UnixPermissions = w.UnixPermissions
		case "labels":
			v.Labels = w.Labels
		case "description":
			v.Desc = w.Description
		case "snapshotPolicy":
			v.SnapshotPolicy = snapshotPolicyFromWire(w.SnapshotPolicy)
		case "snapReserve":
			v.SnapReserve = float64(w.SnapReserve)
		case "snapshotDirectory":
			v.SnapshotDirectory = w.SnapshotDirectory
		case "securityStyle":
			v.SecurityStyle = int32(w.SecurityStyle)
		case "kerberosEnabled":
			v.KerberosEnabled = w.KerberosEnabled
		case "restrictedActions":
			v.RestrictedActions = nil
			for _, x := range w.RestrictedActions {
				v.RestrictedActions = append(v.RestrictedActions, int32(x))
			}
		case "throughputMibps":
			v.ThroughputMibps = float64(w.ThroughputMibps)
		case "largeCapacity", "multipleEndpoints":
			if w.LargeCapacity || w.MultipleEndpoints {
				return model.Invalid(f, "large-capacity volumes are not supported by Basin")
			}
		case "kmsConfig":
			if w.KmsConfig != "" {
				return model.Invalid(f, "customer-managed encryption keys are not supported by Basin")
			}
		case "backupConfig", "tieringPolicy", "hybridReplicationParameters", "cacheParameters", "blockDevices", "largeCapacityConfig":
			raw := map[string]json.RawMessage{"backupConfig": w.BackupConfig, "tieringPolicy": w.TieringPolicy,
				"hybridReplicationParameters": w.HybridReplicationParameters, "cacheParameters": w.CacheParameters,
				"blockDevices": w.BlockDevices, "largeCapacityConfig": w.LargeCapacityConfig}[f]
			if len(raw) > 0 && string(raw) != "null" {
				return model.Invalid(f, "is unsupported by Basin")
			}
		}
	}
	return nil
}

func (s *Server) createVolume(rq *request, p parent) {
	id := rq.q.Get("volumeId")
	if err := intent.CheckID("volumeId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Volume
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.createVolumeOp(rq.ctx, p, id, w)
	s.answerOperation(rq, op, err)
}

// createVolumeOp records the creation of volume id of p from the request's w
// (with restoreParameters, a clone of a snapshot).
func (s *Server) createVolumeOp(ctx context.Context, p parent, id string, w apiv1.Volume) (*model.Operation, error) {
	v := &model.Volume{Meta: model.Meta{Project: p.project, Location: p.location, ID: id}}
	fields := append(append([]string{}, volumeFields.mutable...), volumeFields.immutable...)
	if err := volumeFromWire(&w, v, fields); err != nil {
		return nil, err
	}
	req := intent.VolumeCreate{Volume: v}
	if rp := w.RestoreParameters; rp != nil {
		req.Restore = &intent.RestoreSource{Snapshot: rp.SourceSnapshot, Backup: rp.SourceBackup}
	}
	return s.intents().CreateVolume(ctx, s.st, req)
}

func (s *Server) updateVolume(rq *request, p parent, id string) {
	if err := checkPathID("Volume", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Volume
	present, err := s.readBody(rq, &w)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.updateVolumeOp(rq.ctx, p, id, w, present, rq.q)
	s.answerOperation(rq, op, err)
}

// updateVolumeOp records the update of volume id of p: w's fields that q's
// updateMask names, or without one those present (updatePaths).
func (s *Server) updateVolumeOp(ctx context.Context, p parent, id string, w apiv1.Volume, present map[string]bool, q url.Values) (*model.Operation, error) {
	if err := checkBodyName(w.Name, p.name()+"/volumes/"+id); err != nil {
		return nil, err
	}
	return s.intents().UpdateVolume(ctx, s.st, intent.VolumeUpdate{Project: p.project, Location: p.location, ID: id,
		Patch: func(tx store.Tx, v *model.Volume) error {
			cur, err := s.renderVolume(tx, v)
			if err != nil {
				return err
			}
			paths, err := updatePaths(q, volumeFields, present, &w, &cur)
			if err != nil {
				return err
			}
			return volumeFromWire(&w, v, paths)
		}})
}

func (s *Server) deleteVolume(rq *request, p parent, id string) {
	if err := checkPathID("Volume", id); err != nil {
		s.writeError(rq, err)
		return
	}
	force := false
	if f := rq.q.Get("force"); f != "" {
		var err error
		if force, err = strconv.ParseBool(f); err != nil {
			s.writeError(rq, model.Invalid("force", "must be true or false"))
			return
		}
	}
	op, err := s.deleteVolumeOp(rq.ctx, p, id, force)
	s.answerOperation(rq, op, err)
}

// deleteVolumeOp records the deletion of volume id of p (force: with its
// snapshots).
func (s *Server) deleteVolumeOp(ctx context.Context, p parent, id string, force bool) (*model.Operation, error) {
	return s.intents().DeleteVolume(ctx, s.st, intent.VolumeDelete{Project: p.project, Location: p.location, ID: id, Force: force})
}

func (s *Server) revertVolume(rq *request, p parent, id string) {
	if err := checkPathID("Volume", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var body apiv1.RevertVolumeRequest
	if _, err := s.readBody(rq, &body); err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.revertVolumeOp(rq.ctx, p, id, body.SnapshotID)
	s.answerOperation(rq, op, err)
}

// revertVolumeOp records the revert of volume id of p to its snapshot snapshotID.
func (s *Server) revertVolumeOp(ctx context.Context, p parent, id, snapshotID string) (*model.Operation, error) {
	return s.intents().RevertVolume(ctx, s.st, intent.VolumeRevert{Project: p.project, Location: p.location, ID: id, SnapshotID: snapshotID})
}
