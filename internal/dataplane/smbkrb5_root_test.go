package dataplane

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	krb5client "github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/oncrpc"
	"github.com/basin-nas/basin/internal/oncrpc/rpcsecgss"
	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/nfsraw"
)

// krbSeq numbers the Kerberos root test's subnet (10.99.<krbSeq>.0/24) and
// bridge; BASIN_E2E_NETSEQ moves it, as it moves test/e2e's, so that one run
// of it can share the machine with another run of the suite.
var krbSeq = func() int {
	if n, err := strconv.Atoi(os.Getenv("BASIN_E2E_NETSEQ")); err == nil && n >= 1 && n <= 200 {
		return n
	}
	return 84
}()

// krbLab is a network with a real AD DC and a Manager whose network's Samba
// instance is joined to it.
type krbLab struct {
	dc      *addc.DC
	m       *Manager
	network string
	mb      SMBMembership
	prefix  netip.Prefix
	dataDir string
	mounts  string
}

// krbNet is the test network's address i (10.99.<krbSeq>.i).
func (l *krbLab) addr(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("10.99.%d.%d", krbSeq, i))
}

// newKrbLab starts the DC, the Manager and joins the network's instance.
func newKrbLab(t *testing.T) *krbLab {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Samba, an AD DC)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	for _, b := range []string{"smbd", "winbindd", "net", dcerpcdBinary, "samba"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs Samba: %v", err)
		}
	}
	ctx := context.Background()
	l := &krbLab{network: "bkr", prefix: netip.MustParsePrefix(fmt.Sprintf("10.99.%d.0/24", krbSeq))}
	bridge := fmt.Sprintf("bkr%d", krbSeq)
	rootBridge(t, bridge, l.addr(1).String()+"/24")
	l.dc = addc.StartT(t, addc.Options{Name: fmt.Sprintf("bkr%d", krbSeq), Dir: t.TempDir(), Bridge: bridge,
		Addr: l.addr(5).String() + "/24", Gateway: l.addr(1).String()})
	t.Logf("dc up in %v", l.dc.Startup)
	n := Network{Name: l.network, Bridge: bridge, Prefix: l.prefix, FirstEndpoint: l.addr(10), LastEndpoint: l.addr(127)}
	l.dataDir, l.mounts = sharedMounts(t, ctx)
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l.m = New(Options{Ganesha: testGanesha(), DataDir: l.dataDir, Networks: []Network{n}, Logger: logger})
	if err := l.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cred := SMBCredentials{Username: l.dc.Delegated.Name, Password: []byte(l.dc.Delegated.Password)}
	t.Cleanup(func() {
		if err := l.m.LeaveDomain(context.Background(), l.network, l.mb.AD, cred); err != nil {
			t.Error(err)
		}
		if err := l.m.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ou, err := smb.OUPath(l.dc.OU, l.dc.Realm)
	if err != nil {
		t.Fatal(err)
	}
	l.mb = SMBMembership{AD: "projects/p1/locations/l/activeDirectories/krb", Realm: l.dc.Realm, MachineName: "BKR-1A2B",
		DNS: []netip.Addr{netip.MustParseAddr(l.dc.Addr)}, OUPath: ou}
	if err := l.m.JoinDomain(ctx, l.network, l.mb, cred); err != nil {
		t.Fatal(err)
	}
	return l
}

// krb5Client logs u on at the DC's KDC (from the host, which has an address
// on the bridge).
func (l *krbLab) krb5Client(t *testing.T, u addc.User) *krb5client.Client {
	t.Helper()
	cl, err := l.dc.Login(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Destroy)
	return cl
}

// The joined instance's machine becomes the NFS service principal
// nfs/<fqdn>: the SPN is on its computer object in AD, and a service ticket an
// AD user gets for it from the KDC decrypts with the instance's keytab, which
// is 0600 in the instance's private directory. A second call changes nothing.
func TestNFSKerberosPrincipalRoot(t *testing.T) {
	l := newKrbLab(t)
	ctx := context.Background()

	k, err := l.m.NFSKerberos(ctx, l.network, l.mb.AD)
	if err != nil {
		t.Fatal(err)
	}
	spn := "nfs/bkr-1a2b." + strings.ToLower(l.dc.Realm)
	if k.Principal != spn+"@"+l.dc.Realm {
		t.Fatalf("principal %q", k.Principal)
	}
	instDir := l.m.instanceDir(l.network, smbInstanceID(l.mb.AD))
	if k.Keytab != filepath.Join(instDir, "private", "krb5.keytab") {
		t.Fatalf("keytab %s, want it in the instance's private directory %s", k.Keytab, instDir)
	}
	st, err := os.Stat(k.Keytab)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("keytab mode %v", st.Mode())
	}
	before, _ := os.ReadFile(k.Keytab)
	if k2, err := l.m.NFSKerberos(ctx, l.network, l.mb.AD); err != nil || k2 != k {
		t.Fatalf("second call: %+v, %v", k2, err)
	}
	if after, _ := os.ReadFile(k.Keytab); string(after) != string(before) {
		t.Fatal("the second call rewrote the keytab")
	}

	// winbindd changes the machine password (every week by default) without
	// rewriting the keytab: NFSKerberos adds the new key version's keys, and
	// a ticket the KDC issues under it decrypts.
	in := instanceOf(t, l.m, l.network, l.mb.AD)
	if out, err := in.run(ctx, nil, "wbinfo", "--change-secret"); err != nil {
		t.Fatalf("wbinfo --change-secret: %v %s", err, out)
	}
	if _, err := l.m.NFSKerberos(ctx, l.network, l.mb.AD); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(k.Keytab); string(after) == string(before) {
		t.Fatal("the keytab did not follow the machine password's change")
	}

	// The SPN is the computer object's.
	out, err := l.dc.Exec(ctx, "ldbsearch", "-H", filepath.Join(l.dc.Dir, "state", "private", "sam.ldb"), "-b", l.dc.BaseDN,
		"(sAMAccountName="+l.mb.MachineName+"$)", "servicePrincipalName")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(string(out)), "serviceprincipalname: "+spn+"\n") {
		t.Fatalf("no %s on the computer object:\n%s", spn, out)
	}

	// A real ticket: alice asks the KDC for nfs/<fqdn>; the keytab decrypts it.
	kt, err := keytab.Load(k.Keytab)
	if err != nil {
		t.Fatal(err)
	}
	alice := l.dc.Users[0]
	cl := l.krb5Client(t, alice)
	tkt, _, err := cl.GetServiceTicket(spn)
	if err != nil {
		t.Fatalf("service ticket for %s: %v", spn, err)
	}
	if err := tkt.DecryptEncPart(kt, nil); err != nil {
		t.Fatalf("the keytab does not decrypt alice's ticket for %s: %v", spn, err)
	}
	if tkt.EncPart.KVNO < 2 {
		t.Fatalf("ticket under key version %d, want the changed password's", tkt.EncPart.KVNO)
	}
	if got := tkt.DecryptedEncPart.CName.PrincipalNameString(); got != alice.Name {
		t.Fatalf("ticket's client %q, want %q", got, alice.Name)
	}
	t.Logf("ticket for %s (etype %d) decrypted with the keytab: client %s@%s", spn, tkt.EncPart.EType,
		tkt.DecryptedEncPart.CName.PrincipalNameString(), tkt.DecryptedEncPart.CRealm)

	// The keys are nowhere in the logs: the key of the ticket's entry, in hex,
	// appears in no file of the data directory but the keytab.
	key, _, err := kt.GetEncryptionKey(tkt.SName, tkt.Realm, tkt.EncPart.KVNO, tkt.EncPart.EType)
	if err != nil {
		t.Fatal(err)
	}
	hexKey := fmt.Sprintf("%x", key.KeyValue)
	filepath.Walk(l.dataDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() || p == k.Keytab || fi.Size() > 64<<20 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(strings.ToLower(string(b)), hexKey) {
			t.Errorf("%s holds the service key in hex", p)
		}
		return nil
	})
}

