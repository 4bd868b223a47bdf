package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

// Indexes the store keeps beside the documents (table index_entries), so that the
// checks of a write transaction and the controller's wake cost the same at ten
// volumes as at ten thousand. Each is filled from the document on every Put (see
// extract) and dropped with it.
const (
	// IdxShareName: volumes by location + "\x00" + lower-cased shareName (shareName is
	// unique per location, case-insensitively, as SMB compares it).
	IdxShareName = "volume.shareName"
	// IdxNFSShareName: volumes served over NFS, by network + "\x00" + lower-cased
	// shareName. A network's Ganesha serves every project's exports there under
	// /<shareName>, so the name is unique per network too (migration 0004).
	IdxNFSShareName = "volume.nfsShareName"
	// IdxPoolCapacity: volumes by pool name; num is the volume's capacityGib.
	IdxPoolCapacity = "volume.poolCapacity"
	// IdxPoolThroughput: volumes by pool name; num is the volume's assigned
	// throughput (MANUAL QoS pools).
	IdxPoolThroughput = "volume.poolThroughput"
	// IdxEndpoint: volumes by network name; value is the volume's endpoint address.
	IdxEndpoint = "volume.endpoint"
	// IdxVolumeNode: volumes by the node they are placed on; num is the volume's
	// capacityGib (placement counts them; each node lists its own).
	IdxVolumeNode = "volume.node"
	// IdxCloning: volumes still being created from a snapshot, by the snapshot's name.
	IdxCloning = "volume.cloning"
	// IdxPoolNetwork: pools by network name (the sandbox's); value is the pool's
	// Active Directory policy ("" = none).
	IdxPoolNetwork = "pool.network"
	// IdxPoolAD: pools by the Active Directory policy they name.
	IdxPoolAD = "pool.activeDirectory"
	// IdxPoolsCapacity: every pool under key ""; num is its capacityGib (Σ over the
	// node for the overcommit check).
	IdxPoolsCapacity = "pool.capacity"
	// IdxPendingOps: unfinished operations under key ""; num is the create time in
	// Unix nanoseconds.
	IdxPendingOps = "operation.pending"
	// IdxDoneOps: finished operations under key ""; num is the end time in Unix
	// seconds (their expiry reads only those past the retention).
	IdxDoneOps = "operation.done"
	// IdxAuditTime: audit entries under key ""; num is their time in Unix
	// seconds (the same, for the audit log's retention).
	IdxAuditTime = "audit.time"
)

// IndexEntry is one entry of an index: the document's name, and its value and num.
type IndexEntry struct {
	Name  string
	Value string
	Num   float64
}

// indexRow is what an extractor emits for a document.
type indexRow struct {
	idx, key, value string
	num             any // int64 or float64
}

// indexedKinds are the kinds extract has entries for.
var indexedKinds = map[string]bool{KindVolume: true, KindPool: true, KindOperation: true, KindAudit: true}

// extract returns the index entries of a stored document.
func extract(kind string, data []byte) ([]indexRow, error) {
	switch kind {
	case KindVolume:
		var v model.Volume
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("index %s: %w", kind, err)
		}
		rows := []indexRow{
			{idx: IdxShareName, key: ShareNameKey(model.LocationName(v.Project, v.Location), v.ShareName), num: int64(0)},
			{idx: IdxPoolCapacity, key: v.PoolName(), num: v.CapacityGib},
		}
		if v.ThroughputMibps != 0 {
			rows = append(rows, indexRow{idx: IdxPoolThroughput, key: v.PoolName(), num: v.ThroughputMibps})
		}
		if v.Network != "" && (slices.Contains(v.Protocols, model.ProtocolNFSv3) || slices.Contains(v.Protocols, model.ProtocolNFSv4)) {
			rows = append(rows, indexRow{idx: IdxNFSShareName, key: ShareNameKey(v.Network, v.ShareName), num: int64(0)})
		}
		if v.Endpoint != "" {
			rows = append(rows, indexRow{idx: IdxEndpoint, key: v.Network, value: v.Endpoint, num: int64(0)})
		}
		if v.Node != "" {
			rows = append(rows, indexRow{idx: IdxVolumeNode, key: v.Node, num: v.CapacityGib})
		}
		if v.SourceSnapshot != "" && v.State == model.StateCreating {
			rows = append(rows, indexRow{idx: IdxCloning, key: v.SourceSnapshot, num: int64(0)})
		}
		return rows, nil
	case KindPool:
		var p model.Pool
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("index %s: %w", kind, err)
		}
		rows := []indexRow{
			{idx: IdxPoolNetwork, key: model.NetworkName(p.Network), value: p.ActiveDirectory, num: int64(0)},
			{idx: IdxPoolsCapacity, key: "", num: p.CapacityGib},
		}
		if p.ActiveDirectory != "" {
			rows = append(rows, indexRow{idx: IdxPoolAD, key: p.ActiveDirectory, num: int64(0)})
		}
		return rows, nil
	case KindOperation:
		var o struct {
			CreateTime time.Time `json:"createTime"`
			EndTime    time.Time `json:"endTime"`
			Done       bool      `json:"done"`
		}
		if err := json.Unmarshal(data, &o); err != nil {
			return nil, fmt.Errorf("index %s: %w", kind, err)
		}
		if o.Done {
			return []indexRow{{idx: IdxDoneOps, key: "", num: o.EndTime.Unix()}}, nil
		}
		return []indexRow{{idx: IdxPendingOps, key: "", num: o.CreateTime.UnixNano()}}, nil
	case KindAudit:
		var e struct {
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("index %s: %w", kind, err)
		}
		return []indexRow{{idx: IdxAuditTime, key: "", num: e.Time.Unix()}}, nil
	}
	return nil, nil
}

