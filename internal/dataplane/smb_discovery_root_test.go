package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/smb"
	"github.com/basin-nas/basin/test/addc"
)

// TestSMBDomainDiscoveryRoot, against a real AD DC (subnet 10.99.76.0/24, bridge
// bsd0): the DCs an instance talks to come from the policy's site (a site whose
// only DC cannot be reached fails, a site without DCs falls back to the domain's);
// ValidateDomain names what a join would trip on (password, rights on the OU, the
// OU, an unreachable DNS server) without joining; a join records its DCs and pins
// them; a changed policy reaches the running daemons without a restart.
func TestSMBDomainDiscoveryRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Samba)")
	}
	if err := (Ganesha{}).Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	for _, b := range []string{"smbd", "winbindd", "net", "smbcontrol", dcerpcdBinary} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs Samba: %v", err)
		}
	}
	ctx := context.Background()
	const bridge = "bsd0"
	rootBridge(t, bridge, "10.99.76.1/24")
	dc := addc.StartT(t, addc.Options{Name: "bsd", Dir: t.TempDir(), Bridge: bridge, Addr: "10.99.76.5/24", Gateway: "10.99.76.1"})
	admin := addc.User{Name: dc.AdminUser, Password: dc.AdminPassword}
	// Site "Gone": its only DC's name resolves to an address nobody answers on.
	for _, r := range [][]string{
		{dc.DNSDomain, "dcgone", "A", "10.99.76.250"},
		{"_msdcs." + dc.DNSDomain, "_ldap._tcp.Gone._sites.dc", "SRV", "dcgone." + dc.DNSDomain + " 389 0 100"},
	} {
		if out, err := dc.ExecAs(ctx, admin, append([]string{"samba-tool", "dns", "add", "127.0.0.1"}, r...)...); err != nil {
			t.Fatalf("dns add %v: %v %s", r, err, out)
		}
	}

	n := Network{Name: "bsd", Bridge: bridge, Prefix: netip.MustParsePrefix("10.99.76.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.76.10"), LastEndpoint: netip.MustParseAddr("10.99.76.127")}
	dataDir, _ := sharedMounts(t, ctx)
	m := New(Options{DataDir: dataDir, Networks: []Network{n}, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})

	ou, err := smb.OUPath(dc.OU, dc.Realm)
	if err != nil {
		t.Fatal(err)
	}
	dcAddr := netip.MustParseAddr(dc.Addr)
	base := SMBMembership{AD: "projects/p1/locations/l/activeDirectories/ad1", Realm: dc.Realm, DNS: []netip.Addr{dcAddr}, OUPath: ou}
	cred := SMBCredentials{Username: dc.Delegated.Name, Password: []byte(dc.Delegated.Password)}
	alice := dc.Users[0]

	for _, tc := range []struct {
		name string
		mod  func(*SMBMembership, *SMBCredentials)
		want error // nil: valid
	}{
		{"as the delegated user", nil, nil},
		{"site with a DC", func(mb *SMBMembership, _ *SMBCredentials) { mb.Site = dc.Site }, nil},
		{"site without DCs falls back", func(mb *SMBMembership, _ *SMBCredentials) { mb.Site = "NoSuchSite" }, nil},
		{"site whose DC is gone", func(mb *SMBMembership, _ *SMBCredentials) { mb.Site = "Gone" }, smb.ErrDCUnreachable},
		{"DNS server gone", func(mb *SMBMembership, _ *SMBCredentials) { mb.DNS = []netip.Addr{netip.MustParseAddr("10.99.76.251")} }, smb.ErrDCUnreachable},
		{"wrong password", func(_ *SMBMembership, c *SMBCredentials) { c.Password = []byte("Wrong-passw0rd") }, smb.ErrBadCredentials},
		{"user without rights on the OU", func(_ *SMBMembership, c *SMBCredentials) {
			*c = SMBCredentials{Username: alice.Name, Password: []byte(alice.Password)}
		}, smb.ErrInsufficientRights},
		{"the default container needs no rights", func(mb *SMBMembership, c *SMBCredentials) {
			mb.OUPath = ""
			*c = SMBCredentials{Username: alice.Name, Password: []byte(alice.Password)}
		}, nil},
		{"missing OU", func(mb *SMBMembership, _ *SMBCredentials) { mb.OUPath = "Basin/Nowhere" }, smb.ErrOUNotFound},
	} {
		t.Run("validate "+tc.name, func(t *testing.T) {
			mb, c := base, cred
			if tc.mod != nil {
				tc.mod(&mb, &c)
			}
			err := m.ValidateDomain(ctx, "bsd", mb, c)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("ValidateDomain: %v, want %v", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), string(c.Password)) {
				t.Fatal("the error repeats the password")
			}
		})
	}
	// Nothing joined, nothing left behind.
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "sandboxes", "bsd", "smb")); len(ents) != 0 {
		t.Fatalf("instance dirs after validations: %v", ents)
	}
	for _, c := range []string{"BSD-CHECK", "BASIN-CHECK"} {
		if _, ok, _ := dc.ComputerExists(ctx, c); ok {
			t.Fatalf("a validation created computer %s", c)
		}
	}

	// A join in site Branch records the site's DCs and pins them.
	mb := base
	mb.MachineName, mb.Site = "BSD-1A2B", dc.Site
	if err := m.JoinDomain(ctx, "bsd", mb, cred); err != nil {
		t.Fatal(err)
	}
	rec, _ := m.SMBJoined("bsd", mb.AD)
	if !slices.Equal(rec.DCs, []string{dc.FQDN}) {
		t.Fatalf("recorded DCs %v, want [%s]", rec.DCs, dc.FQDN)
	}
	inst := m.instanceDir("bsd", smbInstanceID(mb.AD))
	conf := readFile(t, filepath.Join(inst, "smb.conf"))
	if !strings.Contains(conf, "\tpassword server = "+dc.FQDN+"\n") || !strings.Contains(readFile(t, filepath.Join(inst, "krb5.conf")), "kdc = "+dc.FQDN) {
		t.Fatalf("the site's DC is not pinned:\n%s", conf)
	}
	pids := map[string]int{}
	for _, d := range smbDaemons {
		pids[d] = m.SMBPID("bsd", mb.AD, d)
	}

	// The policy changes (AES only, site): the same daemons take it.
	enctypes := func() string {
		t.Helper()
		out, err := dc.Exec(ctx, "ldbsearch", "-H", filepath.Join(dc.Dir, "state", "private", "sam.ldb"), "-b", dc.BaseDN,
			"(sAMAccountName="+mb.MachineName+"$)", "msDS-SupportedEncryptionTypes")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "msDS-SupportedEncryptionTypes: "); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if got := enctypes(); got == "24" {
		t.Fatalf("enctypes %s before AES was asked for", got)
	}
	mb.AESOnly, mb.Site = true, "NoSuchSite"
	if err := m.JoinDomain(ctx, "bsd", mb, cred); err != nil {
		t.Fatal(err)
	}
	if got := enctypes(); got != "24" {
		t.Fatalf("machine account enctypes %q after aesEncryption, want 24 (AES only)", got)
	}
	if conf := readFile(t, filepath.Join(inst, "smb.conf")); !strings.Contains(conf, "\tkerberos encryption types = strong\n") {
		t.Fatalf("smb.conf not re-rendered:\n%s", conf)
	}
	for _, d := range smbDaemons {
		if pid := m.SMBPID("bsd", mb.AD, d); pid != pids[d] || pid == 0 {
			t.Errorf("%s: pid %d, was %d: restarted instead of reconfigured", d, pid, pids[d])
		}
	}
	// The running smbd took the new configuration.
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(m.SMBPID("bsd", mb.AD, "smbd")), "-m", "-n", "--", "smbcontrol", "-s",
		filepath.Join(inst, "smb.conf"), "smbd", "ping").CombinedOutput()
	if err != nil {
		t.Fatalf("smbd does not answer after the reload: %v %s", err, out)
	}
	if err := m.LeaveDomain(ctx, "bsd", mb.AD, cred); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