// Ganesha serves a Kerberos export with the instance's identity: an AD user
// with a ticket for nfs/<fqdn> writes and reads at krb5, krb5i and krb5p, as
// the uid and gid winbind gives her (SMB's), Ganesha asking the instance's
// winbindd through its socket in the instance's directory; AUTH_SYS, and a
// flavor the matching rule does not list, get WRONGSEC.
func TestNFSKerberosServeRoot(t *testing.T) {
	l := newKrbLab(t)
	ctx := context.Background()
	// winbindd's socket is in the instance's directory, where the sandbox can
	// give it to Ganesha. An instance without it there (as an earlier Basin
	// laid instances out: here, the socket's name removed) is started again.
	pipe := filepath.Join(l.m.instanceDir(l.network, smbInstanceID(l.mb.AD)), "winbindd", "pipe")
	if _, err := os.Stat(pipe); err != nil {
		t.Fatalf("winbindd's socket: %v", err)
	}
	old := l.m.SMBPID(l.network, l.mb.AD, "winbindd")
	if err := os.Remove(pipe); err != nil {
		t.Fatal(err)
	}
	k, err := l.m.NFSKerberos(ctx, l.network, l.mb.AD)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pipe); err != nil || l.m.SMBPID(l.network, l.mb.AD, "winbindd") == old {
		t.Fatalf("winbindd not started again with its socket in the instance's directory: %v", err)
	}
	if err := l.m.ServeNFSKerberos(ctx, l.network, &k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(l.dataDir, "sandboxes", l.network, "logs", "ganesha.log"))
			t.Logf("ganesha.log (tail):\n%s", b[max(0, len(b)-6000):])
		}
	})
	vol := tmpfsVolume(t, l.mounts, "kv1", "size=4m,mode=0777")
	addr := l.addr(20)
	host := l.addr(1).String()
	rule := func(sec ...nfs.Flavor) nfs.Export {
		return nfs.Export{ID: 21, Path: vol, Pseudo: "/kv1", Protocols: []int{4}, Clients: []nfs.Client{
			{Clients: []string{host}, Access: nfs.AccessRW, Squash: nfs.RootSquash, Protocols: []int{4}, Sec: sec}}}
	}
	if err := l.m.Export(ctx, l.network, addr, rule(nfs.FlavorKrb5p)); err != nil {
		t.Fatal(err)
	}
	alice := l.dc.Users[0]
	cl := l.krb5Client(t, alice)
	spn := "nfs/bkr-1a2b." + strings.ToLower(l.dc.Realm)
	// alice's ids as the instance's winbindd gives them (to SMB too).
	out, err := instanceOf(t, l.m, l.network, l.mb.AD).run(ctx, nil, "wbinfo", "-i", l.dc.Domain+`\`+alice.Name)
	f := strings.Split(strings.TrimSpace(out), ":")
	if err != nil || len(f) < 4 {
		t.Fatalf("wbinfo -i %s: %v %s", alice.Name, err, out)
	}
	uid, gid := f[2], f[3]
	t.Logf("alice is %s:%s", uid, gid)
	dial := func(svc rpcsecgss.Service) (*nfsraw.Client, error) {
		a := nfsraw.Auth{Machine: "bkr-client"}
		if svc != 0 {
			a.Sec = nfsraw.Krb5(cl, spn, svc)
		}
		return nfsraw.Dial41(ctx, addr.String(), 2049, a)
	}
	names := map[rpcsecgss.Service]string{0: "sys", rpcsecgss.None: "krb5", rpcsecgss.Integrity: "krb5i", rpcsecgss.Privacy: "krb5p"}
	// lookup reaches the export's root as svc; WRONGSEC when the rule does
	// not admit it.
	lookup := func(svc rpcsecgss.Service) (*nfsraw.Client, []byte, error) {
		c, err := dial(svc)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: dial: %w", names[svc], err)
		}
		fh, err := c.LookupPath(ctx, "kv1")
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, fh, nil
	}
	for _, svc := range []rpcsecgss.Service{0, rpcsecgss.None, rpcsecgss.Integrity} {
		if c, _, err := lookup(svc); !isStatus(err, nfsraw.ErrWrongSec) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("%s on a krb5p-only rule: %v, want WRONGSEC", names[svc], err)
		}
	}
	writeRead := func(svc rpcsecgss.Service) {
		t.Helper()
		c, root, err := lookup(svc)
		if err != nil {
			t.Fatalf("%s: lookup: %v", names[svc], err)
		}
		defer c.Close()
		name := "alice-" + names[svc]
		data := []byte(strings.Repeat(name+" ", 1000))
		fh, sid, err := c.OpenFile(ctx, root, name, nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte(name), true)
		if err != nil {
			t.Fatalf("%s: create: %v", names[svc], err)
		}
		w := &nfsraw.Write{StateID: sid, Data: data}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: fh}, w); err != nil {
			t.Fatalf("%s: write: %v", names[svc], err)
		}
		r := &nfsraw.Read{StateID: sid, Count: uint32(len(data))}
		ga := &nfsraw.GetAttr{}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: fh}, r, ga); err != nil {
			t.Fatalf("%s: read: %v", names[svc], err)
		}
		if string(r.Data) != string(data) {
			t.Fatalf("%s: read %d bytes back, want the %d written", names[svc], len(r.Data), len(data))
		}
		st, err := os.Stat(filepath.Join(vol, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if ga.Attr.Owner != uid || fmt.Sprint(sys.Uid) != uid || fmt.Sprint(sys.Gid) != gid {
			t.Fatalf("%s: %s is %s:%s over NFS, %d:%d on disk; want alice's %s:%s, as SMB maps her", names[svc], name,
				ga.Attr.Owner, ga.Attr.OwnerGroup, sys.Uid, sys.Gid, uid, gid)
		}
	}
	writeRead(rpcsecgss.Privacy)
	if err := l.m.Export(ctx, l.network, addr, rule(nfs.FlavorKrb5, nfs.FlavorKrb5i, nfs.FlavorKrb5p)); err != nil {
		t.Fatal(err)
	}
	writeRead(rpcsecgss.None)
	writeRead(rpcsecgss.Integrity)
	if c, _, err := lookup(0); !isStatus(err, nfsraw.ErrWrongSec) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("sys on a Kerberos rule: %v, want WRONGSEC", err)
	}

	// Forged RPCSEC_GSS calls are not served: alice's last sequence number
	// sent again, and bob's context handle (seen on the wire) used without
	// bob's keys.
	bobConn, _, bob := krbConn(t, l.krb5Client(t, l.dc.Users[1]), addr, spn)
	defer bobConn.Close()
	for _, f := range []struct {
		name   string
		forged func(alice *rpcsecgss.Session) oncrpc.Auth
	}{
		{"a replayed sequence number", func(a *rpcsecgss.Session) oncrpc.Auth { return a.Forged(rpcsecgss.Integrity, true, nil) }},
		{"another principal's context", func(a *rpcsecgss.Session) oncrpc.Auth { return a.Forged(rpcsecgss.Integrity, false, bob) }},
	} {
		c, sw, alice := krbConn(t, cl, addr, spn)
		root, err := c.LookupPath(ctx, "kv1")
		if err != nil {
			t.Fatalf("%s: lookup before forging: %v", f.name, err)
		}
		sw.set(f.forged(alice))
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		ga := &nfsraw.GetAttr{}
		err = c.Run(cctx, &nfsraw.PutFH{FH: root}, ga)
		cancel()
		c.Close()
		if _, answered := nfsraw.StatusOf(err); err == nil || answered {
			t.Fatalf("%s: served (%v, owner %q)", f.name, err, ga.Attr.Owner)
		}
		t.Logf("%s: %v", f.name, err)
	}
}

// switchAuth is an RPC Auth that can be replaced while a client uses it.
type switchAuth struct {
	mu sync.Mutex
	a  oncrpc.Auth
}

func (s *switchAuth) set(a oncrpc.Auth) { s.mu.Lock(); s.a = a; s.mu.Unlock() }

func (s *switchAuth) Seal(b []byte, head int, args []byte) ([]byte, oncrpc.Opener, error) {
	s.mu.Lock()
	a := s.a
	s.mu.Unlock()
	return a.Seal(b, head, args)
}

// krbConn opens an NFSv4.1 session to addr at krb5i as cl's principal, and
// returns it with the Auth its calls go through (to be replaced by forged
// ones) and its RPCSEC_GSS context.
func krbConn(t *testing.T, cl *krb5client.Client, addr netip.Addr, spn string) (*nfsraw.Client, *switchAuth, *rpcsecgss.Session) {
	t.Helper()
	sw := &switchAuth{}
	var sess *rpcsecgss.Session
	c, err := nfsraw.Dial41(context.Background(), addr.String(), 2049, nfsraw.Auth{Machine: "bkr-forge",
		Sec: func(ctx context.Context, caller rpcsecgss.Caller) (oncrpc.Auth, error) {
			s, err := nfsraw.Krb5Session(ctx, caller, cl, spn)
			if err != nil {
				return nil, err
			}
			sess = s
			sw.set(s.Auth(rpcsecgss.Integrity))
			return sw, nil
		}})
	if err != nil {
		t.Fatalf("krb5i session: %v", err)
	}
	return c, sw, sess
}
