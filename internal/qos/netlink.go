package qos

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Kernel layout of a shaped link (all numbers fixed, so a dump is readable):
//
//	dev (e.g. the sandbox's eth0)
//	  qdisc clsact, ingress and egress:
//	    prio 1 (NewPassingACKs only): u32, pure TCP ACKs (IPv4, no options, not
//	            a fragment, total length = the headers' length): no action, the
//	            packet goes its way
//	    prio 2 (egress only): u32 hash table 102: (256 buckets on the last octet of
//	            ip src), one filter per address, classid of its class, mirred
//	            redirect → IFB: the action's counters are the bytes the address
//	            sent, as HTB will charge them (Counters.Sent)
//	    prio 3: u32 match-all, mirred redirect → IFB
//	IFB (ifb<hash of dev>, txqueuelen 1000)
//	  qdisc htb 1: r2q 100 default 2
//	    filters, u32 prio 1, each direction a hash table of 256 buckets on the
//	    address's last octet, one filter per address and direction:
//	      100: ip src (reads)   101: ip dst (writes)
//	    class 1:2       the default class (unclassified traffic), 100 Gbit/s, pfifo 2:
//	    class 1:<minor> the tree's classes (minor ≥ 0x10), leaves with pfifo <minor>:
//
// A packet costs one hash lookup per direction table, whatever the number of
// addresses (and an egress packet one more on dev, where it is counted per
// address: HTB counts a class's packets of both directions together, and the
// split per direction is what metrics need). With NewPassingACKs, pure ACKs, which carry no payload (limits are
// on payload), pass the IFB by: it moves about half the packets (about one ACK
// per data skb with GRO; TestRootPureACKsPassBy), but NFS throughput gained
// nothing measurable (docs/benchmarks.md). A packet with payload always goes
// through the IFB, however small: a client cannot slip data past its class in
// tiny segments. (Classifying once on clsact with skbedit priority would spare HTB its
// filter, but act_skbedit is not built into the kernels Basin runs on.)
const (
	htbMajor     = 1
	defaultMinor = 2
	firstMinor   = 0x10
	lastMinor    = 0xfff0
	hashTable    = 0x100 // u32 hash table id of direction 0; direction 1 uses 0x101 (u32 shares tables per qdisc, and clsact is one qdisc)
	filterPrio   = 1
	countTable   = 0x102       // u32 hash table id of the counting redirects on dev's egress (clsact is one qdisc too)
	ackPrio      = 1           // clsact: pure TCP ACKs pass by the IFB
	countPrio    = 2           // clsact egress: each address's packets go to the IFB through a redirect of their own
	redirectPrio = 3           // clsact: everything else goes to the IFB
	ifbQueueLen  = 1000        // also the pfifo leaves' limit: pfifo without options takes the device's txqueuelen
	defaultRate  = 12500000000 // 100 Gbit/s: unclassified traffic is not shaped (10 Gbit/s would cap a veth that moves ~2 GB/s)
	offSrc       = 12          // offset of the IPv4 source address
	offDst       = 16
)

// New returns the netlink driver. It remembers, per link, the classid it gave each
// Key and the u32 handle it gave each address; Apply sends only what differs from
// that memory.
//
// With StateDir it also keeps that memory in a file per link, so that a driver
// started later (Basin stopped, killed or replaced by a new build while the link
// carried I/O) takes over a shaped link it has no memory of: if the kernel holds
// exactly what the file records, the file becomes its memory and Apply sends only
// the difference, so the link's classes, queues and counters are kept (state.go).
// Without a state directory, or when the file is missing or does not match the
// kernel, a driver with no memory of a shaped link takes it down and builds it
// again from scratch rather than guess which classid was which Key; shaping on
// that link is reset once, nothing is left over. The same happens after an Apply
// that failed half-way, unless the kernel still matches the file.
func New(log *slog.Logger, opts ...Option) Driver {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &netlinkDriver{log: log, links: map[Link]*linkState{}}
	for _, o := range opts {
		o(d)
	}
	return d
}

