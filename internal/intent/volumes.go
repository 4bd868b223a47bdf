package intent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var (
	shareNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$`)
	unixPermRE   = regexp.MustCompile(`^0?[0-7]{3}$|^[0-7]{4}$`)
	snapshotRefR = regexp.MustCompile(`^projects/([^/]+)/locations/([^/]+)/volumes/([^/]+)/snapshots/([^/]+)$`)
)

// Protocol sets a volume may have: those the upstream service accepts (its
// Terraform provider lists them), without the block protocols.
var allowedProtocolSets = [][]model.Protocol{
	{model.ProtocolNFSv3}, {model.ProtocolNFSv4}, {model.ProtocolSMB},
	{model.ProtocolNFSv3, model.ProtocolNFSv4}, {model.ProtocolNFSv3, model.ProtocolSMB}, {model.ProtocolNFSv4, model.ProtocolSMB},
}

// protocolNames are the API's names of the protocol numbers.
var protocolNames = []string{"PROTOCOLS_UNSPECIFIED", "NFSV3", "NFSV4", "SMB", "ISCSI", "NVME"}

func protocolName(p model.Protocol) string {
	if p >= 0 && int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return ""
}

// VolumeCreate asks for a volume.
type VolumeCreate struct {
	// Volume holds the project, location, ID and spec; its create time, state,
	// storage key, network and endpoint are set here.
	Volume *model.Volume
	// Restore is where the volume is cloned from (restoreParameters); nil = empty.
	Restore *RestoreSource
}

// RestoreSource is what a new volume is restored from.
type RestoreSource struct {
	Snapshot string // full snapshot name
	Backup   string // unsupported; must be ""
}

// CreateVolume records a volume to create: its spec is checked against its pool
// and location, it gets a storage key and the lowest free endpoint address of its
// pool's network.
func (s *Service) CreateVolume(ctx context.Context, st store.Store, req VolumeCreate) (*model.Operation, error) {
	v := req.Volume
	if err := CheckID("volumeId", v.ID); err != nil {
		return nil, err
	}
	v.CreateTime, v.State, v.Key = s.opts.Now().UTC(), model.StateCreating, "v"+newID(8)
	v.Node = "" // placed below (a clone: where its source is)
	if v.UnixPermissions == "" {
		v.UnixPermissions = "0770"
		if v.NTACLs() {
			// Where NT ACLs decide (an SMB-only or NTFS volume), the root
			// starts open to every domain user (what Windows calls Everyone:
			// Full control, the services' default); its administrators
			// narrow it with Windows ACLs.
			v.UnixPermissions = "0777"
		}
	}
	loc := model.LocationName(v.Project, v.Location)
	op := s.newOperation(v.Project, v.Location, model.OpVolumeCreate, v.Name())
	return s.withReads(ctx, true, func(r *reads) (*model.Operation, error) {
		return record(ctx, st, op, func(tx store.Tx) error {
			if _, err := store.Get[model.Volume](tx, store.KindVolume, v.Name()); err == nil {
				return model.Errorf(model.ErrAlreadyExists, "Volume '%s' already exists", v.Name())
			}
			if err := s.validateVolume(tx, v, nil); err != nil {
				return err
			}
			if req.Restore != nil {
				if err := resolveCloneSource(tx, req.Restore, v, op); err != nil {
					return err
				}
			}
			if err := s.place(tx, r, v); err != nil {
				return err
			}
			return tx.Insert(store.KindVolume, v.Name(), loc, v)
		})
	})
}

// validateVolume checks a volume's whole spec against its pool and the location.
//
// prev is the volume as stored before an update (nil for a create).
func (s *Service) validateVolume(tx store.Tx, v, prev *model.Volume) error {
	isNew := prev == nil
	loc := model.LocationName(v.Project, v.Location)
	lim := s.opts.Limits
	if v.ShareName == "" {
		return model.Invalid("shareName", "is required")
	}
	if !shareNameRE.MatchString(v.ShareName) {
		return model.Invalid("shareName", "%q must be 1-80 letters, digits, '_' or '-', starting with a letter or digit", v.ShareName)
	}
	if v.StoragePool == "" {
		return model.Invalid("storagePool", "is required (the ID of a storage pool in %s)", loc)
	}
	if !idRE.MatchString(v.StoragePool) {
		return model.Invalid("storagePool", "%q is not a storage pool ID (give the ID, not the full name)", v.StoragePool)
	}
	pool, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
	if errors.Is(err, model.ErrNotFound) {
		return model.Invalid("storagePool", "storage pool %q does not exist in %s", v.StoragePool, loc)
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
			return model.Invalid("protocols", "%s volumes are not supported by Basin", protocolName(pr))
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
		v.SecurityStyle = model.SecurityStyleUNIX
		if smb && !nfs {
			v.SecurityStyle = model.SecurityStyleNTFS
		}
	} else if isNew && !(nfs && smb) {
		if want := map[bool]int32{true: model.SecurityStyleNTFS, false: model.SecurityStyleUNIX}[smb]; v.SecurityStyle != want {
			return model.Invalid("securityStyle", "can only be chosen for dual-protocol volumes")
		}
	}
	if v.KerberosEnabled {
		if err := s.validateKerberos(tx, pool, v); err != nil {
			return err
		}
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
	if !isNew && !sameMode(v.UnixPermissions, prev.UnixPermissions) && prev.NTACLs() {
		return model.Invalid("unixPermissions", "cannot change on a volume whose permissions are its Windows ACLs (SMB-only or NTFS style): change them from Windows")
	}
	// (Checked when the settings are chosen: a volume made before stays as it is.)
	if nfs && smb && slices.Contains(v.SMBSettings, 9) && (isNew || !slices.Equal(v.SMBSettings, prev.SMBSettings)) { // CONTINUOUSLY_AVAILABLE
		return model.Invalid("smbSettings", "CONTINUOUSLY_AVAILABLE is for SMB-only volumes: its durable handles keep SMB clients' locks and caching out of NFS clients' sight")
	}
	if v.SnapReserve < 0 || v.SnapReserve > 90 || math.IsNaN(v.SnapReserve) {
		return model.Invalid("snapReserve", "must be between 0 and 90 percent")
	}
	if err := validateSnapshotPolicy(v.SnapshotPolicy, lim.MaxSnapshotsPerVol); err != nil {
		return err
	}
	if err := CheckMeta(&v.Meta); err != nil {
		return err
	}
	if prev != nil && pool.QosType != model.QosManual && v.ThroughputMibps != 0 {
		if err := s.dropDerivedThroughput(tx, v, prev); err != nil {
			return err
		}
	}
	if err := s.checkVolumeFits(tx, pool, v, prev); err != nil {
		return err
	}
	// shareName is unique per location (case-insensitively, as SMB compares it).
	others, err := store.VolumesWithShareName(tx, loc, v.ShareName)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o != v.Name() {
			return model.Errorf(model.ErrAlreadyExists, "shareName %q is already used by volume %s", v.ShareName, lastSegment(o))
		}
	}
	if isNew && nfs {
		return checkNFSShareName(tx, v, model.NetworkName(pool.Network))
	}
	return nil
}

// checkNFSShareName keeps a new NFS volume's export path, /<shareName>, unique on
// its network, whose Ganesha serves every project's exports (case-insensitively,
// as the location's check). A name held by another project gets one answer,
// whoever holds it, that names neither the project nor the volume; one held by
// the caller's own project names its volume. (Share names are immutable and a
// volume never leaves its network, so only creates are checked: an update never
// meets a clash made before this check existed.)
func checkNFSShareName(tx store.Tx, v *model.Volume, network string) error {
	holders, err := store.NFSVolumesWithShareName(tx, network, v.ShareName)
	if err != nil {
		return err
	}
	for _, h := range holders {
		if h == v.Name() {
			continue
		}
		if strings.HasPrefix(h, "projects/"+v.Project+"/") {
			return model.Errorf(model.ErrAlreadyExists, "shareName %q is already used by volume %s on network %q", v.ShareName, h, network)
		}
		return model.Errorf(model.ErrAlreadyExists, "shareName %q is not available on network %q: NFS export paths (/%s) are shared by every volume on a network; choose another", v.ShareName, network, v.ShareName)
	}
	return nil
}

// dropDerivedThroughput clears the throughputMibps an update into a pool that is
// not MANUAL QoS carries over without asking for it: the value assigned in the
// MANUAL pool the volume leaves, or the ceiling the volume showed before (a body
// read, changed and sent back whole). There the ceiling follows capacity ×
// service level; any other value is refused by checkVolumeFits.
func (s *Service) dropDerivedThroughput(tx store.Tx, v, prev *model.Volume) error {
	if v.ThroughputMibps == prev.ThroughputMibps && prev.PoolName() != v.PoolName() {
		v.ThroughputMibps = 0
		return nil
	}
	prevPool, err := store.Get[model.Pool](tx, store.KindPool, prev.PoolName())
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// The API shows the ceiling rounded to 1/1000 MiB/s.
	if shown := model.VolumeThroughputMibps(prev, prevPool, s.opts.Limits); math.Abs(v.ThroughputMibps-shown) <= 0.0005+1e-9 {
		v.ThroughputMibps = 0
	}
	return nil
}

// checkVolumeFits enforces Σ volume capacity ≤ pool capacity and, for manual QoS,
// Σ throughput ≤ the pool's budget.
//
// The sums come from the store's index of the pool's volumes, less what prev (the
// volume before an update) held of this pool. A volume moving in from another pool
// (storagePool in the update) is not in this pool's index yet, so it counts in
// full; writing it re-keys its index entries, so the pool it left stops counting it.
func (s *Service) checkVolumeFits(tx store.Tx, pool *model.Pool, v, prev *model.Volume) error {
	use, err := store.UsageOfPool(tx, pool.Name())
	if err != nil {
		return err
	}
	capSum, thrSum := use.CapacityGib, use.ThroughputMibps
	if prev != nil && prev.PoolName() == pool.Name() {
		capSum -= prev.CapacityGib
		thrSum -= prev.ThroughputMibps
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

func (s *Service) validateExportRules(v *model.Volume, nfs bool) error {
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
		grants := r.KerberosGrants()
		if len(grants) > 0 && !v.KerberosEnabled {
			return model.Invalid(f(grants[0].Field), "Kerberos flags apply to Kerberos volumes only (kerberosEnabled)")
		}
		for _, g := range grants[min(1, len(grants)):] {
			if g.ReadWrite != grants[0].ReadWrite {
				return model.Invalid(f(g.Field), "one rule's Kerberos flavors must all be read-write or all read-only "+
					"(Basin's NFS server gives a rule's clients one access, whatever the flavor): %s and %s differ", grants[0].Field, g.Field)
			}
		}
	}
	return nil
}

// validateKerberos checks a Kerberos volume: NFSv4.1 (the only version Basin
// serves Kerberos on, as upstream), a pool with an Active Directory policy
// (the domain is the KDC, and its machine on the network the NFS service
// principal), and no Kerberos volume on the network under another policy: a
// network's NFS server has one Kerberos identity. Networks are shared by
// projects and locations, so the last check reads every volume, on Kerberos
// volumes' creates and updates only.
func (s *Service) validateKerberos(tx store.Tx, pool *model.Pool, v *model.Volume) error {
	if !slices.Contains(v.Protocols, model.ProtocolNFSv4) || slices.Contains(v.Protocols, model.ProtocolNFSv3) {
		return model.Invalid("kerberosEnabled", "Kerberos volumes are NFSv4.1 volumes: protocols must be [NFSV4] or [NFSV4, SMB]")
	}
	if pool.ActiveDirectory == "" {
		return model.Errorf(model.ErrFailedPrecondition, "kerberosEnabled: Kerberos volumes need a storage pool with an Active Directory policy (its domain issues the tickets); pool %s has none", pool.ID)
	}
	others, err := store.List[model.Volume](tx, store.KindVolume, "")
	if err != nil {
		return err
	}
	for _, o := range others {
		if !o.KerberosEnabled || o.Name() == v.Name() || model.NetworkName(pool.Network) != o.Network {
			continue
		}
		op, err := store.Get[model.Pool](tx, store.KindPool, o.PoolName())
		if err != nil {
			return err
		}
		if op.ActiveDirectory != pool.ActiveDirectory {
			return model.Errorf(model.ErrFailedPrecondition, "kerberosEnabled: volume %s on network %s is a Kerberos volume of Active Directory policy %s; "+
				"a network's Kerberos volumes share one policy", o.ID, o.Network, op.ActiveDirectory)
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

// allocateEndpoint gives a new volume its network (the pool's) and its own address
// in it (the lowest free one of the network's endpoint range on the volume's node,
// which place chose). Its NFS export ID comes from the controller when the export
// is first loaded.
func (s *Service) allocateEndpoint(tx store.Tx, v *model.Volume, n model.Network) error {
	used, err := store.EndpointsInUse(tx, v.Network)
	if err != nil {
		return err
	}
	for a := n.FirstEndpoint; a.IsValid() && !n.LastEndpoint.Less(a); a = a.Next() {
		if _, taken := used[a.String()]; !taken {
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

// resolveCloneSource checks restoreParameters.sourceSnapshot and records where the
// clone comes from.
func resolveCloneSource(tx store.Tx, rp *RestoreSource, v *model.Volume, op *model.Operation) error {
	if rp.Backup != "" {
		return model.Invalid("restoreParameters.sourceBackup", "restoring from backups is not supported by Basin")
	}
	if rp.Snapshot == "" {
		return nil
	}
	loc := model.LocationName(v.Project, v.Location)
	m := snapshotRefR.FindStringSubmatch(rp.Snapshot)
	if m == nil {
		return model.Invalid("restoreParameters.sourceSnapshot", "%q is not a snapshot name (projects/{p}/locations/{l}/volumes/{v}/snapshots/{s})", rp.Snapshot)
	}
	if m[1] != v.Project || m[2] != v.Location {
		return model.Invalid("restoreParameters.sourceSnapshot", "the snapshot must be in %s", loc)
	}
	sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, rp.Snapshot)
	if errors.Is(err, model.ErrNotFound) {
		return model.Invalid("restoreParameters.sourceSnapshot", "snapshot %s does not exist", rp.Snapshot)
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
	v.SourceSnapshot = rp.Snapshot
	v.Node = src.Node // a clone is made where its source's snapshot is (place)
	op.Params.SourceKey, op.Params.SourceSnapshot, op.Params.SourceNTACLs = src.Key, sn.ID, src.NTACLs()
	return nil
}

// VolumeUpdate asks to change a volume.
type VolumeUpdate struct {
	Project, Location, ID string
	// Patch changes the volume as read in the transaction (tx is there to read what
	// the caller needs to decide, e.g. the pool); its error is answered as is.
	Patch func(tx store.Tx, v *model.Volume) error
}

// UpdateVolume records a change to a volume that is not busy; the result is checked
// like a new volume's, a shrink against the usage read now, a growth against the
// store's reserve.
func (s *Service) UpdateVolume(ctx context.Context, st store.Store, req VolumeUpdate) (*model.Operation, error) {
	if err := CheckPathID("Volume", req.ID); err != nil {
		return nil, err
	}
	name := model.LocationName(req.Project, req.Location) + "/volumes/" + req.ID
	op := s.newOperation(req.Project, req.Location, model.OpVolumeUpdate, name)
	// The volume is read afresh in each transaction: the write may run again once
	// the volume's usage (a shrink) or the store's space (a growth) is read.
	return s.withReads(ctx, false, func(r *reads) (*model.Operation, error) {
		return record(ctx, st, op, func(tx store.Tx) error {
			v, err := getIdle(tx, store.KindVolume, name, "volume", req.ID, func(r *model.Volume) *model.Meta { return &r.Meta })
			if err != nil {
				return err
			}
			prev := *v
			op.Prev, _ = json.Marshal(v)
			if err := req.Patch(tx, v); err != nil {
				return err
			}
			if err := s.validateVolume(tx, v, &prev); err != nil {
				return err
			}
			switch {
			case v.CapacityGib < prev.CapacityGib:
				if err := s.checkShrink(r, v); err != nil {
					return err
				}
			case v.CapacityGib > prev.CapacityGib:
				if err := s.checkStoreRoom(tx, r, v.Node, v.CapacityGib, prev.CapacityGib); err != nil {
					return err
				}
			}
			v.State = model.StateUpdating
			return store.PutVolume(tx, v)
		})
	})
}

// VolumeDelete asks to delete a volume; Force deletes its snapshots too.
type VolumeDelete struct {
	Project, Location, ID string
	Force                 bool
}

// DeleteVolume records a volume's deletion.
func (s *Service) DeleteVolume(ctx context.Context, st store.Store, req VolumeDelete) (*model.Operation, error) {
	if err := CheckPathID("Volume", req.ID); err != nil {
		return nil, err
	}
	id := req.ID
	name := model.LocationName(req.Project, req.Location) + "/volumes/" + id
	op := s.newOperation(req.Project, req.Location, model.OpVolumeDelete, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		v, err := getIdle(tx, store.KindVolume, name, "volume", id, func(r *model.Volume) *model.Meta { return &r.Meta })
		if err != nil {
			return err
		}
		if slices.Contains(v.RestrictedActions, 1) {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s has restrictedActions DELETE; remove it first", id)
		}
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, name)
		if err != nil {
			return err
		}
		if len(snaps) > 0 && !req.Force {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s has %d snapshot(s); delete them or use force=true", id, len(snaps))
		}
		for _, sn := range snaps {
			if sn.State.Busy() {
				return model.Errorf(model.ErrFailedPrecondition, "snapshot %s of volume %s is %s", sn.ID, id, sn.State)
			}
			if err := refuseIfCloning(tx, sn); err != nil {
				return err
			}
		}
		v.State = model.StateDeleting
		return store.PutVolume(tx, v)
	})
}

// VolumeRevert asks to revert a volume to one of its snapshots.
type VolumeRevert struct {
	Project, Location, ID string
	SnapshotID            string
}

// RevertVolume records a revert; the snapshots newer than the one reverted to go
// with it, so none may be busy or a clone's source.
func (s *Service) RevertVolume(ctx context.Context, st store.Store, req VolumeRevert) (*model.Operation, error) {
	if err := CheckPathID("Volume", req.ID); err != nil {
		return nil, err
	}
	if req.SnapshotID == "" {
		return nil, model.Invalid("snapshotId", "is required")
	}
	id := req.ID
	name := model.LocationName(req.Project, req.Location) + "/volumes/" + id
	op := s.newOperation(req.Project, req.Location, model.OpVolumeRevert, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, name)
		if err != nil {
			return err
		}
		if v.State != model.StateReady {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s, not READY", id, v.State)
		}
		sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name+"/snapshots/"+req.SnapshotID)
		if errors.Is(err, model.ErrNotFound) {
			return model.Errorf(model.ErrNotFound, "Snapshot '%s/snapshots/%s' was not found", name, req.SnapshotID)
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
				if err := refuseIfCloning(tx, o); err != nil {
					return err
				}
			}
		}
		op.Params.Snapshot = sn.ID
		op.Prev, _ = json.Marshal(v)
		v.State = model.StateRestoring
		return store.PutVolume(tx, v)
	})
}

// sameMode reports whether two unixPermissions values name one mode ("777"
// and "0777" do).
func sameMode(a, b string) bool {
	ma, ea := strconv.ParseUint(a, 8, 32)
	mb, eb := strconv.ParseUint(b, 8, 32)
	if ea != nil || eb != nil {
		return a == b
	}
	return ma == mb
}
