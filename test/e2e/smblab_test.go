package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	smb2 "github.com/cloudsoda/go-smb2"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/clienthost"
)

// smbLab is a Basin server, a real Samba AD DC on the server's network bridge, an
// Active Directory policy "ad1" made through the v1 API with the DC's delegated
// user, an SMB pool "smb" using it, and a client host (.150 with startSMBLab). SMB tests build on
// it; each test gets its own (the DC takes about 5 s).
type smbLab struct {
	t      *testing.T
	s      *server
	c      *client.Client
	dc     *addc.DC
	realm  string // lower case: the DNS domain
	ad     string // the policy's resource name
	h      *clienthost.Host
	dcVeth string // the DC's host-side veth
}

// smbShare is an SMB volume as its mount options give it.
type smbShare struct {
	ID, Share string
	UNC       string     // \\basin-xxxx.realm\share
	Server    string     // basin-xxxx.realm (lower case)
	Machine   string     // BASIN-XXXX
	Endpoint  netip.Addr // where its server answers
}

var smbLabSeq int

// newSMBLab starts the lab; adExtra adds fields to the policy's body (e.g.
// "administrators") or replaces them; serverFlags go to basin serve.
func newSMBLab(t *testing.T, adExtra map[string]any, serverFlags ...string) *smbLab {
	t.Helper()
	return startSMBLab(t, newServer(t), adExtra, serverFlags...)
}

// startSMBLab starts the lab on a server prepared by newServer.
func startSMBLab(t *testing.T, s *server, adExtra map[string]any, serverFlags ...string) *smbLab {
	t.Helper()
	if err := addc.Check(); err != nil {
		t.Skipf("no Samba AD DC here: %v", err)
	}
	s.start(serverFlags...)
	c := s.client()
	// The network's bridge comes with its sandbox: an NFS volume brings it up, and
	// the DC joins the bridge before any SMB pool exists.
	nfsPool(t, c)
	s.openVolume(c, "first")
	return smbLabOn(t, s, c, adExtra, 150)
}

// smbLabOn starts the lab on a running server s whose network's bridge is up,
// driven through c, with its client host at the hostN-th address.
func smbLabOn(t *testing.T, s *server, c *client.Client, adExtra map[string]any, hostN int) *smbLab {
	t.Helper()
	if err := addc.Check(); err != nil {
		t.Skipf("no Samba AD DC here: %v", err)
	}
	smbLabSeq++
	name := fmt.Sprintf("sl%04d%d", os.Getpid()%10000, smbLabSeq) // unique on the host: another test process may run labs too
	dc := addc.StartT(t, addc.Options{Name: name, Dir: t.TempDir(), Bridge: s.bridge, Addr: s.addrN(200) + "/24"})
	l := &smbLab{t: t, s: s, c: c, dc: dc, realm: strings.ToLower(dc.Realm), ad: strings.TrimPrefix(loc, "/v1/") + "/activeDirectories/ad1",
		dcVeth: "v" + name + "-dc"}
	if hold := os.Getenv("BASIN_E2E_HOLD"); hold != "" {
		// Debugging: a failed test waits (at most 10 minutes) for the file
		// named by BASIN_E2E_HOLD to be removed before it tears down.
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			os.WriteFile(hold, []byte(s.dataDir+"\n"+"(client host not made yet)"+"\n"), 0o644)
			for end := time.Now().Add(10 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
				if _, err := os.Stat(hold); err != nil {
					return
				}
			}
		})
	}
	// Registered before the pool's join, which starts the instance's daemons.
	t.Cleanup(func() {
		if t.Failed() {
			l.logSambaTails()
		}
	})
	body := map[string]any{"domain": l.realm, "dns": dc.Addr, "netBiosPrefix": "BASIN", "organizationalUnit": dc.OU,
		"username": dc.Delegated.Name, "password": dc.Delegated.Password}
	for k, v := range adExtra {
		body[k] = v
	}
	mutate(t, c, "POST", loc+"/activeDirectories?activeDirectoryId=ad1", body)
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=smb", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 2048,
		"network": "projects/p1/global/networks/default", "activeDirectory": l.ad})
	l.h = s.host(hostN)
	return l
}

// logSambaTails logs the end of each Samba log of the lab's instances (smbd's,
// winbindd's and its children's): what a failed logon or a hang left there.
func (l *smbLab) logSambaTails() {
	var files []string
	filepath.WalkDir(filepath.Join(l.s.dataDir, "sandboxes"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasPrefix(d.Name(), "log.") || strings.HasSuffix(d.Name(), ".out")) {
			files = append(files, p)
		}
		return nil
	})
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		l.t.Logf("%s (tail):\n%s", f, b)
	}
}

