package metrics

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
)

// What survives a restart (Options.StateDir), so that the data plane's daemons,
// which outlive Basin, are sampled on as if Basin had not stopped:
//
//   - the state file, rewritten atomically after every pass (a temporary file,
//     fsync, rename): per volume its last counter readings (Ganesha's with the
//     export they are of and Ganesha's statistics epoch, its SMB share's with
//     the data plane's Accountant start, traffic control's), its Prometheus
//     totals and its rollup in progress. The next start takes the
//     readings as its baseline, so its first sample counts what the daemons
//     counted while Basin was down (spread over the intervals it was down for,
//     spreadGap), and goes on with the rollup in progress;
//   - the ring's journal: each pass appends its Points to a segment file (one per
//     5-minute bucket and process, no fsync), and a start reads the last
//     SavedRing of them back into the rings.
//
// Neither is read by anything but New. A file that is absent, unreadable, of
// another format version or of another sampling interval is ignored with a log
// line, and the first sample is a baseline as without it.
const (
	// MaxResumeGap is the longest downtime the saved counter readings bridge;
	// after a longer one the first sample is a baseline again (the rollup in
	// progress and the totals are still taken up).
	MaxResumeGap = time.Hour
	// SavedRing is how much of each ring the journal keeps for the next start.
	SavedRing = time.Hour

	stateFile    = "state"
	stateMagic   = "basinmst"
	stateVersion = 2 // 2: SMB readings (stSMB). Version 1 files are read too.
	ringMagic    = "basinrng"
	ringVersion  = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errState marks a state file or journal that is not one this Sampler can read.
var errState = errors.New("unreadable metrics state")

// Flags of a series in the state file.
const (
	stPrev     = 1 << iota // prev holds a reading
	stNFS                  // prev's Ganesha counters were read
	stQoS                  // prev's traffic-control counters were read
	stHaveIO               // totals.haveIO
	stHaveWire             // totals.haveWire
	stAcc                  // a rollup in progress follows
	stAccFull              // it holds the stored part of its bucket too
	stSMB                  // prev's SMB counters were read (version 2)
)

// enc appends little-endian values to a buffer.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)    { e.b = append(e.b, v) }
func (e *enc) u32(v uint32)  { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64)  { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)   { e.u64(uint64(v)) }
func (e *enc) f64(v float64) { e.u64(math.Float64bits(v)) }
func (e *enc) str(s string)  { e.b = binary.AppendUvarint(e.b, uint64(len(s))); e.b = append(e.b, s...) }

// dec reads what enc wrote; the first short read sets err and every later read
// returns zero.
type dec struct {
	b   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil || n < 0 || len(d.b) < n {
		if d.err == nil {
			d.err = fmt.Errorf("%w: truncated", errState)
		}
		var zero [8]byte // what the fixed-size reads need
		return zero[:min(max(n, 0), len(zero))]
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}
func (d *dec) u8() uint8     { return d.take(1)[0] }
func (d *dec) u32() uint32   { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *dec) u64() uint64   { return binary.LittleEndian.Uint64(d.take(8)) }
func (d *dec) i64() int64    { return int64(d.u64()) }
func (d *dec) f64() float64  { return math.Float64frombits(d.u64()) }
func (d *dec) str() string   { return string(d.bytes()) }
func (d *dec) bytes() []byte { return d.take(d.uvarint()) }
func (d *dec) uvarint() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n) {
		d.err = fmt.Errorf("%w: truncated", errState)
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

// savedSeries is a series as the state file holds it.
type savedSeries struct {
	key      string
	prev     sample
	havePrev bool
	totals   totals
	acc      *agg
	accFull  bool
}

// savedState is a state file's content.
type savedState struct {
	written time.Time // the pass that wrote it
	series  []savedSeries
}

// encodeState writes the state file's bytes into buf (reused): a header (magic,
// version, the pass's time, the interval), every series, and a CRC-32C of all
// that. The caller holds s.mu.
func (s *Sampler) encodeState(buf []byte, at time.Time) []byte {
	e := enc{b: append(buf[:0], stateMagic...)}
	e.u32(stateVersion)
	e.i64(at.UnixNano())
	e.u32(uint32(s.opts.Interval / time.Second))
	e.u32(uint32(len(s.series)))
	for key, sr := range s.series {
		e.str(key)
		var fl uint8
		if sr.havePrev {
			fl |= stPrev
			if sr.prev.nfsOK {
				fl |= stNFS
			}
			if sr.prev.qosOK {
				fl |= stQoS
			}
			if sr.prev.smbOK {
				fl |= stSMB
			}
		}
		if sr.totals.haveIO {
			fl |= stHaveIO
		}
		if sr.totals.haveWire {
			fl |= stHaveWire
		}
		if sr.acc != nil {
			fl |= stAcc
			if sr.accFull {
				fl |= stAccFull
			}
		}
		e.u8(fl)
		if fl&stPrev != 0 {
			e.i64(sr.prev.at.UnixNano())
		}
		if fl&stNFS != 0 {
			n := &sr.prev.nfs
			e.u64(sr.prev.nfsExport)
			for _, io := range []*nfs.IOStats{&n.Read, &n.Write} {
				e.u64(io.RequestedBytes)
				e.u64(io.TransferredBytes)
				e.u64(io.Ops)
				e.u64(io.Errors)
				e.u64(io.LatencyNs)
			}
			e.u64(n.Ops)
			e.i64(n.Since.Unix())
			e.u32(uint32(n.Since.Nanosecond()))
		}
		if fl&stQoS != 0 {
			q := &sr.prev.qos
			for _, v := range []uint64{q.Bytes, q.Packets, q.Drops, q.Overlimits, q.Backlog, q.Rate, q.Ceil, q.Sent, q.SentPackets} {
				e.u64(v)
			}
		}
		if fl&stSMB != 0 {
			m := &sr.prev.smb
			for _, v := range []uint64{m.Reads, m.Writes, m.Other, m.ReadBytes, m.WriteBytes, m.ReadNs, m.WriteNs} {
				e.u64(v)
			}
			e.i64(m.Since.Unix())
			e.u32(uint32(m.Since.Nanosecond()))
		}
		t := &sr.totals
		for _, v := range []uint64{t.io.readOps, t.io.writeOps, t.io.metaOps, t.io.readBytes, t.io.writeBytes, t.io.readNs, t.io.writeNs} {
			e.u64(v)
		}
		for _, v := range []float64{t.atLimitSeconds, t.wireRead, t.wireWrite, t.drops} {
			e.f64(v)
		}
		if sr.acc != nil {
			e.i64(sr.acc.start)
			e.b = binary.AppendUvarint(e.b, encodedSize)
			e.b = sr.acc.appendEncoded(e.b)
		}
	}
	e.u32(crc32.Checksum(e.b, crcTable))
	return e.b
}

// decodeState reads what encodeState wrote, for a Sampler sampling every
// interval.
func decodeState(b []byte, interval time.Duration) (*savedState, error) {
	if len(b) < len(stateMagic)+4+4 || string(b[:len(stateMagic)]) != stateMagic {
		return nil, fmt.Errorf("%w: not a state file", errState)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errState)
	}
	d := dec{b: body[len(stateMagic):]}
	version := d.u32()
	if version != stateVersion && version != 1 {
		return nil, fmt.Errorf("%w: format version %d, this Basin reads %d", errState, version, stateVersion)
	}
	st := &savedState{written: time.Unix(0, d.i64())}
	if iv := time.Duration(d.u32()) * time.Second; iv != interval {
		return nil, fmt.Errorf("%w: sampled every %v, now every %v", errState, iv, interval)
	}
	n := int(d.u32())
	if n > len(d.b) { // each series takes more than a byte
		return nil, fmt.Errorf("%w: %d series in %d bytes", errState, n, len(d.b))
	}
	st.series = make([]savedSeries, 0, n)
	for range n {
		ss := savedSeries{key: d.str()}
		fl := d.u8()
		if version == 1 && fl&stSMB != 0 {
			return nil, fmt.Errorf("%w: series %s: SMB counters in a version 1 file", errState, ss.key)
		}
		ss.havePrev = fl&stPrev != 0
		if ss.havePrev {
			ss.prev.at = time.Unix(0, d.i64())
		}
		if fl&stNFS != 0 {
			ss.prev.nfsOK = true
			ss.prev.nfsExport = d.u64()
			ex := &ss.prev.nfs
			for _, io := range []*nfs.IOStats{&ex.Read, &ex.Write} {
				io.RequestedBytes, io.TransferredBytes, io.Ops, io.Errors, io.LatencyNs = d.u64(), d.u64(), d.u64(), d.u64(), d.u64()
			}
			ex.Ops = d.u64()
			sec := d.i64()
			ex.Since = time.Unix(sec, int64(d.u32()))
		}
		if fl&stQoS != 0 {
			ss.prev.qosOK = true
			q := &ss.prev.qos
			for _, p := range []*uint64{&q.Bytes, &q.Packets, &q.Drops, &q.Overlimits, &q.Backlog, &q.Rate, &q.Ceil, &q.Sent, &q.SentPackets} {
				*p = d.u64()
			}
		}
		if fl&stSMB != 0 {
			ss.prev.smbOK = true
			m := &ss.prev.smb
			for _, p := range []*uint64{&m.Reads, &m.Writes, &m.Other, &m.ReadBytes, &m.WriteBytes, &m.ReadNs, &m.WriteNs} {
				*p = d.u64()
			}
			sec := d.i64()
			m.Since = time.Unix(sec, int64(d.u32()))
		}
		t := &ss.totals
		for _, p := range []*uint64{&t.io.readOps, &t.io.writeOps, &t.io.metaOps, &t.io.readBytes, &t.io.writeBytes, &t.io.readNs, &t.io.writeNs} {
			*p = d.u64()
		}
		for _, p := range []*float64{&t.atLimitSeconds, &t.wireRead, &t.wireWrite, &t.drops} {
			*p = d.f64()
		}
		t.haveIO, t.haveWire = fl&stHaveIO != 0, fl&stHaveWire != 0
		if fl&stAcc != 0 {
			start := d.i64()
			raw := d.bytes()
			if d.err == nil {
				a, err := decodeAgg(start, raw)
				if err != nil {
					return nil, fmt.Errorf("%w: series %s: %v", errState, ss.key, err)
				}
				ss.acc, ss.accFull = a, fl&stAccFull != 0
			}
		}
		if d.err != nil {
			return nil, d.err
		}
		st.series = append(st.series, ss)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last series", errState, len(d.b))
	}
	return st, nil
}

// writeFileAtomic replaces path with data: a temporary file beside it, synced,
// renamed over it, and the directory synced, so a crash at any point leaves the
// old file or the new one whole.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if dir, err := os.Open(filepath.Dir(path)); err == nil {
		err = dir.Sync()
		dir.Close()
		return err
	}
	return nil
}

