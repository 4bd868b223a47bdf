package apiv1

import "encoding/json"

//go:generate sh -c "python3 gen_enums.py && gofmt -w enums_gen.go"

// StoragePool is google.cloud.netapp.v1.StoragePool.
type StoragePool struct {
	Name                     string            `json:"name,omitempty"`
	ServiceLevel             ServiceLevel      `json:"serviceLevel,omitempty"`
	CapacityGib              Int64             `json:"capacityGib,omitempty"`
	VolumeCapacityGib        Int64             `json:"volumeCapacityGib,omitempty"`
	VolumeCount              int32             `json:"volumeCount,omitempty"`
	State                    PoolState         `json:"state,omitempty"`
	StateDetails             string            `json:"stateDetails,omitempty"`
	CreateTime               string            `json:"createTime,omitempty"`
	Description              string            `json:"description,omitempty"`
	Labels                   map[string]string `json:"labels,omitempty"`
	Network                  string            `json:"network,omitempty"`
	ActiveDirectory          string            `json:"activeDirectory,omitempty"`
	KmsConfig                string            `json:"kmsConfig,omitempty"`
	LdapEnabled              bool              `json:"ldapEnabled,omitempty"`
	PsaRange                 string            `json:"psaRange,omitempty"`
	EncryptionType           EncryptionType    `json:"encryptionType,omitempty"`
	GlobalAccessAllowed      *bool             `json:"globalAccessAllowed,omitempty"`
	AllowAutoTiering         bool              `json:"allowAutoTiering,omitempty"`
	ReplicaZone              string            `json:"replicaZone,omitempty"`
	Zone                     string            `json:"zone,omitempty"`
	SatisfiesPzs             bool              `json:"satisfiesPzs,omitempty"`
	SatisfiesPzi             bool              `json:"satisfiesPzi,omitempty"`
	CustomPerformanceEnabled bool              `json:"customPerformanceEnabled,omitempty"`
	TotalThroughputMibps     Int64             `json:"totalThroughputMibps,omitempty"`
	TotalIops                Int64             `json:"totalIops,omitempty"`
	HotTierSizeGib           Int64             `json:"hotTierSizeGib,omitempty"`
	EnableHotTierAutoResize  *bool             `json:"enableHotTierAutoResize,omitempty"`
	QosType                  QosType           `json:"qosType,omitempty"`
	AvailableThroughputMibps Double            `json:"availableThroughputMibps,omitempty"`
	ColdTierSizeUsedGib      Int64             `json:"coldTierSizeUsedGib,omitempty"`
	HotTierSizeUsedGib       Int64             `json:"hotTierSizeUsedGib,omitempty"`
	Type                     *StoragePoolType  `json:"type,omitempty"`
	Mode                     *Mode             `json:"mode,omitempty"`
	ScaleType                ScaleType         `json:"scaleType,omitempty"`
}

