package controller

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/store"
)

// fakeKerberos models the data plane's Kerberos: the identity each
// network's NFS server serves with.
type fakeKerberos struct {
	mu        sync.Mutex
	made      []string // "network|policy" per NFSKerberos
	served    map[string]*dataplane.NFSKerberos
	endpoints map[string]bool // "network|policy|addr" the machine's name leads to
}

func (f *fakeKerberos) NFSKerberosEndpoint(_ context.Context, network, ad string, addr netip.Addr, serve bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.endpoints == nil {
		f.endpoints = map[string]bool{}
	}
	key := network + "|" + ad + "|" + addr.String()
	if serve {
		f.endpoints[key] = true
	} else {
		delete(f.endpoints, key)
	}
	return nil
}

func (f *fakeKerberos) NFSKerberos(_ context.Context, network, ad string) (dataplane.NFSKerberos, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made = append(f.made, network+"|"+ad)
	return dataplane.NFSKerberos{Principal: "nfs/basin-1a2b.basin.test@BASIN.TEST", Keytab: "/fake/" + ad + "/krb5.keytab"}, nil
}

func (f *fakeKerberos) ServeNFSKerberos(_ context.Context, network string, k *dataplane.NFSKerberos) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.served == nil {
		f.served = map[string]*dataplane.NFSKerberos{}
	}
	f.served[network] = k
	return nil
}