// saveState writes the state as of the pass at at. A failed write removes the
// file rather than leave an older one: a start from readings older than what
// was since counted would count that twice.
func (s *Sampler) saveState(at time.Time) error {
	if s.opts.StateDir == "" {
		return nil
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	s.mu.Lock()
	s.stateBuf = s.encodeState(s.stateBuf, at)
	s.mu.Unlock()
	path := filepath.Join(s.opts.StateDir, stateFile)
	err := os.MkdirAll(s.opts.StateDir, 0o700)
	if err == nil {
		err = writeFileAtomic(path, s.stateBuf)
	}
	if err != nil {
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("save metrics state: %w", err)
	}
	return nil
}

// keyedPoint is a Point of the journal: its series and the Point.
type keyedPoint struct {
	key string
	p   Point
}

// ringSegment is the name of the journal segment whose first pass was at t.
func ringSegment(t int64) string { return fmt.Sprintf("ring-%d.log", t) }

// segmentTime is the time in a segment's name (ok false: not a segment).
func segmentTime(name string) (int64, bool) {
	num, ok := strings.CutPrefix(name, "ring-")
	if num, ok = strings.CutSuffix(num, ".log"); !ok {
		return 0, false
	}
	t, err := strconv.ParseInt(num, 10, 64)
	return t, err == nil
}

// appendRing appends a pass's Points to the journal: to the segment of this
// process and 5-minute bucket, starting one (and deleting those older than
// SavedRing) when the bucket changes. Each pass is one record: its length, a
// CRC-32C and the Points (key, time, values), so a record a crash cut short
// ends its segment's reading. Not synced: a crash of Basin loses nothing the
// kernel has; a crash of the machine, the last seconds.
func (s *Sampler) appendRing(at time.Time, pts []keyedPoint) error {
	if s.opts.StateDir == "" {
		return nil
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	e := enc{b: s.ringBuf[:0]}
	e.u32(0) // length and CRC, below
	e.u32(0)
	for i := range pts {
		e.str(pts[i].key)
		e.u32(pts[i].p.T)
		for _, v := range pts[i].p.V {
			e.u32(math.Float32bits(v))
		}
	}
	binary.LittleEndian.PutUint32(e.b, uint32(len(e.b)-8))
	binary.LittleEndian.PutUint32(e.b[4:], crc32.Checksum(e.b[8:], crcTable))
	s.ringBuf = e.b

	now := at.Unix()
	flags := os.O_WRONLY | os.O_APPEND
	if s.segment == "" || bucket(now) != bucket(s.segmentAt) {
		s.segment, s.segmentAt = ringSegment(now), now
		flags |= os.O_CREATE | os.O_TRUNC
		if err := os.MkdirAll(s.opts.StateDir, 0o700); err != nil {
			return fmt.Errorf("metrics journal: %w", err)
		}
		s.pruneRing(now)
	}
	f, err := os.OpenFile(filepath.Join(s.opts.StateDir, s.segment), flags, 0o600)
	if err != nil {
		s.segment = ""
		return fmt.Errorf("metrics journal: %w", err)
	}
	if flags&os.O_CREATE != 0 {
		h := enc{b: []byte(ringMagic)}
		h.u32(ringVersion)
		h.u32(uint32(s.opts.Interval / time.Second))
		_, err = f.Write(h.b)
	}
	if err == nil {
		_, err = f.Write(e.b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.segment = "" // the next pass starts a segment of its own
		return fmt.Errorf("metrics journal: %w", err)
	}
	return nil
}

// segments lists the journal's segments by their first pass, oldest first.
func (s *Sampler) segments() ([]int64, error) {
	ents, err := os.ReadDir(s.opts.StateDir)
	if err != nil {
		return nil, err
	}
	var ts []int64
	for _, e := range ents {
		if t, ok := segmentTime(e.Name()); ok && e.Type().IsRegular() {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return ts, nil
}

// pruneRing deletes the segments that hold nothing newer than SavedRing before
// now: those followed by one that began before then.
func (s *Sampler) pruneRing(now int64) {
	ts, err := s.segments()
	if err != nil {
		return
	}
	cutoff := now - int64(SavedRing/time.Second)
	for i := 0; i+1 < len(ts) && ts[i+1] <= cutoff; i++ {
		if err := os.Remove(filepath.Join(s.opts.StateDir, ringSegment(ts[i]))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Debug("metrics journal prune", "err", err)
		}
	}
}

// readRing calls fn with every Point the journal holds from after since, in
// the order written. A segment of another format or interval is skipped; one
// cut short is read up to its last whole pass.
func (s *Sampler) readRing(since int64, fn func(key string, p Point)) {
	ts, err := s.segments()
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("metrics: journal unreadable; the ring starts empty", "err", err)
		}
		return
	}
	cutoff := since - int64(SavedRing/time.Second)
	for i, t := range ts {
		if i+1 < len(ts) && ts[i+1] <= cutoff {
			continue // nothing recent enough
		}
		name := ringSegment(t)
		b, err := os.ReadFile(filepath.Join(s.opts.StateDir, name))
		if err != nil {
			s.log.Warn("metrics: journal segment ignored", "segment", name, "err", err)
			continue
		}
		hdr := len(ringMagic) + 8
		if len(b) < hdr || string(b[:len(ringMagic)]) != ringMagic {
			s.log.Warn("metrics: journal segment ignored", "segment", name, "err", "not a journal segment")
			continue
		}
		d := dec{b: b[len(ringMagic):]}
		if v, iv := d.u32(), time.Duration(d.u32())*time.Second; v != ringVersion || iv != s.opts.Interval {
			s.log.Warn("metrics: journal segment ignored", "segment", name, "version", v, "interval", iv)
			continue
		}
		for len(d.b) > 0 {
			n, sum := int(d.u32()), d.u32()
			rec := d.take(n)
			if d.err != nil || crc32.Checksum(rec, crcTable) != sum {
				s.log.Info("metrics: journal segment ends in a partial pass", "segment", name)
				break
			}
			r := dec{b: rec}
			for len(r.b) > 0 && r.err == nil {
				key := r.str()
				var p Point
				p.T = r.u32()
				for j := range p.V {
					p.V[j] = math.Float32frombits(r.u32())
				}
				if r.err == nil && int64(p.T) > cutoff {
					fn(key, p)
				}
			}
		}
	}
}

// restore takes up what the last run saved (New, before the first sample): the
// state file's series, then the journal's Points into their rings.
func (s *Sampler) restore() {
	now := s.now()
	b, err := os.ReadFile(filepath.Join(s.opts.StateDir, stateFile))
	var st *savedState
	if err == nil {
		st, err = decodeState(b, s.opts.Interval)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.log.Info("metrics: no saved state; the first sample is a baseline")
	case err != nil:
		s.log.Warn("metrics: saved state ignored; the first sample is a baseline", "err", err)
	}
	until := map[string]uint32{} // a series' Points in the journal end with its saved reading
	if st != nil {
		gap := now.Sub(st.written)
		resume := gap >= 0 && gap <= MaxResumeGap
		if !resume {
			s.log.Info("metrics: saved state too old to bridge; the first sample is a baseline", "saved", st.written, "gap", gap.Round(time.Second))
		}
		for _, ss := range st.series {
			sr := &series{ring: newRing(s.ringLen()), restored: true, totals: ss.totals, acc: ss.acc, accFull: ss.accFull}
			if s.opts.Store == nil {
				sr.accFull = true
			}
			if resume && ss.havePrev {
				sr.prev, sr.havePrev, sr.bridge = ss.prev, true, true
				until[ss.key] = uint32(ss.prev.at.Unix())
			}
			s.series[ss.key] = sr
		}
		s.log.Info("metrics: saved state taken up", "series", len(st.series), "saved", st.written, "resumed", resume)
	}
	points := 0
	s.readRing(now.Unix(), func(key string, p Point) {
		if u, ok := until[key]; ok && p.T > u {
			return
		}
		sr := s.series[key]
		if sr == nil {
			sr = &series{ring: newRing(s.ringLen())}
			s.series[key] = sr
		}
		if last, ok := sr.ring.last(); ok && p.T <= last.T {
			return
		}
		sr.ring.add(p)
		points++
	})
	if points > 0 {
		s.log.Info("metrics: ring taken up from the journal", "points", points)
	}
}
