package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/internal/store"
)

// fakeSMB models the SMB data plane: instances joined per (network, policy) and
// their registry shares.
type fakeSMB struct {
	mu       sync.Mutex
	joined   map[string]dataplane.SMBMembership
	shares   map[string]map[string]map[string]string // instance → share → params
	links    map[string]map[string]string            // snapshot dir → entry → target
	joins    []string                                // "network|machine|user|password" per JoinDomain
	leaves   []string                                // "network|policy|user"
	joinErr  error
	block    chan struct{} // non-nil: JoinDomain waits for it
	entered  chan struct{}
	enterOne sync.Once
	lists    int // SMBShares calls
	// validations are "network|realm|site|ou|user|password" per ValidateDomain;
	// validateErr is what it returns.
	validations []string
	validateErr error
	// onLeave, if set, runs at each LeaveDomain (without the lock).
	onLeave func()
}

func newFakeSMB() *fakeSMB {
	return &fakeSMB{joined: map[string]dataplane.SMBMembership{}, shares: map[string]map[string]map[string]string{},
		links: map[string]map[string]string{}}
}

func (f *fakeSMB) SMBSnapshotDir(network, ad, share string) string {
	return "/fake/" + strings.NewReplacer("/", "_", "\x00", "_").Replace(memberKey(network, ad)) + "/snapshots/" + share
}

func (f *fakeSMB) SMBSnapshotLinks(network, ad, share string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.links[f.SMBSnapshotDir(network, ad, share)]), nil
}

func (f *fakeSMB) JoinDomain(ctx context.Context, network string, mb dataplane.SMBMembership, cred dataplane.SMBCredentials) error {
	if f.entered != nil {
		f.enterOne.Do(func() { close(f.entered) })
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, strings.Join([]string{network, mb.MachineName, cred.Username, string(cred.Password)}, "|"))
	if f.joinErr != nil {
		return f.joinErr
	}
	f.joined[memberKey(network, mb.AD)] = mb
	return nil
}

func (f *fakeSMB) ValidateDomain(ctx context.Context, network string, mb dataplane.SMBMembership, cred dataplane.SMBCredentials) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.validations = append(f.validations, strings.Join([]string{network, mb.Realm, mb.Site, mb.OUPath, cred.Username, string(cred.Password)}, "|"))
	return f.validateErr
}

func (f *fakeSMB) SMBJoined(network, ad string) (dataplane.SMBMembership, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mb, ok := f.joined[memberKey(network, ad)]
	return mb, ok
}

func (f *fakeSMB) LeaveDomain(ctx context.Context, network, ad string, cred dataplane.SMBCredentials) error {
	if f.onLeave != nil {
		f.onLeave()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaves = append(f.leaves, network+"|"+ad+"|"+cred.Username)
	delete(f.joined, memberKey(network, ad))
	delete(f.shares, memberKey(network, ad))
	return nil
}

func (f *fakeSMB) SMBShare(ctx context.Context, network, ad string, addr netip.Addr, spec smb.ShareSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.joined[memberKey(network, ad)]; !ok {
		return errors.New("not joined")
	}
	p, err := smb.ShareParams(spec)
	if err != nil {
		return err
	}
	if spec.SnapshotDir != "" {
		f.links[spec.SnapshotDir] = maps.Clone(spec.Snapshots)
	}
	k := memberKey(network, ad)
	if f.shares[k] == nil {
		f.shares[k] = map[string]map[string]string{}
	}
	f.shares[k][spec.Name] = p
	return nil
}

func (f *fakeSMB) SMBUnshare(ctx context.Context, network, ad string, addr netip.Addr, share string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.shares[memberKey(network, ad)], share)
	return nil
}

func (f *fakeSMB) SMBShares(ctx context.Context, network, ad string) (map[string]map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	out := map[string]map[string]string{}
	for k, v := range f.shares[memberKey(network, ad)] {
		out[k] = v
	}
	return out, nil
}

// fakeSecrets opens "sealed:<password>" sealed for the right policy.
type fakeSecrets struct{}

