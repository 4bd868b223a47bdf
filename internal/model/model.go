// Package model is Basin's domain vocabulary: storage pools, volumes, snapshots,
// Active Directory policies, operations, service accounts, and the sentinel errors
// callers branch on. It imports nothing of Basin's and may be imported by any server
// package. Enum values use the v1 API's numbers so conversion is a cast.
package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Sentinel errors; the api package maps each to one HTTP/gRPC status.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalid            = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrAborted            = errors.New("aborted")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnimplemented      = errors.New("unimplemented")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrCancelled          = errors.New("cancelled")
	// ErrUnavailable: what the call needs is down for now (every node that
	// could take it); the same call may succeed later.
	ErrUnavailable = errors.New("unavailable")
)

// FieldError is an invalid-argument error about one field (JSON path, camelCase).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Invalid returns a FieldError for field.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Errorf wraps a sentinel with a user-safe message: Errorf(ErrNotFound, "volume %q", n).
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// UserMessage returns the user-safe message of the first error in err's chain made
// by Errorf or Invalid (Basin's own words), and false if there is none: anything
// else (a command's stderr, a path) is for the server log only.
func UserMessage(err error) (string, bool) {
	var ke *kindError
	if errors.As(err, &ke) {
		return ke.msg, true
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Error(), true
	}
	return "", false
}

// ServiceLevel of a pool (API numbering).
type ServiceLevel int32

// Service levels.
const (
	LevelUnspecified ServiceLevel = 0
	LevelPremium     ServiceLevel = 1
	LevelExtreme     ServiceLevel = 2
	LevelStandard    ServiceLevel = 3
	LevelFlex        ServiceLevel = 4
)

// State of a pool, volume or snapshot. Values are Basin's own; the api package maps
// them to each resource's enum.
type State string

// States.
const (
	StateCreating  State = "CREATING"
	StateReady     State = "READY"
	StateUpdating  State = "UPDATING"
	StateDeleting  State = "DELETING"
	StateRestoring State = "RESTORING"
	StateError     State = "ERROR"
	StateInUse     State = "IN_USE"
)

// Busy reports whether a resource in state s has an operation in progress.
func (s State) Busy() bool {
	return s == StateCreating || s == StateUpdating || s == StateDeleting || s == StateRestoring
}

// QosType of a pool.
type QosType int32

// QoS types.
const (
	QosUnspecified QosType = 0
	QosAuto        QosType = 1
	QosManual      QosType = 2
)

// Protocol of a volume.
type Protocol int32

// Protocols.
const (
	ProtocolNFSv3 Protocol = 1
	ProtocolNFSv4 Protocol = 2
	ProtocolSMB   Protocol = 3
)

