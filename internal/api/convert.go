package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/store"
)

func poolState(s model.State) apiv1.PoolState {
	v, _ := apiv1.PoolStateEnum.Parse(string(s))
	return apiv1.PoolState(v)
}

func volumeState(s model.State) apiv1.VolumeState {
	v, _ := apiv1.VolumeStateEnum.Parse(string(s))
	return apiv1.VolumeState(v)
}

func snapshotState(s model.State) apiv1.SnapshotState {
	v, _ := apiv1.SnapshotStateEnum.Parse(string(s))
	return apiv1.SnapshotState(v)
}

func adState(s model.State) apiv1.ActiveDirectoryState {
	v, _ := apiv1.ActiveDirectoryStateEnum.Parse(string(s))
	return apiv1.ActiveDirectoryState(v)
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// poolStats are a pool's aggregates over its volumes.
type poolStats struct {
	capacityGib int64
	count       int32
	throughput  float64 // Σ assigned throughput (MANUAL pools)
}

func (s *Server) poolToWire(p *model.Pool, st *poolStats) apiv1.StoragePool {
	if st == nil {
		st = &poolStats{}
	}
	w := apiv1.StoragePool{
		Name: p.Name(), ServiceLevel: apiv1.ServiceLevel(p.ServiceLevel), CapacityGib: apiv1.Int64(p.CapacityGib),
		VolumeCapacityGib: apiv1.Int64(st.capacityGib), VolumeCount: st.count,
		State: poolState(p.State), StateDetails: p.Details, CreateTime: apiv1.FormatTime(p.CreateTime),
		Description: p.Desc, Labels: nilIfEmpty(p.Labels), Network: p.Network, ActiveDirectory: p.ActiveDirectory,
		LdapEnabled: p.LdapEnabled, EncryptionType: apiv1.EncryptionType(1), AllowAutoTiering: p.AllowAutoTiering,
		Zone: p.Zone, ReplicaZone: p.ReplicaZone, CustomPerformanceEnabled: p.CustomPerformanceEnabled,
		TotalThroughputMibps: apiv1.Int64(p.TotalThroughputMibps), TotalIops: apiv1.Int64(p.TotalIops),
		QosType: apiv1.QosType(p.QosType),
	}
	if p.QosType == model.QosManual {
		w.AvailableThroughputMibps = apiv1.Double(roundMibps(model.PoolBudgetMibps(p, s.opts.Limits) - st.throughput))
	}
	return w
}

func roundMibps(f float64) float64 { return math.Round(f*1000) / 1000 }

func exportRulesToWire(rules []model.ExportRule) []apiv1.SimpleExportPolicyRule {
	out := make([]apiv1.SimpleExportPolicyRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, apiv1.SimpleExportPolicyRule{
			AllowedClients: r.AllowedClients, HasRootAccess: r.HasRootAccess,
			AccessType: (*apiv1.AccessType)(r.AccessType), Nfsv3: r.NFSv3, Nfsv4: r.NFSv4,
			Kerberos5ReadOnly: r.Kerberos5ReadOnly, Kerberos5ReadWrite: r.Kerberos5ReadWrite,
			Kerberos5iReadOnly: r.Kerberos5iReadOnly, Kerberos5iReadWrite: r.Kerberos5iReadWrite,
			Kerberos5pReadOnly: r.Kerberos5pReadOnly, Kerberos5pReadWrite: r.Kerberos5pReadWrite,
			SquashMode: (*apiv1.SquashMode)(r.SquashMode), AnonUid: (*apiv1.Int64)(r.AnonUID),
		})
	}
	return out
}

func exportRulesFromWire(rules []apiv1.SimpleExportPolicyRule) []model.ExportRule {
	out := make([]model.ExportRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, model.ExportRule{
			AllowedClients: r.AllowedClients, HasRootAccess: r.HasRootAccess,
			AccessType: (*int32)(r.AccessType), NFSv3: r.Nfsv3, NFSv4: r.Nfsv4,
			Kerberos5ReadOnly: r.Kerberos5ReadOnly, Kerberos5ReadWrite: r.Kerberos5ReadWrite,
			Kerberos5iReadOnly: r.Kerberos5iReadOnly, Kerberos5iReadWrite: r.Kerberos5iReadWrite,
			Kerberos5pReadOnly: r.Kerberos5pReadOnly, Kerberos5pReadWrite: r.Kerberos5pReadWrite,
			SquashMode: (*int32)(r.SquashMode), AnonUID: (*int64)(r.AnonUid),
		})
	}
	return out
}