// NewPassingACKs returns the netlink driver with the pure-ACK bypass: payload-less
// TCP ACKs pass the IFB by (limits are on payload), which halves the packets it
// moves. Measured side by side with New on NFS (docs/benchmarks.md) it gained
// nothing above noise, so it is not the default (--qos-pass-acks).
func NewPassingACKs(log *slog.Logger, opts ...Option) Driver {
	d := New(log, opts...).(*netlinkDriver)
	d.passACKs = true
	return d
}

// Option configures New and NewPassingACKs.
type Option func(*netlinkDriver)

// StateDir has the driver keep its memory of each link in a file in dir (made
// when first needed), written after every Apply that changed something and
// removed by Remove, and take over a link from that file when it has no memory of
// it (New). One driver at a time may use a directory.
func StateDir(dir string) Option {
	return func(d *netlinkDriver) { d.stateDir = dir }
}

type netlinkDriver struct {
	log      *slog.Logger
	passACKs bool       // the pure-ACK bypass (NewPassingACKs)
	stateDir string     // StateDir; "" = none
	mu       sync.Mutex // one operation at a time; guards links
	links    map[Link]*linkState
}

// linkState is what the driver made on one link.
type linkState struct {
	tree    map[string]Class // live classes, with Addrs
	minor   map[string]uint16
	used    map[uint16]bool
	handles [2]map[netip.Addr]uint32 // per direction: address → u32 filter handle
	nodes   [2]map[uint32]bool       // per direction: used handles
	// retune lists the classes (DefaultKey: the default class) whose burst,
	// cburst, quantum or priority the kernel holds otherwise than this driver
	// sets them: found when the link was adopted, set by the next Apply.
	retune []string
	// unsaved: the state file does not hold this memory yet (StateDir).
	unsaved bool
}

func newLinkState() *linkState {
	return &linkState{
		tree: map[string]Class{}, minor: map[string]uint16{}, used: map[uint16]bool{},
		handles: [2]map[netip.Addr]uint32{{}, {}}, nodes: [2]map[uint32]bool{{}, {}},
	}
}

func (s *linkState) liveTree() Tree {
	t := Tree{}
	for _, c := range s.tree {
		t.Classes = append(t.Classes, c)
	}
	return t
}

// allocMinor gives key the lowest free minor.
func (s *linkState) allocMinor(key string) (uint16, error) {
	for m := uint16(firstMinor); m <= lastMinor; m++ {
		if !s.used[m] {
			s.used[m], s.minor[key] = true, m
			return m, nil
		}
	}
	return 0, fmt.Errorf("class %s: no free classid", key)
}

func (s *linkState) freeMinor(key string) {
	delete(s.used, s.minor[key])
	delete(s.minor, key)
}

// allocHandle gives addr a u32 handle in its bucket (the last octet) of direction d.
func (s *linkState) allocHandle(d int, a netip.Addr) (uint32, error) {
	bucket := uint32(a.As4()[3])
	for node := uint32(1); node < 0x1000; node++ {
		h := uint32(hashTable+d)<<20 | bucket<<12 | node
		if !s.nodes[d][h] {
			s.nodes[d][h], s.handles[d][a] = true, h
			return h, nil
		}
	}
	return 0, fmt.Errorf("address %v: hash bucket full", a)
}

func (s *linkState) freeHandle(d int, a netip.Addr) {
	delete(s.nodes[d], s.handles[d][a])
	delete(s.handles[d], a)
}

// ifbName is the IFB that carries dev's traffic: 15 characters at most, unique per
// device within its namespace.
func ifbName(dev string) string {
	h := sha1.Sum([]byte(dev))
	return "ifb" + hex.EncodeToString(h[:4])
}

