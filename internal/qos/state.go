package qos

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// A driver with a state directory (StateDir) keeps there, per link, its memory of
// what it made: the classid it gave each Key, the u32 handles it gave each address
// per direction, the classes with their rates, ceilings and addresses, the
// pure-ACK mode and the IFB. A driver started later with no memory of the link
// (Basin stopped, killed or replaced by a new build while clients kept doing I/O)
// reads the file and checks the kernel against it (adopt): the IFB is the one
// recorded, and the link's qdiscs, classes and filters, each written out as a line
// (layout), are exactly those the file calls for. Only then does the file become
// the driver's memory, and Apply sends only the difference to the desired tree;
// anything else (no file, a file of another version, link or mode, a kernel that
// differs) and the driver rebuilds the link as it would with no file, saying why.
// A class whose rate, ceiling and parent match but whose burst, cburst, quantum or
// priority do not (a build that computes them otherwise) is adopted and set in
// place by the next Apply.

// stateVersion is the format of the state files this driver writes and reads.
const stateVersion = 1

// linkFile is the state file of one link.
type linkFile struct {
	Version  int         `json:"version"`
	Netns    string      `json:"netns"`
	Dev      string      `json:"dev"`
	PassACKs bool        `json:"passACKs"` // made by NewPassingACKs
	IFB      string      `json:"ifb"`
	IFBIndex int         `json:"ifbIndex"` // the IFB's ifindex: an IFB made again has another
	Classes  []fileClass `json:"classes"`
}

type fileClass struct {
	Key    string     `json:"key"`
	Parent string     `json:"parent,omitempty"`
	Minor  uint16     `json:"minor"` // classid 1:<minor>
	Rate   uint64     `json:"rate"`
	Ceil   uint64     `json:"ceil"`
	Addrs  []fileAddr `json:"addrs,omitempty"`
}

type fileAddr struct {
	Addr    netip.Addr `json:"addr"`
	Handles [2]uint32  `json:"handles"` // u32 filter handles: reads (source), writes (destination)
}

