package api

import (
	"context"
	"github.com/basin-nas/basin/internal/intent"
	"net/http"
	"net/url"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var poolFields = fieldRules{
	mutable: []string{"capacityGib", "description", "labels", "activeDirectory", "allowAutoTiering", "zone", "replicaZone",
		"totalThroughputMibps", "totalIops", "hotTierSizeGib", "enableHotTierAutoResize", "qosType"},
	immutable: []string{"serviceLevel", "network", "kmsConfig", "ldapEnabled", "customPerformanceEnabled", "type", "mode", "scaleType", "psaRange"},
	output: []string{"volumeCapacityGib", "volumeCount", "state", "stateDetails", "createTime", "encryptionType", "globalAccessAllowed",
		"satisfiesPzs", "satisfiesPzi", "availableThroughputMibps", "coldTierSizeUsedGib", "hotTierSizeUsedGib"},
}

func (s *Server) listPools(rq *request, p parent) {
	out, err := s.listPoolsQ(rq.ctx, p, rq.q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

// listPoolsQ lists the storagePools of p with the list query q (pageSize, pageToken,
// filter, orderBy).
func (s *Server) listPoolsQ(ctx context.Context, p parent, q url.Values) (apiv1.ListStoragePoolsResponse, error) {
	lq, err := parseListQuery[apiv1.StoragePool](q, p.name()+"/storagePools", "name")
	if err != nil {
		return apiv1.ListStoragePoolsResponse{}, err
	}
	var out []apiv1.StoragePool
	var next string
	err = s.st.View(ctx, func(tx store.Tx) error {
		if lq.byName() {
			var names []string
			for _, lp := range s.locationsOf(p) {
				n, err := tx.Names(store.KindPool, lp.name())
				if err != nil {
					return err
				}
				names = append(names, n...)
			}
			out, next, err = pageByName(lq, names, func(name string) (apiv1.StoragePool, error) {
				pl, err := store.Get[model.Pool](tx, store.KindPool, name)
				if err != nil {
					return apiv1.StoragePool{}, err
				}
				return s.renderPool(tx, pl)
			})
			return err
		}
		var items []apiv1.StoragePool
		for _, lp := range s.locationsOf(p) {
			pools, err := store.List[model.Pool](tx, store.KindPool, lp.name())
			if err != nil {
				return err
			}
			for _, pl := range pools {
				w, err := s.renderPool(tx, pl)
				if err != nil {
					return err
				}
				items = append(items, w)
			}
		}
		out, next, err = page(lq, items, func(x apiv1.StoragePool) string { return x.Name })
		return err
	})
	if err != nil {
		return apiv1.ListStoragePoolsResponse{}, err
	}
	return apiv1.ListStoragePoolsResponse{StoragePools: out, NextPageToken: next}, nil
}

// locationsOf expands the "-" wildcard into every served location.
func (s *Server) locationsOf(p parent) []parent {
	if p.location != "-" {
		return []parent{p}
	}
	out := make([]parent, 0, len(s.opts.Locations))
	for _, l := range s.opts.Locations {
		out = append(out, parent{project: p.project, location: l})
	}
	return out
}

func (s *Server) getPool(rq *request, p parent, id string) {
	w, err := s.getPoolW(rq.ctx, p, id)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// getPoolW returns the storage pool id of p.
func (s *Server) getPoolW(ctx context.Context, p parent, id string) (apiv1.StoragePool, error) {
	if err := checkPathID("Storage pool", id); err != nil {
		return apiv1.StoragePool{}, err
	}
	var w apiv1.StoragePool
	err := s.st.View(ctx, func(tx store.Tx) error {
		pl, err := store.Get[model.Pool](tx, store.KindPool, p.name()+"/storagePools/"+id)
		if err != nil {
			return err
		}
		w, err = s.renderPool(tx, pl)
		return err
	})
	return w, err
}

func poolFromWire(w *apiv1.StoragePool, pl *model.Pool, fields []string) error {
	for _, f := range fields {
		switch f {
		case "serviceLevel":
			pl.ServiceLevel = model.ServiceLevel(w.ServiceLevel)
		case "capacityGib":
			pl.CapacityGib = int64(w.CapacityGib)
		case "description":
			pl.Desc = w.Description
		case "labels":
			pl.Labels = w.Labels
		case "network":
			pl.Network = w.Network
		case "activeDirectory":
			pl.ActiveDirectory = w.ActiveDirectory
		case "ldapEnabled":
			pl.LdapEnabled = w.LdapEnabled
		case "allowAutoTiering":
			pl.AllowAutoTiering = w.AllowAutoTiering
		case "zone":
			pl.Zone = w.Zone
		case "replicaZone":
			pl.ReplicaZone = w.ReplicaZone
		case "customPerformanceEnabled":
			pl.CustomPerformanceEnabled = w.CustomPerformanceEnabled
		case "totalThroughputMibps":
			pl.TotalThroughputMibps = int64(w.TotalThroughputMibps)
		case "totalIops":
			pl.TotalIops = int64(w.TotalIops)
		case "qosType":
			pl.QosType = model.QosType(w.QosType)
			if pl.QosType == model.QosUnspecified {
				pl.QosType = model.QosAuto
			}
		case "kmsConfig":
			if w.KmsConfig != "" {
				return model.Invalid("kmsConfig", "customer-managed encryption keys are not supported by Basin")
			}
		case "hotTierSizeGib", "enableHotTierAutoResize":
			if w.HotTierSizeGib != 0 || w.EnableHotTierAutoResize != nil {
				return model.Invalid(f, "auto-tiering is not supported by Basin")
			}
		case "type":
			if w.Type != nil && *w.Type == 2 {
				return model.Invalid("type", "UNIFIED pools are not supported by Basin")
			}
		case "mode":
			if w.Mode != nil && *w.Mode == 2 {
				return model.Invalid("mode", "ONTAP mode is not supported by Basin")
			}
		case "scaleType":
			if w.ScaleType == 2 {
				return model.Invalid("scaleType", "SCALE_TYPE_SCALEOUT is not supported by Basin")
			}
		}
	}
	return nil
}

func (s *Server) createPool(rq *request, p parent) {
	id := rq.q.Get("storagePoolId")
	if err := intent.CheckID("storagePoolId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.StoragePool
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.createPoolOp(rq.ctx, p, id, w)
	s.answerOperation(rq, op, err)
}

// createPoolOp records the creation of storage pool id of p from the
// request's w.
func (s *Server) createPoolOp(ctx context.Context, p parent, id string, w apiv1.StoragePool) (*model.Operation, error) {
	pl := &model.Pool{Meta: model.Meta{Project: p.project, Location: p.location, ID: id}, QosType: model.QosAuto}
	fields := append(append([]string{}, poolFields.mutable...), poolFields.immutable...)
	if err := poolFromWire(&w, pl, fields); err != nil {
		return nil, err
	}
	return s.intents().CreatePool(ctx, s.st, intent.PoolCreate{Pool: pl})
}

func (s *Server) updatePool(rq *request, p parent, id string) {
	if err := checkPathID("Storage pool", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.StoragePool
	present, err := s.readBody(rq, &w)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.updatePoolOp(rq.ctx, p, id, w, present, rq.q)
	s.answerOperation(rq, op, err)
}

// updatePoolOp records the update of storage pool id of p: w's fields that
// q's updateMask names, or those present.
func (s *Server) updatePoolOp(ctx context.Context, p parent, id string, w apiv1.StoragePool, present map[string]bool, q url.Values) (*model.Operation, error) {
	if err := checkBodyName(w.Name, p.name()+"/storagePools/"+id); err != nil {
		return nil, err
	}
	// Short names compare with the stored long ones (an unchanged network is no change).
	w.Network = intent.LongNetwork(p.project, w.Network)
	w.ActiveDirectory = intent.LongActiveDirectory(p.project, p.location, w.ActiveDirectory)
	return s.intents().UpdatePool(ctx, s.st, intent.PoolUpdate{Project: p.project, Location: p.location, ID: id,
		Patch: func(tx store.Tx, pl *model.Pool) error {
			cur, err := s.renderPool(tx, pl)
			if err != nil {
				return err
			}
			paths, err := updatePaths(q, poolFields, present, &w, &cur)
			if err != nil {
				return err
			}
			return poolFromWire(&w, pl, paths)
		}})
}

func (s *Server) deletePool(rq *request, p parent, id string) {
	op, err := s.deletePoolOp(rq.ctx, p, id)
	s.answerOperation(rq, op, err)
}

// deletePoolOp records the deletion of storage pool id of p.
func (s *Server) deletePoolOp(ctx context.Context, p parent, id string) (*model.Operation, error) {
	return s.intents().DeletePool(ctx, s.st, intent.PoolDelete{Project: p.project, Location: p.location, ID: id})
}

// switchPool swaps the pool's zone and replicaZone, upstream's switch of the
// active and replica zones, as an update of the pool. In Basin both are the
// names a client gave the pool (a volume's zone is the node it lives on), so
// nothing moves: the operation answers the pool with the two swapped.
func (s *Server) switchPool(rq *request, p parent, id string) {
	op, err := s.switchPoolOp(rq.ctx, p, id)
	s.answerOperation(rq, op, err)
}

// switchPoolOp records the switch of storage pool id of p (switchPool).
func (s *Server) switchPoolOp(ctx context.Context, p parent, id string) (*model.Operation, error) {
	return s.intents().UpdatePool(ctx, s.st, intent.PoolUpdate{Project: p.project, Location: p.location, ID: id,
		Patch: func(_ store.Tx, pl *model.Pool) error {
			if pl.ReplicaZone == "" {
				return model.Errorf(model.ErrFailedPrecondition, "storage pool %s has no replica zone to switch to", id)
			}
			pl.Zone, pl.ReplicaZone = pl.ReplicaZone, pl.Zone
			return nil
		}})
}

// validateDirectoryService checks the pool's Active Directory policy against its
// domain (an operation that completes with Empty or the domain's reason).
// directoryServiceType may be left out; Active Directory is the only kind.
func (s *Server) validateDirectoryService(rq *request, p parent, id string) {
	var body apiv1.ValidateDirectoryServiceRequest
	if _, err := s.readBody(rq, &body); err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.validateDirectoryServiceOp(rq.ctx, p, id, body)
	s.answerOperation(rq, op, err)
}

// validateDirectoryServiceOp records the check of storage pool id of p's
// Active Directory policy (validateDirectoryService).
func (s *Server) validateDirectoryServiceOp(ctx context.Context, p parent, id string, body apiv1.ValidateDirectoryServiceRequest) (*model.Operation, error) {
	switch body.DirectoryServiceType {
	case apiv1.DirectoryServiceType(0), apiv1.DirectoryServiceType(1):
	default:
		return nil, model.Invalid("directoryServiceType", "must be ACTIVE_DIRECTORY, the only directory service Basin supports")
	}
	return s.intents().ValidateDirectory(ctx, s.st, p.project, p.location, id)
}