func scheduleToWire(s *model.Schedule) *apiv1.Schedule {
	if s == nil {
		return nil
	}
	return &apiv1.Schedule{SnapshotsToKeep: (*apiv1.Double)(s.SnapshotsToKeep), Minute: (*apiv1.Double)(s.Minute),
		Hour: (*apiv1.Double)(s.Hour), Day: s.Day, DaysOfMonth: s.DaysOfMonth}
}

func scheduleFromWire(s *apiv1.Schedule) *model.Schedule {
	if s == nil {
		return nil
	}
	return &model.Schedule{SnapshotsToKeep: (*float64)(s.SnapshotsToKeep), Minute: (*float64)(s.Minute),
		Hour: (*float64)(s.Hour), Day: s.Day, DaysOfMonth: s.DaysOfMonth}
}

func snapshotPolicyToWire(p *model.SnapshotPolicy) *apiv1.SnapshotPolicy {
	if p == nil {
		return nil
	}
	return &apiv1.SnapshotPolicy{Enabled: p.Enabled, HourlySchedule: scheduleToWire(p.Hourly),
		DailySchedule: scheduleToWire(p.Daily), WeeklySchedule: scheduleToWire(p.Weekly), MonthlySchedule: scheduleToWire(p.Monthly)}
}

func snapshotPolicyFromWire(p *apiv1.SnapshotPolicy) *model.SnapshotPolicy {
	if p == nil {
		return nil
	}
	return &model.SnapshotPolicy{Enabled: p.Enabled, Hourly: scheduleFromWire(p.HourlySchedule),
		Daily: scheduleFromWire(p.DailySchedule), Weekly: scheduleFromWire(p.WeeklySchedule), Monthly: scheduleFromWire(p.MonthlySchedule)}
}

// volumeToWire renders a volume; pool may be nil (deleted meanwhile), in which case
// the fields inherited from it are left out.
func (s *Server) volumeToWire(v *model.Volume, pool *model.Pool) apiv1.Volume {
	w := apiv1.Volume{
		Name: v.Name(), State: volumeState(v.State), StateDetails: v.Details, CreateTime: apiv1.FormatTime(v.CreateTime),
		ShareName: v.ShareName, StoragePool: v.StoragePool, CapacityGib: apiv1.Int64(v.CapacityGib),
		UnixPermissions: v.UnixPermissions, Labels: nilIfEmpty(v.Labels), Description: v.Desc,
		SnapshotPolicy: snapshotPolicyToWire(v.SnapshotPolicy), SnapReserve: apiv1.Double(v.SnapReserve),
		SnapshotDirectory: v.SnapshotDirectory, UsedGib: apiv1.Int64(ceilGiB(v.UsedBytes)),
		SecurityStyle: apiv1.SecurityStyle(v.SecurityStyle), KerberosEnabled: v.KerberosEnabled,
		EncryptionType: apiv1.EncryptionType(1),
		Zone:           v.Node,
	}
	// A volume on a node that stopped saying it is alive cannot be reached
	// until the node returns (its storage is there), unless another node
	// serves it meanwhile (failover: storage every node reaches).
	if s.opts.Cluster && v.Node != "" && !v.State.Busy() {
		at := v.Node
		if h := s.nodes.hosting(v.Network, v.Node); h != nil && h.Host != v.Node {
			at = h.Host
			if v.State == model.StateReady && v.Details == "" {
				w.StateDetails = fmt.Sprintf("served by node %s since %s (node %s %s)", h.Host, apiv1.FormatTime(h.Since), h.From,
					map[string]string{model.HostingLost: "was lost", model.HostingDrained: "is drained"}[h.Reason])
				if !h.ServesFor(h.Host) {
					w.StateDetails = fmt.Sprintf("moving to node %s: node %s is letting it go", h.Host, h.From)
				}
			}
		}
		if n := s.nodes.get(at); n != nil && !n.Up(s.now()) {
			w.State = volumeState(model.StateError)
			w.StateDetails = fmt.Sprintf("node %s, where this volume is served, has not been heard from since %s; the volume is unreachable until it returns",
				n.ID, apiv1.FormatTime(n.HeartbeatTime))
		}
	}
	// Storage that failed (health observed now, not stored: the database may be
	// on the failing disk) shows over the record's state, unless an operation
	// runs on the volume: it owns the state until it ends.
	if s.opts.Health != nil && !v.State.Busy() {
		if msg := s.opts.Health.VolumeFault(v.Key); msg != "" {
			w.State, w.StateDetails = volumeState(model.StateError), msg
		}
	}
	if v.HasExportPolicy {
		w.ExportPolicy = &apiv1.ExportPolicy{Rules: exportRulesToWire(v.ExportRules)}
	}
	for _, p := range v.Protocols {
		w.Protocols = append(w.Protocols, apiv1.Protocol(p))
	}
	for _, x := range v.SMBSettings {
		w.SmbSettings = append(w.SmbSettings, apiv1.SMBSetting(x))
	}
	for _, x := range v.RestrictedActions {
		w.RestrictedActions = append(w.RestrictedActions, apiv1.RestrictedAction(x))
	}
	if v.SourceSnapshot != "" {
		src := v.SourceSnapshot
		vol := src
		if i := strings.LastIndex(src, "/snapshots/"); i >= 0 {
			vol = src[:i]
		}
		w.CloneDetails = &apiv1.CloneDetails{SourceSnapshot: src, SourceVolume: vol}
	}
	w.MountOptions = mountOptions(v)
	if pool != nil {
		w.Network, w.ServiceLevel = pool.Network, apiv1.ServiceLevel(pool.ServiceLevel)
		w.ActiveDirectory, w.LdapEnabled = pool.ActiveDirectory, pool.LdapEnabled
		w.ThroughputMibps = apiv1.Double(roundMibps(model.VolumeThroughputMibps(v, pool, s.opts.Limits)))
	}
	return w
}

