package smb

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Per-share SMB I/O from smbd's own profile (`smbd profiling level = on`,
// RenderGlobal). Samba 4.17 has no per-share statistics: each smbd process keeps
// its counters (requests, their summed time, bytes in and out, per SMB2 command)
// and writes them once a second, under its pid, into smbprofile.tdb in the cache
// directory; when a child exits, the parent adds its record to its own and
// deletes it. A child serves one client connection (with multichannel, all of a
// session's channels), and `smbstatus -S` lists the shares each child has
// connected. So a child connected to one share is that share's I/O; Accountant
// keeps the per-share sums.

// ProfileFile is smbd's profile database, in the cache directory.
const ProfileFile = "smbprofile.tdb"

// ProfilingLevel is RenderGlobal's `smbd profiling level`: counts and times.
const ProfilingLevel = "on"

// Samba 4.17's struct profile_stats: a magic identifying its layout (a hash of
// its field names), then 443 64-bit counters in the order `smbstatus -P` prints
// them, the last section the SMB2 commands': 19 commands of 5 values each
// (count, time in µs, idle, bytes in, bytes out).
const (
	profileValues = 443
	profileSize   = 8 + 8*profileValues
	smb2First     = profileValues - 19*5
	connectValue  = 0 // connect_count: a child counts its one connection
)

// profileMagic is the magic of Samba 4.17's layout.
var profileMagic = [8]byte{0x80, 0xa2, 0xd8, 0x08, 0xd5, 0x9d, 0x8d, 0x48}

// The SMB2 commands, in the profile's order.
const (
	smb2Negprot = iota
	smb2Sesssetup
	smb2Logoff
	smb2Tcon
	smb2Tdis
	smb2Create
	smb2Close
	smb2Flush
	smb2Read
	smb2Write
	smb2Lock
	smb2Ioctl
	smb2Cancel
	smb2Keepalive
	smb2Find
	smb2Notify
	smb2Getinfo
	smb2Setinfo
	smb2Break
)

// otherCommands are the requests counted as neither reads nor writes: the ones
// about files and directories (opens, closes, flushes, locks, ioctls, listings,
// change notifications, attributes, lease breaks), not the session's own
// (negotiation, logon, tree connects, cancel, echo).
var otherCommands = []int{smb2Create, smb2Close, smb2Flush, smb2Lock, smb2Ioctl, smb2Find, smb2Notify, smb2Getinfo, smb2Setinfo, smb2Break}

// Fixed parts of the SMB2 messages around the data, which the profile's byte
// counts include: a read response and a write request are the 64-byte header
// and 16 (read) or 48 (write) bytes of their own before the data.
const (
	readResponseOverhead = 64 + 16
	writeRequestOverhead = 64 + 48
)

// ProcessIO is one smbd process's counters, as its profile record holds them.
// Message bytes are whole SMB2 messages (header, fixed part and data): read
// responses sent, write requests received.
type ProcessIO struct {
	Connects      uint64 `json:"connects,omitempty"` // connections it served (a child: 1)
	Reads         uint64 `json:"reads,omitempty"`    // requests (Other: otherCommands)
	Writes        uint64 `json:"writes,omitempty"`
	Other         uint64 `json:"other,omitempty"`
	ReadMsgBytes  uint64 `json:"readMsgBytes,omitempty"`
	WriteMsgBytes uint64 `json:"writeMsgBytes,omitempty"`
	ReadTimeUs    uint64 `json:"readTimeUs,omitempty"` // summed from each request's arrival to its reply
	WriteTimeUs   uint64 `json:"writeTimeUs,omitempty"`
	OtherTimeUs   uint64 `json:"otherTimeUs,omitempty"`
}

func (p *ProcessIO) fields() []*uint64 {
	return []*uint64{&p.Connects, &p.Reads, &p.Writes, &p.Other, &p.ReadMsgBytes, &p.WriteMsgBytes,
		&p.ReadTimeUs, &p.WriteTimeUs, &p.OtherTimeUs}
}

// sub is p − q per counter, and whether none went back.
func (p ProcessIO) sub(q ProcessIO) (ProcessIO, bool) {
	var d ProcessIO
	a, b, out := p.fields(), q.fields(), d.fields()
	for i := range a {
		if *a[i] < *b[i] {
			return ProcessIO{}, false
		}
		*out[i] = *a[i] - *b[i]
	}
	return d, true
}

// less is p − q per counter, at least 0 each.
func (p ProcessIO) less(q ProcessIO) ProcessIO {
	var d ProcessIO
	a, b, out := p.fields(), q.fields(), d.fields()
	for i := range a {
		*out[i] = *a[i] - min(*a[i], *b[i])
	}
	return d
}