// A Kerberos volume's export admits, rule by rule, the flavors its flags
// name, read-write only where the flags and the rule's access both allow it,
// and no one on a rule without flags; before it is exported the network's
// instance of the pool's policy is joined and its machine made the NFS
// server's Kerberos identity, once.
func TestKerberosVolumeExport(t *testing.T) {
	h := newHarness(t)
	dp := h.withDataPlane()
	f, k := newFakeSMB(), &fakeKerberos{}
	var clockMu sync.Mutex
	now := t0
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	c := h.startWith(t, Options{SMB: f, Kerberos: k, Secrets: fakeSecrets{}, Now: clock})
	ad := newAD("ad1")
	p := newSMBPool("pool", ad.Name())
	seedPoolAD(t, h, p, ad)
	h.runOps(t, c, newOp(model.OpPoolCreate, p.Name(), t0))

	rule := func(clients string, access int32, flags ...*bool) model.ExportRule {
		r := model.ExportRule{AllowedClients: ptr(clients), AccessType: ptr(access), NFSv4: ptr(true), HasRootAccess: ptr("false")}
		for i, f := range []**bool{&r.Kerberos5ReadOnly, &r.Kerberos5ReadWrite, &r.Kerberos5iReadOnly, &r.Kerberos5iReadWrite,
			&r.Kerberos5pReadOnly, &r.Kerberos5pReadWrite} {
			*f = flags[i]
		}
		return r
	}
	yes, no := ptr(true), ptr(false)
	v := nfsVolume("krb", false, model.ProtocolNFSv4)
	v.StoragePool, v.KerberosEnabled = "pool", true
	v.ExportRules = []model.ExportRule{
		rule("10.99.0.101", model.AccessReadWrite, nil, nil, nil, nil, nil, yes),  // krb5p read-write
		rule("10.99.0.102", model.AccessReadWrite, yes, nil, yes, yes, nil, nil),  // krb5 read-only, krb5i read-write: the API refuses this, read-only here
		rule("10.99.0.103", model.AccessReadOnly, nil, yes, nil, yes, nil, yes),   // read-write flags, a read-only rule
		rule("10.99.0.0/24", model.AccessReadWrite, no, no, no, no, no, no),       // no flavor
		rule("10.99.1.0/24", model.AccessReadWrite, yes, yes, nil, nil, yes, nil), // RW wins over RO for krb5
		rule("10.99.2.0/24", model.AccessReadWrite, nil, yes, nil, nil, nil, nil), // root explicitly granted
	}
	// Root access left unset: squashed all the same for Kerberos (a machine
	// principal any domain user can make is root to Ganesha).
	v.ExportRules[4].HasRootAccess = nil
	v.ExportRules[5].HasRootAccess = ptr("true")
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, v) })
	for i, u := range []time.Duration{1, 2} {
		op := newOp(model.OpVolumeCreate, v.Name(), t0.Add(u*time.Second))
		if i == 1 {
			op = newOp(model.OpVolumeUpdate, v.Name(), t0.Add(u*time.Second))
		}
		h.runOps(t, c, op)
		if got := h.opDone(t, op.Name()); got.Error != nil {
			t.Fatalf("%s: %+v", op.Kind, got.Error)
		}
	}
	var ex nfs.Export
	for _, e := range dp.Exports() {
		ex = e.Export
	}
	want := []struct {
		access nfs.Access
		sec    []nfs.Flavor
	}{
		{nfs.AccessRW, []nfs.Flavor{nfs.FlavorKrb5p}},
		{nfs.AccessRO, []nfs.Flavor{nfs.FlavorKrb5, nfs.FlavorKrb5i}},
		{nfs.AccessRO, []nfs.Flavor{nfs.FlavorKrb5, nfs.FlavorKrb5i, nfs.FlavorKrb5p}},
		{nfs.AccessNone, nil},
		{nfs.AccessRO, []nfs.Flavor{nfs.FlavorKrb5, nfs.FlavorKrb5p}},
		{nfs.AccessRW, []nfs.Flavor{nfs.FlavorKrb5}},
	}
	if len(ex.Clients) != len(want) {
		t.Fatalf("clients %+v", ex.Clients)
	}
	for i, w := range want {
		squash := nfs.RootSquash
		if i == 5 {
			squash = nfs.NoRootSquash
		}
		if cl := ex.Clients[i]; cl.Access != w.access || !slices.Equal(cl.Sec, w.sec) || cl.Squash != squash {
			t.Errorf("rule %d: %s %v %s, want %s %v %s", i, cl.Access, cl.Sec, cl.Squash, w.access, w.sec, squash)
		}
	}
	if len(f.joins) != 1 || !slices.Equal(k.made, []string{"default|" + ad.Name()}) || k.served["default"] == nil {
		t.Fatalf("joins %q, identities made %q, served %v: want one each, on default", f.joins, k.made, k.served)
	}
	// Clients mount it by the machine's name, which leads to its endpoint.
	if got, err := c.loadVolume(context.Background(), v.Name()); err != nil || got.KerberosServer != "basin-1a2b.basin.test" {
		t.Fatalf("recorded server %q, %v", got.KerberosServer, err)
	}
	if !k.endpoints["default|"+ad.Name()+"|"+v.Endpoint] || len(k.endpoints) != 1 {
		t.Fatalf("endpoints of the machine's name: %v", k.endpoints)
	}

	// A volume without Kerberos renders AUTH_SYS rules as before, and asks
	// for no identity.
	plain := nfsVolume("plain", false, model.ProtocolNFSv4)
	plain.Endpoint = "10.99.0.11"
	op := newOp(model.OpVolumeCreate, plain.Name(), t0.Add(3*time.Second))
	h.seed(t, func(tx store.Tx) error { return store.PutVolume(tx, plain) })
	h.runOps(t, c, op)
	for _, e := range dp.Exports() {
		if e.Export.Pseudo == "/plain" && (len(e.Export.Clients) != 1 || e.Export.Clients[0].Sec != nil) {
			t.Fatalf("plain volume's clients %+v", e.Export.Clients)
		}
	}
	if len(k.made) != 1 {
		t.Fatalf("identities made %q", k.made)
	}

	// A resync pass within krbRecheck asks nothing; past it, the identity
	// is made again (the machine's keys may have changed).
	ctx := context.Background()
	if err := c.resync(ctx, false); err != nil {
		t.Fatal(err)
	}
	clockMu.Lock()
	now = now.Add(krbRecheck + time.Second)
	clockMu.Unlock()
	if err := c.resync(ctx, false); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	if len(k.made) != 2 {
		t.Fatalf("identities made %q, want a second one past the recheck interval", k.made)
	}
	k.mu.Unlock()

	// Deleted, its endpoint no longer leads there.
	h.runDelete(t, c, v, t0.Add(4*time.Second))
	if len(k.endpoints) != 0 {
		t.Fatalf("endpoints after the delete: %v", k.endpoints)
	}
}