func (fakeSecrets) Open(sealed, aad string) (string, error) {
	pw, ok := strings.CutPrefix(sealed, "sealed:")
	if !ok || !strings.HasSuffix(aad, "#password") {
		return "", errors.New("cannot open")
	}
	return pw, nil
}

const adPassword = "S3cret!join"

func newAD(id string) *model.ActiveDirectory {
	return &model.ActiveDirectory{Meta: model.Meta{Project: "p", Location: "l", ID: id, CreateTime: t0, State: model.StateReady},
		Domain: "basin.test", DNS: "10.99.70.10", NetBiosPrefix: "BASIN", OrganizationalUnit: "OU=Basin",
		Username: "basinjoin", PasswordSealed: "sealed:" + adPassword}
}

func newSMBPool(id, ad string) *model.Pool {
	return &model.Pool{Meta: model.Meta{Project: "p", Location: "l", ID: id, CreateTime: t0, State: model.StateCreating},
		ServiceLevel: model.LevelPremium, CapacityGib: 2048, Network: "projects/p/global/networks/default", ActiveDirectory: ad}
}

func newSMBVolume(id, pool string) *model.Volume {
	v := newVolume(id)
	v.StoragePool, v.Protocols, v.Endpoint, v.Network = pool, []model.Protocol{model.ProtocolSMB}, "10.99.0.20", "default"
	v.SMBSettings = []int32{int32(smb.EncryptData), int32(smb.Browsable)}
	return v
}

// run seeds records and their operations, wakes the controller and waits for each.
func (h *harness) runOps(t *testing.T, c *Controller, ops ...*model.Operation) {
	t.Helper()
	h.seed(t, func(tx store.Tx) error {
		for _, op := range ops {
			if err := store.PutOperation(tx, op); err != nil {
				return err
			}
		}
		return nil
	})
	c.Wake()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, op := range ops {
		if !c.WaitDone(ctx, op.Name()) {
			t.Fatalf("%s did not finish", op.Name())
		}
	}
}

// runDelete marks volume v DELETING and runs its delete operation, made at at.
func (h *harness) runDelete(t *testing.T, c *Controller, v *model.Volume, at time.Time) {
	t.Helper()
	h.seed(t, func(tx store.Tx) error {
		cur, err := store.Get[model.Volume](tx, store.KindVolume, v.Name())
		if err != nil {
			return err
		}
		cur.State = model.StateDeleting
		return store.PutVolume(tx, cur)
	})
	h.runOps(t, c, newOp(model.OpVolumeDelete, v.Name(), at))
}

