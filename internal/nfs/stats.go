package nfs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// IOStats is one direction of an export's NFS I/O as Ganesha counted it.
type IOStats struct {
	RequestedBytes   uint64
	TransferredBytes uint64
	Ops              uint64
	Errors           uint64
	LatencyNs        uint64 // summed over Ops
}

// ExportIO is an export's cumulative NFS counters, summed over NFSv3, v4.0, v4.1
// and v4.2, since Since.
type ExportIO struct {
	Read, Write IOStats
	// Ops counts every request on the export: NFSv3 calls and NFSv4 compounds, of
	// which Read.Ops and Write.Ops are the reads and writes; the rest are metadata
	// (lookups, attributes, directory listings, creates, removes, commits).
	Ops uint64
	// Since is when Ganesha's counters started (its statistics timestamp): a
	// restart or a reset of its statistics changes it. Removing and adding an
	// export back resets that export's counters without changing it.
	Since time.Time
}

// NFSv3IO returns export id's NFSv3 read and write counters since Ganesha started.
func (d *DBus) NFSv3IO(ctx context.Context, id uint64) (read, write IOStats, err error) {
	r, err := d.versionIO(ctx, id, "GetNFSv3IO")
	return r.read, r.write, err
}

// statsIface is Ganesha's per-export statistics interface.
const statsIface = "org.ganesha.nfsd.exportstats"

// versionIOMethods are the per-version I/O calls ExportIO sums.
var versionIOMethods = []string{"GetNFSv3IO", "GetNFSv40IO", "GetNFSv41IO", "GetNFSv42IO"}

// ExportIO returns export id's counters summed over every NFS version, in five
// calls: the I/O of NFSv3, v4.0, v4.1 and v4.2, and GetTotalOPS for the request
// count (Ganesha keeps them per export and per version,
// org.ganesha.nfsd.exportstats). Statistics are on unless Ganesha's configuration
// turns them off (Enable_NFS_Stats, which RenderConfig sets).
func (d *DBus) ExportIO(ctx context.Context, id uint64) (ExportIO, error) {
	var out ExportIO
	for _, m := range versionIOMethods {
		r, err := d.versionIO(ctx, id, m)
		if err != nil {
			return ExportIO{}, err
		}
		out.Read = addIO(out.Read, r.read)
		out.Write = addIO(out.Write, r.write)
	}
	var err error
	if out.Ops, out.Since, err = d.totalOps(ctx, id); err != nil {
		return ExportIO{}, err
	}
	return out, nil
}

// totalOps reads export id's request count and the statistics timestamp
// (GetTotalOPS). An export Ganesha does not have is an error wrapping
// errNoExport.
func (d *DBus) totalOps(ctx context.Context, id uint64) (uint64, time.Time, error) {
	id16, err := exportID(id)
	if err != nil {
		return 0, time.Time{}, err
	}
	call, err := d.callIface(ctx, statsIface, "GetTotalOPS", id16)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("export %d stats: %w", id, err)
	}
	ops, since, err := parseTotalOps(call.Body)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("export %d stats: %w", id, err)
	}
	return ops, since, nil
}

// AllExportIO returns the I/O counters of every export Ganesha has, summed over
// NFS versions, in one call (GetNFSIO, Ganesha 4.x). Only Read, Write and Since
// are set: Ganesha has no request count of every export in one call (ExportsIO
// adds them). An export with no I/O in any version yet is absent.
func (d *DBus) AllExportIO(ctx context.Context) (map[uint64]ExportIO, error) {
	call, err := d.callIface(ctx, statsIface, "GetNFSIO")
	if err != nil {
		return nil, fmt.Errorf("all exports' stats: %w", err)
	}
	out, err := parseAllIO(call.Body)
	if err != nil {
		return nil, fmt.Errorf("all exports' stats: %w", err)
	}
	return out, nil
}