// Volume is google.cloud.netapp.v1.Volume.
type Volume struct {
	Name                        string             `json:"name,omitempty"`
	State                       VolumeState        `json:"state,omitempty"`
	StateDetails                string             `json:"stateDetails,omitempty"`
	CreateTime                  string             `json:"createTime,omitempty"`
	ShareName                   string             `json:"shareName,omitempty"`
	PsaRange                    string             `json:"psaRange,omitempty"`
	StoragePool                 string             `json:"storagePool,omitempty"`
	Network                     string             `json:"network,omitempty"`
	ServiceLevel                ServiceLevel       `json:"serviceLevel,omitempty"`
	CapacityGib                 Int64              `json:"capacityGib,omitempty"`
	ExportPolicy                *ExportPolicy      `json:"exportPolicy,omitempty"`
	Protocols                   []Protocol         `json:"protocols,omitempty"`
	SmbSettings                 []SMBSetting       `json:"smbSettings,omitempty"`
	MountOptions                []MountOption      `json:"mountOptions,omitempty"`
	UnixPermissions             string             `json:"unixPermissions,omitempty"`
	Labels                      map[string]string  `json:"labels,omitempty"`
	Description                 string             `json:"description,omitempty"`
	SnapshotPolicy              *SnapshotPolicy    `json:"snapshotPolicy,omitempty"`
	SnapReserve                 Double             `json:"snapReserve,omitempty"`
	SnapshotDirectory           bool               `json:"snapshotDirectory,omitempty"`
	UsedGib                     Int64              `json:"usedGib,omitempty"`
	SecurityStyle               SecurityStyle      `json:"securityStyle,omitempty"`
	KerberosEnabled             bool               `json:"kerberosEnabled,omitempty"`
	LdapEnabled                 bool               `json:"ldapEnabled,omitempty"`
	ActiveDirectory             string             `json:"activeDirectory,omitempty"`
	RestoreParameters           *RestoreParameters `json:"restoreParameters,omitempty"`
	KmsConfig                   string             `json:"kmsConfig,omitempty"`
	EncryptionType              EncryptionType     `json:"encryptionType,omitempty"`
	HasReplication              bool               `json:"hasReplication,omitempty"`
	BackupConfig                json.RawMessage    `json:"backupConfig,omitempty"`
	RestrictedActions           []RestrictedAction `json:"restrictedActions,omitempty"`
	LargeCapacity               bool               `json:"largeCapacity,omitempty"`
	MultipleEndpoints           bool               `json:"multipleEndpoints,omitempty"`
	TieringPolicy               json.RawMessage    `json:"tieringPolicy,omitempty"`
	ReplicaZone                 string             `json:"replicaZone,omitempty"`
	Zone                        string             `json:"zone,omitempty"`
	ColdTierSizeGib             Int64              `json:"coldTierSizeGib,omitempty"`
	HybridReplicationParameters json.RawMessage    `json:"hybridReplicationParameters,omitempty"`
	ThroughputMibps             Double             `json:"throughputMibps,omitempty"`
	CacheParameters             json.RawMessage    `json:"cacheParameters,omitempty"`
	HotTierSizeUsedGib          Int64              `json:"hotTierSizeUsedGib,omitempty"`
	BlockDevices                json.RawMessage    `json:"blockDevices,omitempty"`
	LargeCapacityConfig         json.RawMessage    `json:"largeCapacityConfig,omitempty"`
	CloneDetails                *CloneDetails      `json:"cloneDetails,omitempty"`
}

// ExportPolicy is google.cloud.netapp.v1.ExportPolicy.
type ExportPolicy struct {
	Rules []SimpleExportPolicyRule `json:"rules"`
}

// SimpleExportPolicyRule is google.cloud.netapp.v1.SimpleExportPolicyRule, one export
// rule; every field has presence.
type SimpleExportPolicyRule struct {
	AllowedClients      *string     `json:"allowedClients,omitempty"`
	HasRootAccess       *string     `json:"hasRootAccess,omitempty"`
	AccessType          *AccessType `json:"accessType,omitempty"`
	Nfsv3               *bool       `json:"nfsv3,omitempty"`
	Nfsv4               *bool       `json:"nfsv4,omitempty"`
	Kerberos5ReadOnly   *bool       `json:"kerberos5ReadOnly,omitempty"`
	Kerberos5ReadWrite  *bool       `json:"kerberos5ReadWrite,omitempty"`
	Kerberos5iReadOnly  *bool       `json:"kerberos5iReadOnly,omitempty"`
	Kerberos5iReadWrite *bool       `json:"kerberos5iReadWrite,omitempty"`
	Kerberos5pReadOnly  *bool       `json:"kerberos5pReadOnly,omitempty"`
	Kerberos5pReadWrite *bool       `json:"kerberos5pReadWrite,omitempty"`
	SquashMode          *SquashMode `json:"squashMode,omitempty"`
	AnonUid             *Int64      `json:"anonUid,omitempty"`
}

// SnapshotPolicy is google.cloud.netapp.v1.SnapshotPolicy.
type SnapshotPolicy struct {
	Enabled         *bool     `json:"enabled,omitempty"`
	HourlySchedule  *Schedule `json:"hourlySchedule,omitempty"`
	DailySchedule   *Schedule `json:"dailySchedule,omitempty"`
	WeeklySchedule  *Schedule `json:"weeklySchedule,omitempty"`
	MonthlySchedule *Schedule `json:"monthlySchedule,omitempty"`
}

// Schedule covers the Hourly, Daily, Weekly and Monthly schedule messages; the fields
// a kind lacks are never set on it.
type Schedule struct {
	SnapshotsToKeep *Double `json:"snapshotsToKeep,omitempty"`
	Minute          *Double `json:"minute,omitempty"`
	Hour            *Double `json:"hour,omitempty"`
	Day             *string `json:"day,omitempty"`
	DaysOfMonth     *string `json:"daysOfMonth,omitempty"`
}