// mountOptions tells clients how to mount a volume, one entry per NFS protocol, with
// the options the services recommend (large transfers, hard mounts, nconnect on
// kernels from 5.3 on) and the access its export policy grants over that
// protocol: -o ro when its rules let clients only read.
func mountOptions(v *model.Volume) []apiv1.MountOption {
	if v.Endpoint == "" {
		return nil
	}
	var out []apiv1.MountOption
	for _, p := range v.Protocols {
		var vers string
		switch p {
		case model.ProtocolNFSv3:
			vers = "vers=3,proto=tcp"
		case model.ProtocolNFSv4:
			vers = "vers=4.1"
		case model.ProtocolSMB:
			if mo, ok := smbMountOption(v); ok {
				out = append(out, mo)
			}
			continue
		default:
			continue
		}
		if p == model.ProtocolNFSv4 && v.KerberosEnabled {
			out = append(out, kerberosMountOption(v))
			continue
		}
		full := v.Endpoint + ":/" + v.ShareName
		rw, ro := nfsAccess(v.ExportRules, p)
		mode, note := "rw", "Only clients its export policy allows can mount it."
		switch {
		case len(rw) == 0 && len(ro) == 0:
			note = "Its export policy lets no client mount it over " + nfsName(p) + " yet: add a rule."
		case len(rw) == 0:
			mode, note = "ro", "Its export policy lets clients ("+strings.Join(ro, ", ")+") only read it."
		case len(ro) > 0:
			note = "Clients its read-only rules match (" + strings.Join(ro, ", ") + ") mount with -o ro; only clients its export policy allows can mount it."
		}
		out = append(out, apiv1.MountOption{
			Export: "/" + v.ShareName, ExportFull: full, Protocol: apiv1.Protocol(p), IPAddress: v.Endpoint,
			Instructions: fmt.Sprintf("Linux: sudo mkdir -p /mnt/%[1]s && sudo mount -t nfs -o %[4]s,hard,%[2]s,rsize=1048576,wsize=1048576,nconnect=4 %[3]s /mnt/%[1]s "+
				"(nconnect needs kernel 5.3 or newer; drop it on older clients). %[5]s", v.ShareName, vers, full, mode, note),
		})
	}
	return out
}

