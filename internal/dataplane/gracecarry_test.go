package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeRADOS is one pool namespace's objects, in memory.
type fakeRADOS struct {
	data map[string][]byte
	omap map[string]map[string][]byte
	// failCreate fails that many Creates (a carry cut short before its last
	// step); failRead fails Reads of that object with an I/O error.
	failCreate int
	failRead   string
	writes     int
}

func newFakeRADOS() *fakeRADOS {
	return &fakeRADOS{data: map[string][]byte{}, omap: map[string]map[string][]byte{}}
}

func (f *fakeRADOS) exists(oid string) bool {
	_, ok := f.data[oid]
	return ok
}

func (f *fakeRADOS) Read(_ context.Context, oid string) ([]byte, error) {
	if oid == f.failRead {
		return nil, errors.New("EIO")
	}
	if !f.exists(oid) {
		return nil, errNoObject
	}
	return slices.Clone(f.data[oid]), nil
}

func (f *fakeRADOS) Omap(_ context.Context, oid string) (map[string][]byte, error) {
	if !f.exists(oid) {
		return nil, errNoObject
	}
	return maps.Clone(f.omap[oid]), nil
}

func (f *fakeRADOS) ReplaceOmap(_ context.Context, oid string, kv map[string][]byte) error {
	f.writes++
	if !f.exists(oid) {
		f.data[oid] = []byte{}
	}
	f.omap[oid] = map[string][]byte{}
	maps.Copy(f.omap[oid], kv)
	return nil
}

func (f *fakeRADOS) Create(_ context.Context, oid string, data []byte, kv map[string][]byte) error {
	if f.failCreate > 0 {
		f.failCreate--
		return errors.New("connection lost")
	}
	if f.exists(oid) {
		return errObjectExists
	}
	f.writes++
	f.data[oid], f.omap[oid] = slices.Clone(data), maps.Clone(kv)
	return nil
}

// join is what a Ganesha starting on grace database oid does
// (rados_grace_join_bulk with start, then read_clids): it starts a grace
// period if none is on (R = C, C = C+1), marks itself needing grace and
// enforcing, and returns the clients that may reclaim (those of rec-R).
func (f *fakeRADOS) join(t *testing.T, oid, node string) (cur, rec uint64, clients map[string][]byte) {
	t.Helper()
	cur, rec, err := graceEpochs(f.data[oid])
	if err != nil {
		t.Fatal(err)
	}
	if _, member := f.omap[oid][node]; !member {
		t.Fatalf("%s is not a member of %s (%v): Ganesha refuses to start", node, oid, f.omap[oid])
	}
	if rec == 0 {
		rec, cur = cur, cur+1
	}
	f.data[oid] = graceData(cur, rec)
	f.omap[oid][node] = []byte{graceNeed | graceEnforcing}
	f.ReplaceOmap(context.Background(), recOID(cur, node), nil) //nolint:errcheck
	return cur, rec, f.omap[recOID(rec, node)]
}

// record writes a client's record under epoch e, as a serving Ganesha does.
func (f *fakeRADOS) record(e uint64, node, client, val string) {
	oid := recOID(e, node)
	if !f.exists(oid) {
		f.data[oid], f.omap[oid] = []byte{}, map[string][]byte{}
	}
	f.omap[oid][client] = []byte(val)
}

const carryNode = "basin-br0-n1"

func names(kv map[string][]byte) []string { return slices.Sorted(maps.Keys(kv)) }