func (p *ProcessIO) add(q ProcessIO) {
	a, b := p.fields(), q.fields()
	for i := range a {
		*a[i] += *b[i]
	}
}

// parseProfile reads one record's value.
func parseProfile(b []byte) (ProcessIO, error) {
	if len(b) != profileSize {
		return ProcessIO{}, fmt.Errorf("smbd profile record of %d bytes, Samba 4.17's are %d", len(b), profileSize)
	}
	if !bytes.Equal(b[:8], profileMagic[:]) {
		return ProcessIO{}, fmt.Errorf("smbd profile magic %x is not Samba 4.17's", b[:8])
	}
	v := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8+8*i:]) }
	cmd := func(c, field int) uint64 { return v(smb2First + 5*c + field) }
	const count, time, in, out = 0, 1, 3, 4
	p := ProcessIO{Connects: v(connectValue),
		Reads: cmd(smb2Read, count), ReadTimeUs: cmd(smb2Read, time), ReadMsgBytes: cmd(smb2Read, out),
		Writes: cmd(smb2Write, count), WriteTimeUs: cmd(smb2Write, time), WriteMsgBytes: cmd(smb2Write, in)}
	for _, c := range otherCommands {
		p.Other += cmd(c, count)
		p.OtherTimeUs += cmd(c, time)
	}
	return p, nil
}

// ParseProfileDump reads `tdbdump smbprofile.tdb`: each process's counters by
// pid. A record of another layout (another Samba) is an error.
func ParseProfileDump(out []byte) (map[int]ProcessIO, error) {
	procs := map[int]ProcessIO{}
	var key []byte
	haveKey := false
	for n, line := range bytes.Split(out, []byte("\n")) {
		name, val, ok := tdbdumpLine(line)
		if !ok {
			continue
		}
		b, err := unescapeTdbdump(val)
		if err != nil {
			return nil, fmt.Errorf("tdbdump line %d: %w", n+1, err)
		}
		if want, err := strconv.Atoi(name[strings.IndexByte(name, '(')+1 : len(name)-1]); err != nil || want != len(b) {
			return nil, fmt.Errorf("tdbdump line %d: %s holds %d bytes", n+1, name, len(b))
		}
		switch {
		case strings.HasPrefix(name, "key("):
			key, haveKey = b, true
		case haveKey:
			if len(key) != 4 {
				return nil, fmt.Errorf("tdbdump line %d: a key of %d bytes, not a pid", n+1, len(key))
			}
			p, err := parseProfile(b)
			if err != nil {
				return nil, err
			}
			procs[int(binary.LittleEndian.Uint32(key))] = p
			haveKey = false
		default:
			return nil, fmt.Errorf("tdbdump line %d: data without a key", n+1)
		}
	}
	return procs, nil
}

// tdbdumpLine splits `key(4) = "…"` or `data(3552) = "…"` into its name and quoted
// value; other lines (the braces) are not ok.
func tdbdumpLine(line []byte) (name string, val []byte, ok bool) {
	s := string(bytes.TrimRight(line, "\r"))
	if !strings.HasPrefix(s, "key(") && !strings.HasPrefix(s, "data(") {
		return "", nil, false
	}
	name, rest, ok := strings.Cut(s, " = ")
	if !ok || !strings.HasSuffix(name, ")") || len(rest) < 2 || rest[0] != '"' || rest[len(rest)-1] != '"' {
		return "", nil, false
	}
	return name, []byte(rest[1 : len(rest)-1]), true
}

// unescapeTdbdump undoes tdbdump's escaping: printable bytes as themselves
// (except '"' and '\'), any other as \XX.
func unescapeTdbdump(s []byte) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return nil, fmt.Errorf("a cut escape at byte %d", i)
		}
		var b [1]byte
		if _, err := hex.Decode(b[:], s[i+1:i+3]); err != nil {
			return nil, fmt.Errorf("escape at byte %d: %w", i, err)
		}
		out = append(out, b[0])
		i += 2
	}
	return out, nil
}