// stateFileName is the name of l's state file: the namespace and the device,
// each with every byte but letters, digits, '_', '-' and '.' (but a leading one)
// escaped as %XX, joined by '@'.
func stateFileName(l Link) string {
	esc := func(s string) string {
		var b strings.Builder
		for i, c := range []byte(s) {
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' && i > 0 || c == '_' || c == '-' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	return esc(l.Netns) + "@" + esc(l.Dev) + ".json"
}

// encodeState writes st, the memory of link l whose IFB has index ifbIndex, as
// its state file.
func encodeState(l Link, passACKs bool, ifbIndex int, st *linkState) linkFile {
	f := linkFile{Version: stateVersion, Netns: l.Netns, Dev: l.Dev, PassACKs: passACKs, IFB: ifbName(l.Dev), IFBIndex: ifbIndex,
		Classes: []fileClass{}}
	for _, c := range st.liveTree().Canonical().Classes {
		fc := fileClass{Key: c.Key, Parent: c.Parent, Minor: st.minor[c.Key], Rate: c.Rate, Ceil: c.Ceil}
		for _, a := range c.Addrs {
			fc.Addrs = append(fc.Addrs, fileAddr{Addr: a, Handles: [2]uint32{st.handles[0][a], st.handles[1][a]}})
		}
		f.Classes = append(f.Classes, fc)
	}
	return f
}

func ackMode(passACKs bool) string {
	if passACKs {
		return "passing the IFB by"
	}
	return "shaped"
}

// memory checks the file itself, as read for link l by a driver whose pure-ACK
// mode is passACKs, and returns it as that driver's memory of the link. Whether
// the kernel holds what it says is for layout and adopt.
func (f linkFile) memory(l Link, passACKs bool) (*linkState, error) {
	switch {
	case f.Version != stateVersion:
		return nil, fmt.Errorf("format version %d, this driver's is %d", f.Version, stateVersion)
	case f.Netns != l.Netns || f.Dev != l.Dev:
		return nil, fmt.Errorf("written for link %s", Link{Netns: f.Netns, Dev: f.Dev})
	case f.PassACKs != passACKs:
		return nil, fmt.Errorf("written with pure ACKs %s, this driver has them %s", ackMode(f.PassACKs), ackMode(passACKs))
	case f.IFB != ifbName(l.Dev) || f.IFBIndex <= 0:
		return nil, fmt.Errorf("IFB %q of index %d, want %s", f.IFB, f.IFBIndex, ifbName(l.Dev))
	}
	st := newLinkState()
	t := Tree{}
	for _, c := range f.Classes {
		if c.Minor < firstMinor || c.Minor > lastMinor {
			return nil, fmt.Errorf("class %q: classid 1:%x out of range", c.Key, c.Minor)
		}
		if st.used[c.Minor] {
			return nil, fmt.Errorf("class %q: classid 1:%x given twice", c.Key, c.Minor)
		}
		if _, dup := st.minor[c.Key]; dup {
			return nil, fmt.Errorf("class %q twice", c.Key)
		}
		st.used[c.Minor], st.minor[c.Key] = true, c.Minor
		cl := Class{Key: c.Key, Parent: c.Parent, Rate: c.Rate, Ceil: c.Ceil}
		for _, a := range c.Addrs {
			if !a.Addr.Is4() {
				return nil, fmt.Errorf("class %q: address %v is not IPv4", c.Key, a.Addr)
			}
			if slices.Contains(cl.Addrs, a.Addr) {
				return nil, fmt.Errorf("class %q: address %v twice", c.Key, a.Addr)
			}
			for dir, h := range a.Handles {
				if h>>20 != uint32(hashTable+dir) || h>>12&0xff != uint32(a.Addr.As4()[3]) || h&0xfff == 0 {
					return nil, fmt.Errorf("class %q: address %v: handle %x is not in its hash bucket", c.Key, a.Addr, h)
				}
				if st.nodes[dir][h] {
					return nil, fmt.Errorf("class %q: address %v: handle %x given twice", c.Key, a.Addr, h)
				}
				st.nodes[dir][h], st.handles[dir][a.Addr] = true, h
			}
			cl.Addrs = append(cl.Addrs, a.Addr)
		}
		t.Classes = append(t.Classes, cl)
		st.tree[c.Key] = cl
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return st, nil
}

// htbTuning is what of an HTB class derives from its rate and ceiling (Burst,
// Quantum) or is left at its default (priority).
type htbTuning struct{ buffer, cbuffer, quantum, prio uint32 }

func tuningOf(rate, ceil uint64) htbTuning {
	return htbTuning{buffer: netlink.Xmittime(rate, Burst(rate)), cbuffer: netlink.Xmittime(ceil, Burst(ceil)), quantum: Quantum(rate)}
}

// u32Line is one u32 filter as layout writes it. Handles in the driver's own hash
// tables are written out; those the kernel chose (in the table it makes for each
// priority) are "auto".
type u32Line struct {
	where         string // "ifb", "clsact"
	prio, proto   uint16
	handle, hash  string
	divisor, link uint32
	classid       uint32
	sel           string
	redirect      int    // ifindex a mirred egress redirect sends to
	unknown       string // anything else
}

func (u u32Line) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s u32 prio %d proto %04x", u.where, u.prio, u.proto)
	if u.handle != "" {
		fmt.Fprintf(&b, " handle %s", u.handle)
	}
	if u.hash != "" {
		fmt.Fprintf(&b, " hash %s", u.hash)
	}
	if u.divisor != 0 {
		fmt.Fprintf(&b, " divisor %d", u.divisor)
	}
	if u.link != 0 {
		fmt.Fprintf(&b, " link %x:", u.link>>20)
	}
	if u.classid != 0 {
		fmt.Fprintf(&b, " classid %s", netlink.HandleStr(u.classid))
	}
	if u.sel != "" {
		fmt.Fprintf(&b, " sel %s", u.sel)
	}
	if u.redirect != 0 {
		fmt.Fprintf(&b, " redirect %d", u.redirect)
	}
	if u.unknown != "" {
		fmt.Fprintf(&b, " %s", u.unknown)
	}
	return b.String()
}

// ownTable reports whether a u32 handle lies in one of the driver's hash tables.
func ownTable(h uint32) bool {
	t := h >> 20
	return t == hashTable || t == hashTable+1 || t == countTable
}

func u32Handle(h uint32) string {
	switch {
	case h == 0:
		return ""
	case ownTable(h):
		return fmt.Sprintf("%x:%x:%x", h>>20, h>>12&0xff, h&0xfff)
	}
	return "auto"
}

func selString(s *nl.TcU32Sel) string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "flags %x hoff %d hmask %x", s.Flags, s.Hoff, s.Hmask)
	if s.Offshift != 0 || s.Offmask != 0 || s.Off != 0 || s.Offoff != 0 {
		fmt.Fprintf(&b, " off %d/%x>>%d@%d", s.Off, s.Offmask, s.Offshift, s.Offoff)
	}
	for _, k := range s.Keys {
		fmt.Fprintf(&b, " %08x/%08x@%d", k.Val, k.Mask, k.Off)
		if k.OffMask != 0 {
			fmt.Fprintf(&b, "+%x", k.OffMask)
		}
	}
	return b.String()
}

