package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"

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

var (
	networkRE = regexp.MustCompile(`^projects/([^/]+)/global/networks/([A-Za-z0-9][A-Za-z0-9._-]{0,62})$`)
	adRefRE   = regexp.MustCompile(`^projects/([^/]+)/locations/([^/]+)/activeDirectories/([^/]+)$`)
)

func (s *Server) listPools(rq *request, p parent) {
	lq, err := parseListQuery[apiv1.StoragePool](rq.q, p.name()+"/storagePools", "name")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var items []apiv1.StoragePool
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
		for _, lp := range s.locationsOf(p) {
			pools, err := store.List[model.Pool](tx, store.KindPool, lp.name())
			if err != nil {
				return err
			}
			vols, err := store.List[model.Volume](tx, store.KindVolume, lp.name())
			if err != nil {
				return err
			}
			stats := statsByPool(vols)
			for _, pl := range pools {
				items = append(items, s.poolToWire(pl, stats[pl.Name()]))
			}
		}
		return nil
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	out, next, err := page(lq, items, func(x apiv1.StoragePool) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListStoragePoolsResponse{StoragePools: out, NextPageToken: next})
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
	if err := checkPathID("Storage pool", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.StoragePool
	err := s.st.View(rq.ctx, func(tx store.Tx) error {
		pl, err := store.Get[model.Pool](tx, store.KindPool, p.name()+"/storagePools/"+id)
		if err != nil {
			return err
		}
		w, err = s.renderPool(tx, pl)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// validatePoolSpec checks the fields a pool create or update sets. prev is the pool
// before an update (nil on create): references it already held were checked when
// they were set and are not checked again, so an update of other fields never fails
// on them.
func (s *Server) validatePoolSpec(tx store.Tx, p parent, pl, prev *model.Pool) error {
	lim := s.opts.Limits
	if pl.ServiceLevel == model.LevelUnspecified {
		return model.Invalid("serviceLevel", "is required (PREMIUM, EXTREME, STANDARD or FLEX)")
	}
	if pl.CapacityGib <= 0 {
		return model.Invalid("capacityGib", "is required and must be positive")
	}
	if pl.CapacityGib < lim.MinPoolGib || pl.CapacityGib > lim.MaxPoolGib {
		return model.Invalid("capacityGib", "%d GiB is outside the allowed range %d–%d GiB", pl.CapacityGib, lim.MinPoolGib, lim.MaxPoolGib)
	}
	if prev == nil || prev.Network != pl.Network {
		if err := s.checkNetworkRef(p, pl.Network); err != nil {
			return err
		}
	} else if _, ok := s.network(model.NetworkName(pl.Network)); !ok {
		return s.unconfiguredNetwork(pl.Network)
	}
	if pl.ActiveDirectory != "" && (prev == nil || prev.ActiveDirectory != pl.ActiveDirectory) {
		if err := checkADRef(tx, p, pl.ActiveDirectory); err != nil {
			return err
		}
	}
	if pl.CustomPerformanceEnabled && pl.ServiceLevel != model.LevelFlex {
		return model.Invalid("customPerformanceEnabled", "is only available for FLEX pools")
	}
	if pl.CustomPerformanceEnabled {
		if pl.TotalThroughputMibps < lim.FlexCustomMinThrough || pl.TotalThroughputMibps > lim.FlexCustomMaxThrough {
			return model.Invalid("totalThroughputMibps", "must be between %d and %d MiB/s for custom performance", lim.FlexCustomMinThrough, lim.FlexCustomMaxThrough)
		}
		if pl.TotalIops == 0 {
			pl.TotalIops = 1024 + 16*(pl.TotalThroughputMibps-64)
		}
		if pl.TotalIops < 0 || pl.TotalIops > 160000 {
			return model.Invalid("totalIops", "must be at most 160000")
		}
	} else if pl.TotalThroughputMibps != 0 || pl.TotalIops != 0 {
		return model.Invalid("totalThroughputMibps", "can only be set when customPerformanceEnabled is true")
	}
	if pl.AllowAutoTiering {
		return model.Invalid("allowAutoTiering", "auto-tiering is not supported by Basin")
	}
	return checkMeta(&pl.Meta)
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
	if err := checkID("storagePoolId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.StoragePool
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	pl := &model.Pool{Meta: model.Meta{Project: p.project, Location: p.location, ID: id, CreateTime: s.now().UTC(), State: model.StateCreating},
		QosType: model.QosAuto}
	fields := append(append([]string{}, poolFields.mutable...), poolFields.immutable...)
	if err := poolFromWire(&w, pl, fields); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpPoolCreate, pl.Name())
	s.startOperation(rq, op, func(tx store.Tx) error {
		if err := s.validatePoolSpec(tx, p, pl, nil); err != nil {
			return err
		}
		if err := s.checkPoolCommit(rq.ctx, tx, pl, 0); err != nil {
			return err
		}
		return tx.Insert(store.KindPool, pl.Name(), p.name(), pl)
	})
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
	name := p.name() + "/storagePools/" + id
	if err := checkBodyName(w.Name, name); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpPoolUpdate, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		pl, err := store.Get[model.Pool](tx, store.KindPool, name)
		if err != nil {
			return err
		}
		if pl.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "storage pool %s is %s; wait for its operation to finish", id, pl.State)
		}
		cur, err := s.renderPool(tx, pl)
		if err != nil {
			return err
		}
		paths, err := updatePaths(rq.q, poolFields, present, &w, &cur)
		if err != nil {
			return err
		}
		op.Prev, _ = json.Marshal(pl)
		prev := *pl
		if err := poolFromWire(&w, pl, paths); err != nil {
			return err
		}
		if err := s.validatePoolSpec(tx, p, pl, &prev); err != nil {
			return err
		}
		if pl.QosType != prev.QosType {
			if err := s.switchQosType(tx, pl); err != nil {
				return err
			}
		}
		if err := s.checkPoolFits(tx, pl); err != nil {
			return err
		}
		if err := s.checkPoolCommit(rq.ctx, tx, pl, prev.CapacityGib); err != nil {
			return err
		}
		pl.State = model.StateUpdating
		return store.PutPool(tx, pl)
	})
}