// ExportsIO returns what ExportIO does for each export of ids in 1+len(ids)
// calls instead of 5×len(ids): AllExportIO for every export's I/O, then
// GetTotalOPS per export, pipelined, for its request count (and to learn that it exists:
// an export Ganesha does not have, or an id outside 1..MaxExportID, is left out
// of the map). It fails as a whole only when a call fails (Ganesha without
// GetNFSIO, the bus gone).
func (d *DBus) ExportsIO(ctx context.Context, ids []uint64) (map[uint64]ExportIO, error) {
	all, err := d.AllExportIO(ctx)
	if err != nil {
		return nil, err
	}
	conn, _, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	// GetTotalOPS calls go out maxPending at a time, each answer making room
	// for the next call (Ganesha answers them in order): answers are read in
	// batches, instead of a round trip per export through the bus daemon.
	obj := conn.Object(ganeshaName, exportMgr)
	ch := make(chan *dbus.Call, maxPending)
	var valid []uint16
	for _, id := range ids {
		if id16, err := exportID(id); err == nil {
			valid = append(valid, id16)
		}
	}
	next := 0
	send := func() {
		obj.GoWithContext(ctx, statsIface+".GetTotalOPS", 0, ch, valid[next])
		next++
	}
	for next < len(valid) && next < maxPending {
		send()
	}
	out := make(map[uint64]ExportIO, len(ids))
	var firstErr error
	for range valid {
		call := <-ch
		if next < len(valid) {
			send()
		}
		id := uint64(call.Args[0].(uint16))
		if call.Err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("export %d stats: %w", id, call.Err)
			}
			continue
		}
		ops, since, err := parseTotalOps(call.Body)
		if errors.Is(err, errNoExport) {
			continue
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("export %d stats: %w", id, err)
		}
		io := all[id]
		io.Ops, io.Since = ops, since
		out[id] = io
	}
	if firstErr != nil {
		var reply dbus.Error
		if !errors.As(firstErr, &reply) && ctx.Err() == nil {
			d.drop(conn) // the connection failed: the next call dials again
		}
		return nil, firstErr
	}
	return out, nil
}

// maxPending bounds the calls ExportsIO has in flight, well below the bus
// daemon's limit on a connection's pending replies (128 in system.conf).
const maxPending = 64

// parseAllIO reads a GetNFSIO reply: (b ok, s message, (tt) timestamp,
// a(qs(tttttt)(tttttt))) — per export and NFS version that saw activity, the
// export id, the version ("NFSv3", "NFSv40", "NFSv41", "NFSv42") and read and
// write counters as in GetNFSv*IO. It sums each export's versions; Since is the
// timestamp.
func parseAllIO(body []any) (map[uint64]ExportIO, error) {
	ok, msg, err := parseStatus(body)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New(msg)
	}
	if len(body) < 4 {
		return nil, fmt.Errorf("reply %v", body)
	}
	since, err := parseTimestamp(body[2])
	if err != nil {
		return nil, err
	}
	rows, err := structs(body[3])
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]ExportIO, len(rows))
	for _, row := range rows {
		if len(row) != 4 {
			return nil, fmt.Errorf("unexpected entry %v", row)
		}
		id, ok1 := row[0].(uint16)
		_, ok2 := row[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("unexpected entry %v", row)
		}
		r, err := parseIOStats(row[2])
		if err != nil {
			return nil, err
		}
		w, err := parseIOStats(row[3])
		if err != nil {
			return nil, err
		}
		e := out[uint64(id)]
		e.Read, e.Write, e.Since = addIO(e.Read, r), addIO(e.Write, w), since
		out[uint64(id)] = e
	}
	return out, nil
}

func addIO(a, b IOStats) IOStats {
	return IOStats{RequestedBytes: a.RequestedBytes + b.RequestedBytes, TransferredBytes: a.TransferredBytes + b.TransferredBytes,
		Ops: a.Ops + b.Ops, Errors: a.Errors + b.Errors, LatencyNs: a.LatencyNs + b.LatencyNs}
}

// versionReply is one GetNFSv*IO answer.
type versionReply struct {
	read, write IOStats
	since       time.Time // zero if the export had no activity in that version
}

func (d *DBus) versionIO(ctx context.Context, id uint64, method string) (versionReply, error) {
	id16, err := exportID(id)
	if err != nil {
		return versionReply{}, err
	}
	call, err := d.callIface(ctx, statsIface, method, id16)
	if err != nil {
		return versionReply{}, fmt.Errorf("export %d stats: %w", id, err)
	}
	r, err := parseVersionIO(call.Body)
	if err != nil {
		return versionReply{}, fmt.Errorf("export %d stats: %s: %w", id, method, err)
	}
	return r, nil
}