// filterLine writes a filter listed on where (the IFB's HTB, dev's clsact) as a
// line.
func filterLine(where string, f netlink.Filter) string {
	a := f.Attrs()
	u, ok := f.(*netlink.U32)
	if !ok {
		return fmt.Sprintf("%s %s prio %d proto %04x handle %x", where, f.Type(), a.Priority, a.Protocol, a.Handle)
	}
	line := u32Line{where: where, prio: a.Priority, proto: a.Protocol, handle: u32Handle(a.Handle), hash: u32Handle(u.Hash),
		divisor: u.Divisor, link: u.Link, classid: u.ClassId, sel: selString(u.Sel)}
	var unknown []string
	if a.Chain != nil && *a.Chain != 0 {
		unknown = append(unknown, fmt.Sprintf("chain %d", *a.Chain))
	}
	if u.Police != nil {
		unknown = append(unknown, "police")
	}
	for _, act := range u.Actions {
		if m, ok := act.(*netlink.MirredAction); ok && m.MirredAction == netlink.TCA_EGRESS_REDIR &&
			m.Attrs().Action == netlink.TC_ACT_STOLEN && line.redirect == 0 {
			line.redirect = m.Ifindex
			continue
		}
		unknown = append(unknown, "action "+act.Type())
	}
	line.unknown = strings.Join(unknown, " ")
	return line.String()
}

// kernelLink is what the kernel holds on a link and its IFB, as read by
// session.kernel.
type kernelLink struct {
	ifb                         netlink.Link
	devQdiscs, ifbQdiscs        []netlink.Qdisc
	classes                     []netlink.Class
	ifbFilters, egress, ingress []netlink.Filter
}

// layout writes what k holds as lines, with each HTB class's tuning by classid.
// Of dev's qdiscs only clsact (and ingress, which would stand in its place) are
// the driver's business.
func (k kernelLink) layout() (lines []string, tune map[uint32]htbTuning) {
	tune = map[uint32]htbTuning{}
	a := k.ifb.Attrs()
	lines = append(lines, ifbLine(a.Name, a.Flags&net.FlagUp != 0, a.TxQLen))
	for _, q := range k.devQdiscs {
		if t := q.Type(); t == "clsact" || t == "ingress" {
			lines = append(lines, qdiscLine("dev", q))
		}
	}
	for _, q := range k.ifbQdiscs {
		lines = append(lines, qdiscLine("ifb", q))
	}
	for _, c := range k.classes {
		htb, ok := c.(*netlink.HtbClass)
		if !ok {
			lines = append(lines, fmt.Sprintf("ifb class %s %s parent %s", c.Type(), netlink.HandleStr(c.Attrs().Handle), netlink.HandleStr(c.Attrs().Parent)))
			continue
		}
		lines = append(lines, classLine(htb.Handle, htb.Parent, htb.Rate, htb.Ceil))
		tune[htb.Handle] = htbTuning{buffer: htb.Buffer, cbuffer: htb.Cbuffer, quantum: htb.Quantum, prio: htb.Prio}
	}
	for _, f := range k.ifbFilters {
		lines = append(lines, filterLine("ifb", f))
	}
	// u32 keeps its hash tables per qdisc, and clsact is one: listing one
	// direction's filters of a priority lists the other direction's of the same
	// priority too. So dev's filters are taken once each, by handle (unique in
	// the qdisc), without their direction.
	seen := map[[3]uint32]bool{}
	for _, f := range slices.Concat(k.egress, k.ingress) {
		a := f.Attrs()
		if id := [3]uint32{uint32(a.Priority), uint32(a.Protocol), a.Handle}; !seen[id] {
			seen[id] = true
			lines = append(lines, filterLine("clsact", f))
		}
	}
	return lines, tune
}