// switchQosType moves a pool's volumes to its new QoS type: to MANUAL, each volume
// keeps the throughput it had automatically (capacity × rate, which fits the budget);
// to AUTO, assignments are dropped and throughput follows capacity again.
func (s *Server) switchQosType(tx store.Tx, pl *model.Pool) error {
	vols, err := store.List[model.Volume](tx, store.KindVolume, model.LocationName(pl.Project, pl.Location))
	if err != nil {
		return err
	}
	auto := *pl
	auto.QosType = model.QosAuto
	for _, v := range vols {
		if v.PoolName() != pl.Name() {
			continue
		}
		if v.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s; wait for its operation before changing qosType", v.ID, v.State)
		}
		v.ThroughputMibps = 0
		if pl.QosType == model.QosManual {
			v.ThroughputMibps = roundMibps(model.VolumeThroughputMibps(v, &auto, s.opts.Limits))
		}
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
	}
	return nil
}

// checkPoolFits refuses a pool change that leaves its volumes without room: capacity
// below Σ volume capacity, or a manual-QoS budget below Σ assigned throughput.
func (s *Server) checkPoolFits(tx store.Tx, pl *model.Pool) error {
	vols, err := store.List[model.Volume](tx, store.KindVolume, model.LocationName(pl.Project, pl.Location))
	if err != nil {
		return err
	}
	st := statsByPool(vols)[pl.Name()]
	if st == nil {
		return nil
	}
	if pl.CapacityGib < st.capacityGib {
		return model.Errorf(model.ErrFailedPrecondition, "capacityGib: %d GiB is less than the %d GiB its volumes use", pl.CapacityGib, st.capacityGib)
	}
	if pl.QosType == model.QosManual {
		var sum float64
		for _, v := range vols {
			if v.PoolName() == pl.Name() {
				sum += v.ThroughputMibps
			}
		}
		if budget := model.PoolBudgetMibps(pl, s.opts.Limits); sum > budget+1e-9 {
			return model.Errorf(model.ErrFailedPrecondition, "the pool's throughput budget %.2f MiB/s is less than the %.2f MiB/s assigned to its volumes", budget, sum)
		}
	}
	return nil
}