func classid(minor uint16) uint32 { return netlink.MakeHandle(htbMajor, minor) }

// handle opens a netlink handle in l's namespace.
func handle(l Link) (*netlink.Handle, error) {
	if l.Netns == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromName(l.Netns)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", l.Netns, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// session is one operation on one link: its netlink handle and devices.
type session struct {
	h   *netlink.Handle
	dev netlink.Link
	ifb netlink.Link // nil when absent
}

func open(l Link) (*session, error) {
	h, err := handle(l)
	if err != nil {
		return nil, err
	}
	dev, err := h.LinkByName(l.Dev)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("link %s: %w", l, err)
	}
	s := &session{h: h, dev: dev}
	if ifb, err := h.LinkByName(ifbName(l.Dev)); err == nil {
		s.ifb = ifb
	}
	return s, nil
}

func (d *netlinkDriver) Apply(ctx context.Context, l Link, t Tree) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if len(t.Classes) == 0 {
		return d.Remove(ctx, l)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := open(l)
	if err != nil {
		return err
	}
	defer s.h.Close()
	st := d.links[l]
	if st != nil && s.ifb == nil {
		st = nil // the IFB went (a sandbox made again): nothing of ours is left
	}
	if st == nil && d.stateDir != "" {
		if s.ifb == nil {
			d.log.Info("qos: shaping the link", "link", l.String(), "why", "no IFB: the link is not shaped")
		} else {
			var why string
			if st, why = d.adopt(s, l); st == nil {
				d.log.Warn("qos: taking the link's shaping down to build it again", "link", l.String(), "why", why)
			}
		}
	}
	if st == nil {
		if err := s.teardown(); err != nil {
			return fmt.Errorf("qos %s: reset: %w", l, err)
		}
		if err := s.setup(ifbName(l.Dev), d.passACKs); err != nil {
			delete(d.links, l)
			return fmt.Errorf("qos %s: set up: %w", l, err)
		}
		st = newLinkState()
		st.unsaved = true
	}
	d.links[l] = st
	for len(st.retune) > 0 {
		if err := s.retune(st, st.retune[0]); err != nil {
			// Rebuild next time rather than adopt and fail again.
			delete(d.links, l)
			os.Remove(filepath.Join(d.stateDir, stateFileName(l)))
			return fmt.Errorf("qos %s: retune class %q: %w", l, st.retune[0], err)
		}
		st.retune, st.unsaved = st.retune[1:], true
	}
	changes := Plan(st.liveTree(), t)
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			delete(d.links, l) // partly applied: rebuild next time (the kernel no longer matches the state file)
			return err
		}
		if err := s.apply(st, c); err != nil {
			delete(d.links, l)
			return fmt.Errorf("qos %s: %s: %w", l, c, err)
		}
	}
	if len(changes) > 0 {
		st.unsaved = true
	}
	if d.stateDir != "" && st.unsaved {
		d.save(l, s.ifb.Attrs().Index, st)
	}
	d.log.Debug("qos applied", "link", l.String(), "changes", len(changes), "classes", len(t.Classes))
	return nil
}

// retune sets the burst, cburst, quantum and priority of class key (DefaultKey:
// the default class) to this driver's, in place.
func (s *session) retune(st *linkState, key string) error {
	if key == DefaultKey {
		return s.h.ClassChange(s.htbClass(defaultMinor, netlink.MakeHandle(htbMajor, 0), defaultRate, defaultRate))
	}
	cl := st.tree[key]
	return s.h.ClassChange(s.htbClass(st.minor[key], st.parentOf(key), cl.Rate, cl.Ceil))
}

// parentOf is the classid of key's parent (the HTB qdisc for a class under the root).
func (st *linkState) parentOf(key string) uint32 {
	if p := st.tree[key].Parent; p != "" {
		return classid(st.minor[p])
	}
	return netlink.MakeHandle(htbMajor, 0)
}