// ShareNameKey is the IdxShareName key of a shareName in a location
// (projects/{p}/locations/{l}), and the IdxNFSShareName key of one on a network.
func ShareNameKey(location, shareName string) string {
	return location + "\x00" + strings.ToLower(shareName)
}

// PendingOperations returns the operations not yet done, oldest first (by create
// time, then name), without reading the finished ones.
func PendingOperations(tx Tx) ([]*model.Operation, error) {
	raws, err := tx.IndexDocs(IdxPendingOps, "")
	if err != nil {
		return nil, err
	}
	out := make([]*model.Operation, 0, len(raws))
	for _, r := range raws {
		o := new(model.Operation)
		if err := json.Unmarshal(r, o); err != nil {
			return nil, fmt.Errorf("decode %s: %w", KindOperation, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// ExpiredOperations returns the names of up to limit operations that finished
// before cutoff, oldest first.
func ExpiredOperations(tx Tx, cutoff time.Time, limit int) ([]string, error) {
	return names(tx.IndexBelow(IdxDoneOps, "", float64(cutoff.Unix()), limit))
}

// ExpiredAudit returns the names of up to limit audit entries from before
// cutoff, oldest first.
func ExpiredAudit(tx Tx, cutoff time.Time, limit int) ([]string, error) {
	return names(tx.IndexBelow(IdxAuditTime, "", float64(cutoff.Unix()), limit))
}

// VolumesWithShareName returns the names of the volumes of location that have
// shareName (compared case-insensitively), ordered by name.
func VolumesWithShareName(tx Tx, location, shareName string) ([]string, error) {
	return names(tx.Index(IdxShareName, ShareNameKey(location, shareName)))
}

// NFSVolumesWithShareName returns the names of the volumes served over NFS on
// network (a network name) that have shareName (compared case-insensitively),
// whatever their project, ordered by name.
func NFSVolumesWithShareName(tx Tx, network, shareName string) ([]string, error) {
	return names(tx.Index(IdxNFSShareName, ShareNameKey(network, shareName)))
}

// PoolUsage is what a pool's volumes take of it.
type PoolUsage struct {
	Volumes         int     // how many volumes the pool holds
	CapacityGib     int64   // Σ capacityGib
	ThroughputMibps float64 // Σ assigned throughput (MANUAL QoS pools)
}

// UsageOfPool sums the volumes of the pool named pool.
func UsageOfPool(tx Tx, pool string) (PoolUsage, error) {
	capSum, n, err := tx.IndexSum(IdxPoolCapacity, pool)
	if err != nil {
		return PoolUsage{}, err
	}
	thr, _, err := tx.IndexSum(IdxPoolThroughput, pool)
	if err != nil {
		return PoolUsage{}, err
	}
	return PoolUsage{Volumes: n, CapacityGib: int64(capSum), ThroughputMibps: thr}, nil
}

// EndpointsInUse returns the endpoint addresses volumes hold in network, mapped to
// the volume holding each.
func EndpointsInUse(tx Tx, network string) (map[string]string, error) {
	es, err := tx.Index(IdxEndpoint, network)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(es))
	for _, e := range es {
		out[e.Value] = e.Name
	}
	return out, nil
}

// VolumesCloning returns the names of the volumes still being created from the
// snapshot named snapshot.
func VolumesCloning(tx Tx, snapshot string) ([]string, error) {
	return names(tx.Index(IdxCloning, snapshot))
}

// PoolsUsingAD returns the names of the pools naming Active Directory policy ad.
func PoolsUsingAD(tx Tx, ad string) ([]string, error) {
	return names(tx.Index(IdxPoolAD, ad))
}

// PoolsOnNetwork returns the pools on network (a network name, not a reference):
// each entry's Name is the pool, its Value the pool's Active Directory policy.
func PoolsOnNetwork(tx Tx, network string) ([]IndexEntry, error) {
	return tx.Index(IdxPoolNetwork, network)
}

// PoolsCapacityGib returns Σ capacityGib of every pool in the store.
func PoolsCapacityGib(tx Tx) (int64, error) {
	sum, _, err := tx.IndexSum(IdxPoolsCapacity, "")
	return int64(sum), err
}

func names(es []IndexEntry, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out, nil
}