func getAD(t *testing.T, h *harness, name string) *model.ActiveDirectory {
	t.Helper()
	var a *model.ActiveDirectory
	if err := h.st.View(context.Background(), func(tx store.Tx) (err error) {
		a, err = store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, name)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return a
}

// A pool with a policy joins its network's instance for that policy once, as
// PREFIX-XXXX with the policy's user and opened password; an SMB volume in it is
// shared with its settings and names its server; a second pool of the same policy
// joins nothing more; deleting the volume removes its share, and deleting the last
// pool leaves the domain and forgets the machine name.
func TestSMBJoinShareLeave(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})
	ad := newAD("ad1")
	p1, p2 := newSMBPool("pool", ad.Name()), newSMBPool("pool2", ad.Name())
	h.seed(t, func(tx store.Tx) error {
		for _, p := range []*model.Pool{p1, p2} {
			if err := store.PutPool(tx, p); err != nil {
				return err
			}
		}
		return store.PutAD(tx, ad)
	})
	h.runOps(t, c, newOp(model.OpPoolCreate, p1.Name(), t0))
	if op := h.opDone(t, newOp(model.OpPoolCreate, p1.Name(), t0).Name()); op.Error != nil {
		t.Fatalf("pool create: %+v", op.Error)
	}
	if len(f.joins) != 1 {
		t.Fatalf("joins %q, want one", f.joins)
	}
	parts := strings.Split(f.joins[0], "|")
	if !regexp.MustCompile(`^BASIN-[0-9A-F]{4}$`).MatchString(parts[1]) || parts[0] != "default" || parts[2] != "basinjoin" || parts[3] != adPassword {
		t.Fatalf("join %q: want network default, BASIN-XXXX, the policy's user and password", f.joins[0])
	}
	machine := parts[1]
	if got := getAD(t, h, ad.Name()).Members["default"]; got != machine {
		t.Fatalf("recorded member %q, want %q", got, machine)
	}

	v := newSMBVolume("docs", "pool")
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
	h.runOps(t, c, newOp(model.OpVolumeCreate, v.Name(), t0.Add(time.Second)), newOp(model.OpPoolCreate, p2.Name(), t0.Add(2*time.Second)))
	params := f.shares[memberKey("default", ad.Name())]["docs"]
	if params == nil || params["server smb encrypt"] != "required" || params["path"] != h.be.MountPath(v.Key) {
		t.Fatalf("share params %v: want the volume's path with encryption required", params)
	}
	got, err := c.loadVolume(context.Background(), v.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got.SMBServer != machine+".basin.test" || got.State != model.StateReady {
		t.Fatalf("volume server %q state %s, want %s.basin.test READY", got.SMBServer, got.State, machine)
	}
	if len(f.joins) != 1 {
		t.Fatalf("joins %q: the second pool of the policy joined again", f.joins)
	}

	h.runDelete(t, c, v, t0.Add(3*time.Second))
	if _, ok := f.shares[memberKey("default", ad.Name())]["docs"]; ok {
		t.Fatal("the deleted volume's share is still there")
	}
	h.runOps(t, c, newOp(model.OpPoolDelete, p1.Name(), t0.Add(4*time.Second)))
	if len(f.leaves) != 0 {
		t.Fatalf("left %q while pool2 still uses the policy", f.leaves)
	}
	h.runOps(t, c, newOp(model.OpPoolDelete, p2.Name(), t0.Add(5*time.Second)))
	if len(f.leaves) != 1 || f.leaves[0] != "default|"+ad.Name()+"|basinjoin" {
		t.Fatalf("leaves %q, want one for the policy on default", f.leaves)
	}
	if m := getAD(t, h, ad.Name()).Members; len(m) != 0 {
		t.Fatalf("members %v after the leave", m)
	}
}

// A pool's delete is done only once the domain leave its removal calls for
// has run: a client that deletes a network's last SMB pool and then gives
// the network a pool of another domain (a network joins one domain), or
// looks for the computer account, finds the leave behind it.
func TestSMBPoolDeleteDoneAfterLeave(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	seedPoolAD(t, h, p, ad)
	h.runOps(t, c, newOp(model.OpPoolCreate, p.Name(), t0))
	del := newOp(model.OpPoolDelete, p.Name(), t0.Add(time.Second))
	var doneAtLeave []bool
	f.onLeave = func() { doneAtLeave = append(doneAtLeave, h.opDone(t, del.Name()).Done) }
	h.runOps(t, c, del)
	if len(doneAtLeave) != 1 {
		t.Fatalf("%d leaves, want one", len(doneAtLeave))
	}
	if doneAtLeave[0] {
		t.Error("the pool's delete was done before its domain leave ran")
	}
	if op := h.opDone(t, del.Name()); !op.Done || op.Error != nil {
		t.Fatalf("pool delete: done %v, %+v", op.Done, op.Error)
	}
	if m := getAD(t, h, ad.Name()).Members; len(m) != 0 {
		t.Fatalf("members %v after the leave", m)
	}
}

// seedPoolAD stores pool p and policy ad.
func seedPoolAD(t *testing.T, h *harness, p *model.Pool, ad *model.ActiveDirectory) {
	t.Helper()
	h.seed(t, func(tx store.Tx) error {
		if err := store.PutPool(tx, p); err != nil {
			return err
		}
		return store.PutAD(tx, ad)
	})
}