// setup builds the IFB, its root HTB with the default class, and the redirection of
// both directions of dev into the IFB.
func (s *session) setup(name string, passACKs bool) error {
	ifb := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, TxQLen: ifbQueueLen}}
	if err := s.h.LinkAdd(ifb); err != nil {
		return fmt.Errorf("add ifb %s: %w", name, err)
	}
	link, err := s.h.LinkByName(name)
	if err != nil {
		return err
	}
	s.ifb = link
	if err := s.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("ifb %s up: %w", name, err)
	}
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(htbMajor, 0), Parent: netlink.HANDLE_ROOT})
	root.Rate2Quantum, root.Defcls = 100, defaultMinor
	if err := s.h.QdiscReplace(root); err != nil {
		return fmt.Errorf("htb root: %w", err)
	}
	if err := s.addClass(defaultMinor, 0, defaultRate, defaultRate, true); err != nil {
		return fmt.Errorf("default class: %w", err)
	}
	clsact := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: s.dev.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := s.h.QdiscReplace(clsact); err != nil {
		return fmt.Errorf("clsact: %w", err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
		for doff := uint32(5); passACKs && doff <= 15; doff++ {
			ack := &netlink.U32{FilterAttrs: netlink.FilterAttrs{LinkIndex: s.dev.Attrs().Index, Parent: parent,
				Priority: ackPrio, Protocol: unix.ETH_P_IP}, Sel: &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: pureACK(doff)},
				// No action (act_gact is not built into every kernel): a match
				// with a class and no action ends classification and lets the
				// packet go its way (TC_ACT_OK).
				ClassId: classid(defaultMinor)}
			if err := s.h.FilterAdd(ack); err != nil {
				return fmt.Errorf("pure ACKs: %w", err)
			}
		}
		if parent == netlink.HANDLE_MIN_EGRESS {
			ht := &netlink.U32{FilterAttrs: s.countAttrs(countTable << 20), Divisor: 256}
			if err := s.h.FilterAdd(ht); err != nil {
				return fmt.Errorf("counting hash table: %w", err)
			}
			link := &netlink.U32{FilterAttrs: s.countAttrs(0), Link: countTable << 20,
				Sel: &nl.TcU32Sel{Hmask: 0xff, Hoff: offSrc, Keys: []nl.TcU32Key{{}}}}
			if err := s.h.FilterAdd(link); err != nil {
				return fmt.Errorf("counting hash link: %w", err)
			}
		}
		all := &netlink.U32{FilterAttrs: netlink.FilterAttrs{LinkIndex: s.dev.Attrs().Index, Parent: parent,
			Priority: redirectPrio, Protocol: unix.ETH_P_ALL}, Actions: []netlink.Action{netlink.NewMirredAction(link.Attrs().Index)}}
		if err := s.h.FilterAdd(all); err != nil {
			return fmt.Errorf("redirect: %w", err)
		}
	}
	for dir := range 2 {
		ht := &netlink.U32{FilterAttrs: s.filterAttrs(uint32(hashTable+dir) << 20), Divisor: 256}
		if err := s.h.FilterAdd(ht); err != nil {
			return fmt.Errorf("hash table: %w", err)
		}
		link := &netlink.U32{FilterAttrs: s.filterAttrs(0), Link: uint32(hashTable+dir) << 20,
			Sel: &nl.TcU32Sel{Hmask: 0xff, Hoff: int16(dirOffset(dir)), Keys: []nl.TcU32Key{{}}}}
		if err := s.h.FilterAdd(link); err != nil {
			return fmt.Errorf("hash link: %w", err)
		}
	}
	return nil
}