// MountOption is google.cloud.netapp.v1.MountOption (output only).
type MountOption struct {
	Export       string   `json:"export,omitempty"`
	ExportFull   string   `json:"exportFull,omitempty"`
	Protocol     Protocol `json:"protocol,omitempty"`
	Instructions string   `json:"instructions,omitempty"`
	IPAddress    string   `json:"ipAddress,omitempty"`
}

// RestoreParameters selects the source of a new volume.
type RestoreParameters struct {
	SourceSnapshot string `json:"sourceSnapshot,omitempty"`
	SourceBackup   string `json:"sourceBackup,omitempty"`
}

// CloneDetails describes a volume cloned from a snapshot (output only).
type CloneDetails struct {
	SourceSnapshot string `json:"sourceSnapshot,omitempty"`
	SourceVolume   string `json:"sourceVolume,omitempty"`
	SharedSpaceGib Int64  `json:"sharedSpaceGib,omitempty"`
}

// Snapshot is google.cloud.netapp.v1.Snapshot.
type Snapshot struct {
	Name         string            `json:"name,omitempty"`
	State        SnapshotState     `json:"state,omitempty"`
	StateDetails string            `json:"stateDetails,omitempty"`
	Description  string            `json:"description,omitempty"`
	UsedBytes    Double            `json:"usedBytes,omitempty"`
	CreateTime   string            `json:"createTime,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// ActiveDirectory is google.cloud.netapp.v1.ActiveDirectory. Password is
// input only: the api package never sets it on output.
type ActiveDirectory struct {
	Name                 string               `json:"name,omitempty"`
	CreateTime           string               `json:"createTime,omitempty"`
	State                ActiveDirectoryState `json:"state,omitempty"`
	Domain               string               `json:"domain,omitempty"`
	Site                 string               `json:"site,omitempty"`
	DNS                  string               `json:"dns,omitempty"`
	NetBiosPrefix        string               `json:"netBiosPrefix,omitempty"`
	OrganizationalUnit   string               `json:"organizationalUnit,omitempty"`
	AesEncryption        bool                 `json:"aesEncryption,omitempty"`
	Username             string               `json:"username,omitempty"`
	Password             string               `json:"password,omitempty"`
	BackupOperators      []string             `json:"backupOperators,omitempty"`
	Administrators       []string             `json:"administrators,omitempty"`
	SecurityOperators    []string             `json:"securityOperators,omitempty"`
	KdcHostname          string               `json:"kdcHostname,omitempty"`
	KdcIP                string               `json:"kdcIp,omitempty"`
	NfsUsersWithLdap     bool                 `json:"nfsUsersWithLdap,omitempty"`
	Description          string               `json:"description,omitempty"`
	LdapSigning          bool                 `json:"ldapSigning,omitempty"`
	EncryptDcConnections bool                 `json:"encryptDcConnections,omitempty"`
	Labels               map[string]string    `json:"labels,omitempty"`
	StateDetails         string               `json:"stateDetails,omitempty"`
}

// RevertVolumeRequest is the body of POST …/volumes/{id}:revert.
type RevertVolumeRequest struct {
	SnapshotID string `json:"snapshotId,omitempty"`
}

// ValidateDirectoryServiceRequest is the body of POST
// …/storagePools/{id}:validateDirectoryService.
type ValidateDirectoryServiceRequest struct {
	DirectoryServiceType DirectoryServiceType `json:"directoryServiceType,omitempty"`
}

// Location is google.cloud.location.Location. Its parser in the official client is
// strict: only these fields may appear.
type Location struct {
	Name        string            `json:"name,omitempty"`
	LocationID  string            `json:"locationId,omitempty"`
	DisplayName string            `json:"displayName,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Metadata    *LocationMetadata `json:"metadata,omitempty"`
}

// LocationMetadata is google.cloud.netapp.v1.LocationMetadata, packed in an Any.
type LocationMetadata struct {
	Type                     string            `json:"@type"`
	SupportedServiceLevels   []ServiceLevel    `json:"supportedServiceLevels,omitempty"`
	SupportedFlexPerformance []FlexPerformance `json:"supportedFlexPerformance,omitempty"`
}

// Operation is google.longrunning.Operation. Response and Error are
// mutually exclusive; parsers of it are strict.
type Operation struct {
	Name     string             `json:"name"`
	Metadata *OperationMetadata `json:"metadata,omitempty"`
	Done     bool               `json:"done,omitempty"`
	Error    *Status            `json:"error,omitempty"`
	Response json.RawMessage    `json:"response,omitempty"`
}