// A resync pass lists an instance's shares once, not once per volume; a share it
// finds missing is put back, and the next pass lists afresh.
func TestSMBResyncListsSharesOncePerInstance(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	seedPoolAD(t, h, p, ad)
	h.runOps(t, c, newOp(model.OpPoolCreate, p.Name(), t0))
	var ops []*model.Operation
	for i, id := range []string{"a", "b", "c"} {
		v := newSMBVolume(id, "pool")
		h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
		ops = append(ops, newOp(model.OpVolumeCreate, v.Name(), t0.Add(time.Duration(i+1)*time.Second)))
	}
	h.runOps(t, c, ops...)
	ctx := context.Background()
	pass := func() int {
		t.Helper()
		f.mu.Lock()
		f.lists = 0
		f.mu.Unlock()
		if err := c.resync(ctx, false); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.lists
	}
	if n := pass(); n != 1 {
		t.Fatalf("a pass over 3 SMB volumes of one instance listed its shares %d times, want 1", n)
	}
	k := memberKey("default", ad.Name())
	f.mu.Lock()
	delete(f.shares[k], "b")
	f.mu.Unlock()
	pass()
	f.mu.Lock()
	_, back := f.shares[k]["b"]
	f.mu.Unlock()
	if !back {
		t.Fatal("the pass did not put the missing share back")
	}
	if n := pass(); n != 1 {
		t.Fatalf("the next pass listed %d times, want 1", n)
	}
}

// A join the domain refuses fails the pool operation with the domain's reason,
// shows it on the policy (ERROR), and the password appears in neither; the machine
// name was recorded first, so the retry joins under the same name.
func TestSMBJoinRefused(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	f.joinErr = &smb.JoinError{Kind: smb.ErrBadCredentials, Reason: "the domain refused the user name or password"}
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}, StepAttempts: 1})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	seedPoolAD(t, h, p, ad)
	op := newOp(model.OpPoolCreate, p.Name(), t0)
	h.runOps(t, c, op)
	done := h.opDone(t, op.Name())
	if done.Error == nil || !strings.Contains(done.Error.Message, "refused the user name or password") {
		t.Fatalf("operation error %+v: want the domain's reason", done.Error)
	}
	a := getAD(t, h, ad.Name())
	if a.State != model.StateError || !strings.Contains(a.Details, "refused the user name or password") {
		t.Fatalf("policy %s %q: want ERROR with the reason", a.State, a.Details)
	}
	for _, s := range []string{done.Error.Message, a.Details, fmt.Sprint(done)} {
		if strings.Contains(s, adPassword) {
			t.Fatalf("the password leaked into %q", s)
		}
	}
	first := a.Members["default"]
	f.mu.Lock()
	f.joinErr = nil
	f.mu.Unlock()
	// A failed create takes its pool back: the user creates it again.
	h.seed(t, func(tx store.Tx) error { return store.PutPool(tx, newSMBPool("pool", ad.Name())) })
	retry := newOp(model.OpPoolCreate, p.Name(), t0.Add(time.Second))
	retry.ID = "retry"
	h.runOps(t, c, retry)
	if e := h.opDone(t, retry.Name()).Error; e != nil {
		t.Fatalf("retry: %+v", e)
	}
	if last := strings.Split(f.joins[len(f.joins)-1], "|")[1]; last != first || first == "" {
		t.Fatalf("retry joined as %q, first attempt as %q: want the same name", last, first)
	}
	if a := getAD(t, h, ad.Name()); a.State != model.StateReady || a.Details != "" {
		t.Fatalf("policy %s %q after a good join: want READY", a.State, a.Details)
	}
}