// ParseTcons reads `smbstatus -S -j`: by pid, the shares each process has
// connected (IPC$, the RPC share, left out), each once, in the order read.
func ParseTcons(out []byte) (map[int][]string, error) {
	var st struct {
		Tcons map[string]struct {
			Service  string `json:"service"`
			ServerID struct {
				PID string `json:"pid"`
			} `json:"server_id"`
		} `json:"tcons"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("smbstatus -S -j: %w", err)
	}
	shares := map[int][]string{}
	for _, tc := range st.Tcons {
		pid, err := strconv.Atoi(tc.ServerID.PID)
		if err != nil || pid <= 0 {
			// Not a local process's (another node's, or a record Samba
			// itself would not read): placed nowhere, the rest still counts.
			continue
		}
		if strings.EqualFold(tc.Service, "IPC$") || containsFold(shares[pid], tc.Service) {
			continue
		}
		shares[pid] = append(shares[pid], tc.Service)
	}
	return shares, nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// ShareIO is a share's SMB I/O since its Accountant started: requests, payload
// bytes (the messages' bytes less their headers) and the summed time of reads
// and writes.
type ShareIO struct {
	Reads      uint64 `json:"reads,omitempty"`
	Writes     uint64 `json:"writes,omitempty"`
	Other      uint64 `json:"other,omitempty"`
	ReadBytes  uint64 `json:"readBytes,omitempty"`
	WriteBytes uint64 `json:"writeBytes,omitempty"`
	ReadNs     uint64 `json:"readNs,omitempty"`
	WriteNs    uint64 `json:"writeNs,omitempty"`
	// Since is when the Accountant that counted them started (its first
	// Update; an Accountant restored from its State keeps it). Counters of
	// another Since are another Accountant's: not comparable, even when they
	// are higher (Accountant.Shares sets it; the zero time in its State).
	Since time.Time `json:"since,omitzero"`
}

func (s *ShareIO) add(d ProcessIO) {
	s.Reads += d.Reads
	s.Writes += d.Writes
	s.Other += d.Other
	s.ReadBytes += d.ReadMsgBytes - min(d.ReadMsgBytes, d.Reads*readResponseOverhead)
	s.WriteBytes += d.WriteMsgBytes - min(d.WriteMsgBytes, d.Writes*writeRequestOverhead)
	s.ReadNs += d.ReadTimeUs * 1000
	s.WriteNs += d.WriteTimeUs * 1000
}

// Accountant sums one smbd's profile into its shares' I/O, from successive reads
// of its processes' records and of their tree connects (Update, once per
// sampling pass). Counters only grow: a restarted smbd's processes add to them.
//
// A child's growth between two reads goes to its share when it has exactly one
// (IPC$ aside) and had the same one, none, or was not seen before; a child
// connected to several shares (a client reaching two of the instance's shares
// over one connection) cannot be split, and counts for no share (Unattributed).
// When children exit, the parent's record grows by their last counters: the
// growth beyond what the last read saw of them goes to their share when they
// all had the same one and the parent's connection count grew by exactly as many
// (no child came and went unseen between two reads); otherwise it is
// unattributed too. A child read while it had a tree connect but no record yet
// (it writes its first a second after its first request) counts as seen, with
// nothing counted yet. Not safe for concurrent use.
//
// Its whole state can be saved (State) and taken up by another process
// (RestoreAccountant), which goes on counting as this one would have: Basin
// saves it after every Update, so a restart of Basin while smbd serves on does
// not start the sums again.
type Accountant struct {
	since    time.Time // its first Update
	parent   int
	parentIO ProcessIO // the parent's record when its growth was last accounted for
	seen     map[int]seenProcess
	early    map[int]seenProcess // children known by their tree connects only, no record yet
	finished map[int]bool        // exited children whose tree connects are still listed (a crash leaves them)
	exited   []seenProcess       // seen children gone, not yet found in the parent's record
	waited   int                 // Updates they have waited for it
	former   map[int]bool        // earlier smbd parents whose records are still listed
	shares   map[string]*ShareIO
	// Unattributed is what could not be given to a share.
	Unattributed ShareIO
}

type seenProcess struct {
	io        ProcessIO
	share     string // its one share ("": none or several)
	ambiguous bool   // several shares
	parent    int    // the smbd it was first seen under (whose record absorbs its exit)
}

// maxExitWait is how many Updates exited children wait for the parent to absorb
// their records (it does when it reaps them) before their remainder is given up
// as unattributed.
const maxExitWait = 3

// Update accounts for one read: parent is the smbd parent's pid, procs every
// record of its profile database (ParseProfileDump), tcons the children's shares
// (ParseTcons), shares every share the instance serves (each appears in Shares,
// zero until used). Share names are compared without case.
func (a *Accountant) Update(parent int, procs map[int]ProcessIO, tcons map[int][]string, shares []string) {
	if a.since.IsZero() {
		a.since = time.Now().Round(0)
	}
	if a.shares == nil {
		a.shares = map[string]*ShareIO{}
	}
	for _, s := range shares {
		if a.shares[strings.ToLower(s)] == nil {
			a.shares[strings.ToLower(s)] = &ShareIO{}
		}
	}
	if parent <= 0 {
		return // no smbd (it is restarting): nobody to place anything under
	}
	if a.seen == nil {
		a.seen, a.former = map[int]seenProcess{}, map[int]bool{}
	}
	if parent != a.parent {
		// A new smbd. Until it clears the database (TDB_CLEAR_IF_FIRST) the
		// old one's killed children's records and tree connects are still
		// there: those seen before keep their counts (only their growth since
		// counts), and once gone they are not waited for, as no parent absorbs
		// them. What they did after their last read and never recorded is lost.
		if a.parent > 0 {
			a.former[a.parent] = true
		}
		a.parent, a.parentIO, a.exited, a.waited = parent, procs[parent], nil, 0
		a.early, a.finished = map[int]seenProcess{}, map[int]bool{}
	}
	for pid := range a.former {
		if _, ok := procs[pid]; !ok || pid == parent {
			delete(a.former, pid)
		}
	}
	for pid, io := range procs {
		if pid == parent || a.former[pid] {
			continue // the old smbd's own record: what it absorbed was counted
		}
		list := tcons[pid]
		share := ""
		if len(list) == 1 {
			share = strings.ToLower(list[0])
		}
		prev, had := a.seen[pid]
		d := io
		if had {
			var ok bool
			if d, ok = io.sub(prev.io); !ok {
				d, had = io, false // the pid was reused by a new process
			}
		}
		target := ""
		if share != "" && (!had || prev.share == share || (prev.share == "" && !prev.ambiguous)) {
			target = share
		}
		if !had {
			if e, ok := a.early[pid]; ok && e.share != share && e.share != "" {
				target = "" // it changed shares before its first record
			}
			delete(a.early, pid)
		}
		a.credit(target, d)
		under := parent
		if had {
			under = prev.parent
		}
		a.seen[pid] = seenProcess{io: io, share: share, ambiguous: len(list) > 1, parent: under}
	}
	for pid, sp := range a.seen {
		if _, ok := procs[pid]; !ok {
			if sp.parent == parent {
				a.exited = append(a.exited, sp)
				a.finished[pid] = true
			}
			delete(a.seen, pid)
		}
	}
	for pid, sp := range a.early {
		if _, ok := tcons[pid]; !ok {
			a.exited = append(a.exited, sp) // gone before its first record
			delete(a.early, pid)
		}
	}
	for pid := range a.finished {
		if _, ok := tcons[pid]; !ok {
			delete(a.finished, pid)
		}
	}
	for pid, list := range tcons {
		if _, ok := procs[pid]; ok || pid == parent || a.finished[pid] {
			continue
		}
		sp := seenProcess{ambiguous: len(list) > 1}
		if len(list) == 1 {
			sp.share = strings.ToLower(list[0])
		}
		if e, ok := a.early[pid]; ok && (e.share != sp.share || e.ambiguous) {
			sp = seenProcess{ambiguous: true} // its shares changed: no single one
		}
		a.early[pid] = sp
	}
	pio, ok := procs[parent]
	if !ok {
		return // no record yet: nothing absorbed
	}
	growth, ok := pio.sub(a.parentIO)
	if !ok {
		a.parentIO, a.exited, a.waited = pio, nil, 0
		return
	}
	if growth.Connects < uint64(len(a.exited)) && a.waited < maxExitWait {
		a.waited++ // some exited children are not absorbed yet
		return
	}
	var last ProcessIO
	target := ""
	for i, sp := range a.exited {
		last.add(sp.io)
		if i == 0 {
			target = sp.share
		} else if sp.share != target {
			target = ""
		}
	}
	if growth.Connects != uint64(len(a.exited)) {
		target = "" // children came and went between two reads, or never got absorbed
	}
	a.credit(target, growth.less(last))
	a.parentIO, a.exited, a.waited = pio, nil, 0
}

func (a *Accountant) credit(share string, d ProcessIO) {
	if share == "" {
		a.Unattributed.add(d)
		return
	}
	s := a.shares[share]
	if s == nil {
		s = &ShareIO{}
		a.shares[share] = s
	}
	s.add(d)
}

// Knows reports whether the last Update placed process pid: it had a record or
// a tree connect.
func (a *Accountant) Knows(pid int) bool {
	_, seen := a.seen[pid]
	_, early := a.early[pid]
	return seen || early
}

// Shares returns each share's I/O so far, by lower-case share name, with the
// Accountant's start as Since.
func (a *Accountant) Shares() map[string]ShareIO {
	out := make(map[string]ShareIO, len(a.shares))
	for k, v := range a.shares {
		io := *v
		io.Since = a.since
		out[k] = io
	}
	return out
}