// OperationMetadata is google.cloud.netapp.v1.OperationMetadata, packed in an Any.
type OperationMetadata struct {
	Type                  string `json:"@type"`
	CreateTime            string `json:"createTime,omitempty"`
	EndTime               string `json:"endTime,omitempty"`
	Target                string `json:"target,omitempty"`
	Verb                  string `json:"verb,omitempty"`
	StatusMessage         string `json:"statusMessage,omitempty"`
	RequestedCancellation bool   `json:"requestedCancellation,omitempty"`
	APIVersion            string `json:"apiVersion,omitempty"`
}

// Status is google.rpc.Status as it appears inside an Operation: a gRPC code, never a
// "status" string (the official clients' strict parser rejects one).
type Status struct {
	Code    int32             `json:"code"`
	Message string            `json:"message,omitempty"`
	Details []json.RawMessage `json:"details,omitempty"`
}

// ErrorBody is the HTTP error body of Google APIs, the one the official clients parse.
type ErrorBody struct {
	Error HTTPError `json:"error"`
}

// HTTPError is the "error" member of ErrorBody: code is the HTTP status.
type HTTPError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
	Details []any  `json:"details,omitempty"`
}

// ErrorInfo is google.rpc.ErrorInfo.
type ErrorInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// BadRequest is google.rpc.BadRequest.
type BadRequest struct {
	Type            string           `json:"@type"`
	FieldViolations []FieldViolation `json:"fieldViolations"`
}

// FieldViolation is google.rpc.BadRequest.FieldViolation.
type FieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// Type URLs of the Any values Basin emits.
const (
	TypeOperationMetadata = "type.googleapis.com/google.cloud.netapp.v1.OperationMetadata"
	TypeLocationMetadata  = "type.googleapis.com/google.cloud.netapp.v1.LocationMetadata"
	TypeStoragePool       = "type.googleapis.com/google.cloud.netapp.v1.StoragePool"
	TypeVolume            = "type.googleapis.com/google.cloud.netapp.v1.Volume"
	TypeSnapshot          = "type.googleapis.com/google.cloud.netapp.v1.Snapshot"
	TypeActiveDirectory   = "type.googleapis.com/google.cloud.netapp.v1.ActiveDirectory"
	TypeEmpty             = "type.googleapis.com/google.protobuf.Empty"
	TypeErrorInfo         = "type.googleapis.com/google.rpc.ErrorInfo"
	TypeBadRequest        = "type.googleapis.com/google.rpc.BadRequest"
)

// List responses (google.cloud.netapp.v1.List*Response).
type (
	ListStoragePoolsResponse struct {
		StoragePools  []StoragePool `json:"storagePools,omitempty"`
		NextPageToken string        `json:"nextPageToken,omitempty"`
		Unreachable   []string      `json:"unreachable,omitempty"`
	}
	ListVolumesResponse struct {
		Volumes       []Volume `json:"volumes,omitempty"`
		NextPageToken string   `json:"nextPageToken,omitempty"`
		Unreachable   []string `json:"unreachable,omitempty"`
	}
	ListSnapshotsResponse struct {
		Snapshots     []Snapshot `json:"snapshots,omitempty"`
		NextPageToken string     `json:"nextPageToken,omitempty"`
		Unreachable   []string   `json:"unreachable,omitempty"`
	}
	ListActiveDirectoriesResponse struct {
		ActiveDirectories []ActiveDirectory `json:"activeDirectories,omitempty"`
		NextPageToken     string            `json:"nextPageToken,omitempty"`
		Unreachable       []string          `json:"unreachable,omitempty"`
	}
	ListOperationsResponse struct {
		Operations    []Operation `json:"operations,omitempty"`
		NextPageToken string      `json:"nextPageToken,omitempty"`
	}
	ListLocationsResponse struct {
		Locations     []Location `json:"locations,omitempty"`
		NextPageToken string     `json:"nextPageToken,omitempty"`
	}
)

// AnyOf packs a message as a proto3 JSON Any: its fields inline plus "@type".
func AnyOf(typeURL string, msg any) (json.RawMessage, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if string(b) == "{}" || string(b) == "null" {
		return json.Marshal(map[string]string{"@type": typeURL})
	}
	head, _ := json.Marshal(map[string]string{"@type": typeURL})
	out := make([]byte, 0, len(head)+len(b))
	out = append(out, head[:len(head)-1]...)
	out = append(out, ',')
	out = append(out, b[1:]...)
	return out, nil
}