// kerberosMountOption is a Kerberos volume's NFSv4.1 mount: by its server's
// DNS name (clients' tickets are for nfs/<name>; known once it is exported),
// with the strongest flavor its rules admit, and the access they grant.
func kerberosMountOption(v *model.Volume) apiv1.MountOption {
	server := v.KerberosServer
	if server == "" {
		server = "SERVER"
	}
	full := server + ":/" + v.ShareName
	rank := map[string]int{model.FlavorKrb5: 1, model.FlavorKrb5i: 2, model.FlavorKrb5p: 3}
	sec, anyRW := "", false
	var clients []string
	for _, r := range v.ExportRules {
		gs := r.KerberosGrants()
		if r.NFSv4 == nil || !*r.NFSv4 || len(gs) == 0 || r.AccessType == nil || *r.AccessType == model.AccessReadNone || r.AllowedClients == nil {
			continue
		}
		clients = append(clients, *r.AllowedClients)
		rw := *r.AccessType == model.AccessReadWrite
		for _, g := range gs {
			if rank[g.Flavor] > rank[sec] {
				sec = g.Flavor
			}
			rw = rw && g.ReadWrite
		}
		anyRW = anyRW || rw
	}
	mode := "rw"
	if !anyRW {
		mode = "ro"
	}
	note := "Only clients its export policy allows (" + strings.Join(clients, ", ") + ") can mount it, with the flavors their rule names."
	if sec == "" {
		sec, note = model.FlavorKrb5p, "Its export policy lets no client mount it yet: add a rule with a Kerberos flag."
	}
	if v.KerberosServer == "" {
		note += " Its server's name (SERVER here) is known once the volume is exported."
	}
	return apiv1.MountOption{
		Export: "/" + v.ShareName, ExportFull: full, Protocol: apiv1.Protocol(model.ProtocolNFSv4), IPAddress: v.Endpoint,
		Instructions: fmt.Sprintf("Linux, with rpc-gssd running and the user's Kerberos ticket from the domain (kinit): "+
			"sudo mkdir -p /mnt/%[1]s && sudo mount -t nfs -o %[4]s,hard,sec=%[5]s,vers=4.1,rsize=1048576,wsize=1048576 %[2]s /mnt/%[1]s "+
			"(mount by the name %[3]s, not the address: tickets are for nfs/%[3]s). %[6]s", v.ShareName, full, server, mode, sec, note),
	}
}

// nfsAccess lists the clients of the export rules that apply to NFS protocol p
// and let them write (rw) or only read (ro); rules granting no access are left out.
func nfsAccess(rules []model.ExportRule, p model.Protocol) (rw, ro []string) {
	for _, r := range rules {
		applies := r.NFSv3
		if p == model.ProtocolNFSv4 {
			applies = r.NFSv4
		}
		if applies == nil || !*applies || r.AccessType == nil || r.AllowedClients == nil {
			continue
		}
		switch *r.AccessType {
		case model.AccessReadWrite:
			rw = append(rw, *r.AllowedClients)
		case model.AccessReadOnly:
			ro = append(ro, *r.AllowedClients)
		}
	}
	return rw, ro
}

func nfsName(p model.Protocol) string {
	if p == model.ProtocolNFSv4 {
		return "NFSv4.1"
	}
	return "NFSv3"
}

// smbMountOption is an SMB volume's UNC path and mount commands, once it is shared
// (its server's name is known only after its network joined the domain).
func smbMountOption(v *model.Volume) (apiv1.MountOption, bool) {
	machine, realm, ok := strings.Cut(v.SMBServer, ".")
	if !ok {
		return apiv1.MountOption{}, false
	}
	addr, _ := netip.ParseAddr(v.Endpoint)
	mo, err := smb.MountOptions(smb.MountSpec{MachineName: machine, Realm: realm, Share: v.ShareName, Address: addr,
		Encrypt: slices.Contains(v.SMBSettings, int32(smb.EncryptData))})
	if err != nil {
		return apiv1.MountOption{}, false
	}
	return apiv1.MountOption{Export: mo.Export, ExportFull: mo.ExportFull, Protocol: apiv1.Protocol(model.ProtocolSMB),
		IPAddress: mo.IPAddress, Instructions: mo.Instructions}, true
}

func ceilGiB(b int64) int64 {
	if b <= 0 {
		return 0
	}
	return (b + 1<<30 - 1) >> 30
}

func snapshotToWire(sn *model.Snapshot) apiv1.Snapshot {
	return apiv1.Snapshot{Name: sn.Name(), State: snapshotState(sn.State), StateDetails: sn.Details,
		Description: sn.Desc, UsedBytes: apiv1.Double(sn.UsedBytes), CreateTime: apiv1.FormatTime(sn.CreateTime),
		Labels: nilIfEmpty(sn.Labels)}
}

// adToWire renders an AD policy without its password. inUse reports that a pool
// references it.
func adToWire(a *model.ActiveDirectory, inUse bool) apiv1.ActiveDirectory {
	state := a.State
	if inUse && state == model.StateReady {
		state = model.StateInUse
	}
	return apiv1.ActiveDirectory{
		Name: a.Name(), CreateTime: apiv1.FormatTime(a.CreateTime), State: adState(state), Domain: a.Domain,
		Site: a.Site, DNS: a.DNS, NetBiosPrefix: a.NetBiosPrefix, OrganizationalUnit: a.OrganizationalUnit,
		AesEncryption: a.AesEncryption, Username: a.Username, BackupOperators: a.BackupOperators,
		Administrators: a.Administrators, SecurityOperators: a.SecurityOperators, KdcHostname: a.KdcHostname,
		KdcIP: a.KdcIP, NfsUsersWithLdap: a.NfsUsersWithLdap, Description: a.Desc, LdapSigning: a.LdapSigning,
		EncryptDcConnections: a.EncryptDcConnections, Labels: nilIfEmpty(a.Labels), StateDetails: a.Details,
	}
}