// A dual-protocol volume's share maps SMB byte-range locks to POSIX locks, which
// NFS clients meet, and then has no durable handles; an SMB-only volume keeps
// its locks in Samba's database and has durable handles (smb.Locking).
func TestSMBLockingByProtocols(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	seedPoolAD(t, h, p, ad)
	h.runOps(t, c, newOp(model.OpPoolCreate, p.Name(), t0))
	only, dual, ntfs := newSMBVolume("only", "pool"), newSMBVolume("dual", "pool"), newSMBVolume("ntfs", "pool")
	dual.Protocols = []model.Protocol{model.ProtocolSMB, model.ProtocolNFSv3}
	dual.Endpoint = "10.99.0.21"
	dual.SecurityStyle = model.SecurityStyleUNIX
	ntfs.Protocols = []model.Protocol{model.ProtocolSMB, model.ProtocolNFSv4}
	ntfs.Endpoint = "10.99.0.22"
	ntfs.SecurityStyle = model.SecurityStyleNTFS
	var ops []*model.Operation
	for i, v := range []*model.Volume{only, dual, ntfs} {
		h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
		ops = append(ops, newOp(model.OpVolumeCreate, v.Name(), t0.Add(time.Duration(i+1)*time.Second)))
	}
	h.runOps(t, c, ops...)
	f.mu.Lock()
	defer f.mu.Unlock()
	shares := f.shares[memberKey("default", ad.Name())]
	for share, want := range map[string]string{"only": "no", "dual": "yes"} {
		if got := shares[share]["posix locking"]; got != want {
			t.Errorf("share %s: posix locking %q, want %q (params %v)", share, got, want, shares[share])
		}
	}
	if shares["dual"]["durable handles"] != "no" || shares["only"]["durable handles"] != "yes" {
		t.Errorf("durable handles: only %q, dual %q; want yes, no", shares["only"]["durable handles"], shares["dual"]["durable handles"])
	}
	// Oplocks are kernel leases where NFS clients open the files too.
	for share, want := range map[string]string{"only": "", "dual": "yes", "ntfs": "yes"} {
		if got := shares[share]["kernel oplocks"]; got != want {
			t.Errorf("share %s: kernel oplocks %q, want %q", share, got, want)
		}
	}
	// NFS exports of dual-protocol volumes read attributes afresh (Samba
	// changes them behind Ganesha); an NTFS one refuses permission changes.
	exports := map[string]nfs.Export{}
	for _, e := range dp.Exports() {
		exports[e.Export.Pseudo] = e.Export
	}
	if e := exports["/dual"]; !e.NoAttrCache || e.NTFS {
		t.Errorf("UNIX dual-protocol export: NoAttrCache %v, NTFS %v; want true, false", e.NoAttrCache, e.NTFS)
	}
	if e := exports["/ntfs"]; !e.NoAttrCache || !e.NTFS {
		t.Errorf("NTFS dual-protocol export: NoAttrCache %v, NTFS %v; want true, true", e.NoAttrCache, e.NTFS)
	}
	if _, ok := exports["/only"]; ok || len(exports) != 2 {
		t.Errorf("exports %v; want /dual and /ntfs", exports)
	}
	// The security style: NT ACLs (acl_xattr) on NTFS volumes, SMB-only ones
	// included; mode bits on a UNIX dual-protocol volume.
	for share, want := range map[string]bool{"only": true, "ntfs": true, "dual": false} {
		if got := strings.Contains(shares[share]["vfs objects"], "acl_xattr"); got != want {
			t.Errorf("share %s: vfs objects %q; acl_xattr %v, want %v", share, shares[share]["vfs objects"], got, want)
		}
	}
}

// A joined server whose daemons do not start (smbd not answering) is no
// refusal by the domain: the operation says what did not start, the policy
// stays out of ERROR, and the next resync pass tries again, until it works.
func TestSMBServerStartFailureIsRetried(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}, StepAttempts: 1})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	seedPoolAD(t, h, p, ad)
	startErr := &smb.JoinError{Kind: smb.ErrServerStart,
		Reason: "the domain was joined, but the SMB server did not start: smbd did not answer an SMB2 NEGOTIATE on 127.1.2.3:445"}
	f.joinErr = startErr
	op := newOp(model.OpPoolCreate, p.Name(), t0)
	h.runOps(t, c, op)
	done := h.opDone(t, op.Name())
	if done.Error == nil || !strings.Contains(done.Error.Message, "the SMB server did not start: smbd did not answer") {
		t.Fatalf("operation error %+v: want what did not start", done.Error)
	}
	if a := getAD(t, h, ad.Name()); a.State == model.StateError {
		t.Fatalf("policy in ERROR (%q) after its server failed to start: resync would never try again", a.Details)
	}
	// The pool exists (made again, as a user would) and Basin restarted: the
	// resync passes start the instance, failing until the daemons come up.
	h.seed(t, func(tx store.Tx) error {
		pl := newSMBPool("pool", ad.Name())
		pl.State = model.StateReady
		return store.PutPool(tx, pl)
	})
	joins := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.joins)
	}
	ctx := context.Background()
	for i := range 2 {
		before := joins()
		c.resync(ctx, false) //nolint:errcheck // the failed start is logged
		if joins() != before+1 {
			t.Fatalf("pass %d: %d joins, want one more than %d", i, joins(), before)
		}
		if a := getAD(t, h, ad.Name()); a.State == model.StateError {
			t.Fatalf("pass %d: policy in ERROR (%q)", i, a.Details)
		}
	}
	f.mu.Lock()
	f.joinErr = nil
	f.mu.Unlock()
	if err := c.resync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.SMBJoined("default", ad.Name()); !ok {
		t.Fatal("the instance was not started once its daemons came up")
	}
}