// pureACK matches an IPv4 TCP segment with no payload whose TCP header is doff
// words long: a 20-byte IP header (no options), not a fragment, and a total length
// of exactly both headers.
func pureACK(doff uint32) []nl.TcU32Key {
	return []nl.TcU32Key{
		{Off: 0, Mask: 0x0f00ffff, Val: 5<<24 | (20 + 4*doff)}, // IHL 5, total length
		{Off: 4, Mask: 0x00003fff, Val: 0},                     // no more fragments, offset 0
		{Off: 8, Mask: 0x00ff0000, Val: unix.IPPROTO_TCP << 16},
		{Off: 32, Mask: 0xf0000000, Val: doff << 28}, // TCP data offset
	}
}

// dirOffset is where direction dir's address lies in the IPv4 header: direction 0
// is reads (the endpoint is the source), 1 is writes (the destination).
func dirOffset(dir int) int {
	if dir == 0 {
		return offSrc
	}
	return offDst
}

// countAttrs are those of a counting redirect filter on dev's egress.
func (s *session) countAttrs(h uint32) netlink.FilterAttrs {
	return netlink.FilterAttrs{LinkIndex: s.dev.Attrs().Index, Parent: netlink.HANDLE_MIN_EGRESS,
		Priority: countPrio, Protocol: unix.ETH_P_IP, Handle: h}
}

// countHandle is the handle of the counting redirect of the address whose
// read-direction (source) filter on the IFB has handle h: the same bucket and
// node in table countTable.
func countHandle(h uint32) uint32 { return countTable<<20 | h&0xfffff }

// filterAttrs are those of a u32 filter on the IFB's HTB.
func (s *session) filterAttrs(h uint32) netlink.FilterAttrs {
	return netlink.FilterAttrs{LinkIndex: s.ifb.Attrs().Index, Parent: netlink.MakeHandle(htbMajor, 0),
		Priority: filterPrio, Protocol: unix.ETH_P_IP, Handle: h}
}

func (s *session) htbClass(minor uint16, parent uint32, rate, ceil uint64) *netlink.HtbClass {
	return &netlink.HtbClass{
		ClassAttrs: netlink.ClassAttrs{LinkIndex: s.ifb.Attrs().Index, Handle: classid(minor), Parent: parent},
		Rate:       rate, Ceil: ceil,
		Buffer:  netlink.Xmittime(rate, Burst(rate)),
		Cbuffer: netlink.Xmittime(ceil, Burst(ceil)),
		Quantum: Quantum(rate),
	}
}

func (s *session) addClass(minor uint16, parent uint32, rate, ceil uint64, leaf bool) error {
	if parent == 0 {
		parent = netlink.MakeHandle(htbMajor, 0)
	}
	if err := s.h.ClassAdd(s.htbClass(minor, parent, rate, ceil)); err != nil {
		return err
	}
	if !leaf {
		return nil
	}
	q := &netlink.GenericQdisc{QdiscType: "pfifo", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: s.ifb.Attrs().Index, Handle: netlink.MakeHandle(minor, 0), Parent: classid(minor)}}
	if err := s.h.QdiscAdd(q); err != nil {
		return fmt.Errorf("pfifo: %w", err)
	}
	return nil
}

