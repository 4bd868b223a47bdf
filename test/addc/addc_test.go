package addc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestParentDN(t *testing.T) {
	for _, tc := range []struct{ name, dn, want string }{
		{"plain", "CN=BADTEST1,OU=Basin,DC=basin,DC=test", "OU=Basin,DC=basin,DC=test"},
		{"escaped comma", `CN=a\,b,OU=Basin,DC=basin,DC=test`, "OU=Basin,DC=basin,DC=test"},
		{"one rdn", "DC=test", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parentDN(tc.dn); got != tc.want {
				t.Errorf("parentDN(%q) = %q, want %q", tc.dn, got, tc.want)
			}
		})
	}
}

func TestParseDN(t *testing.T) {
	out := "# record 1\ndn: CN=X,OU=Basin,DC=basin,DC=test\n\n# returned 1 records\n"
	if got := parseDN(out); got != "CN=X,OU=Basin,DC=basin,DC=test" {
		t.Errorf("parseDN = %q", got)
	}
	if got := parseDN("# returned 0 records\n"); got != "" {
		t.Errorf("parseDN of no record = %q", got)
	}
}

// Host files the DC must not touch (and below, directories it must not add to).
var hostFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/samba/smb.conf", "/etc/krb5.conf"}

func hashHostFiles() map[string][32]byte {
	m := map[string][32]byte{}
	for _, f := range hostFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			b = []byte("missing")
		}
		m[f] = sha256.Sum256(b)
	}
	// The host's Samba state and log directories: what files they hold.
	for _, dir := range []string{"/var/lib/samba", "/var/log/samba"} {
		var names []string
		filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error { //nolint:errcheck // missing is a state too
			names = append(names, p)
			return nil
		})
		m[dir] = sha256.Sum256([]byte(strings.Join(names, "\n")))
	}
	return m
}

const bridge = "bad0"

// makeBridge makes the test's bridge with the host address 10.99.70.1/24.
func makeBridge(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := Check(); err != nil {
		t.Skip(err)
	}
	exec.Command("ip", "link", "del", bridge).Run() //nolint:errcheck // a leftover of a killed run
	for _, argv := range [][]string{
		{"ip", "link", "add", bridge, "type", "bridge"},
		{"ip", "addr", "add", "10.99.70.1/24", "dev", bridge},
		{"ip", "link", "set", bridge, "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			t.Errorf("delete bridge: %v %s", err, out)
		}
	})
}

// hostRun runs a command in the host namespace with password on PASSWD_FD.
func hostRun(ctx context.Context, password string, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	go func() { w.WriteString(password + "\n"); w.Close() }() //nolint:errcheck
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(os.Environ(), "PASSWD_FD=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func srv(t *testing.T, name string) ([]*dns.SRV, int) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeSRV)
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, "10.99.70.10:53")
	if err != nil {
		t.Fatalf("SRV %s: %v", name, err)
	}
	var out []*dns.SRV
	for _, rr := range r.Answer {
		if s, ok := rr.(*dns.SRV); ok {
			out = append(out, s)
		}
	}
	return out, r.Rcode
}

// A start that fails half-way (no such bridge, after the namespace and veth were
// made) leaves nothing behind.
func TestStartFailsCleanly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := Check(); err != nil {
		t.Skip(err)
	}
	_, err := Start(context.Background(), Options{Name: "badx", Dir: t.TempDir(), Bridge: "badnone0", Addr: "10.99.71.10/24"})
	if err == nil {
		t.Fatal("Start on a missing bridge succeeded")
	}
	if _, serr := os.Stat("/run/netns/badx-dc"); serr == nil {
		t.Errorf("netns badx-dc left after %v", err)
	}
	if _, ierr := net.InterfaceByName("vbadx-dc"); ierr == nil {
		t.Errorf("veth vbadx-dc left after %v", err)
	}
}