func ifbLine(name string, up bool, qlen int) string {
	return fmt.Sprintf("ifb %s up %v txqueuelen %d", name, up, qlen)
}

// qdiscLine writes a qdisc as a line. A pfifo's handle is left out: a leaf's is
// the driver's (<minor>:), or the kernel's when HTB gave the class one of its own
// (a class whose children were all deleted).
func qdiscLine(where string, q netlink.Qdisc) string {
	a := q.Attrs()
	switch q := q.(type) {
	case *netlink.Htb:
		return fmt.Sprintf("%s qdisc htb %s parent %s default %x r2q %d", where, netlink.HandleStr(a.Handle), netlink.HandleStr(a.Parent), q.Defcls, q.Rate2Quantum)
	}
	if q.Type() == "pfifo" {
		return fmt.Sprintf("%s qdisc pfifo parent %s", where, netlink.HandleStr(a.Parent))
	}
	return fmt.Sprintf("%s qdisc %s %s parent %s", where, q.Type(), netlink.HandleStr(a.Handle), netlink.HandleStr(a.Parent))
}

// classLine writes an HTB class as a line; a class under the root is listed with
// the root (TC_H_ROOT) or the qdisc as its parent, written "root" either way.
func classLine(handle, parent uint32, rate, ceil uint64) string {
	p := netlink.HandleStr(parent)
	if parent == netlink.MakeHandle(htbMajor, 0) {
		p = "root"
	}
	return fmt.Sprintf("ifb class htb %s parent %s rate %d ceil %d", netlink.HandleStr(handle), p, rate, ceil)
}

