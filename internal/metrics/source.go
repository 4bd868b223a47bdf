package metrics

import (
	"context"
	"net/netip"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/smb"
)

// Volume is what the sampler needs to know of one volume, as its Targets list it.
type Volume struct {
	// Key is the volume's storage key: it never changes and is never reused, so
	// it names the volume's series (a volume deleted and made again under the same
	// name starts afresh).
	Key string
	// Name is the volume's resource name (projects/p/locations/l/volumes/v);
	// Project, Location and ID its parts (Prometheus labels).
	Name                  string
	Project, Location, ID string
	// Pool is the pool's ID, Network the name of its network; Endpoint is the
	// volume's own address there (the zero Addr: none yet).
	Pool     string
	Network  string
	Endpoint netip.Addr
	// ExportID is the volume's NFS export (0: not exported).
	ExportID uint64
	// SMB is the volume's SMB share (the zero SMBShare: not shared over SMB).
	SMB SMBShare
	// LimitBytesPerSec is the throughput the volume is held to (payload bytes per
	// second, both directions together); 0 = none.
	LimitBytesPerSec float64
}

// Targets lists the volumes to sample, once per interval.
type Targets interface {
	Volumes(ctx context.Context) ([]Volume, error)
}

// NFSSource reads an export's cumulative Ganesha counters (dataplane.Manager).
type NFSSource interface {
	ExportIO(ctx context.Context, network string, exportID uint64) (nfs.ExportIO, error)
}

// NFSBatchSource reads many exports' counters of one network at once
// (dataplane.Manager: one DBus call for every export's I/O, then one per export
// for its request count, instead of five per export). When the NFSSource has
// it, the sampler makes one such read per network and interval; an export
// missing from the answer is unknown for the interval, and a read that fails
// falls back to ExportIO per volume (a Ganesha without the batched call).
type NFSBatchSource interface {
	ExportsIO(ctx context.Context, network string, exportIDs []uint64) (map[uint64]nfs.ExportIO, error)
}

// CapacitySource reads a volume's space use now (the storage backend): bytes
// used by its data and snapshots, and the bytes only its snapshots hold.
type CapacitySource interface {
	VolumeUsage(ctx context.Context, key string) (usedBytes, snapshotBytes int64, err error)
}

// ClientSource counts, for one network, the distinct client addresses connected
// to each endpoint address (one read per network and interval, whatever the
// number of volumes).
type ClientSource interface {
	Clients(ctx context.Context, network string) (map[netip.Addr]int, error)
}

// QoSSource reads one network's traffic-control counters (the daemon: the qos
// driver's Counters of the network's link), by class key; a volume's class is
// keyed by its resource name (Volume.Name). One read per network and interval,
// whatever the number of volumes; a volume without a class (no limit, or its
// class not made yet) has no wire metrics.
type QoSSource interface {
	QoSCounters(ctx context.Context, network string) (map[string]qos.Counters, error)
}

// SMBShare names a volume's SMB share: the Active Directory connection whose
// Samba instance serves it, and the share's name.
type SMBShare struct{ AD, Name string }

// SMBSource reads one network's SMB I/O (dataplane.Manager.SMBIO): by share
// (Name in lower case), the requests, payload bytes and summed latency of reads
// and writes, and other requests, counted since ShareIO.Since, so only growing.
// The data plane keeps its sums across Basin's restarts, with their Since; sums
// of another Since (started again) are not compared with earlier ones, and
// the interval is unknown. A read may return some instances' shares with an
// error for others.
type SMBSource interface {
	SMBIO(ctx context.Context, network string) (map[SMBShare]smb.ShareIO, error)
}
