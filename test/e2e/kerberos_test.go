package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	krb5client "github.com/jcmturner/gokrb5/v8/client"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/oncrpc"
	"github.com/basin-nas/basin/internal/oncrpc/rpcsecgss"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// A Kerberos volume of a pool with an AD policy, against a real DC: AD users
// with tickets from it write and read over NFSv4.1 at krb5, krb5i and krb5p,
// their files owned by the uid and gid SMB gives them (100000 + RID); AUTH_SYS
// is refused with WRONGSEC, and so are krb5 and krb5i from a client whose
// rule admits krb5p only (rules apply in order: it comes first), and a handle
// carried to an export of another flavor. A ticket's end ends what it
// opened, and opens nothing after (ticketExpiry, alongside the rest).
func TestKerberosNFS(t *testing.T) {
	l := startSMBLab(t, newServer(t, "BASIN_TEST_KRB5_CLOCKSKEW="+krbTestSkew.String()), nil)
	ctx := context.Background()
	strict, open := l.s.host(151), l.h // .151: krb5p only; .150: the subnet's rule
	rule := func(clients string, flags ...string) map[string]any {
		r := map[string]any{"allowedClients": clients, "accessType": "READ_WRITE", "nfsv4": true, "hasRootAccess": "false"}
		for _, f := range flags {
			r[f] = true
		}
		return r
	}
	mutate(t, l.c, "POST", loc+"/volumes?volumeId=kv", map[string]any{"shareName": "kv", "storagePool": "smb", "capacityGib": 100,
		"protocols": []string{"NFSV4"}, "kerberosEnabled": true, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{
			rule(l.s.addrN(151), "kerberos5pReadWrite"),
			rule(l.s.subnet.String(), "kerberos5ReadWrite", "kerberos5iReadWrite", "kerberos5pReadWrite"),
		}}})
	ep := endpoint(t, l.c, "kv")
	spn := l.nfsPrincipal(ctx)
	t.Logf("volume kv on %s, service principal %s", ep, spn)
	// Clients mount it by the machine's name, which leads to its endpoint.
	server := strings.TrimPrefix(spn, "nfs/")
	var vol client.Object
	if err := l.c.Do(ctx, "GET", loc+"/volumes/kv", nil, nil, &vol); err != nil {
		t.Fatal(err)
	}
	if mo := vol["mountOptions"].([]any)[0].(map[string]any); mo["exportFull"] != server+":/kv" || !strings.Contains(fmt.Sprint(mo["instructions"]), "sec=krb5p") {
		t.Fatalf("mount option %v, want %s:/kv with sec=krb5p", mo, server)
	}
	if a, err := l.dc.LookupA(ctx, server); err != nil || !slices.Contains(a, ep.String()) {
		t.Fatalf("%s resolves to %v (%v), want %s among them", server, a, err, ep)
	}

	session := func(h *clienthost.Host, u addc.User, svc rpcsecgss.Service, fn func(c *nfsraw.Client, root []byte) error) error {
		return l.krbSession(ctx, h, ep, spn, "kv", u, svc, fn)
	}
	expiry := l.ticketExpiry(ctx, open, ep, spn, "kv", l.user("alice"))
	for _, u := range []addc.User{l.user("alice"), l.user("bob")} {
		uid, gid := l.rid(ctx, "(sAMAccountName="+u.Name+")")+100000, l.rid(ctx, "(sAMAccountName=Domain Users)")+100000
		for _, svc := range []rpcsecgss.Service{rpcsecgss.None, rpcsecgss.Integrity, rpcsecgss.Privacy} {
			name := u.Name + "-" + flavorNames[svc]
			data := []byte(strings.Repeat(name+"\n", 500))
			err := session(open, u, svc, func(c *nfsraw.Client, root []byte) error {
				fh, sid, err := c.OpenFile(ctx, root, name, nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte(name), true)
				if err != nil {
					return fmt.Errorf("create: %w", err)
				}
				if err := c.Run(ctx, &nfsraw.PutFH{FH: fh}, &nfsraw.Write{StateID: sid, Data: data}); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				r, ga := &nfsraw.Read{StateID: sid, Count: uint32(len(data))}, &nfsraw.GetAttr{}
				if err := c.Run(ctx, &nfsraw.PutFH{FH: fh}, r, ga); err != nil {
					return fmt.Errorf("read: %w", err)
				}
				if string(r.Data) != string(data) {
					return fmt.Errorf("read %d bytes back, not the %d written", len(r.Data), len(data))
				}
				if ga.Attr.Owner != strconv.Itoa(uid) || ga.Attr.OwnerGroup != strconv.Itoa(gid) {
					return fmt.Errorf("owner %s:%s, want %d:%d (as SMB maps %s)", ga.Attr.Owner, ga.Attr.OwnerGroup, uid, gid, u.Name)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s at %s: %v", u.Name, flavorNames[svc], err)
			}
		}
	}
	alice := l.user("alice")
	refused := func(h *clienthost.Host, svc rpcsecgss.Service) {
		t.Helper()
		err := session(h, alice, svc, func(*nfsraw.Client, []byte) error { return nil })
		if s, ok := nfsraw.StatusOf(err); !ok || s != nfsraw.ErrWrongSec {
			t.Fatalf("%s from %s: %v, want WRONGSEC", flavorNames[svc], h.Name(), err)
		}
	}
	refused(open, 0)
	refused(strict, 0)
	refused(strict, rpcsecgss.None)
	refused(strict, rpcsecgss.Integrity)
	if err := session(strict, alice, rpcsecgss.Privacy, func(c *nfsraw.Client, root []byte) error {
		entries, err := c.ReadDirAll(ctx, root)
		if err == nil && len(entries) != 6 {
			err = fmt.Errorf("%d entries, want the 6 files written", len(entries))
		}
		return err
	}); err != nil {
		t.Fatalf("krb5p from the krb5p-only client: %v", err)
	}

	// A handle crosses no flavor: a handle of an AUTH_SYS volume sent with
	// krb5p, and of the Kerberos volume sent with AUTH_SYS, get WRONGSEC.
	mutate(t, l.c, "POST", loc+"/volumes?volumeId=sv", map[string]any{"shareName": "sv", "storagePool": "pool1", "capacityGib": 1,
		"protocols": []string{"NFSV4"}, "exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": l.s.subnet.String(),
			"accessType": "READ_WRITE", "nfsv4": true}}}})
	sysEP := endpoint(t, l.c, "sv")
	var sysFH, krbFH []byte
	if err := l.krbSession(ctx, open, sysEP, spn, "sv", alice, 0, func(_ *nfsraw.Client, root []byte) error { sysFH = root; return nil }); err != nil {
		t.Fatalf("AUTH_SYS on the AUTH_SYS volume: %v", err)
	}
	if err := session(open, alice, rpcsecgss.Privacy, func(_ *nfsraw.Client, root []byte) error { krbFH = root; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		what string
		ep   netip.Addr
		svc  rpcsecgss.Service
		fh   []byte
	}{{"the AUTH_SYS volume's handle with krb5p", ep, rpcsecgss.Privacy, sysFH}, {"the Kerberos volume's handle with AUTH_SYS", sysEP, 0, krbFH}} {
		err := open.Within(func() error {
			a := nfsraw.Auth{UID: 1000, GID: 1000, Machine: open.Name()}
			if x.svc != 0 {
				a.Sec = nfsraw.Krb5(l.krb5Login(alice), spn, x.svc)
			}
			c, err := nfsraw.Dial41(ctx, x.ep.String(), 2049, a)
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Run(ctx, &nfsraw.PutFH{FH: x.fh}, &nfsraw.GetAttr{})
		})
		if s, ok := nfsraw.StatusOf(err); !ok || s != nfsraw.ErrWrongSec {
			t.Fatalf("%s: %v, want WRONGSEC", x.what, err)
		}
	}

	// A user removed from the domain gets no new ticket; a ticket issued
	// before goes on serving until it expires: the PAC in it is trusted and
	// the ids follow from the RID (idmap rid), so nothing asks the domain.
	bob := l.user("bob")
	var bobCl *krb5client.Client
	if err := open.Within(func() error {
		bobCl = l.krb5Login(bob)
		_, _, err := bobCl.GetServiceTicket(spn)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bobWant := strconv.Itoa(l.rid(ctx, "(sAMAccountName=bob)") + 100000)
	if out, err := l.dc.Exec(ctx, "samba-tool", "user", "delete", bob.Name); err != nil {
		t.Fatalf("delete bob: %v %s", err, out)
	}
	if err := open.Within(func() error { _, err := l.dc.Login(bob); return err }); err == nil {
		t.Fatal("bob logged on after his account was deleted")
	}
	bobUID := ""
	err := open.Within(func() error {
		c, err := nfsraw.Dial41(ctx, ep.String(), 2049, nfsraw.Auth{Machine: open.Name(), Sec: nfsraw.Krb5(bobCl, spn, rpcsecgss.Privacy)})
		if err != nil {
			return err
		}
		defer c.Close()
		fh, sid, err := c.OpenFile(ctx, krbFH, "bob-after", nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte("bob"), true)
		if err != nil {
			return err
		}
		ga := &nfsraw.GetAttr{}
		err = c.Run(ctx, &nfsraw.PutFH{FH: fh}, &nfsraw.Write{StateID: sid, Data: []byte("still here\n")}, ga)
		bobUID = ga.Attr.Owner
		return err
	})
	if err != nil || bobUID != bobWant {
		t.Fatalf("deleted bob with a ticket from before: %v, owner %s; want served as %s until the ticket expires", err, bobUID, bobWant)
	}

	if note, err := expiry(); err != nil {
		t.Fatalf("a ticket that expired: %v", err)
	} else {
		t.Log(note)
	}

	// Deleted, its endpoint no longer answers for the name.
	mutate(t, l.c, "DELETE", loc+"/volumes/kv", nil)
	if a, _ := l.dc.LookupA(ctx, server); slices.Contains(a, ep.String()) {
		t.Fatalf("%s still resolves to %s after the volume went: %v", server, ep, a)
	}
}

// The Kerberos times of TestKerberosNFS: Basin serves with a clock skew of
// 5 s, not MIT's 5 minutes (BASIN_TEST_KRB5_CLOCKSKEW; the skew is also the
// grace MIT's acceptor gives a ticket past its end), and a ticket lasts 15 s.
const (
	krbTestSkew     = 5 * time.Second
	krbTestLifetime = 15 * time.Second
)

// ticketExpiry starts checking, while the caller goes on, that the NFS
// server holds a Kerberos ticket's end: u gets a ticket from host h that
// lasts krbTestLifetime, and opens a krb5p session to ep with it, which it
// uses every second. The RPCSEC_GSS context lives as long as the ticket
// (RFC 2203 §5.3.3.3): ntirpc gives it the time left that the acceptor
// reports, the ticket's end and the skew, less 5 s, and answers a call after
// that with RPCSEC_GSS_CREDPROBLEM. A new context with the ticket is then
// refused (the acceptor takes no ticket past its end and the skew: the
// client's credential rejected), and one with a new ticket is not.
// The returned wait returns what the check found, and when.
func (l *smbLab) ticketExpiry(ctx context.Context, h *clienthost.Host, ep netip.Addr, spn, share string, u addc.User) (wait func() (string, error)) {
	done := make(chan error, 1)
	var note string
	go func() {
		var tk *addc.Ticket
		dial := func(sec func(context.Context, rpcsecgss.Caller) (oncrpc.Auth, error)) (c *nfsraw.Client, root []byte, err error) {
			err = h.Within(func() error {
				if tk == nil {
					if tk, err = l.dc.ServiceTicket(u, spn, krbTestLifetime); err != nil {
						return err
					}
					sec = nfsraw.Krb5Ticket(tk.Realm, tk.CName, tk.Ticket, tk.Key, rpcsecgss.Privacy)
				}
				if c, err = nfsraw.Dial41(ctx, ep.String(), 2049, nfsraw.Auth{Machine: h.Name(), Sec: sec}); err != nil {
					return err
				}
				if root, err = c.LookupPath(ctx, share); err != nil {
					c.Close()
				}
				return err
			})
			return c, root, err
		}
		done <- func() error {
			c, root, err := dial(nil)
			if err != nil {
				return fmt.Errorf("a session with a fresh ticket: %w", err)
			}
			defer c.Close()
			if got := tk.End.Sub(tk.Start); got > krbTestLifetime+time.Second {
				return fmt.Errorf("the KDC gave a ticket for %s, asked for %s", got, krbTestLifetime)
			}
			// Served until about the context's end (the ticket's end, with
			// the test's skew of 5 s; a call a second, ntirpc's clock in whole
			// seconds), refused before the skew is past.
			servedTo, refuseBy := tk.End.Add(krbTestSkew-5*time.Second-4*time.Second), tk.End.Add(krbTestSkew+2*time.Second)
			var lastOK time.Time
			for {
				err := c.Run(ctx, &nfsraw.PutFH{FH: root}, &nfsraw.GetAttr{})
				now := time.Now()
				if err != nil {
					var re *nfsraw.RPCError
					if !errors.As(err, &re) || !re.Denied || re.Auth != oncrpc.GSSCredProblem {
						return fmt.Errorf("the session at %s of its ticket's end: %w, want RPCSEC_GSS_CREDPROBLEM", now.Sub(tk.End), err)
					}
					if lastOK.IsZero() {
						return fmt.Errorf("the session refused from its first call, %s before its ticket's end", tk.End.Sub(now))
					}
					if lastOK.Before(servedTo) {
						return fmt.Errorf("the context ended %s before its ticket did", tk.End.Sub(lastOK))
					}
					note = fmt.Sprintf("a ticket of %s: its session served at %+.1fs of its end, refused (CREDPROBLEM) at %+.1fs",
						tk.End.Sub(tk.Start), lastOK.Sub(tk.End).Seconds(), now.Sub(tk.End).Seconds())
					break
				}
				if now.After(refuseBy) {
					return fmt.Errorf("the session still served %s after its ticket ended (skew %s)", now.Sub(tk.End), krbTestSkew)
				}
				lastOK = now
				time.Sleep(time.Second)
			}
			// The ticket again, once past its end and the skew.
			time.Sleep(time.Until(tk.End.Add(krbTestSkew + 1500*time.Millisecond)))
			c2, _, err := dial(nfsraw.Krb5Ticket(tk.Realm, tk.CName, tk.Ticket, tk.Key, rpcsecgss.Privacy))
			refusedAt := time.Since(tk.End)
			if err == nil {
				c2.Close()
				return fmt.Errorf("a new context with the ticket %s after its end was accepted", time.Since(tk.End))
			}
			var re *nfsraw.RPCError
			if !errors.As(err, &re) || !re.Denied || re.Auth != oncrpc.AuthRejectedCred {
				return fmt.Errorf("a new context with the expired ticket: %w, want the credential rejected", err)
			}
			// A new ticket does.
			var cl *krb5client.Client
			if err := h.Within(func() (err error) { cl, err = l.dc.Login(u); return err }); err != nil {
				return err
			}
			defer cl.Destroy()
			c3, _, err := dial(nfsraw.Krb5(cl, spn, rpcsecgss.Privacy))
			if err != nil {
				return fmt.Errorf("a new ticket after the old one expired: %w", err)
			}
			c3.Close()
			note += fmt.Sprintf("; a new context with it refused at %+.1fs, with a new ticket accepted", refusedAt.Seconds())
			return nil
		}()
	}()
	return func() (string, error) { err := <-done; return note, err }
}

// flavorNames name the RPC security flavors as mount's sec= does (0: AUTH_SYS).
var flavorNames = map[rpcsecgss.Service]string{0: "sys", rpcsecgss.None: "krb5", rpcsecgss.Integrity: "krb5i", rpcsecgss.Privacy: "krb5p"}

// krbSession runs fn with an NFSv4.1 session to ep from host h as u at svc
// (0: AUTH_SYS as uid 1000), tickets for spn, and the handle of share's root.
func (l *smbLab) krbSession(ctx context.Context, h *clienthost.Host, ep netip.Addr, spn, share string, u addc.User, svc rpcsecgss.Service,
	fn func(c *nfsraw.Client, root []byte) error) error {
	return h.Within(func() error {
		a := nfsraw.Auth{UID: 1000, GID: 1000, Machine: h.Name()}
		if svc != 0 {
			a.Sec = nfsraw.Krb5(l.krb5Login(u), spn, svc)
		}
		c, err := nfsraw.Dial41(ctx, ep.String(), 2049, a)
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		defer c.Close()
		root, err := c.LookupPath(ctx, share)
		if err != nil {
			return err
		}
		return fn(c, root)
	})
}

// nfsPrincipal is the NFS service principal the pool's machine got in the
// domain: nfs/<its DNS name>.
func (l *smbLab) nfsPrincipal(ctx context.Context) string {
	l.t.Helper()
	out, err := l.dc.Exec(ctx, "ldbsearch", "-H", filepath.Join(l.dc.Dir, "state", "private", "sam.ldb"), "-b", l.dc.BaseDN,
		"(servicePrincipalName=nfs/*)", "servicePrincipalName")
	if err != nil {
		l.t.Fatal(err)
	}
	var spns []string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "servicePrincipalName: "); ok && strings.HasPrefix(v, "nfs/") && strings.Contains(v, ".") {
			spns = append(spns, strings.ToLower(v))
		}
	}
	if len(spns) != 1 {
		l.t.Fatalf("NFS service principals in the domain: %q, want one", spns)
	}
	return spns[0]
}