// expectedLayout is what a link the driver shaped holds when its memory is st:
// the lines it must hold, those it may hold (a leaf's pfifo: see qdiscLine) and
// each class's tuning.
func expectedLayout(st *linkState, l Link, passACKs bool, ifbIndex int) (must, may []string, tune map[uint32]htbTuning) {
	const ip, all = unix.ETH_P_IP, unix.ETH_P_ALL
	root := netlink.MakeHandle(htbMajor, 0)
	must = append(must, ifbLine(ifbName(l.Dev), true, ifbQueueLen),
		fmt.Sprintf("dev qdisc clsact %s parent %s", netlink.HandleStr(netlink.MakeHandle(0xffff, 0)), netlink.HandleStr(netlink.HANDLE_CLSACT)),
		fmt.Sprintf("ifb qdisc htb %s parent root default %x r2q 100", netlink.HandleStr(root), defaultMinor),
		fmt.Sprintf("ifb qdisc pfifo parent %s", netlink.HandleStr(classid(defaultMinor))),
		classLine(classid(defaultMinor), root, defaultRate, defaultRate))
	tune = map[uint32]htbTuning{classid(defaultMinor): tuningOf(defaultRate, defaultRate)}
	inner := map[string]bool{}
	for _, c := range st.tree {
		inner[c.Parent] = true
	}
	for _, k := range slices.Sorted(maps.Keys(st.tree)) {
		c := st.tree[k]
		id := classid(st.minor[k])
		must = append(must, classLine(id, st.parentOf(k), c.Rate, c.Ceil))
		tune[id] = tuningOf(c.Rate, c.Ceil)
		if !inner[k] {
			may = append(may, fmt.Sprintf("ifb qdisc pfifo parent %s", netlink.HandleStr(id)))
		}
	}
	line := func(u u32Line) { must = append(must, u.String()) }
	addrKey := func(a netip.Addr, off int) string {
		return selString(&nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: []nl.TcU32Key{{
			Mask: 0xffffffff, Val: binary.BigEndian.Uint32(a.AsSlice()), Off: int32(off)}}})
	}
	zeroKey := func(flags uint8, hoff int16, hmask uint32) string {
		return selString(&nl.TcU32Sel{Flags: flags, Hoff: hoff, Hmask: hmask, Keys: []nl.TcU32Key{{}}})
	}
	// Filters as netlink lists them: hash tables are not listed, and neither is
	// the entry the kernel gives each priority.
	// The IFB's HTB: a link into each direction's table, and each address's
	// filter per direction.
	for dir := range 2 {
		line(u32Line{where: "ifb", prio: filterPrio, proto: ip, handle: "auto", hash: "auto", link: uint32(hashTable+dir) << 20,
			sel: zeroKey(0, int16(dirOffset(dir)), 0xff)})
	}
	for k, c := range st.tree {
		for _, a := range c.Addrs {
			for dir := range 2 {
				h := st.handles[dir][a]
				line(u32Line{where: "ifb", prio: filterPrio, proto: ip, handle: u32Handle(h), hash: u32Handle(h &^ 0xfff),
					classid: classid(st.minor[k]), sel: addrKey(a, dirOffset(dir))})
			}
		}
	}
	// dev's clsact: the link into the counting table and the counting redirects
	// (egress), and in each direction the pure ACKs (NewPassingACKs) and the
	// match-all redirect.
	line(u32Line{where: "clsact", prio: countPrio, proto: ip, handle: "auto", hash: "auto", link: countTable << 20,
		sel: zeroKey(0, offSrc, 0xff)})
	for k, c := range st.tree {
		for _, a := range c.Addrs {
			h := countHandle(st.handles[0][a])
			line(u32Line{where: "clsact", prio: countPrio, proto: ip, handle: u32Handle(h), hash: u32Handle(h &^ 0xfff),
				classid: classid(st.minor[k]), sel: addrKey(a, offSrc), redirect: ifbIndex})
		}
	}
	for range 2 {
		for doff := uint32(5); passACKs && doff <= 15; doff++ {
			line(u32Line{where: "clsact", prio: ackPrio, proto: ip, handle: "auto", hash: "auto", classid: classid(defaultMinor),
				sel: selString(&nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: pureACK(doff)})})
		}
		line(u32Line{where: "clsact", prio: redirectPrio, proto: all, handle: "auto", hash: "auto",
			sel: zeroKey(nl.TC_U32_TERMINAL, 0, 0), redirect: ifbIndex})
	}
	return must, may, tune
}

// differences compares the lines a link holds with those it must and may hold:
// what is missing, and what is there but neither required nor allowed.
func differences(must, may, got []string) (missing, unexpected []string) {
	need, allow := map[string]int{}, map[string]int{}
	for _, l := range must {
		need[l]++
	}
	for _, l := range may {
		allow[l]++
	}
	for _, l := range got {
		switch {
		case need[l] > 0:
			need[l]--
		case allow[l] > 0:
			allow[l]--
		default:
			unexpected = append(unexpected, l)
		}
	}
	for _, l := range must {
		if need[l] > 0 {
			need[l]--
			missing = append(missing, l)
		}
	}
	slices.Sort(unexpected)
	return missing, unexpected
}

// mismatch says briefly how a link differs from what it must hold.
func mismatch(missing, unexpected []string) string {
	some := func(ls []string) string {
		if len(ls) > 3 {
			return fmt.Sprintf("%q and %d more", ls[:3], len(ls)-3)
		}
		return fmt.Sprintf("%q", ls)
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing "+some(missing))
	}
	if len(unexpected) > 0 {
		parts = append(parts, "not the driver's "+some(unexpected))
	}
	return "the kernel differs from the state file: " + strings.Join(parts, "; ")
}