// parseVersionIO reads a GetNFSv*IO reply: (b ok, s message, (tt) timestamp,
// (tttttt) read, (tttttt) write), each (tttttt) being requested and transferred
// bytes, requests, errors, summed latency in ns and an unused queue wait. An
// export nobody used in that version answers (false, "… does not have any …
// activity"): zero counters.
func parseVersionIO(body []any) (versionReply, error) {
	var r versionReply
	ok, msg, err := parseStatus(body)
	if err != nil {
		return r, err
	}
	if !ok {
		if strings.Contains(msg, "not have any") {
			return r, nil
		}
		return r, errors.New(msg)
	}
	if len(body) < 5 {
		return r, fmt.Errorf("reply %v", body)
	}
	if r.since, err = parseTimestamp(body[2]); err != nil {
		return r, err
	}
	if r.read, err = parseIOStats(body[3]); err != nil {
		return r, err
	}
	r.write, err = parseIOStats(body[4])
	return r, err
}

func parseIOStats(v any) (IOStats, error) {
	f, ok := v.([]any)
	if !ok || len(f) < 5 {
		return IOStats{}, fmt.Errorf("unexpected field %v", v)
	}
	var n [5]uint64
	for i := range n {
		if n[i], ok = f[i].(uint64); !ok {
			return IOStats{}, fmt.Errorf("unexpected field %v", v)
		}
	}
	return IOStats{n[0], n[1], n[2], n[3], n[4]}, nil
}

// parseTimestamp reads a (tt) timestamp: seconds and nanoseconds.
func parseTimestamp(v any) (time.Time, error) {
	f, ok := v.([]any)
	if !ok || len(f) != 2 {
		return time.Time{}, fmt.Errorf("unexpected timestamp %v", v)
	}
	sec, ok1 := f[0].(uint64)
	nsec, ok2 := f[1].(uint64)
	if !ok1 || !ok2 || sec > 1<<40 || nsec >= 1e9 {
		return time.Time{}, fmt.Errorf("unexpected timestamp %v", v)
	}
	return time.Unix(int64(sec), int64(nsec)).UTC(), nil
}

// parseStatus reads the (b ok, s message) every statistics reply starts with.
func parseStatus(body []any) (ok bool, msg string, err error) {
	if len(body) < 2 {
		return false, "", fmt.Errorf("reply %v", body)
	}
	ok, okB := body[0].(bool)
	msg, okS := body[1].(string)
	if !okB || !okS {
		return false, "", fmt.Errorf("reply %v", body)
	}
	return ok, msg, nil
}

// errNoExport is GetTotalOPS' answer about an export Ganesha does not have.
var errNoExport = errors.New("no such export")

// parseTotalOps reads a GetTotalOPS reply: (b ok, s message, (tt) timestamp,
// (stst…) a request count per version, "NFSv3" its calls, "NFSv40" and the
// others their compounds). It sums the versions' counts; an export Ganesha does
// not know answers (false, …): an error.
func parseTotalOps(body []any) (uint64, time.Time, error) {
	ok, msg, err := parseStatus(body)
	if err != nil {
		return 0, time.Time{}, err
	}
	if !ok {
		return 0, time.Time{}, fmt.Errorf("%w: %s", errNoExport, msg)
	}
	if len(body) < 4 {
		return 0, time.Time{}, fmt.Errorf("reply %v", body)
	}
	since, err := parseTimestamp(body[2])
	if err != nil {
		return 0, time.Time{}, err
	}
	f, ok := body[3].([]any)
	if !ok || len(f)%2 != 0 {
		return 0, time.Time{}, fmt.Errorf("unexpected counts %v", body[3])
	}
	var total uint64
	for i := 0; i < len(f); i += 2 {
		name, ok1 := f[i].(string)
		n, ok2 := f[i+1].(uint64)
		if !ok1 || !ok2 {
			return 0, time.Time{}, fmt.Errorf("unexpected counts %v", body[3])
		}
		if strings.HasPrefix(name, "NFSv") {
			total += n
		}
	}
	return total, since, nil
}
