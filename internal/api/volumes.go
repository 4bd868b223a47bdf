package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/basin-nas/basin/internal/apiv1"
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

var (
	shareNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$`)
	unixPermRE   = regexp.MustCompile(`^0?[0-7]{3}$|^[0-7]{4}$`)
	snapshotRefR = regexp.MustCompile(`^projects/([^/]+)/locations/([^/]+)/volumes/([^/]+)/snapshots/([^/]+)$`)
)

// Protocol sets a volume may have (API.md §4.2).
var allowedProtocolSets = [][]model.Protocol{
	{model.ProtocolNFSv3}, {model.ProtocolNFSv4}, {model.ProtocolSMB},
	{model.ProtocolNFSv3, model.ProtocolNFSv4}, {model.ProtocolNFSv3, model.ProtocolSMB}, {model.ProtocolNFSv4, model.ProtocolSMB},
}

func (s *Server) listVolumes(rq *request, p parent) {
	lq, err := parseListQuery[apiv1.Volume](rq.q, p.name()+"/volumes", "name")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var items []apiv1.Volume
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
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
		return nil
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	out, next, err := page(lq, items, func(x apiv1.Volume) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListVolumesResponse{Volumes: out, NextPageToken: next})
}

func (s *Server) getVolume(rq *request, p parent, id string) {
	if err := checkPathID("Volume", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Volume
	err := s.st.View(rq.ctx, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, p.name()+"/volumes/"+id)
		if err != nil {
			return err
		}
		w, err = s.renderVolume(tx, v)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
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

// validateVolume checks a volume's whole spec against its pool and the location.
func (s *Server) validateVolume(tx store.Tx, p parent, v *model.Volume, isNew bool) error {
	lim := s.opts.Limits
	if v.ShareName == "" {
		return model.Invalid("shareName", "is required")
	}
	if !shareNameRE.MatchString(v.ShareName) {
		return model.Invalid("shareName", "%q must be 1-80 letters, digits, '_' or '-', starting with a letter or digit", v.ShareName)
	}
	if v.StoragePool == "" {
		return model.Invalid("storagePool", "is required (the ID of a storage pool in %s)", p.name())
	}
	if !idRE.MatchString(v.StoragePool) {
		return model.Invalid("storagePool", "%q is not a storage pool ID (give the ID, not the full name)", v.StoragePool)
	}
	pool, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
	if errors.Is(err, model.ErrNotFound) {
		return model.Invalid("storagePool", "storage pool %q does not exist in %s", v.StoragePool, p.name())
	}
	if err != nil {
		return err
	}
	if pool.State != model.StateReady {
		return model.Errorf(model.ErrFailedPrecondition, "storage pool %s is %s, not READY", pool.ID, pool.State)
	}
	if v.Network != "" && model.NetworkName(pool.Network) != v.Network {
		return model.Errorf(model.ErrFailedPrecondition, "storagePool: pool %s is on network %q; the volume's endpoint is on %q", pool.ID, model.NetworkName(pool.Network), v.Network)
	}
	if v.CapacityGib <= 0 {
		return model.Invalid("capacityGib", "is required and must be positive")
	}
	if v.CapacityGib < lim.MinVolumeGib || v.CapacityGib > lim.MaxVolumeGib {
		return model.Invalid("capacityGib", "%d GiB is outside the allowed range %d–%d GiB", v.CapacityGib, lim.MinVolumeGib, lim.MaxVolumeGib)
	}
	if len(v.Protocols) == 0 {
		return model.Invalid("protocols", "is required (NFSV3, NFSV4 and/or SMB)")
	}
	for _, pr := range v.Protocols {
		if pr != model.ProtocolNFSv3 && pr != model.ProtocolNFSv4 && pr != model.ProtocolSMB {
			return model.Invalid("protocols", "%s volumes are not supported by Basin", apiv1.Protocol(pr))
		}
	}
	if !validProtocolSet(v.Protocols) {
		return model.Invalid("protocols", "allowed combinations are [NFSV3], [NFSV4], [SMB], [NFSV3, NFSV4], [SMB, NFSV3], [SMB, NFSV4]")
	}
	nfs := slices.Contains(v.Protocols, model.ProtocolNFSv3) || slices.Contains(v.Protocols, model.ProtocolNFSv4)
	smb := slices.Contains(v.Protocols, model.ProtocolSMB)
	if smb && pool.ActiveDirectory == "" {
		return model.Errorf(model.ErrFailedPrecondition, "SMB volumes need a storage pool with an Active Directory policy; pool %s has none", pool.ID)
	}
	if isNew && v.SecurityStyle == 0 {
		v.SecurityStyle = 2 // UNIX
		if smb && !nfs {
			v.SecurityStyle = 1 // NTFS
		}
	} else if isNew && !(nfs && smb) {
		if want := map[bool]int32{true: 1, false: 2}[smb]; v.SecurityStyle != want {
			return model.Invalid("securityStyle", "can only be chosen for dual-protocol volumes")
		}
	}
	if v.KerberosEnabled {
		return model.Errorf(model.ErrFailedPrecondition, "kerberosEnabled: Kerberos is not configured for this Basin service")
	}
	if err := s.validateExportRules(v, nfs); err != nil {
		return err
	}
	if len(v.SMBSettings) > 0 && !smb {
		return model.Invalid("smbSettings", "only applies to SMB volumes")
	}
	if slices.Contains(v.SMBSettings, 2) && slices.Contains(v.SMBSettings, 4) {
		return model.Invalid("smbSettings", "BROWSABLE and NON_BROWSABLE are mutually exclusive")
	}
	if v.UnixPermissions != "" && !unixPermRE.MatchString(v.UnixPermissions) {
		return model.Invalid("unixPermissions", "%q must be an octal mode like \"0770\"", v.UnixPermissions)
	}
	if v.SnapReserve < 0 || v.SnapReserve > 90 || math.IsNaN(v.SnapReserve) {
		return model.Invalid("snapReserve", "must be between 0 and 90 percent")
	}
	if err := validateSnapshotPolicy(v.SnapshotPolicy, lim.MaxSnapshotsPerVol); err != nil {
		return err
	}
	if err := checkMeta(&v.Meta); err != nil {
		return err
	}
	if err := s.checkVolumeFits(tx, pool, v); err != nil {
		return err
	}
	// shareName is unique per location (case-insensitively, as SMB compares it).
	vols, err := store.List[model.Volume](tx, store.KindVolume, p.name())
	if err != nil {
		return err
	}
	for _, o := range vols {
		if o.Name() != v.Name() && strings.EqualFold(o.ShareName, v.ShareName) {
			return model.Errorf(model.ErrAlreadyExists, "shareName %q is already used by volume %s", v.ShareName, o.ID)
		}
	}
	return nil
}

// allocateEndpoint gives a new volume its network (the pool's) and its own address
// in it (the lowest free one of the network's endpoint range). Its NFS export ID
// comes from the controller when the export is first loaded.
func (s *Server) allocateEndpoint(tx store.Tx, v *model.Volume) error {
	pool, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
	if err != nil {
		return err
	}
	v.Network = model.NetworkName(pool.Network)
	n, ok := s.network(v.Network)
	if !ok {
		return model.Errorf(model.ErrFailedPrecondition, "network %q of pool %s is no longer configured", v.Network, pool.ID)
	}
	all, err := store.List[model.Volume](tx, store.KindVolume, "")
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, o := range all {
		if o.Network == v.Network {
			used[o.Endpoint] = true
		}
	}
	for a := n.FirstEndpoint; a.IsValid() && !n.LastEndpoint.Less(a); a = a.Next() {
		if !used[a.String()] {
			v.Endpoint = a.String()
			break
		}
	}
	if v.Endpoint == "" {
		return model.Errorf(model.ErrFailedPrecondition, "network %q has no free endpoint address (range %s-%s); delete a volume or ask the administrator to widen the range",
			n.Name, n.FirstEndpoint, n.LastEndpoint)
	}
	return nil
}

func validProtocolSet(ps []model.Protocol) bool {
	sorted := slices.Clone(ps)
	slices.Sort(sorted)
	for _, set := range allowedProtocolSets {
		if slices.Equal(sorted, set) {
			return true
		}
	}
	return false
}

// checkVolumeFits enforces Σ volume capacity ≤ pool capacity and, for manual QoS,
// Σ throughput ≤ the pool's budget.
func (s *Server) checkVolumeFits(tx store.Tx, pool *model.Pool, v *model.Volume) error {
	vols, err := store.List[model.Volume](tx, store.KindVolume, model.LocationName(pool.Project, pool.Location))
	if err != nil {
		return err
	}
	var capSum int64
	var thrSum float64
	for _, o := range vols {
		if o.Name() == v.Name() || o.PoolName() != pool.Name() {
			continue
		}
		capSum += o.CapacityGib
		thrSum += o.ThroughputMibps
	}
	if capSum+v.CapacityGib > pool.CapacityGib {
		return model.Errorf(model.ErrFailedPrecondition, "capacityGib: storage pool %s has %d GiB free, the volume needs %d GiB", pool.ID, pool.CapacityGib-capSum, v.CapacityGib)
	}
	lim := s.opts.Limits
	if pool.QosType == model.QosManual {
		if v.ThroughputMibps < lim.MinManualThroughput || v.ThroughputMibps > lim.MaxManualThroughput {
			return model.Invalid("throughputMibps", "is required in MANUAL QoS pools, between %g and %g MiB/s", lim.MinManualThroughput, lim.MaxManualThroughput)
		}
		if budget := model.PoolBudgetMibps(pool, lim); thrSum+v.ThroughputMibps > budget+1e-9 {
			return model.Errorf(model.ErrFailedPrecondition, "throughputMibps: storage pool %s has %.2f MiB/s unassigned, the volume asks for %.2f", pool.ID, budget-thrSum, v.ThroughputMibps)
		}
	} else if v.ThroughputMibps != 0 {
		return model.Invalid("throughputMibps", "can only be set in MANUAL QoS pools; in pool %s it follows capacity × service level", pool.ID)
	}
	return nil
}

func (s *Server) validateExportRules(v *model.Volume, nfs bool) error {
	if !v.HasExportPolicy {
		return nil
	}
	if !nfs {
		return model.Invalid("exportPolicy", "only applies to NFS volumes")
	}
	if len(v.ExportRules) > s.opts.Limits.MaxExportRules {
		return model.Invalid("exportPolicy.rules", "at most %d rules are allowed", s.opts.Limits.MaxExportRules)
	}
	for i, r := range v.ExportRules {
		f := func(name string) string { return fmt.Sprintf("exportPolicy.rules[%d].%s", i, name) }
		if r.AllowedClients == nil || strings.TrimSpace(*r.AllowedClients) == "" {
			return model.Invalid(f("allowedClients"), "is required")
		}
		for _, c := range strings.Split(*r.AllowedClients, ",") {
			// Plain IPv4 only: an IPv4-mapped IPv6 form (::ffff:10.0.0.1,
			// ::ffff:0.0.0.0/96) would be accepted and then match no client.
			c = strings.TrimSpace(c)
			if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
				continue
			}
			if a, err := netip.ParseAddr(c); err == nil && a.Is4() {
				continue
			}
			return model.Invalid(f("allowedClients"), "%q is not an IPv4 address or CIDR (IPv6 and IPv4-mapped IPv6 forms are not supported)", c)
		}
		if r.AccessType == nil || *r.AccessType == 0 {
			return model.Invalid(f("accessType"), "is required (READ_ONLY, READ_WRITE or READ_NONE)")
		}
		v3 := r.NFSv3 != nil && *r.NFSv3
		v4 := r.NFSv4 != nil && *r.NFSv4
		if !v3 && !v4 {
			return model.Invalid(f("nfsv3"), "a rule must apply to NFSv3, NFSv4 or both")
		}
		if (v3 && !slices.Contains(v.Protocols, model.ProtocolNFSv3) && !v4) || (v4 && !slices.Contains(v.Protocols, model.ProtocolNFSv4) && !v3) {
			return model.Invalid(f("nfsv3"), "the rule's NFS versions are not among the volume's protocols")
		}
		if r.HasRootAccess != nil {
			if _, err := strconv.ParseBool(*r.HasRootAccess); err != nil {
				return model.Invalid(f("hasRootAccess"), "must be \"true\" or \"false\"")
			}
		}
		if r.SquashMode != nil && (*r.SquashMode == model.SquashRoot || *r.SquashMode == model.SquashAll) {
			if r.AnonUID == nil {
				return model.Invalid(f("anonUid"), "is required with ROOT_SQUASH or ALL_SQUASH")
			}
			if *r.AnonUID == 0 {
				return model.Invalid(f("anonUid"), "cannot be 0 with ROOT_SQUASH or ALL_SQUASH: squashed users would become root (use e.g. 65534, nobody)")
			}
		}
		if r.AnonUID != nil && (*r.AnonUID < 0 || *r.AnonUID > math.MaxUint32) {
			return model.Invalid(f("anonUid"), "must be between 0 and 4294967295")
		}
		for _, k := range []*bool{r.Kerberos5ReadOnly, r.Kerberos5ReadWrite, r.Kerberos5iReadOnly, r.Kerberos5iReadWrite, r.Kerberos5pReadOnly, r.Kerberos5pReadWrite} {
			if k != nil && *k {
				return model.Errorf(model.ErrFailedPrecondition, "%s: Kerberos export rules need kerberosEnabled volumes, and Kerberos is not configured for this Basin service", f("kerberos5ReadOnly"))
			}
		}
	}
	return nil
}

var weekdays = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

func validateSnapshotPolicy(p *model.SnapshotPolicy, maxSnaps int) error {
	if p == nil {
		return nil
	}
	total := 0.0
	for name, sc := range map[string]*model.Schedule{"hourlySchedule": p.Hourly, "dailySchedule": p.Daily, "weeklySchedule": p.Weekly, "monthlySchedule": p.Monthly} {
		if sc == nil {
			continue
		}
		field := "snapshotPolicy." + name
		if sc.SnapshotsToKeep != nil {
			if *sc.SnapshotsToKeep < 0 || *sc.SnapshotsToKeep != math.Trunc(*sc.SnapshotsToKeep) {
				return model.Invalid(field+".snapshotsToKeep", "must be a non-negative whole number")
			}
			total += *sc.SnapshotsToKeep
		}
		if sc.Minute != nil && (*sc.Minute < 0 || *sc.Minute > 59) {
			return model.Invalid(field+".minute", "must be between 0 and 59")
		}
		if sc.Hour != nil && (*sc.Hour < 0 || *sc.Hour > 23) {
			return model.Invalid(field+".hour", "must be between 0 and 23")
		}
		if sc.Day != nil {
			for _, d := range strings.Split(*sc.Day, ",") {
				if !slices.Contains(weekdays, strings.ToLower(strings.TrimSpace(d))) {
					return model.Invalid(field+".day", "%q is not a weekday name", d)
				}
			}
		}
		if sc.DaysOfMonth != nil {
			for _, d := range strings.Split(*sc.DaysOfMonth, ",") {
				if n, err := strconv.Atoi(strings.TrimSpace(d)); err != nil || n < 1 || n > 31 {
					return model.Invalid(field+".daysOfMonth", "%q is not a day of the month (1-31)", d)
				}
			}
		}
	}
	if total > float64(maxSnaps) {
		return model.Invalid("snapshotPolicy", "schedules keep %g snapshots in all; at most %d are allowed per volume", total, maxSnaps)
	}
	return nil
}

func (s *Server) createVolume(rq *request, p parent) {
	id := rq.q.Get("volumeId")
	if err := checkID("volumeId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Volume
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	v := &model.Volume{Meta: model.Meta{Project: p.project, Location: p.location, ID: id, CreateTime: s.now().UTC(), State: model.StateCreating},
		Key: "v" + newID(8)}
	fields := append(append([]string{}, volumeFields.mutable...), volumeFields.immutable...)
	if err := volumeFromWire(&w, v, fields); err != nil {
		s.writeError(rq, err)
		return
	}
	if v.UnixPermissions == "" {
		v.UnixPermissions = "0770"
	}
	op := s.newOperation(p, model.OpVolumeCreate, v.Name())
	s.startOperation(rq, op, func(tx store.Tx) error {
		if _, err := store.Get[model.Volume](tx, store.KindVolume, v.Name()); err == nil {
			return model.Errorf(model.ErrAlreadyExists, "Volume '%s' already exists", v.Name())
		}
		if err := s.validateVolume(tx, p, v, true); err != nil {
			return err
		}
		if w.RestoreParameters != nil {
			if err := s.resolveCloneSource(tx, p, w.RestoreParameters, v, op); err != nil {
				return err
			}
		}
		if err := s.allocateEndpoint(tx, v); err != nil {
			return err
		}
		if err := s.checkStoreReserve(rq.ctx); err != nil {
			return err
		}
		return tx.Insert(store.KindVolume, v.Name(), p.name(), v)
	})
}

// resolveCloneSource checks restoreParameters.sourceSnapshot and records where the
// clone comes from.
func (s *Server) resolveCloneSource(tx store.Tx, p parent, rp *apiv1.RestoreParameters, v *model.Volume, op *model.Operation) error {
	if rp.SourceBackup != "" {
		return model.Invalid("restoreParameters.sourceBackup", "restoring from backups is not supported by Basin")
	}
	if rp.SourceSnapshot == "" {
		return nil
	}
	m := snapshotRefR.FindStringSubmatch(rp.SourceSnapshot)
	if m == nil {
		return model.Invalid("restoreParameters.sourceSnapshot", "%q is not a snapshot name (projects/{p}/locations/{l}/volumes/{v}/snapshots/{s})", rp.SourceSnapshot)
	}
	if m[1] != p.project || m[2] != p.location {
		return model.Invalid("restoreParameters.sourceSnapshot", "the snapshot must be in %s", p.name())
	}
	sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, rp.SourceSnapshot)
	if errors.Is(err, model.ErrNotFound) {
		return model.Invalid("restoreParameters.sourceSnapshot", "snapshot %s does not exist", rp.SourceSnapshot)
	}
	if err != nil {
		return err
	}
	if sn.State != model.StateReady {
		return model.Errorf(model.ErrFailedPrecondition, "snapshot %s is %s, not READY", sn.ID, sn.State)
	}
	src, err := store.Get[model.Volume](tx, store.KindVolume, sn.VolumeName())
	if err != nil {
		return err
	}
	if src.State != model.StateReady {
		return model.Errorf(model.ErrFailedPrecondition, "source volume %s is %s, not READY", src.ID, src.State)
	}
	v.SourceSnapshot = rp.SourceSnapshot
	op.Params["sourceKey"], op.Params["sourceSnapshot"] = src.Key, sn.ID
	return nil
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
	name := p.name() + "/volumes/" + id
	if err := checkBodyName(w.Name, name); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpVolumeUpdate, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, name)
		if err != nil {
			return err
		}
		if v.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s; wait for its operation to finish", id, v.State)
		}
		cur, err := s.renderVolume(tx, v)
		if err != nil {
			return err
		}
		paths, err := updatePaths(rq.q, volumeFields, present, &w, &cur)
		if err != nil {
			return err
		}
		op.Prev, _ = json.Marshal(v)
		prevGib := v.CapacityGib
		if err := volumeFromWire(&w, v, paths); err != nil {
			return err
		}
		if err := s.validateVolume(tx, p, v, false); err != nil {
			return err
		}
		switch {
		case v.CapacityGib < prevGib:
			if err := s.checkShrink(rq.ctx, v); err != nil {
				return err
			}
		case v.CapacityGib > prevGib:
			if err := s.checkStoreReserve(rq.ctx); err != nil {
				return err
			}
		}
		v.State = model.StateUpdating
		return store.PutVolume(tx, v)
	})
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
	name := p.name() + "/volumes/" + id
	op := s.newOperation(p, model.OpVolumeDelete, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, name)
		if err != nil {
			return err
		}
		if v.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s; wait for its operation to finish", id, v.State)
		}
		if slices.Contains(v.RestrictedActions, 1) {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s has restrictedActions DELETE; remove it first", id)
		}
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, name)
		if err != nil {
			return err
		}
		if len(snaps) > 0 && !force {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s has %d snapshot(s); delete them or use force=true", id, len(snaps))
		}
		for _, sn := range snaps {
			if sn.State.Busy() {
				return model.Errorf(model.ErrFailedPrecondition, "snapshot %s of volume %s is %s", sn.ID, id, sn.State)
			}
			if err := s.refuseIfCloning(tx, p, sn); err != nil {
				return err
			}
		}
		v.State = model.StateDeleting
		return store.PutVolume(tx, v)
	})
}

// refuseIfCloning refuses to remove a snapshot a volume is still being cloned from.
func (s *Server) refuseIfCloning(tx store.Tx, p parent, sn *model.Snapshot) error {
	vols, err := store.List[model.Volume](tx, store.KindVolume, p.name())
	if err != nil {
		return err
	}
	for _, o := range vols {
		if o.State == model.StateCreating && o.SourceSnapshot == sn.Name() {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is being cloned from snapshot %s", o.ID, sn.ID)
		}
	}
	return nil
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
	if body.SnapshotID == "" {
		s.writeError(rq, model.Invalid("snapshotId", "is required"))
		return
	}
	name := p.name() + "/volumes/" + id
	op := s.newOperation(p, model.OpVolumeRevert, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, name)
		if err != nil {
			return err
		}
		if v.State != model.StateReady {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s, not READY", id, v.State)
		}
		sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name+"/snapshots/"+body.SnapshotID)
		if errors.Is(err, model.ErrNotFound) {
			return model.Errorf(model.ErrNotFound, "Snapshot '%s/snapshots/%s' was not found", name, body.SnapshotID)
		}
		if err != nil {
			return err
		}
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, name)
		if err != nil {
			return err
		}
		for _, o := range snaps {
			if o.State.Busy() {
				return model.Errorf(model.ErrFailedPrecondition, "snapshot %s of volume %s is %s", o.ID, id, o.State)
			}
			if o.CreateTime.After(sn.CreateTime) {
				if err := s.refuseIfCloning(tx, p, o); err != nil {
					return err
				}
			}
		}
		op.Params["snapshot"] = sn.ID
		op.Prev, _ = json.Marshal(v)
		v.State = model.StateRestoring
		return store.PutVolume(tx, v)
	})
}