// kernel reads what the link and its IFB hold.
func (s *session) kernel() (k kernelLink, err error) {
	k.ifb = s.ifb
	if k.devQdiscs, err = s.h.QdiscList(s.dev); err != nil {
		return k, fmt.Errorf("list qdiscs: %w", err)
	}
	if k.ifbQdiscs, err = s.h.QdiscList(s.ifb); err != nil {
		return k, fmt.Errorf("list qdiscs: %w", err)
	}
	if k.classes, err = s.h.ClassList(s.ifb, netlink.HANDLE_NONE); err != nil {
		return k, fmt.Errorf("list classes: %w", err)
	}
	if k.ifbFilters, err = s.h.FilterList(s.ifb, netlink.MakeHandle(htbMajor, 0)); err != nil {
		return k, fmt.Errorf("list filters: %w", err)
	}
	if k.egress, err = s.h.FilterList(s.dev, netlink.HANDLE_MIN_EGRESS); err != nil {
		return k, fmt.Errorf("list egress filters: %w", err)
	}
	if k.ingress, err = s.h.FilterList(s.dev, netlink.HANDLE_MIN_INGRESS); err != nil {
		return k, fmt.Errorf("list ingress filters: %w", err)
	}
	return k, nil
}

// adopt reads l's state file and, if the kernel holds exactly what it records,
// returns it as the driver's memory of l, with the classes to retune; otherwise
// nil and why not.
func (d *netlinkDriver) adopt(s *session, l Link) (*linkState, string) {
	path := filepath.Join(d.stateDir, stateFileName(l))
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "no state file " + path
	}
	if err != nil {
		return nil, err.Error()
	}
	var f linkFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Sprintf("state file %s: %v", path, err)
	}
	st, err := f.memory(l, d.passACKs)
	if err != nil {
		return nil, fmt.Sprintf("state file %s: %v", path, err)
	}
	if s.ifb == nil {
		return nil, "no IFB"
	}
	if i := s.ifb.Attrs().Index; i != f.IFBIndex {
		return nil, fmt.Sprintf("IFB %s has index %d, the state file's %d: it was made again", s.ifb.Attrs().Name, i, f.IFBIndex)
	}
	k, err := s.kernel()
	if err != nil {
		return nil, err.Error()
	}
	got, tune := k.layout()
	must, may, want := expectedLayout(st, l, d.passACKs, f.IFBIndex)
	if missing, unexpected := differences(must, may, got); len(missing)+len(unexpected) > 0 {
		return nil, mismatch(missing, unexpected)
	}
	if tune[classid(defaultMinor)] != want[classid(defaultMinor)] {
		st.retune = append(st.retune, DefaultKey)
	}
	for _, key := range slices.Sorted(maps.Keys(st.tree)) {
		if id := classid(st.minor[key]); tune[id] != want[id] {
			st.retune = append(st.retune, key)
		}
	}
	d.log.Info("qos: adopted the link's shaping from its state file", "link", l.String(), "classes", len(st.tree), "retune", len(st.retune))
	return st, ""
}

// save writes st, the memory of l whose IFB has index ifbIndex, to l's state
// file. When it cannot, the file is removed (a later driver rebuilds the link)
// and the next Apply tries again.
func (d *netlinkDriver) save(l Link, ifbIndex int, st *linkState) {
	name := stateFileName(l)
	b, err := json.MarshalIndent(encodeState(l, d.passACKs, ifbIndex, st), "", "\t")
	if err == nil {
		err = writeFileAtomic(d.stateDir, name, append(b, '\n'))
	}
	if err != nil {
		d.log.Warn("qos: cannot save the link's state: a restart will rebuild its shaping", "link", l.String(), "err", err)
		os.Remove(filepath.Join(d.stateDir, name))
		return
	}
	st.unsaved = false
}

// writeFileAtomic replaces dir/name with data: a reader (or a crash) sees the old
// file or the new one, never a part.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	dh, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer dh.Close()
	return dh.Sync()
}