func TestDC(t *testing.T) {
	makeBridge(t)
	before := hashHostFiles()
	dir := t.TempDir()
	d := StartT(t, Options{Name: "bad", Dir: dir, Bridge: bridge, Addr: "10.99.70.10/24", Gateway: "10.99.70.1"})
	t.Logf("startup %.1f s", d.Startup.Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("dns", func(t *testing.T) {
		for _, tc := range []struct{ name, port string }{
			{"_ldap._tcp.dc._msdcs.basin.test", "389"},
			{"_kerberos._tcp.dc._msdcs.basin.test", "88"},
			{"_ldap._tcp.Branch._sites.dc._msdcs.basin.test", "389"},
			{"_kerberos._tcp.Branch._sites.dc._msdcs.basin.test", "88"},
			{"_ldap._tcp.Branch._sites.basin.test", "389"},
			{"_ldap._tcp.Default-First-Site-Name._sites.dc._msdcs.basin.test", "389"},
		} {
			got, rcode := srv(t, tc.name)
			if len(got) != 1 || got[0].Target != "dc1.basin.test." || strconv.Itoa(int(got[0].Port)) != tc.port {
				t.Errorf("SRV %s = %v (rcode %s), want dc1.basin.test.:%s", tc.name, got, dns.RcodeToString[rcode], tc.port)
			}
		}
		// A site that was not made has no records: the Branch answers are the fixture's.
		if got, rcode := srv(t, "_ldap._tcp.NoSuchSite._sites.dc._msdcs.basin.test"); len(got) != 0 || rcode != dns.RcodeNameError {
			t.Errorf("SRV of an unknown site = %v, rcode %s; want NXDOMAIN", got, dns.RcodeToString[rcode])
		}
		addrs, err := d.LookupA(ctx, d.FQDN)
		if err != nil || len(addrs) != 1 || addrs[0] != "10.99.70.10" {
			t.Errorf("LookupA(%s) = %v, %v", d.FQDN, addrs, err)
		}
	})

	// A second DC is a copy of the template the first one's start made: its DNS
	// names its own address, never the first's nor the template's, and its site
	// has its own subnet.
	t.Run("copy of the template", func(t *testing.T) {
		d2 := StartT(t, Options{Name: "bad2", Dir: t.TempDir(), Bridge: bridge, Addr: "10.99.70.20/24",
			Gateway: "10.99.70.1", SiteSubnet: "10.99.72.0/24"})
		if d2.MadeTemplate {
			t.Errorf("the second DC provisioned a template of its own")
		}
		for _, name := range []string{d2.FQDN, d2.DNSDomain, "gc._msdcs." + d2.DNSDomain} {
			addrs, err := d2.LookupA(ctx, name)
			if err != nil || len(addrs) != 1 || addrs[0] != "10.99.70.20" {
				t.Errorf("second DC: A %s = %v, %v; want [10.99.70.20]", name, addrs, err)
			}
			addrs, err = d.LookupA(ctx, name)
			if err != nil || len(addrs) != 1 || addrs[0] != "10.99.70.10" {
				t.Errorf("first DC: A %s = %v, %v; want [10.99.70.10]", name, addrs, err)
			}
		}
		subnets := func(dc *DC) string {
			out, err := dc.Exec(ctx, "ldbsearch", "-H", dc.path("state", "private", "sam.ldb"),
				"-b", "CN=Subnets,CN=Sites,CN=Configuration,"+dc.BaseDN, "(objectClass=subnet)", "cn", "siteObject")
			if err != nil {
				t.Fatalf("subnets: %v", err)
			}
			var got []string
			for _, l := range strings.Split(string(out), "\n") {
				if v, ok := strings.CutPrefix(l, "cn: "); ok {
					got = append(got, v)
				} else if v, ok := strings.CutPrefix(l, "siteObject: "); ok {
					got = append(got, strings.SplitN(v, ",", 2)[0])
				}
			}
			return strings.Join(got, " ")
		}
		if got := subnets(d2); got != "10.99.72.0/24 CN=Branch" {
			t.Errorf("second DC's subnets: %q", got)
		}
		if got := subnets(d); got != "10.99.70.0/24 CN=Branch" {
			t.Errorf("first DC's subnets: %q", got)
		}
		for _, f := range []string{d2.ConfPath, d2.path("etc", "samba", "smb.conf")} {
			b, err := os.ReadFile(f)
			if err != nil || strings.Contains(string(b), "basin-addc-template-") || !strings.Contains(string(b), d2.Dir+"/state/private") {
				t.Errorf("%s names the template's paths, or not the DC's (%v):\n%s", f, err, b)
			}
		}
		templates.Lock()
		var dirs []string
		for _, dir := range templates.dirs {
			dirs = append(dirs, dir)
		}
		templates.Unlock()
		if len(dirs) != 1 {
			t.Fatalf("templates: %v", dirs)
		}
		RemoveTemplates()
		if _, err := os.Stat(dirs[0]); err == nil {
			t.Errorf("RemoveTemplates left %s", dirs[0])
		}
	})

	t.Run("ldap bind as delegated", func(t *testing.T) {
		empty := d.path("etc", "empty.conf")
		search := func(pw string) (string, error) {
			return hostRun(ctx, pw, "ldbsearch", "--configfile="+empty, "-H", "ldap://10.99.70.10",
				"--use-kerberos=off", "-U", d.Domain+`\`+d.Delegated.Name, "-b", d.BaseDN,
				"(sAMAccountName="+d.Users[0].Name+")", "memberOf")
		}
		out, err := search(d.Delegated.Password)
		if err != nil || !strings.Contains(out, "dn: CN=alice,CN=Users,DC=basin,DC=test") ||
			!strings.Contains(out, "memberOf: CN=shareusers,CN=Users,DC=basin,DC=test") {
			t.Errorf("ldbsearch as %s: %v\n%s", d.Delegated.Name, err, out)
		}
		if out, err := search("wrong-" + d.Delegated.Password); err == nil {
			t.Errorf("ldbsearch with a wrong password succeeded:\n%s", out)
		}
		if out, err := search(d.Delegated.Password); strings.Contains(out, d.Delegated.Password) {
			t.Errorf("password in output (%v)", err)
		}
	})

	t.Run("delegated rights", func(t *testing.T) {
		del := User{d.Domain + `\` + d.Delegated.Name, d.Delegated.Password}
		ldap := "ldap://" + d.FQDN
		const name = "BADTEST1"
		if out, err := d.ExecAs(ctx, del, "samba-tool", "computer", "create", name, "--computerou=OU=Basin", "-H", ldap); err != nil {
			t.Fatalf("create computer in OU: %v %s", err, out)
		}
		ou, ok, err := d.ComputerExists(ctx, name)
		if err != nil || !ok || ou != d.OU {
			t.Fatalf("ComputerExists(%s) = %q, %v, %v; want %q", name, ou, ok, err, d.OU)
		}
		if out, err := d.ExecAs(ctx, del, "samba-tool", "computer", "delete", name, "-H", ldap); err != nil {
			t.Fatalf("delete computer in OU: %v %s", err, out)
		}
		if _, ok, err := d.ComputerExists(ctx, name); ok || err != nil {
			t.Errorf("computer %s still there after delete (%v)", name, err)
		}
		// Not outside the OU.
		if out, err := d.ExecAs(ctx, del, "samba-tool", "computer", "create", "BADTEST2", "--computerou=CN=Computers", "-H", ldap); err == nil {
			t.Errorf("delegated user created a computer in CN=Computers: %s", out)
		}
		if _, ok, _ := d.ComputerExists(ctx, "BADTEST2"); ok {
			t.Errorf("BADTEST2 exists outside the OU")
		}
		// Nor another class in the OU.
		d.ExecAs(ctx, del, "samba-tool", "group", "add", "badgroup", "--groupou=OU=Basin", "-H", ldap) //nolint:errcheck // the search below decides
		out, err := d.Exec(ctx, "ldbsearch", "-H", d.path("state", "private", "sam.ldb"), "-b", d.BaseDN, "(sAMAccountName=badgroup)", "dn")
		if err != nil || strings.Contains(string(out), "dn: ") {
			t.Errorf("delegated user created a group in the OU (%v): %s", err, out)
		}
		// The administrator can create outside it: the refusals above are about rights.
		admin := User{d.AdminUser, d.AdminPassword}
		if out, err := d.ExecAs(ctx, admin, "samba-tool", "computer", "create", "BADTEST3", "--computerou=CN=Computers", "-H", ldap); err != nil {
			t.Errorf("admin create in CN=Computers: %v %s", err, out)
		} else if ou, ok, _ := d.ComputerExists(ctx, "BADTEST3"); !ok || ou != "CN=Computers,"+d.BaseDN {
			t.Errorf("BADTEST3 in %q (%v)", ou, ok)
		}
	})

	// What a Basin member does with the delegated user: net ads join into the OU and
	// net ads leave. It runs in the DC's namespaces (its resolver and krb5.conf)
	// with a member smb.conf and state of its own.
	t.Run("join and leave as delegated", func(t *testing.T) {
		m := d.path("member")
		for _, sub := range []string{"private", "lock", "state", "cache", "run"} {
			if err := os.MkdirAll(m+"/"+sub, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		conf := m + "/smb.conf"
		err := os.WriteFile(conf, []byte(`[global]
netbios name = BADMEMBER
workgroup = BASIN
realm = BASIN.TEST
security = ads
server role = member server
private dir = `+m+`/private
lock directory = `+m+`/lock
state directory = `+m+`/state
cache directory = `+m+`/cache
pid directory = `+m+`/run
ncalrpc dir = `+m+`/run/ncalrpc
log file = `+m+`/log.%m
`), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		del := User{d.Domain + `\` + d.Delegated.Name, d.Delegated.Password}
		if out, err := d.ExecAs(ctx, del, "net", "ads", "join", "-s", conf, "createcomputer=Basin", "--no-dns-updates"); err != nil {
			t.Fatalf("net ads join: %v %s", err, out)
		}
		if ou, ok, err := d.ComputerExists(ctx, "BADMEMBER"); err != nil || !ok || ou != d.OU {
			t.Fatalf("BADMEMBER after join: %q %v %v", ou, ok, err)
		}
		if out, err := d.Exec(ctx, "net", "ads", "testjoin", "-s", conf); err != nil {
			t.Errorf("net ads testjoin: %v %s", err, out)
		}
		if out, err := d.ExecAs(ctx, del, "net", "ads", "leave", "-s", conf); err != nil {
			t.Fatalf("net ads leave: %v %s", err, out)
		}
		if _, ok, err := d.ComputerExists(ctx, "BADMEMBER"); ok || err != nil {
			t.Errorf("BADMEMBER still there after leave (%v)", err)
		}
	})

	t.Run("close leaves nothing", func(t *testing.T) {
		pids := PidsInNetns("/run/netns/" + d.Netns)
		if len(pids) < 3 {
			t.Fatalf("only %d processes in the DC's netns before Close", len(pids))
		}
		if err := d.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		for _, pid := range pids {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				t.Errorf("process %d still exists", pid)
			}
		}
		if _, err := os.Stat("/run/netns/" + d.Netns); err == nil {
			t.Errorf("netns %s left", d.Netns)
		}
		if _, err := net.InterfaceByName(d.veth); err == nil {
			t.Errorf("veth %s left", d.veth)
		}
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mi), dir) || strings.Contains(string(mi), d.Netns) {
			t.Errorf("mounts left:\n%s", mi)
		}
		// No password in the DC's logs.
		logs := 0
		filepath.WalkDir(d.path("logs"), func(p string, e fs.DirEntry, err error) error { //nolint:errcheck // walked for reading
			if err != nil || e.IsDir() {
				return nil
			}
			logs++
			b, _ := os.ReadFile(p)
			for _, pw := range []string{d.AdminPassword, d.Delegated.Password, d.Users[0].Password, d.Users[1].Password} {
				if bytes.Contains(b, []byte(pw)) {
					t.Errorf("a password is in %s", p)
				}
			}
			return nil
		})
		if logs < 1 {
			t.Errorf("%d log files: expected samba.out at least", logs)
		}
		after := hashHostFiles()
		for f := range before {
			if before[f] != after[f] {
				t.Errorf("host file %s changed", f)
			}
		}
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveTemplates()
	os.Exit(code)
}

// FuzzParentDN: the parent is always a proper suffix of the DN, after a comma.
func FuzzParentDN(f *testing.F) {
	f.Add("CN=BADTEST1,OU=Basin,DC=basin,DC=test")
	f.Add(`CN=a\,b,DC=x`)
	f.Add(`CN=a\`)
	f.Fuzz(func(t *testing.T, dn string) {
		p := parentDN(dn)
		if p == "" {
			return
		}
		if !strings.HasSuffix(dn, ","+p) {
			t.Fatalf("parentDN(%q) = %q: not a suffix after a comma", dn, p)
		}
		_ = parseDN("dn: " + dn + "\n")
	})
}
