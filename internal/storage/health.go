package storage

// Health is what a backend observes, at once, of whether the node store and the
// volumes' filesystems can still be trusted with writes: a filesystem that turned
// read-only under Basin (btrfs does after a write fails, e.g. when the disk under
// the store fills) or whose device reported I/O errors has lost, or may lose,
// what clients were told was written.
type Health struct {
	// Store is the node store's fault (zero: healthy). A faulted store fails
	// every volume kept in it, whatever their own filesystems report.
	Store Fault
	// Volumes holds every open volume, by key, with its fault (zero: healthy).
	Volumes map[string]Fault
}

// Fault says why a filesystem cannot be trusted with writes. The zero Fault is
// health.
type Fault struct {
	Reason FaultReason
	// Detail is what was observed, for the server log: it may name devices and
	// host paths, so it is never shown to users.
	Detail string
}

// OK reports whether f is no fault.
func (f Fault) OK() bool { return f.Reason == "" }

// FaultReason is the kind of a Fault.
type FaultReason string

// The faults a backend reports.
const (
	// FaultReadOnly: the filesystem is read-only though Basin mounted it
	// read-write. Reads work; writes fail.
	FaultReadOnly FaultReason = "read-only"
	// FaultIOErrors: the filesystem's device reported I/O errors (writes, reads,
	// flushes, checksums) since Basin first saw it mounted: data clients were told
	// was written may be lost.
	FaultIOErrors FaultReason = "io-errors"
)