func (s *session) apply(st *linkState, c Change) error {
	switch c.Op {
	case OpDeleteAddr:
		// The counting redirect first: the address's packets then take the
		// match-all redirect, into the default class until the filters go.
		if h, ok := st.handles[0][c.Addr]; ok {
			f := &netlink.U32{FilterAttrs: s.countAttrs(countHandle(h))}
			if err := s.h.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
		for dir := range 2 {
			f := &netlink.U32{FilterAttrs: s.filterAttrs(st.handles[dir][c.Addr])}
			if err := s.h.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
			st.freeHandle(dir, c.Addr)
		}
		cl := st.tree[c.Key]
		cl.Addrs = slices.DeleteFunc(slices.Clone(cl.Addrs), func(a netip.Addr) bool { return a == c.Addr })
		st.tree[c.Key] = cl
	case OpDeleteClass:
		cl := st.htbClass(s, c.Key)
		if err := s.h.ClassDel(cl); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		st.freeMinor(c.Key)
		delete(st.tree, c.Key)
	case OpChangeClass:
		cl := st.tree[c.Key]
		if err := s.h.ClassChange(s.htbClass(st.minor[c.Key], st.parentOf(c.Key), c.Class.Rate, c.Class.Ceil)); err != nil {
			return err
		}
		cl.Rate, cl.Ceil = c.Class.Rate, c.Class.Ceil
		st.tree[c.Key] = cl
	case OpAddClass:
		minor, err := st.allocMinor(c.Key)
		if err != nil {
			return err
		}
		parent := uint32(0)
		if c.Class.Parent != "" {
			parent = classid(st.minor[c.Class.Parent])
		}
		// A new class is a leaf until a child is added under it; HTB then drops the
		// leaf's pfifo itself (and gives a class whose children are all deleted a
		// pfifo of the IFB's txqueuelen, i.e. the same as ours).
		if err := s.addClass(minor, parent, c.Class.Rate, c.Class.Ceil, true); err != nil {
			st.freeMinor(c.Key)
			return err
		}
		st.tree[c.Key] = c.Class
	case OpAddAddr:
		for dir := range 2 {
			h, err := st.allocHandle(dir, c.Addr)
			if err != nil {
				return err
			}
			f := &netlink.U32{
				FilterAttrs: s.filterAttrs(h),
				Hash:        h &^ 0xfff,
				ClassId:     classid(st.minor[c.Key]),
				Sel: &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: []nl.TcU32Key{{
					Mask: 0xffffffff, Val: binary.BigEndian.Uint32(c.Addr.AsSlice()), Off: int32(dirOffset(dir))}}},
			}
			if err := s.h.FilterAdd(f); err != nil {
				st.freeHandle(dir, c.Addr)
				return err
			}
		}
		h := countHandle(st.handles[0][c.Addr])
		f := &netlink.U32{
			FilterAttrs: s.countAttrs(h),
			Hash:        h &^ 0xfff,
			ClassId:     classid(st.minor[c.Key]),
			Sel: &nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: []nl.TcU32Key{{
				Mask: 0xffffffff, Val: binary.BigEndian.Uint32(c.Addr.AsSlice()), Off: offSrc}}},
			Actions: []netlink.Action{netlink.NewMirredAction(s.ifb.Attrs().Index)},
		}
		if err := s.h.FilterAdd(f); err != nil {
			return fmt.Errorf("counting redirect: %w", err)
		}
		cl := st.tree[c.Key]
		cl.Addrs = append(slices.Clone(cl.Addrs), c.Addr)
		st.tree[c.Key] = cl
	default:
		return fmt.Errorf("unknown change %q", c.Op)
	}
	return nil
}

func (st *linkState) htbClass(s *session, key string) *netlink.HtbClass {
	return &netlink.HtbClass{ClassAttrs: netlink.ClassAttrs{LinkIndex: s.ifb.Attrs().Index, Handle: classid(st.minor[key])}}
}

// teardown removes the IFB (with its qdiscs and classes) and dev's clsact (with its
// filters); what is already absent is fine.
func (s *session) teardown() error {
	var errs []error
	if s.ifb != nil {
		if err := s.h.LinkDel(s.ifb); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete ifb: %w", err))
		}
		s.ifb = nil
	}
	clsact := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: s.dev.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := s.h.QdiscDel(clsact); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		errs = append(errs, fmt.Errorf("delete clsact: %w", err))
	}
	return errors.Join(errs...)
}