// The clients of the old instance's current epoch, and those of its recovery
// epoch that had not reclaimed yet, are those the new instance lets reclaim;
// the old instance's objects are left as they were.
func TestCarryGrace(t *testing.T) {
	ctx := context.Background()
	f := newFakeRADOS()
	from, to := "grace-"+carryNode, "grace-"+carryNode+".e3"
	// The old instance restarted once while clients A and C were its own:
	// it is at C=6, R=5. A reclaimed, under a new client id (in rec-6 as 7,
	// where a handle was since revoked from it); C has not yet; D is new.
	f.data[from], f.omap[from] = graceData(6, 5), map[string][]byte{carryNode: {graceNeed | graceEnforcing}}
	f.record(5, carryNode, "1", "10.99.0.201-(5:A-own)")
	f.record(5, carryNode, "2", "10.99.0.202-(5:C-own)")
	f.record(6, carryNode, "7", "10.99.0.201-(5:A-own)#handle")
	f.record(6, carryNode, "8", "10.99.0.203-(5:D-own)")
	before := map[string][]byte{}
	for oid := range f.data {
		before[oid] = slices.Clone(f.data[oid])
	}
	n, done, err := carryGrace(ctx, f, carryNode, from, to, 3)
	if err != nil || !done || n != 3 {
		t.Fatalf("carryGrace = %d, %v, %v; want 3 clients, done", n, done, err)
	}
	k := uint64(3) << 32
	if c, r, err := graceEpochs(f.data[to]); err != nil || c != k || r != 0 {
		t.Fatalf("%s at C=%d R=%d (%v); want C=%d R=0", to, c, r, err, k)
	}
	if got := f.omap[to]; len(got) != 1 || !slices.Equal(got[carryNode], []byte{graceEnforcing}) {
		t.Fatalf("%s members %v; want %s alone, enforcing", to, got, carryNode)
	}
	cur, rec, clients := f.join(t, to, carryNode)
	if rec != k || cur != k+1 {
		t.Errorf("the new Ganesha joined at C=%d R=%d; want C=%d R=%d", cur, rec, k+1, k)
	}
	if got := names(clients); !slices.Equal(got, []string{"2", "7", "8"}) {
		t.Errorf("clients allowed to reclaim %v; want 2 (C), 7 (A, once) and 8 (D)", got)
	}
	if string(clients["7"]) != "10.99.0.201-(5:A-own)#handle" {
		t.Errorf("A's record %q; want the current epoch's", clients["7"])
	}
	for oid, b := range before {
		if !slices.Equal(f.data[oid], b) {
			t.Errorf("the old instance's %s changed", oid)
		}
	}
	if len(f.omap[from]) != 1 || len(f.omap[recOID(5, carryNode)]) != 2 || len(f.omap[recOID(6, carryNode)]) != 2 {
		t.Errorf("the old instance's records changed: %v", f.omap)
	}

	// A second carry changes nothing, even though the old instance took on a
	// client since and the new Ganesha already joined.
	f.record(6, carryNode, "9", "10.99.0.204-(5:E-own)")
	w := f.writes
	if n, done, err := carryGrace(ctx, f, carryNode, from, to, 3); err != nil || !done || n != 0 || f.writes != w {
		t.Fatalf("a second carry: %d, %v, %v, %d writes; want nothing done again", n, done, err, f.writes-w)
	}
	if c, r, _ := graceEpochs(f.data[to]); c != k+1 || r != k {
		t.Errorf("a second carry moved the joined database to C=%d R=%d", c, r)
	}

	// The next move carries from this generation into the next, whose range
	// lies beyond it.
	f.record(k+1, carryNode, "20", "10.99.0.205-(5:F-own)")
	f.record(k+1, carryNode, "21", "10.99.0.203-(5:D-own)") // D reclaimed at generation 3
	n, _, err = carryGrace(ctx, f, carryNode, to, "grace-"+carryNode+".e4", 4)
	if err != nil || n != 4 {
		t.Fatalf("carry from generation 3 to 4: %d, %v; want A and C (not yet reclaimed), D and F", n, err)
	}
	_, _, clients = f.join(t, "grace-"+carryNode+".e4", carryNode)
	if got := names(clients); !slices.Equal(got, []string{"2", "20", "21", "7"}) {
		t.Errorf("generation 4 lets %v reclaim; want 2 (C), 20 (F), 21 (D, once) and 7 (A)", got)
	}
}

// No old database (the identity never served NFSv4 with RADOS recovery, or
// its objects were lost): the new database starts with no client to wait for.
// Missing record objects count as empty.
func TestCarryGraceNothingToCarry(t *testing.T) {
	ctx := context.Background()
	f := newFakeRADOS()
	n, done, err := carryGrace(ctx, f, carryNode, "grace-"+carryNode, "grace-"+carryNode+".e1", 1)
	if err != nil || !done || n != 0 {
		t.Fatalf("carryGrace without an old database = %d, %v, %v", n, done, err)
	}
	cur, rec, clients := f.join(t, "grace-"+carryNode+".e1", carryNode)
	if cur != 1<<32+1 || rec != 1<<32 || len(clients) != 0 {
		t.Fatalf("joined at C=%d R=%d with clients %v", cur, rec, names(clients))
	}

	g := newFakeRADOS()
	g.data["grace-"+carryNode] = graceData(9, 0)
	if n, _, err := carryGrace(ctx, g, carryNode, "grace-"+carryNode, "grace-"+carryNode+".e1", 1); err != nil || n != 0 {
		t.Fatalf("carryGrace without record objects = %d, %v", n, err)
	}
}