// restart stops Basin cleanly and starts it again. A clean stop deletes the
// network's bridge and the start makes it anew, without the DC's and the client
// host's ports: they are plugged back in as soon as the bridge is there, while
// Basin gets ready (which must not wait on the domain).
func (l *smbLab) restart() {
	l.t.Helper()
	l.s.stop(syscall.SIGTERM)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := os.Stat("/sys/class/net/" + l.s.bridge); err == nil {
				exec.Command("ip", "link", "set", l.dcVeth, "master", l.s.bridge, "up").Run()
				l.h.Attach(l.s.bridge)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	l.s.start()
	close(stop)
	<-done
}

// volume creates an SMB volume id with share name id in pool "smb"; extra adds or
// replaces body fields (smbSettings, unixPermissions…).
func (l *smbLab) volume(id string, extra map[string]any) smbShare {
	l.t.Helper()
	body := map[string]any{"shareName": id, "storagePool": "smb", "capacityGib": 100, "protocols": []string{"SMB"}}
	for k, v := range extra {
		body[k] = v
	}
	mutate(l.t, l.c, "POST", loc+"/volumes?volumeId="+id, body)
	return l.share(id)
}

// share reads volume id's SMB mount option (project p1, NetBIOS prefix BASIN).
func (l *smbLab) share(id string) smbShare {
	l.t.Helper()
	return l.shareIn("p1", "basin", id)
}

// shareIn reads the SMB mount option of volume id in project, whose policy's
// NetBIOS prefix is prefix (lower case).
func (l *smbLab) shareIn(project, prefix, id string) smbShare {
	l.t.Helper()
	var v client.Object
	if err := l.c.Do(context.Background(), "GET", "/v1/projects/"+project+"/locations/us-east4/volumes/"+id, nil, nil, &v); err != nil {
		l.t.Fatal(err)
	}
	var mo map[string]any
	mos, _ := v["mountOptions"].([]any)
	for _, m := range mos {
		if m, _ := m.(map[string]any); m != nil && m["protocol"] == "SMB" {
			if mo != nil {
				l.t.Fatalf("volume %s: mountOptions %v: two SMB entries", id, mos)
			}
			mo = m
		}
	}
	if mo == nil {
		l.t.Fatalf("volume %s: mountOptions %v: no SMB entry", id, v["mountOptions"])
	}
	unc, _ := mo["exportFull"].(string)
	ep, err := netip.ParseAddr(fmt.Sprint(mo["ipAddress"]))
	share, _ := v["shareName"].(string)
	m := regexp.MustCompile(`^\\\\((` + regexp.QuoteMeta(prefix) + `-[0-9a-f]{4})\.` + regexp.QuoteMeta(l.realm) + `)\\` + regexp.QuoteMeta(share) + `$`).FindStringSubmatch(unc)
	if m == nil || err != nil {
		l.t.Fatalf("volume %s: mount option %v: want \\\\%s-xxxx.%s\\%s and the endpoint", id, mo, prefix, l.realm, share)
	}
	return smbShare{ID: id, Share: share, UNC: unc, Server: m[1], Machine: strings.ToUpper(m[2]), Endpoint: ep}
}

// user returns the DC's user by name (alice, bob, or the delegated user).
func (l *smbLab) user(name string) addc.User {
	for _, u := range append(l.dc.Users, l.dc.Delegated) {
		if u.Name == name {
			return u
		}
	}
	l.t.Fatalf("no user %s in the DC fixture", name)
	return addc.User{}
}

// smbclient runs smbclient on the client host against the share as user (NTLM,
// by address) with args (e.g. "-m", "SMB3", "-c", "ls").
func (l *smbLab) smbclient(ctx context.Context, sh smbShare, u addc.User, args ...string) (string, error) {
	argv := append([]string{"//" + sh.Endpoint.String() + "/" + sh.Share, "-U", l.dc.Domain + `\` + u.Name + "%" + u.Password}, args...)
	return l.h.Run(ctx, "smbclient", argv...)
}

// smbclientKrb5 runs smbclient with Kerberos only, naming the server by its DNS
// name (the ticket is for cifs/<name>) and connecting to the endpoint.
func (l *smbLab) smbclientKrb5(ctx context.Context, sh smbShare, u addc.User, args ...string) (string, error) {
	argv := append([]string{"//" + sh.Server + "/" + sh.Share, "-I", sh.Endpoint.String(),
		"--use-kerberos=required", "-U", u.Name + "@" + l.dc.Realm + "%" + u.Password}, args...)
	cmd := l.h.Command(ctx, "smbclient", argv...)
	cmd.Env = append(os.Environ(), "KRB5_CONFIG="+l.dc.Krb5Conf, "KRB5CCNAME=MEMORY:e2e")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// dialNTLM opens a go-smb2 session from the client host as u with NTLM.
func (l *smbLab) dialNTLM(ctx context.Context, sh smbShare, u addc.User) (*smb2.Session, error) {
	d := &smb2.Dialer{Initiator: &smb2.NTLMInitiator{User: u.Name, Password: u.Password, Domain: l.dc.Domain}}
	return l.dial(ctx, sh, d)
}

// dialKrb5 opens a go-smb2 session from the client host as u with Kerberos
// (gokrb5 against the DC's KDC, a ticket for cifs/<server name>).
func (l *smbLab) dialKrb5(ctx context.Context, sh smbShare, u addc.User) (*smb2.Session, error) {
	var sess *smb2.Session
	// The KDC is reached from the client host: logon and the service ticket (during
	// session setup) both open their sockets inside it.
	err := l.h.Within(func() error {
		cl, err := l.dc.Login(u)
		if err != nil {
			return err
		}
		d := &smb2.Dialer{Initiator: &smb2.Krb5Initiator{Client: cl, TargetSPN: "cifs/" + sh.Server}}
		sess, err = l.dialIn(ctx, sh, d)
		return err
	})
	return sess, err
}

func (l *smbLab) dial(ctx context.Context, sh smbShare, d *smb2.Dialer) (*smb2.Session, error) {
	var sess *smb2.Session
	err := l.h.Within(func() (err error) {
		sess, err = l.dialIn(ctx, sh, d)
		return err
	})
	return sess, err
}

// dialIn dials on the calling thread (inside the client host).
func (l *smbLab) dialIn(ctx context.Context, sh smbShare, d *smb2.Dialer) (*smb2.Session, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(sh.Endpoint.String(), "445"))
	if err != nil {
		return nil, err
	}
	sess, err := d.DialConn(ctx, conn, net.JoinHostPort(sh.Endpoint.String(), "445"))
	if err != nil {
		conn.Close()
		return nil, err
	}
	return sess, nil
}