// rid is the RID of the one object filter finds (the last part of its SID).
func (l *smbLab) rid(ctx context.Context, filter string) int {
	l.t.Helper()
	out, err := l.dc.Exec(ctx, "ldbsearch", "-H", filepath.Join(l.dc.Dir, "state", "private", "sam.ldb"), "-b", l.dc.BaseDN, filter, "objectSid")
	if err != nil {
		l.t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "objectSid: "); ok {
			n, err := strconv.Atoi(v[strings.LastIndexByte(v, '-')+1:])
			if err == nil {
				return n
			}
		}
	}
	l.t.Fatalf("no objectSid for %s:\n%s", filter, out)
	return 0
}

// krb5Login logs u on at the DC's KDC (from where it is called: inside a
// client host, its sockets are the host's).
func (l *smbLab) krb5Login(u addc.User) *krb5client.Client {
	l.t.Helper()
	cl, err := l.dc.Login(u)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(cl.Destroy)
	return cl
}

// A dual-protocol Kerberos volume: what alice writes over SMB is hers over
// NFS with her ticket, and the other way round, by the same ids; after Basin
// restarts, the network's NFS server still accepts her tickets.
func TestKerberosDual(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx := context.Background()
	sh := l.volume("kd", map[string]any{"protocols": []string{"NFSV4", "SMB"}, "kerberosEnabled": true, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": l.s.subnet.String(), "accessType": "READ_WRITE",
			"nfsv4": true, "hasRootAccess": "false", "kerberos5pReadWrite": true}}}})
	spn := l.nfsPrincipal(ctx)
	if spn != "nfs/"+sh.Server {
		t.Fatalf("service principal %s, want nfs/ and the SMB server's name %s", spn, sh.Server)
	}
	alice := l.user("alice")
	uid := strconv.Itoa(l.rid(ctx, "(sAMAccountName=alice)") + 100000)
	fromSMB, fromNFS := []byte("written over SMB\n"), []byte("written over NFS with krb5p\n")
	fs := l.mount(ctx, sh, alice, sh.Share)
	if err := fs.WriteFile("from-smb.txt", fromSMB, 0o644); err != nil {
		t.Fatal(err)
	}
	nfs := func(what string, fn func(c *nfsraw.Client, root []byte) error) {
		t.Helper()
		if err := l.krbSession(ctx, l.h, sh.Endpoint, spn, "kd", alice, rpcsecgss.Privacy, fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	nfs("NFS", func(c *nfsraw.Client, root []byte) error {
		ga := &nfsraw.GetAttr{}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: root}, &nfsraw.Lookup{Name: "from-smb.txt"}, ga); err != nil {
			return fmt.Errorf("lookup from-smb.txt: %w", err)
		}
		if ga.Attr.Owner != uid {
			return fmt.Errorf("from-smb.txt is %s's over NFS, want alice's %s", ga.Attr.Owner, uid)
		}
		fh, sid, err := c.OpenFile(ctx, root, "from-nfs.txt", nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte("alice"), true)
		if err != nil {
			return err
		}
		return c.Run(ctx, &nfsraw.PutFH{FH: fh}, &nfsraw.Write{StateID: sid, Data: fromNFS})
	})
	if b, err := fs.ReadFile("from-nfs.txt"); err != nil || string(b) != string(fromNFS) {
		t.Fatalf("from-nfs.txt over SMB: %q, %v", b, err)
	}
	fs.Umount()

	l.restart()
	nfs("NFS after a restart", func(c *nfsraw.Client, root []byte) error {
		r := &nfsraw.Read{Count: 4096}
		if err := c.Run(ctx, &nfsraw.PutFH{FH: root}, &nfsraw.Lookup{Name: "from-nfs.txt"}, r); err != nil {
			return err
		}
		if string(r.Data) != string(fromNFS) {
			return fmt.Errorf("read %q", r.Data)
		}
		return nil
	})
}