func (s *Server) deletePool(rq *request, p parent, id string) {
	if err := checkPathID("Storage pool", id); err != nil {
		s.writeError(rq, err)
		return
	}
	name := p.name() + "/storagePools/" + id
	op := s.newOperation(p, model.OpPoolDelete, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		pl, err := store.Get[model.Pool](tx, store.KindPool, name)
		if err != nil {
			return err
		}
		if pl.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "storage pool %s is %s; wait for its operation to finish", id, pl.State)
		}
		vols, err := store.List[model.Volume](tx, store.KindVolume, p.name())
		if err != nil {
			return err
		}
		if st := statsByPool(vols)[name]; st != nil && st.count > 0 {
			return model.Errorf(model.ErrFailedPrecondition, "storage pool %s still has %d volume(s); delete them first", id, st.count)
		}
		pl.State = model.StateDeleting
		return store.PutPool(tx, pl)
	})
}

var labelKeyRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
var labelValRE = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)

// checkMeta validates labels and description, common to every resource.
func checkMeta(m *model.Meta) error {
	if len(m.Labels) > 64 {
		return model.Invalid("labels", "at most 64 labels are allowed")
	}
	for k, v := range m.Labels {
		if !labelKeyRE.MatchString(k) {
			return model.Invalid("labels", "key %q must start with a lowercase letter and hold at most 63 lowercase letters, digits, '_' or '-'", k)
		}
		if !labelValRE.MatchString(v) {
			return model.Invalid("labels", "value %q of %q may hold at most 63 lowercase letters, digits, '_' or '-'", v, k)
		}
	}
	if len(m.Desc) > 2048 {
		return model.Invalid("description", "must be at most 2048 characters")
	}
	return nil
}

// checkNetworkRef checks a pool's network: projects/{p}/global/networks/{n} where p is
// the caller's project and n a network given to basin serve. Networks belong to the
// node and every project sees each of them under its own project name, so another
// project's name is refused before anything is looked up: the answer cannot depend
// on anything outside the caller's project.
func (s *Server) checkNetworkRef(p parent, ref string) error {
	if ref == "" {
		return model.Invalid("network", "is required, as projects/%s/global/networks/{network}", p.project)
	}
	m := networkRE.FindStringSubmatch(ref)
	if m == nil || m[1] != p.project {
		return model.Invalid("network", "must be projects/%s/global/networks/{network}, naming a network of project %s", p.project, p.project)
	}
	if _, ok := s.network(m[2]); !ok {
		return s.unconfiguredNetwork(ref)
	}
	return nil
}

func (s *Server) unconfiguredNetwork(ref string) error {
	var names []string
	for _, n := range s.opts.Networks {
		names = append(names, n.Name)
	}
	return model.Invalid("network", "network %q is not configured in this Basin (configured: %s)", model.NetworkName(ref), strings.Join(names, ", "))
}

// checkADRef checks a reference to an Active Directory policy. Only policies of the
// caller's project and the pool's location can be named; anything else gets one
// answer, before any lookup, so it cannot reveal whether another project's policy
// exists.
func checkADRef(tx store.Tx, p parent, ref string) error {
	m := adRefRE.FindStringSubmatch(ref)
	if m == nil || m[1] != p.project || m[2] != p.location {
		return model.Invalid("activeDirectory", "must be the full name of an Active Directory policy in %s: %s/activeDirectories/{id}", p.name(), p.name())
	}
	if !idRE.MatchString(m[3]) {
		return model.Invalid("activeDirectory", "Active Directory policy %q does not exist in %s", m[3], p.name())
	}
	a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ref)
	if errors.Is(err, model.ErrNotFound) {
		return model.Invalid("activeDirectory", "Active Directory policy %q does not exist in %s", m[3], p.name())
	}
	if err != nil {
		return err
	}
	if a.State == model.StateDeleting {
		return model.Errorf(model.ErrFailedPrecondition, "activeDirectory: Active Directory policy %s is being deleted", a.ID)
	}
	return nil
}

func (s *Server) network(name string) (model.Network, bool) {
	for _, n := range s.opts.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return model.Network{}, false
}