// A share showing previous versions lists each READY snapshot by its UTC creation
// time, leading to the snapshot's read-only mount (mounted for it, though the
// volume has no NFS .snapshot); a deleted snapshot leaves the list and is
// unmounted; a share without the setting has no snapshot directory.
func TestSMBPreviousVersions(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	v := newSMBVolume("docs", "pool")
	v.SMBSettings = []int32{int32(smb.ShowPreviousVersions)}
	plain := newSMBVolume("plain", "pool")
	plain.Endpoint = "10.99.0.21"
	seedPoolAD(t, h, p, ad)
	h.runOps(t, c, newOp(model.OpPoolCreate, p.Name(), t0))
	for i, vol := range []*model.Volume{v, plain} {
		if op := h.run(t, c, newOp(model.OpVolumeCreate, vol.Name(), t0.Add(time.Duration(i+1)*time.Second)),
			func(tx store.Tx) error { return store.PutVolume(tx, vol) }); op.Error != nil {
			t.Fatalf("create %s: %+v", vol.ID, op.Error)
		}
	}
	dir := f.SMBSnapshotDir("default", ad.Name(), "docs")
	if params := f.shares[memberKey("default", ad.Name())]["docs"]; params["shadow:snapdir"] != dir || !strings.Contains(params["vfs objects"], "shadow_copy2") {
		t.Fatalf("share params %v: want shadow_copy2 over %s", params, dir)
	}
	// s0 and s1 in the same second: s1 shows one second later.
	times := []time.Time{time.Date(2026, 11, 23, 8, 1, 2, 300, time.FixedZone("X", 3600)), time.Date(2026, 11, 23, 7, 1, 2, 9e8, time.UTC),
		time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)}
	snaps := map[string]*model.Snapshot{}
	for i, at := range times {
		for _, vol := range []*model.Volume{v, plain} {
			sn := &model.Snapshot{Meta: model.Meta{Project: vol.Project, Location: vol.Location, ID: fmt.Sprintf("s%d", i), CreateTime: at, State: model.StateCreating}, Volume: vol.ID}
			if op := h.run(t, c, newOp(model.OpSnapshotCreate, sn.Name(), at), func(tx store.Tx) error { return store.PutSnapshot(tx, sn) }); op.Error != nil {
				t.Fatalf("snapshot: %+v", op.Error)
			}
			snaps[vol.ID+"/"+sn.ID] = sn
		}
	}
	want := map[string]string{"@GMT-2026.11.23-07.01.02": h.be.SnapshotMountPath(v.Key, "s0"), "@GMT-2026.11.23-07.01.03": h.be.SnapshotMountPath(v.Key, "s1"),
		"@GMT-2026.11.23-09.00.00": h.be.SnapshotMountPath(v.Key, "s2")}
	if links, _ := f.SMBSnapshotLinks("default", ad.Name(), "docs"); !maps.Equal(links, want) {
		t.Fatalf("previous versions %v, want %v", links, want)
	}
	obs, err := h.be.ObserveSnapshots(context.Background(), v.Key)
	if err != nil || !obs["s0"].Mounted || !obs["s1"].Mounted || !obs["s2"].Mounted {
		t.Fatalf("snapshots %+v (%v): want all mounted for the share", obs, err)
	}
	if links, _ := f.SMBSnapshotLinks("default", ad.Name(), "plain"); len(links) != 0 {
		t.Fatalf("a share without previous versions lists %v", links)
	}
	if obs, _ := h.be.ObserveSnapshots(context.Background(), plain.Key); obs["s0"].Mounted {
		t.Fatal("a snapshot of a volume that shows none is mounted")
	}

	del := snaps["docs/s0"]
	h.seed(t, func(tx store.Tx) error {
		cur, err := store.Get[model.Snapshot](tx, store.KindSnapshot, del.Name())
		if err != nil {
			return err
		}
		cur.State = model.StateDeleting
		return store.PutSnapshot(tx, cur)
	})
	h.runOps(t, c, newOp(model.OpSnapshotDelete, del.Name(), t0.Add(time.Hour)))
	// s1 is alone in its second now, and shows at it.
	want = map[string]string{"@GMT-2026.11.23-07.01.02": h.be.SnapshotMountPath(v.Key, "s1"), "@GMT-2026.11.23-09.00.00": h.be.SnapshotMountPath(v.Key, "s2")}
	if links, _ := f.SMBSnapshotLinks("default", ad.Name(), "docs"); !maps.Equal(links, want) {
		t.Fatalf("after a delete: previous versions %v, want %v", links, want)
	}
	if obs, _ := h.be.ObserveSnapshots(context.Background(), v.Key); obs["s0"].Exists || !obs["s1"].Mounted || !obs["s2"].Mounted {
		t.Fatalf("after a delete: %+v", obs)
	}
}