// A carry cut short before its last step (the new database) is done again in
// full by the next call.
func TestCarryGraceCutShort(t *testing.T) {
	ctx := context.Background()
	f := newFakeRADOS()
	from, to := "grace-"+carryNode, "grace-"+carryNode+".e2"
	f.data[from] = graceData(4, 0)
	f.record(4, carryNode, "a", "a")
	f.failCreate = 1
	if _, done, err := carryGrace(ctx, f, carryNode, from, to, 2); err == nil || done {
		t.Fatalf("a carry whose create failed: done %v, %v", done, err)
	}
	if f.exists(to) {
		t.Fatal("the new database exists after a failed create")
	}
	f.record(4, carryNode, "b", "b")
	n, done, err := carryGrace(ctx, f, carryNode, from, to, 2)
	if err != nil || !done || n != 2 {
		t.Fatalf("the carry again: %d, %v, %v; want a and b", n, done, err)
	}
	if _, _, clients := f.join(t, to, carryNode); !slices.Equal(names(clients), []string{"a", "b"}) {
		t.Fatalf("clients %v; want a, b", names(clients))
	}
}

// What must not be carried is refused, with nothing written.
func TestCarryGraceRefuses(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		setup    func(f *fakeRADOS)
		from, to string
		gen      int64
	}{
		{"generation 0", nil, "grace-x", "grace-x.e0", 0},
		{"generation too large", nil, "grace-x", "grace-x.e1", maxGraceGen + 1},
		{"from is to", nil, "grace-x.e1", "grace-x.e1", 1},
		{"short database", func(f *fakeRADOS) { f.data["grace-x"] = []byte{1, 0, 0, 0, 0, 0, 0, 0} }, "grace-x", "grace-x.e1", 1},
		{"epochs past the new range", func(f *fakeRADOS) { f.data["grace-x"] = graceData(2<<32, 0) }, "grace-x", "grace-x.e2", 2},
		{"old database unreadable", func(f *fakeRADOS) { f.data["grace-x"] = graceData(3, 0); f.failRead = "grace-x" }, "grace-x", "grace-x.e1", 1},
		{"new database unreadable", func(f *fakeRADOS) { f.failRead = "grace-x.e1" }, "grace-x", "grace-x.e1", 1},
		// Made by something else (ganesha-rados-grace add starts at epoch 1).
		{"new database at other epochs", func(f *fakeRADOS) { f.data["grace-x.e1"] = graceData(1, 0) }, "grace-x", "grace-x.e1", 1},
	} {
		f := newFakeRADOS()
		if c.setup != nil {
			c.setup(f)
		}
		if _, done, err := carryGrace(ctx, f, "x", c.from, c.to, c.gen); err == nil || done {
			t.Errorf("%s: carried (done %v)", c.name, done)
		}
		if f.writes != 0 {
			t.Errorf("%s: %d writes", c.name, f.writes)
		}
	}
}

// Ganesha's names: 16 hex digits of epoch, then the node id.
func TestRecOID(t *testing.T) {
	if got := recOID(1<<32+1, carryNode); got != "rec-0000000100000001:"+carryNode {
		t.Errorf("recOID = %q", got)
	}
}