func (d *netlinkDriver) Remove(ctx context.Context, l Link) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.links, l)
	var errs []error
	if d.stateDir != "" {
		if err := os.Remove(filepath.Join(d.stateDir, stateFileName(l))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("qos %s: remove state file: %w", l, err))
		}
	}
	s, err := open(l)
	if err != nil {
		var le netlink.LinkNotFoundError
		if errors.As(err, &le) || errors.Is(err, unix.ENOENT) {
			return errors.Join(errs...) // no device (or no namespace): nothing of ours can be there
		}
		return errors.Join(append(errs, err)...)
	}
	defer s.h.Close()
	if err := s.teardown(); err != nil {
		errs = append(errs, fmt.Errorf("qos %s: remove: %w", l, err))
	}
	return errors.Join(errs...)
}

// memory is the driver's memory of l: what it made there, or, with no memory of
// a shaped link, what it adopts from the link's state file (nil if nothing).
// Read and Counters use it to name classes by Key; they change nothing.
func (d *netlinkDriver) memory(s *session, l Link) *linkState {
	if st := d.links[l]; st != nil || d.stateDir == "" || s.ifb == nil {
		return st
	}
	st, why := d.adopt(s, l)
	if st == nil {
		d.log.Debug("qos: classes not named: the link's state file was not adopted", "link", l.String(), "why", why)
		return nil
	}
	d.links[l] = st
	return st
}

func (d *netlinkDriver) Read(ctx context.Context, l Link) (Tree, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := open(l)
	if err != nil {
		return Tree{}, err
	}
	defer s.h.Close()
	if s.ifb == nil {
		return Tree{}, nil
	}
	nameOf := keyOf(d.memory(s, l))
	classes, err := s.h.ClassList(s.ifb, netlink.HANDLE_NONE)
	if err != nil {
		return Tree{}, fmt.Errorf("qos %s: list classes: %w", l, err)
	}
	byID := map[uint32]*Class{}
	var order []uint32
	for _, c := range classes {
		htb, ok := c.(*netlink.HtbClass)
		if !ok || htb.Handle == classid(defaultMinor) {
			continue
		}
		cl := &Class{Key: nameOf(htb.Handle), Rate: htb.Rate, Ceil: htb.Ceil}
		if htb.Parent != netlink.MakeHandle(htbMajor, 0) && htb.Parent != netlink.HANDLE_ROOT {
			cl.Parent = nameOf(htb.Parent)
		}
		byID[htb.Handle] = cl
		order = append(order, htb.Handle)
	}
	// Addresses, read from one direction's filters (Apply installs both; the other
	// direction is compared in tests).
	for dir := range 2 {
		addrs, err := s.classified(dir)
		if err != nil {
			return Tree{}, fmt.Errorf("qos %s: %w", l, err)
		}
		for a, id := range addrs {
			cl := byID[id]
			if cl == nil {
				return Tree{}, fmt.Errorf("qos %s: address %v classified into missing class %x", l, a, id)
			}
			if dir == 0 {
				cl.Addrs = append(cl.Addrs, a)
			} else if !slices.Contains(cl.Addrs, a) {
				return Tree{}, fmt.Errorf("qos %s: address %v classified for writes only (class %s)", l, a, cl.Key)
			}
		}
	}
	// Every classified address has its counting redirect into the same class.
	counted, err := s.counting()
	if err != nil {
		return Tree{}, fmt.Errorf("qos %s: %w", l, err)
	}
	for id, cl := range byID {
		for _, a := range cl.Addrs {
			if c, ok := counted[a]; !ok || c.classid != id {
				return Tree{}, fmt.Errorf("qos %s: address %v of class %s has no counting redirect into it", l, a, cl.Key)
			}
			delete(counted, a)
		}
	}
	if len(counted) > 0 {
		extra := slices.SortedFunc(maps.Keys(counted), netip.Addr.Compare)
		return Tree{}, fmt.Errorf("qos %s: address %v is counted but classified into no class", l, extra[0])
	}
	t := Tree{}
	for _, id := range order {
		t.Classes = append(t.Classes, *byID[id])
	}
	return t.Canonical(), nil
}

// counted is one counting redirect: the class it names and what its action
// moved into the IFB.
type counted struct {
	classid        uint32
	bytes, packets uint64
}