// Meta is what every stored resource carries.
type Meta struct {
	Project    string            `json:"project"`
	Location   string            `json:"location"`
	ID         string            `json:"id"`
	CreateTime time.Time         `json:"createTime"`
	State      State             `json:"state"`
	Details    string            `json:"stateDetails,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Desc is the user's description.
	Desc string `json:"description,omitempty"`
}

// Network is a configured network: a name pools refer to
// (projects/{p}/global/networks/{name}), its subnet, and the range volumes'
// endpoint addresses are taken from (both ends included).
type Network struct {
	Name                        string
	Prefix                      netip.Prefix
	FirstEndpoint, LastEndpoint netip.Addr
}

// NetworksOrDefault returns a copy of nets with every missing endpoint range set
// to DefaultEndpoints, or the default network (10.99.0.0/24) if nets is empty.
func NetworksOrDefault(nets []Network) []Network {
	if len(nets) == 0 {
		nets = []Network{{Name: "default", Prefix: netip.MustParsePrefix("10.99.0.0/24")}}
	}
	nets = slices.Clone(nets)
	for i, n := range nets {
		if !n.FirstEndpoint.IsValid() || !n.LastEndpoint.IsValid() {
			nets[i].FirstEndpoint, nets[i].LastEndpoint = DefaultEndpoints(n.Prefix)
		}
	}
	return nets
}

// DefaultEndpoints is the endpoint range of a subnet configured without one: from
// its tenth address to the last address of its lower half (10.99.0.10-10.99.0.127
// for a /24), so client machines can use the upper half; in subnets too small for
// that (/28), from the second address (the first is the host's). The same rule as
// dataplane.ParseNetwork.
func DefaultEndpoints(p netip.Prefix) (first, last netip.Addr) {
	p = p.Masked()
	b := p.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	at := func(off uint32) netip.Addr {
		v := base + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	half := uint32(1) << (31 - p.Bits())
	if half-1 < 10 {
		return at(2), at(half - 1)
	}
	return at(10), at(half - 1)
}

// NetworkName returns the name in projects/{p}/global/networks/{name}.
func NetworkName(resource string) string {
	if i := strings.LastIndex(resource, "/"); i >= 0 {
		return resource[i+1:]
	}
	return resource
}

// LocationName is projects/{p}/locations/{l}.
func LocationName(project, location string) string {
	return "projects/" + project + "/locations/" + location
}

// Pool is a storage pool: a logical budget of capacity and throughput.
type Pool struct {
	Meta
	ServiceLevel             ServiceLevel `json:"serviceLevel"`
	CapacityGib              int64        `json:"capacityGib"`
	Network                  string       `json:"network"`
	ActiveDirectory          string       `json:"activeDirectory,omitempty"`
	LdapEnabled              bool         `json:"ldapEnabled,omitempty"`
	AllowAutoTiering         bool         `json:"allowAutoTiering,omitempty"`
	QosType                  QosType      `json:"qosType,omitempty"`
	CustomPerformanceEnabled bool         `json:"customPerformanceEnabled,omitempty"`
	TotalThroughputMibps     int64        `json:"totalThroughputMibps,omitempty"`
	TotalIops                int64        `json:"totalIops,omitempty"`
	Zone                     string       `json:"zone,omitempty"`
	ReplicaZone              string       `json:"replicaZone,omitempty"`
}

// Name is the pool's resource name.
func (p *Pool) Name() string {
	return LocationName(p.Project, p.Location) + "/storagePools/" + p.ID
}

// Export rule access types and squash modes (API numbering).
const (
	AccessReadOnly  int32 = 1
	AccessReadWrite int32 = 2
	AccessReadNone  int32 = 3

	SquashNoRoot int32 = 1
	SquashRoot   int32 = 2
	SquashAll    int32 = 3
)

// ExportRule is one rule of a volume's export policy. Pointer fields keep the
// presence the API gives them.
type ExportRule struct {
	AllowedClients      *string `json:"allowedClients,omitempty"`
	HasRootAccess       *string `json:"hasRootAccess,omitempty"`
	AccessType          *int32  `json:"accessType,omitempty"`
	NFSv3               *bool   `json:"nfsv3,omitempty"`
	NFSv4               *bool   `json:"nfsv4,omitempty"`
	Kerberos5ReadOnly   *bool   `json:"kerberos5ReadOnly,omitempty"`
	Kerberos5ReadWrite  *bool   `json:"kerberos5ReadWrite,omitempty"`
	Kerberos5iReadOnly  *bool   `json:"kerberos5iReadOnly,omitempty"`
	Kerberos5iReadWrite *bool   `json:"kerberos5iReadWrite,omitempty"`
	Kerberos5pReadOnly  *bool   `json:"kerberos5pReadOnly,omitempty"`
	Kerberos5pReadWrite *bool   `json:"kerberos5pReadWrite,omitempty"`
	SquashMode          *int32  `json:"squashMode,omitempty"`
	AnonUID             *int64  `json:"anonUid,omitempty"`
}

// Kerberos flavors, as NFS and Ganesha name them.
const (
	FlavorKrb5  = "krb5"  // authentication
	FlavorKrb5i = "krb5i" // and integrity
	FlavorKrb5p = "krb5p" // and privacy
)

// KerberosGrant is what a rule's flags give one Kerberos flavor.
type KerberosGrant struct {
	Flavor    string // FlavorKrb5, FlavorKrb5i or FlavorKrb5p
	Field     string // the flag that grants it, e.g. "kerberos5pReadWrite"
	ReadWrite bool   // read-write; else read-only
}

// KerberosGrants lists the flavors r's Kerberos flags admit, krb5 first. A
// flavor's read-write flag wins over its read-only one (upstream: the
// read-only flag is ignored when read-write is set).
func (r ExportRule) KerberosGrants() []KerberosGrant {
	var gs []KerberosGrant
	for _, f := range []struct {
		flavor, name string
		ro, rw       *bool
	}{
		{FlavorKrb5, "kerberos5", r.Kerberos5ReadOnly, r.Kerberos5ReadWrite},
		{FlavorKrb5i, "kerberos5i", r.Kerberos5iReadOnly, r.Kerberos5iReadWrite},
		{FlavorKrb5p, "kerberos5p", r.Kerberos5pReadOnly, r.Kerberos5pReadWrite},
	} {
		switch {
		case f.rw != nil && *f.rw:
			gs = append(gs, KerberosGrant{Flavor: f.flavor, Field: f.name + "ReadWrite", ReadWrite: true})
		case f.ro != nil && *f.ro:
			gs = append(gs, KerberosGrant{Flavor: f.flavor, Field: f.name + "ReadOnly"})
		}
	}
	return gs
}

// Schedule is one snapshot schedule (hourly, daily, weekly or monthly).
type Schedule struct {
	SnapshotsToKeep *float64 `json:"snapshotsToKeep,omitempty"`
	Minute          *float64 `json:"minute,omitempty"`
	Hour            *float64 `json:"hour,omitempty"`
	Day             *string  `json:"day,omitempty"`
	DaysOfMonth     *string  `json:"daysOfMonth,omitempty"`
}

// SnapshotPolicy holds a volume's snapshot schedules (stored; scheduling comes later).
type SnapshotPolicy struct {
	Enabled *bool     `json:"enabled,omitempty"`
	Hourly  *Schedule `json:"hourly,omitempty"`
	Daily   *Schedule `json:"daily,omitempty"`
	Weekly  *Schedule `json:"weekly,omitempty"`
	Monthly *Schedule `json:"monthly,omitempty"`
}

// Security styles (securityStyle): which permissions are authoritative.
const (
	SecurityStyleNTFS int32 = 1 // NT ACLs, changed over SMB
	SecurityStyleUNIX int32 = 2 // mode bits, changed over NFS
)

// NTACLs reports whether v's permissions are the NT ACLs set from Windows:
// an SMB-only volume, or a dual-protocol one of NTFS style. Its root's mode
// is set when it is made, then follows those ACLs (Samba derives it).
func (v *Volume) NTACLs() bool {
	if v.SecurityStyle == SecurityStyleNTFS {
		return true
	}
	return len(v.Protocols) > 0 && !slices.ContainsFunc(v.Protocols, func(p Protocol) bool { return p != ProtocolSMB })
}

// Volume is a file share carved from a pool.
type Volume struct {
	Meta
	ShareName         string          `json:"shareName"`
	StoragePool       string          `json:"storagePool"`
	CapacityGib       int64           `json:"capacityGib"`
	ExportRules       []ExportRule    `json:"exportRules,omitempty"`
	HasExportPolicy   bool            `json:"hasExportPolicy,omitempty"`
	Protocols         []Protocol      `json:"protocols"`
	SMBSettings       []int32         `json:"smbSettings,omitempty"`
	UnixPermissions   string          `json:"unixPermissions,omitempty"`
	SnapshotPolicy    *SnapshotPolicy `json:"snapshotPolicy,omitempty"`
	SnapReserve       float64         `json:"snapReserve,omitempty"`
	SnapshotDirectory bool            `json:"snapshotDirectory,omitempty"`
	SecurityStyle     int32           `json:"securityStyle,omitempty"`
	KerberosEnabled   bool            `json:"kerberosEnabled,omitempty"`
	RestrictedActions []int32         `json:"restrictedActions,omitempty"`
	ThroughputMibps   float64         `json:"throughputMibps,omitempty"`
	// SourceSnapshot is the full name of the snapshot this volume was cloned from.
	SourceSnapshot string `json:"sourceSnapshot,omitempty"`
	// UsedBytes is the last observed usage of the volume and its snapshots.
	UsedBytes int64 `json:"usedBytes,omitempty"`

	// Network is the name of the pool's network (pools cannot change network).
	Network string `json:"network,omitempty"`
	// Endpoint is the volume's own address in its network, the lowest free one of
	// the network's endpoint range; it is released when the volume is deleted.
	Endpoint string `json:"endpoint,omitempty"`
	// ExportID is the volume's NFS export ID (1..65535), held from its first export
	// until it is deleted; 0 = none yet. The controller allocates it.
	ExportID uint64 `json:"exportId,omitempty"`
	// SnapshotDirExportID is the export ID of the volume's snapshot directory
	// (/<share>/.snapshot), held only while it is exported; 0 = none.
	SnapshotDirExportID uint64 `json:"snapshotDirExportId,omitempty"`
	// SMBServer is the fully qualified name of the SMB server that shares the
	// volume (the machine account its network joined to the pool's Active
	// Directory as, e.g. "BASIN-1A2B.basin.test"), once shared; "" = not yet.
	SMBServer string `json:"smbServer,omitempty"`
	// KerberosServer is the DNS name a Kerberos volume's NFS clients mount it
	// by (their tickets are for nfs/<name>): the pool's AD machine on the
	// volume's network, e.g. "basin-1a2b.basin.test", once exported; "" = not
	// yet.
	KerberosServer string `json:"kerberosServer,omitempty"`

	// Node is the ID of the node the volume is placed on: its storage is there,
	// that node's data plane serves it and runs its operations. Set at create
	// (a clone goes where its source is) and never changed. On the wire as
	// the volume's zone.
	Node string `json:"node,omitempty"`

	// Key names the volume's storage (filesystem image, mount point); it never
	// changes and is never reused, so a deleted volume's leftovers cannot collide
	// with a new one.
	Key string `json:"key"`
}

// Name is the volume's resource name.
func (v *Volume) Name() string {
	return LocationName(v.Project, v.Location) + "/volumes/" + v.ID
}

// PoolName is the full name of the volume's pool.
func (v *Volume) PoolName() string {
	return LocationName(v.Project, v.Location) + "/storagePools/" + v.StoragePool
}

// Snapshot is a point-in-time, read-only copy of a volume.
type Snapshot struct {
	Meta
	Volume    string  `json:"volume"` // volume ID
	UsedBytes float64 `json:"usedBytes,omitempty"`
	// ExportID is the ID of the snapshot's read-only NFS export under
	// /<share>/.snapshot/<id>, held only while that export is loaded; 0 = none.
	ExportID uint64 `json:"exportId,omitempty"`
	// Schedule is the snapshot schedule that took it (ScheduleHourly…) and
	// ScheduledFor the boundary it was taken for; empty for a snapshot taken on
	// request. Only the snapshot scheduler sets them (through intent), and
	// nothing on the wire reaches them: its retention deletes no other snapshot,
	// whatever its name.
	Schedule     string    `json:"schedule,omitempty"`
	ScheduledFor time.Time `json:"scheduledFor,omitzero"`
}

// Snapshot schedules, as Snapshot.Schedule names them.
const (
	ScheduleHourly  = "hourly"
	ScheduleDaily   = "daily"
	ScheduleWeekly  = "weekly"
	ScheduleMonthly = "monthly"
)

// VolumeName is the full name of the snapshot's volume.
func (s *Snapshot) VolumeName() string {
	return LocationName(s.Project, s.Location) + "/volumes/" + s.Volume
}

// Name is the snapshot's resource name.
func (s *Snapshot) Name() string { return s.VolumeName() + "/snapshots/" + s.ID }

// ActiveDirectory is an AD connection policy. Its password is a secret, stored only
// sealed (internal/secret): the api package never returns it and nothing logs it.
type ActiveDirectory struct {
	Meta
	Domain             string `json:"domain"`
	Site               string `json:"site,omitempty"`
	DNS                string `json:"dns"`
	NetBiosPrefix      string `json:"netBiosPrefix"`
	OrganizationalUnit string `json:"organizationalUnit,omitempty"`
	AesEncryption      bool   `json:"aesEncryption,omitempty"`
	Username           string `json:"username"`
	// PasswordSealed is the join password sealed by internal/secret with the
	// associated data PasswordAAD(); never the clear text. The controller opens it
	// with the daemon's secret.Box when it joins the domain.
	PasswordSealed       string   `json:"passwordSealed,omitempty"`
	BackupOperators      []string `json:"backupOperators,omitempty"`
	Administrators       []string `json:"administrators,omitempty"`
	SecurityOperators    []string `json:"securityOperators,omitempty"`
	KdcHostname          string   `json:"kdcHostname,omitempty"`
	KdcIP                string   `json:"kdcIp,omitempty"`
	NfsUsersWithLdap     bool     `json:"nfsUsersWithLdap,omitempty"`
	LdapSigning          bool     `json:"ldapSigning,omitempty"`
	EncryptDcConnections bool     `json:"encryptDcConnections,omitempty"`
	// Members are the machine accounts Basin joined (or is joining) to the domain,
	// one per network whose SMB service uses the policy: network name → NetBIOS
	// machine name ("BASIN-1A2B"). A name is recorded before its join starts, so a
	// join interrupted at any point is retried under the same name. Not on the wire.
	Members map[string]string `json:"members,omitempty"`
}

// Name is the policy's resource name.
func (a *ActiveDirectory) Name() string {
	return LocationName(a.Project, a.Location) + "/activeDirectories/" + a.ID
}

// PasswordAAD is the associated data the password is sealed with: it binds the
// sealed value to this policy, so it cannot be moved to another.
func (a *ActiveDirectory) PasswordAAD() string { return a.Name() + "#password" }

// OpKind says what an operation does; the controller plans by it.
type OpKind string

// Operation kinds.
const (
	OpPoolCreate OpKind = "pool.create"
	OpPoolUpdate OpKind = "pool.update"
	OpPoolDelete OpKind = "pool.delete"
	// OpPoolValidateDirectory checks a pool's Active Directory policy against the
	// domain (storagePools:validateDirectoryService); it changes nothing.
	OpPoolValidateDirectory OpKind = "pool.validateDirectoryService"
	OpVolumeCreate          OpKind = "volume.create"
	OpVolumeUpdate          OpKind = "volume.update"
	OpVolumeDelete          OpKind = "volume.delete"
	OpVolumeRevert          OpKind = "volume.revert"
	OpSnapshotCreate        OpKind = "snapshot.create"
	OpSnapshotUpdate        OpKind = "snapshot.update"
	OpSnapshotDelete        OpKind = "snapshot.delete"
	OpADCreate              OpKind = "activeDirectory.create"
	OpADUpdate              OpKind = "activeDirectory.update"
	OpADDelete              OpKind = "activeDirectory.delete"
)

// Verb is the OperationMetadata.verb of an operation kind.
func (k OpKind) Verb() string {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '.' {
			return string(k[i+1:])
		}
	}
	return string(k)
}

// Status is a finished operation's error: a gRPC code and a user-safe message.
type Status struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

// Err returns the status as an error: its message, wrapping the sentinel its code
// stands for (an unknown or internal code wraps none).
func (s *Status) Err() error {
	kind := map[int32]error{1: ErrCancelled, 3: ErrInvalid, 5: ErrNotFound, 6: ErrAlreadyExists, 7: ErrPermissionDenied,
		8: ErrResourceExhausted, 9: ErrFailedPrecondition, 10: ErrAborted, 12: ErrUnimplemented, 14: ErrUnavailable, 16: ErrUnauthenticated}[s.Code]
	if kind == nil {
		return errors.New(s.Message)
	}
	return Errorf(kind, "%s", s.Message)
}

// Operation is a long-running operation. It is written in the same transaction as
// the intent it carries out, and the controller drives it to Done.
type Operation struct {
	Project               string    `json:"project"`
	Location              string    `json:"location"`
	ID                    string    `json:"id"`
	Kind                  OpKind    `json:"kind"`
	Target                string    `json:"target"`
	CreateTime            time.Time `json:"createTime"`
	EndTime               time.Time `json:"endTime,omitzero"`
	Done                  bool      `json:"done,omitempty"`
	RequestedCancellation bool      `json:"requestedCancellation,omitempty"`
	StatusMessage         string    `json:"statusMessage,omitempty"`
	Error                 *Status   `json:"error,omitempty"`
	// Response is the stored resource (model JSON) the operation finished with; nil
	// for deletes, whose response is Empty.
	Response []byte `json:"response,omitempty"`
	// Params carry what the operation needs beyond its target, and its progress.
	Params OpParams `json:"params,omitzero"`
	// Prev is the target resource before an update, restored if it is cancelled.
	Prev []byte `json:"prev,omitempty"`
	// Owner is the node running the operation, Epoch how many times it was
	// claimed, and LeaseExpireTime when the owner's claim lapses unless renewed
	// (internal/controller fence.go). Never on the wire.
	Owner           string    `json:"owner,omitempty"`
	Epoch           int64     `json:"epoch,omitempty"`
	LeaseExpireTime time.Time `json:"leaseExpireTime,omitzero"`
}

// Name is the operation's resource name.
func (o *Operation) Name() string {
	return LocationName(o.Project, o.Location) + "/operations/" + o.ID
}

// Node is a Basin node (a basin serve) as it registered in the store: its ID,
// the URL of its API, when it started and when it last said it was alive, and
// what volumes are placed by: its networks (each its own endpoint range) and its
// store's space as of that heartbeat.
type Node struct {
	ID            string    `json:"id"`
	APIURL        string    `json:"apiUrl"`
	StartTime     time.Time `json:"startTime"`
	HeartbeatTime time.Time `json:"heartbeatTime"`
	// Instance is a random ID of the process: a second process that registers
	// under the ID of a node still alive is refused (daemon/nodes.go).
	Instance string    `json:"instance,omitempty"`
	Networks []Network `json:"networks,omitempty"`
	// StoreBytes is what the node's store holds for volumes and FreeBytes what
	// it may still give (storage.Backend.StoreSpace); 0, 0 = not read yet.
	StoreBytes int64 `json:"storeBytes,omitempty"`
	FreeBytes  int64 `json:"freeBytes,omitempty"`
	// SharedStorage names the storage the node's volumes are on when other
	// nodes can reach it too (a CephFS file system: its cluster's fsid, file
	// system and subvolume group); "" = the node's own disk. Volumes move only
	// between nodes with the same SharedStorage (failover).
	SharedStorage string `json:"sharedStorage,omitempty"`
	// FenceAddrs are the addresses the node's clients of the shared storage
	// connect from (its sandboxes' links to the Ceph cluster): when the node
	// is lost, another cuts them off the storage before it serves the node's
	// volumes (storage.ClientFencer).
	FenceAddrs []string `json:"fenceAddrs,omitempty"`
}

// NodeDownAfter is how long after its last heartbeat a node counts as down:
// three heartbeats missed (daemon.HeartbeatInterval).
const NodeDownAfter = 30 * time.Second

// Up reports whether the node's last heartbeat is recent at now.
func (n *Node) Up(now time.Time) bool { return now.Sub(n.HeartbeatTime) <= NodeDownAfter }

// Network returns the node's network called name.
func (n *Node) Network(name string) (Network, bool) {
	for _, nw := range n.Networks {
		if nw.Name == name {
			return nw, true
		}
	}
	return Network{}, false
}

// Hosting says which node serves the volumes placed on node Home that are on
// network Network (failover, internal/controller/failover.go), when that is
// not Home itself: Home was lost or drained, and the volumes' storage is
// shared, so another node serves them under the same endpoint addresses.
// Named HostingName(Network, Home). No record: Home serves them.
//
// A move away from a node that still serves (a drain, a give-back) is made in
// two steps, so two nodes never serve a volume at once: the record names the
// new Host and From, the node that serves now; From stops serving and sets
// Released; only then does Host start. A move away from a lost node needs no
// release: the lost node fenced itself before its serving lease lapsed.
type Hosting struct {
	Network string `json:"network"`
	Home    string `json:"home"`
	Host    string `json:"host"`
	// From is the node that served before this move, Released whether it has
	// stopped (always, when the move was made because From was lost).
	From     string `json:"from,omitempty"`
	Released bool   `json:"released"`
	// Epoch counts the moves: a release is acknowledged for one epoch only.
	Epoch  int64     `json:"epoch"`
	Reason string    `json:"reason"` // HostingLost, HostingDrained or HostingHome
	Since  time.Time `json:"since"`
}

// Why a Hosting moved.
const (
	HostingLost    = "lost"    // its host stopped renewing its serving lease
	HostingDrained = "drained" // its host was drained (basin nodes drain)
	HostingHome    = "home"    // given back to its home node
)

// HostingName names the Hosting of the volumes of node home on network.
func HostingName(network, home string) string { return network + "@" + home }

// ServesFor reports whether node serves what h is about: it is the host and
// the previous host has let go.
func (h *Hosting) ServesFor(node string) bool { return h.Host == node && (h.Released || h.From == "") }

// Drain marks a node drained (basin nodes drain): the volumes it serves move
// to other nodes that reach the same storage, and none move to it, until it is
// undrained. Named by the node's ID; no record: not drained.
type Drain struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

// ServiceAccount is an identity that signs its own tokens with keys Basin issued.
type ServiceAccount struct {
	Email       string    `json:"email"`
	Project     string    `json:"project"`
	UniqueID    string    `json:"uniqueId,omitempty"`
	Description string    `json:"description,omitempty"`
	DisplayName string    `json:"displayName,omitempty"`
	Disabled    bool      `json:"disabled,omitempty"`
	CreateTime  time.Time `json:"createTime"`
	// DisableTime is when the account was last disabled: access tokens issued
	// before it stay refused once it is enabled again.
	DisableTime time.Time `json:"disableTime,omitzero"`
	// Owner accounts hold roles/owner on every project.
	Owner bool `json:"owner,omitempty"`
}

// ServiceAccountKey is the public half of a key; Basin never stores private keys.
type ServiceAccountKey struct {
	ID           string    `json:"id"`
	Email        string    `json:"email"`
	PublicKeyPEM string    `json:"publicKeyPem"`
	CreateTime   time.Time `json:"createTime"`
	ExpireTime   time.Time `json:"expireTime,omitzero"`
}

// Binding grants a role to members ("serviceAccount:EMAIL").
type Binding struct {
	Role    string   `json:"role"`
	Members []string `json:"members"`
}

// IAMPolicy is a project's role bindings. Etag changes with every write.
type IAMPolicy struct {
	Project  string    `json:"project"`
	Bindings []Binding `json:"bindings,omitempty"`
	Etag     string    `json:"etag"`
}

// AuditEntry records one mutating or denied call. It never holds request bodies.
type AuditEntry struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Time      time.Time `json:"time"`
	Principal string    `json:"principal,omitempty"`
	Method    string    `json:"method"` // the permission the call needs, or HTTP method and path
	Resource  string    `json:"resource"`
	Status    int       `json:"status"`
	Outcome   string    `json:"outcome"` // OK or the canonical error code
	RequestID string    `json:"requestId"`
	Client    string    `json:"clientAddress"`
	// Count is how many calls the entry stands for: refused calls of one client
	// (unauthenticated or rate-limited) are recorded in aggregate, one entry per
	// interval, with the details of the first. 0 means 1.
	Count int `json:"count,omitempty"`
	// Throttled is how many of those calls were answered 429 by a rate limit.
	Throttled int `json:"throttled,omitempty"`
	// Details says more, in words for the project's users, of what Basin did on
	// its own (a volume's storage failing, and back).
	Details string `json:"details,omitempty"`
}