// fakeRadosModule stands in for python3-rados under rados_ops.py: objects in
// memory, ENOENT and EEXIST as the bindings raise them, omap listings in
// pages of at most max_return keys after start_after.
const fakeRadosModule = `
LIBRADOS_CREATE_EXCLUSIVE, LIBRADOS_CREATE_IDEMPOTENT = 1, 0
class Error(Exception):
    errno = 5
class ObjectNotFound(Error):
    errno = 2
class ObjectExists(Error):
    errno = 17
OBJS = {}
class _Op:
    def __init__(self): self.steps = []
    def __enter__(self): return self
    def __exit__(self, *a): return False
class ReadOpCtx(_Op): pass
class WriteOpCtx(_Op):
    def new(self, exclusive): self.steps.append(("new", exclusive))
    def write_full(self, b): self.steps.append(("data", b))
class Ioctx:
    def set_namespace(self, ns): self.ns = ns
    def read(self, oid, length=8192, offset=0):
        if oid not in OBJS: raise ObjectNotFound(oid)
        return OBJS[oid][0][offset:offset + length]
    def get_omap_vals(self, op, after, prefix, n):
        op.steps.append(("omap", after, n)); op.out = []
        return op.out, 0
    def operate_read_op(self, op, oid):
        if oid not in OBJS: raise ObjectNotFound(oid)
        for s in op.steps:
            if s[0] == "omap":
                keys = sorted(k for k in OBJS[oid][1] if k > s[1])[:s[2]]
                op.out.extend((k, OBJS[oid][1][k]) for k in keys)
    def clear_omap(self, op): op.steps.append(("clear",))
    def set_omap(self, op, keys, vals): op.steps.append(("set", dict(zip(keys, vals))))
    def operate_write_op(self, op, oid):
        new = next((s[1] for s in op.steps if s[0] == "new"), None)
        if new == LIBRADOS_CREATE_EXCLUSIVE and oid in OBJS: raise ObjectExists(oid)
        data, omap = OBJS.get(oid, (b"", {}))
        omap = dict(omap)
        for s in op.steps:
            if s[0] == "data": data = s[1]
            if s[0] == "clear": omap = {}
            if s[0] == "set": omap.update(s[1])
        OBJS[oid] = (data, omap)
class Rados:
    def __init__(self, conffile=None, name=None, conf=None): pass
    def connect(self, timeout=0): pass
    def open_ioctx(self, pool): return Ioctx()
`

// rados_ops.py, driven through radosChannel by carryGrace, against a stand-in
// for Ceph's bindings: requests and answers cross as carryGrace expects,
// records beyond one listing page come through, and a second carry changes
// nothing. (test/e2e's CephFS tests run the same against a real cluster.)
func TestRADOSChannel(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skip("no " + python)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rados.py"), []byte(fakeRadosModule), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newRADOSChannel([]string{"/usr/bin/env", "PYTHONPATH=" + dir}, "/nonexistent/ceph.conf", "basin-ganesha", "basin-nfs", "g")
	defer c.Close()
	ctx := context.Background()
	from := "grace-" + carryNode
	if _, err := c.Read(ctx, from); !errors.Is(err, errNoObject) {
		t.Fatalf("Read of a missing object: %v", err)
	}
	if err := c.Create(ctx, from, graceData(7, 0), map[string][]byte{carryNode: {graceEnforcing}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, from, graceData(1, 0), nil); !errors.Is(err, errObjectExists) {
		t.Fatalf("a second exclusive create: %v", err)
	}
	records := map[string][]byte{}
	for i := range 2500 {
		// Distinct clients, with bytes JSON strings could not carry.
		records[fmt.Sprintf("%d", 1000+i)] = fmt.Appendf(nil, "10.99.0.1-(11:client-%04d)#\x00\xff\n", i)
	}
	if err := c.ReplaceOmap(ctx, recOID(7, carryNode), records); err != nil {
		t.Fatal(err)
	}
	n, done, err := carryGrace(ctx, c, carryNode, from, from+".e1", 1)
	if err != nil || !done || n != len(records) {
		t.Fatalf("carryGrace through the channel = %d, %v, %v; want %d clients", n, done, err, len(records))
	}
	got, err := c.Omap(ctx, recOID(1<<32, carryNode))
	if err != nil || !maps.EqualFunc(got, records, slices.Equal) {
		t.Fatalf("carried records: %d of %d equal (%v)", len(got), len(records), err)
	}
	data, err := c.Read(ctx, from+".e1")
	if cur, rec, _ := graceEpochs(data); err != nil || cur != 1<<32 || rec != 0 {
		t.Fatalf("the new database: C=%d R=%d, %v", cur, rec, err)
	}
	if n, done, err := carryGrace(ctx, c, carryNode, from, from+".e1", 1); err != nil || !done || n != 0 {
		t.Fatalf("a second carry: %d, %v, %v", n, done, err)
	}
}