// render helpers that look up what a resource's wire form derives from.

func (s *Server) renderPool(tx store.Tx, p *model.Pool) (apiv1.StoragePool, error) {
	use, err := store.UsageOfPool(tx, p.Name())
	if err != nil {
		return apiv1.StoragePool{}, err
	}
	return s.poolToWire(p, &poolStats{capacityGib: use.CapacityGib, count: int32(use.Volumes), throughput: use.ThroughputMibps}), nil
}

func (s *Server) renderVolume(tx store.Tx, v *model.Volume) (apiv1.Volume, error) {
	pool, err := store.Get[model.Pool](tx, store.KindPool, v.PoolName())
	if errors.Is(err, model.ErrNotFound) {
		return s.volumeToWire(v, nil), nil
	}
	if err != nil {
		return apiv1.Volume{}, err
	}
	return s.volumeToWire(v, pool), nil
}

func (s *Server) renderAD(tx store.Tx, a *model.ActiveDirectory) (apiv1.ActiveDirectory, error) {
	pools, err := store.PoolsUsingAD(tx, a.Name())
	if err != nil {
		return apiv1.ActiveDirectory{}, err
	}
	inUse := false
	prefix := model.LocationName(a.Project, a.Location) + "/"
	for _, p := range pools {
		inUse = inUse || strings.HasPrefix(p, prefix)
	}
	return adToWire(a, inUse), nil
}

// operationToWire renders an operation; a finished one carries its result as an
// Any, or Empty for deletes, or its error as a google.rpc.Status.
func (s *Server) operationToWire(ctx context.Context, op *model.Operation) (apiv1.Operation, error) {
	w := apiv1.Operation{
		Name: op.Name(),
		Metadata: &apiv1.OperationMetadata{
			Type: apiv1.TypeOperationMetadata, CreateTime: apiv1.FormatTime(op.CreateTime),
			EndTime: apiv1.FormatTime(op.EndTime), Target: op.Target, Verb: op.Kind.Verb(),
			StatusMessage: op.StatusMessage, RequestedCancellation: op.RequestedCancellation, APIVersion: "v1",
		},
		Done: op.Done,
	}
	if !op.Done {
		return w, nil
	}
	if op.Error != nil {
		w.Error = &apiv1.Status{Code: op.Error.Code, Message: op.Error.Message}
		return w, nil
	}
	var err error
	err = s.st.View(ctx, func(tx store.Tx) error {
		w.Response, err = s.renderResponse(tx, op)
		return err
	})
	return w, err
}

func (s *Server) renderResponse(tx store.Tx, op *model.Operation) (json.RawMessage, error) {
	if op.Response == nil {
		return apiv1.AnyOf(apiv1.TypeEmpty, struct{}{})
	}
	switch op.Kind {
	case model.OpPoolCreate, model.OpPoolUpdate:
		var p model.Pool
		if err := json.Unmarshal(op.Response, &p); err != nil {
			return nil, err
		}
		w, err := s.renderPool(tx, &p)
		if err != nil {
			return nil, err
		}
		return apiv1.AnyOf(apiv1.TypeStoragePool, w)
	case model.OpVolumeCreate, model.OpVolumeUpdate, model.OpVolumeRevert:
		var v model.Volume
		if err := json.Unmarshal(op.Response, &v); err != nil {
			return nil, err
		}
		w, err := s.renderVolume(tx, &v)
		if err != nil {
			return nil, err
		}
		return apiv1.AnyOf(apiv1.TypeVolume, w)
	case model.OpSnapshotCreate, model.OpSnapshotUpdate:
		var sn model.Snapshot
		if err := json.Unmarshal(op.Response, &sn); err != nil {
			return nil, err
		}
		return apiv1.AnyOf(apiv1.TypeSnapshot, snapshotToWire(&sn))
	case model.OpADCreate, model.OpADUpdate:
		var a model.ActiveDirectory
		if err := json.Unmarshal(op.Response, &a); err != nil {
			return nil, err
		}
		w, err := s.renderAD(tx, &a)
		if err != nil {
			return nil, err
		}
		return apiv1.AnyOf(apiv1.TypeActiveDirectory, w)
	}
	return nil, fmt.Errorf("operation %s: no response type for kind %s", op.ID, op.Kind)
}