// counting lists dev's counting redirects by address.
func (s *session) counting() (map[netip.Addr]counted, error) {
	filters, err := s.h.FilterList(s.dev, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return nil, fmt.Errorf("list counting filters: %w", err)
	}
	out := map[netip.Addr]counted{}
	for _, f := range filters {
		u, ok := f.(*netlink.U32)
		if !ok || u.Handle>>20 != countTable || u.Sel == nil || len(u.Sel.Keys) != 1 || u.Sel.Keys[0].Off != offSrc {
			continue
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], u.Sel.Keys[0].Val)
		c := counted{classid: u.ClassId}
		for _, a := range u.Actions {
			if st := a.Attrs().Statistics; st != nil && st.Basic != nil {
				c.bytes += st.Basic.Bytes
				c.packets += uint64(st.Basic.Packets)
			}
		}
		out[netip.AddrFrom4(b)] = c
	}
	return out, nil
}

// classified lists direction dir's address filters: address → the classid they set.
func (s *session) classified(dir int) (map[netip.Addr]uint32, error) {
	off := dirOffset(dir)
	filters, err := s.h.FilterList(s.ifb, netlink.MakeHandle(htbMajor, 0))
	if err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	out := map[netip.Addr]uint32{}
	for _, f := range filters {
		u, ok := f.(*netlink.U32)
		if !ok || u.Sel == nil || len(u.Sel.Keys) != 1 || u.Sel.Keys[0].Mask != 0xffffffff || u.Sel.Keys[0].Off != int32(off) {
			continue
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], u.Sel.Keys[0].Val)
		out[netip.AddrFrom4(b)] = u.ClassId
	}
	return out, nil
}

// keyOf maps a classid to the Key st gave it, or "1:<minor>" for a classid it
// does not hold (the link was shaped before this driver started, and not adopted).
func keyOf(st *linkState) func(uint32) string {
	names := map[uint32]string{}
	if st != nil {
		for k, m := range st.minor {
			names[classid(m)] = k
		}
	}
	return func(id uint32) string {
		if k, ok := names[id]; ok {
			return k
		}
		return fmt.Sprintf("%x:%x", id>>16, id&0xffff)
	}
}

func (d *netlinkDriver) Counters(ctx context.Context, l Link) (map[string]Counters, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := open(l)
	if err != nil {
		return nil, err
	}
	defer s.h.Close()
	out := map[string]Counters{}
	if s.ifb == nil {
		return out, nil
	}
	nameOf := keyOf(d.memory(s, l))
	classes, err := s.h.ClassList(s.ifb, netlink.HANDLE_NONE)
	if err != nil {
		return nil, fmt.Errorf("qos %s: list classes: %w", l, err)
	}
	for _, c := range classes {
		a := c.Attrs()
		key := nameOf(a.Handle)
		if a.Handle == classid(defaultMinor) {
			key = DefaultKey
		}
		var cn Counters
		if htb, ok := c.(*netlink.HtbClass); ok {
			cn.Rate, cn.Ceil = htb.Rate, htb.Ceil
		}
		if st := a.Statistics; st != nil {
			if st.Basic != nil {
				cn.Bytes, cn.Packets = st.Basic.Bytes, uint64(st.Basic.Packets)
			}
			if st.Queue != nil {
				cn.Drops, cn.Overlimits, cn.Backlog = uint64(st.Queue.Drops), uint64(st.Queue.Overlimits), uint64(st.Queue.Backlog)
			}
		}
		out[key] = cn
	}
	counted, err := s.counting()
	if err != nil {
		return nil, fmt.Errorf("qos %s: %w", l, err)
	}
	for _, c := range counted {
		key := nameOf(c.classid)
		cn := out[key]
		cn.Sent += c.bytes
		cn.SentPackets += c.packets
		out[key] = cn
	}
	return out, nil
}