// storagePools:validateDirectoryService checks the pool's policy through the data
// plane with its user and opened password, without joining; it completes with
// Empty, or fails with the domain's reason (FAILED_PRECONDITION, plain words),
// and leaves the pool and the policy as they were either way.
func TestSMBValidateDirectory(t *testing.T) {
	h := newHarness(t)
	f := newFakeSMB()
	c := h.startWith(t, Options{SMB: f, Secrets: fakeSecrets{}})
	ad := newAD("ad1")
	ad.Site = "Branch"
	p := newSMBPool("pool", ad.Name())
	p.State = model.StateReady
	seedPoolAD(t, h, p, ad)

	ok := newOp(model.OpPoolValidateDirectory, p.Name(), t0)
	h.runOps(t, c, ok)
	if op := h.opDone(t, ok.Name()); op.Error != nil || op.Response != nil {
		t.Fatalf("validation: error %+v, response %s; want Empty", op.Error, op.Response)
	}
	if want := "default|BASIN.TEST|Branch|Basin|basinjoin|" + adPassword; len(f.validations) != 1 || f.validations[0] != want {
		t.Fatalf("validations %q, want [%q]", f.validations, want)
	}
	if len(f.joins) != 0 {
		t.Fatalf("a validation joined: %q", f.joins)
	}

	f.validateErr = &smb.JoinError{Kind: smb.ErrInsufficientRights, Reason: smb.ErrInsufficientRights.Error() + " (OU=Basin,DC=basin,DC=test)"}
	bad := newOp(model.OpPoolValidateDirectory, p.Name(), t0.Add(time.Second))
	h.runOps(t, c, bad)
	op := h.opDone(t, bad.Name())
	if op.Error == nil || op.Error.Code != 9 || !strings.Contains(op.Error.Message, "may not create computer accounts there (OU=Basin,DC=basin,DC=test)") {
		t.Fatalf("failed validation's error %+v: want FAILED_PRECONDITION with the domain's reason", op.Error)
	}
	if strings.Contains(op.Error.Message, adPassword) {
		t.Fatal("the password is in the operation's error")
	}
	var pool *model.Pool
	if err := h.st.View(context.Background(), func(tx store.Tx) (err error) {
		pool, err = store.Get[model.Pool](tx, store.KindPool, p.Name())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if pool.State != model.StateReady || pool.Details != "" {
		t.Fatalf("pool %s %q after a failed validation, want READY as it was", pool.State, pool.Details)
	}
	if a := getAD(t, h, ad.Name()); a.State != model.StateReady || len(a.Members) != 0 {
		t.Fatalf("policy %s members %v after validations, want READY and not joined", a.State, a.Members)
	}
}

func (f *fakeSMB) joinCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.joins)
}
