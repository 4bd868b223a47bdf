// Package addc stands up a real Samba 4.17 Active Directory domain controller for
// root tests: one DC in a network namespace of its own, attached by a veth to a
// bridge the caller owns, with every file of it under one directory, and tears it
// down completely. It follows what a hands-on trial of Samba 4.17 as a DC found
// (docs/architecture.md, "A real AD DC in tests, not a fake").
//
// Start provisions the domain and its fixture objects in one Python process (the
// passwords travel on stdin, never in argv) — once per process, as a template each
// DC copies and readdresses — starts `samba`, and returns once LDAP
// accepts connections, the DNS answers _ldap._tcp.dc._msdcs.<realm> and a Kerberos
// logon succeeds. The fixture objects are an OU for computers with a delegated user
// who may create and delete computer objects in it and nothing else, the users alice
// (in group shareusers) and bob, and a second site "Branch" with a subnet and
// hand-made SRV records pointing at this DC.
//
// Nothing of the host's Samba or resolver configuration is used or changed: the DC's
// processes run in a private mount namespace (the holder pattern) with a tmpfs /run,
// its own /run/samba, and its own files bound over /etc/resolv.conf, /etc/hosts,
// /etc/samba, /var/lib/samba and /var/log/samba. Kerberos clients get KRB5_CONFIG.
//
// Test packages (test/e2e and other root tests) import it; nothing under internal/ may.
package addc

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/basin-nas/basin/internal/runner"
)

// Options says where and how to run the DC. Name, Dir, Bridge and Addr are required.
type Options struct {
	// Name prefixes the DC's network namespace ("<Name>-dc") and host veth
	// ("v<Name>-dc"); at most 8 characters.
	Name string
	// Dir is the state directory (t.TempDir() in tests); everything of the DC lives
	// under it.
	Dir string
	// Bridge is an existing Linux bridge in the host namespace the DC's veth joins.
	Bridge string
	// Addr is the DC's address with prefix, e.g. "10.99.70.10/24".
	Addr string
	// Gateway is an optional default route inside the DC's namespace (the bridge's
	// host address).
	Gateway string
	// Realm is the Kerberos realm; default "BASIN.TEST". Its lower case is the DNS
	// domain.
	Realm string
	// Domain is the NetBIOS domain name; default "BASIN".
	Domain string
	// AdminPassword is Administrator's password; default DefaultAdminPassword.
	AdminPassword string
	// SiteSubnet is the subnet of the site "Branch"; default the network of Addr.
	SiteSubnet string
	// Timeout bounds each readiness wait; default 60 s.
	Timeout time.Duration
}

// Fixed test passwords (strong enough for the domain's password policy).
const (
	DefaultAdminPassword = "Basin-Adm1n!Test"
	delegatedPassword    = "Basin-J0in!Test"
)

// Names of the fixture's objects.
const (
	HostName      = "DC1"                                  // the DC's NetBIOS and host name; dc1.<dns domain>
	DelegatedName = "basinjoin"                            // the user with create/delete rights on computers in OU
	UsersGroup    = "shareusers"                           // alice is a member, bob is not
	SiteName      = "Branch"                               // the second site
	ouName        = "OU=Basin"                             // OU for computers, relative to the domain
	computerClass = "bf967a86-0de6-11d0-a285-00aa003049e2" // schemaIDGUID of class computer
)

// User is a domain user and its password.
type User struct{ Name, Password string }

// DC is a running domain controller.
type DC struct {
	Realm, Domain string
	Addr          string // without prefix
	Netns         string
	AdminUser     string // "Administrator"
	AdminPassword string
	// DNSDomain is the lower-case realm; BaseDN its DN ("DC=basin,DC=test").
	DNSDomain, BaseDN string
	// FQDN is the DC's host name in DNS, e.g. "dc1.basin.test".
	FQDN string
	// OU is the DN of the OU for computers, e.g. "OU=Basin,DC=basin,DC=test".
	OU string
	// Delegated may only create and delete computer objects in OU (and write them).
	Delegated User
	// Users are alice (in UsersGroup) and bob (not).
	Users []User
	// Groups are the fixture's groups: UsersGroup.
	Groups []string
	// Site is the second site ("Branch"); SiteSubnet is its subnet.
	Site, SiteSubnet string
	// ConfPath is the DC's smb.conf; Krb5Conf a krb5.conf for the realm (KRB5_CONFIG).
	ConfPath, Krb5Conf string
	// Dir is Options.Dir.
	Dir string
	// Startup is how long Start took; Provision the part of it that gave the
	// DC its domain (a copy of the template, and the template itself when
	// MadeTemplate).
	Startup, Provision time.Duration
	MadeTemplate       bool

	veth   string
	holder *exec.Cmd
	samba  *exec.Cmd
	dead   chan struct{} // closed when samba exits
	// holderDone is closed when the holder has exited and been reaped.
	holderDone chan struct{}
	closed     bool

	madeNetns, madeVeth bool
}

//go:embed driver.py
var driverPy string

// holderScript builds the DC's mount namespace: a tmpfs /run with the DC's own
// /run/samba (libwbclient's compiled-in socket directory), and the DC's files over
// the host's resolver, hosts and Samba directories. Targets missing on the host are
// skipped: there is nothing there to hide.
const holderScript = `set -eu
d="$1"
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/samba
mount --bind "$d/run" /run/samba
bindif() { if [ -e "$2" ]; then mount --bind "$1" "$2"; fi; }
bindif "$d/etc/resolv.conf" /etc/resolv.conf
bindif "$d/etc/hosts" /etc/hosts
bindif "$d/etc/samba" /etc/samba
bindif "$d/varlib" /var/lib/samba
bindif "$d/logs/var" /var/log/samba
echo ready
exec sleep infinity`

// Start provisions and starts a DC and waits until it is ready. On error nothing of
// it is left behind.
func Start(ctx context.Context, o Options) (_ *DC, err error) {
	begin := time.Now()
	d, prefix, err := newDC(o)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()
	if err := d.writeFiles(prefix); err != nil {
		return nil, err
	}
	if err := d.startNetwork(ctx, o, prefix); err != nil {
		return nil, err
	}
	p0 := time.Now()
	if err := d.provision(ctx); err != nil {
		return nil, err
	}
	d.Provision = time.Since(p0)
	if err := d.startSamba(); err != nil {
		return nil, err
	}
	if err := d.waitReady(ctx, timeout); err != nil {
		return nil, fmt.Errorf("dc not ready: %w\n%s", err, d.sambaLog())
	}
	// The second site's SRV records, by hand: only a DC's own site gets them by
	// itself.
	var cmds [][]string
	for _, r := range []struct{ zone, name, port string }{
		{"_msdcs." + d.DNSDomain, "_ldap._tcp." + d.Site + "._sites.dc", "389"},
		{"_msdcs." + d.DNSDomain, "_kerberos._tcp." + d.Site + "._sites.dc", "88"},
		{d.DNSDomain, "_ldap._tcp." + d.Site + "._sites", "389"},
		{d.DNSDomain, "_kerberos._tcp." + d.Site + "._sites", "88"},
	} {
		cmds = append(cmds, []string{"dns", "add", "127.0.0.1", r.zone, r.name, "SRV", d.FQDN + " " + r.port + " 0 100",
			"-U", d.AdminUser + "%" + d.AdminPassword, "-s", d.ConfPath})
	}
	if err := d.sambaTool(ctx, cmds); err != nil {
		return nil, fmt.Errorf("site dns records: %w", err)
	}
	d.Startup = time.Since(begin)
	return d, nil
}

// StartT starts a DC for a test and closes it at the test's end. It skips the test
// unless it runs as root with Samba's AD DC packages installed (scripts/setup.sh
// --test).
func StartT(t testing.TB, o Options) *DC {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("addc: needs root (network namespaces)")
	}
	if err := Check(); err != nil {
		t.Skip("addc: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("addc: %v", err)
	}
	made := ""
	if d.MadeTemplate {
		made = ", the template's included"
	}
	t.Logf("addc: %s (%s) up in %v (provision %v%s)", d.FQDN, d.Addr, d.Startup.Round(time.Millisecond),
		d.Provision.Round(time.Millisecond), made)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("addc: %s", d.sambaLog())
		}
		if err := d.Close(); err != nil {
			t.Errorf("addc: close: %v", err)
		}
	})
	return d
}

// Check reports whether what the DC needs is installed.
func Check() error {
	for _, bin := range []string{"samba", "samba-tool", "smbclient", "ldbsearch", "nsenter", "unshare", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed: run scripts/setup.sh --test", bin)
		}
	}
	for _, f := range []string{"/usr/share/samba/setup/ad-schema", "/usr/sbin/winbindd", "/usr/bin/python3"} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s missing (samba-ad-provision, winbind): run scripts/setup.sh --test", f)
		}
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

func newDC(o Options) (*DC, netip.Prefix, error) {
	if !nameRE.MatchString(o.Name) {
		return nil, netip.Prefix{}, fmt.Errorf("addc: name %q: want 1-8 lower-case letters and digits", o.Name)
	}
	if o.Dir == "" || o.Bridge == "" {
		return nil, netip.Prefix{}, errors.New("addc: Dir and Bridge are required")
	}
	prefix, err := netip.ParsePrefix(o.Addr)
	if err != nil || !prefix.Addr().Is4() {
		return nil, netip.Prefix{}, fmt.Errorf("addc: address %q: want an IPv4 address with prefix", o.Addr)
	}
	d := &DC{Realm: strings.ToUpper(o.Realm), Domain: strings.ToUpper(o.Domain), Addr: prefix.Addr().String(),
		Netns: o.Name + "-dc", veth: "v" + o.Name + "-dc", AdminUser: "Administrator", AdminPassword: o.AdminPassword,
		Site: SiteName, SiteSubnet: o.SiteSubnet, Dir: o.Dir, dead: make(chan struct{}), holderDone: make(chan struct{})}
	if d.Realm == "" {
		d.Realm = "BASIN.TEST"
	}
	if d.Domain == "" {
		d.Domain = "BASIN"
	}
	if d.AdminPassword == "" {
		d.AdminPassword = DefaultAdminPassword
	}
	if d.SiteSubnet == "" {
		d.SiteSubnet = prefix.Masked().String()
	}
	d.DNSDomain = strings.ToLower(d.Realm)
	d.BaseDN = "DC=" + strings.Join(strings.Split(d.DNSDomain, "."), ",DC=")
	d.FQDN = strings.ToLower(HostName) + "." + d.DNSDomain
	d.OU = ouName + "," + d.BaseDN
	d.Delegated = User{DelegatedName, delegatedPassword}
	d.Users = []User{{"alice", "Basin-Al1ce!Test"}, {"bob", "Basin-B0b!Test"}}
	d.Groups = []string{UsersGroup}
	d.ConfPath = filepath.Join(o.Dir, "state", "etc", "smb.conf")
	d.Krb5Conf = filepath.Join(o.Dir, "etc", "krb5.conf")
	return d, prefix, nil
}

func (d *DC) path(p ...string) string { return filepath.Join(append([]string{d.Dir}, p...)...) }

func (d *DC) writeFiles(prefix netip.Prefix) error {
	for _, p := range []string{"etc/samba", "state", "run", "logs/var", "varlib", "tls"} {
		if err := os.MkdirAll(d.path(p), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/resolv.conf": "nameserver " + d.Addr + "\nsearch " + d.DNSDomain + "\n",
		"etc/hosts":       "127.0.0.1 localhost\n" + d.Addr + " " + d.FQDN + " " + strings.ToLower(HostName) + "\n",
		"etc/empty.conf":  "",
		"etc/krb5.conf": fmt.Sprintf("[libdefaults]\n\tdefault_realm = %s\n\tdns_lookup_realm = false\n\tdns_lookup_kdc = false\n"+
			"[realms]\n\t%s = {\n\t\tkdc = %s\n\t\tadmin_server = %s\n\t}\n[domain_realm]\n\t.%s = %s\n\t%s = %s\n",
			d.Realm, d.Realm, d.Addr, d.Addr, d.DNSDomain, d.Realm, d.DNSDomain, d.Realm),
	}
	for name, content := range files {
		if err := os.WriteFile(d.path(name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (d *DC) startNetwork(ctx context.Context, o Options, prefix netip.Prefix) error {
	steps := [][]string{
		{"ip", "netns", "add", d.Netns},
		{"ip", "link", "add", d.veth, "type", "veth", "peer", "name", "eth0", "netns", d.Netns},
		{"ip", "link", "set", d.veth, "master", o.Bridge, "up"},
		{"ip", "-n", d.Netns, "addr", "add", prefix.String(), "dev", "eth0"},
		{"ip", "-n", d.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", d.Netns, "link", "set", "eth0", "up"},
	}
	if o.Gateway != "" {
		steps = append(steps, []string{"ip", "-n", d.Netns, "route", "add", "default", "via", o.Gateway, "dev", "eth0", "onlink"})
	}
	for i, argv := range steps {
		if _, err := (runner.Exec{}).Run(ctx, argv[0], argv[1:]...); err != nil {
			return fmt.Errorf("dc network: %w", err)
		}
		// Close removes only what this DC made.
		d.madeNetns = true
		d.madeVeth = i >= 1
	}
	cmd := exec.Command("ip", "netns", "exec", d.Netns, "unshare", "--mount", "--propagation", "slave", "--",
		"sh", "-c", holderScript, "holder", d.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dc holder: %w", err)
	}
	d.holder = cmd
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		cmd.Wait()         //nolint:errcheck // the error is in stderr
		d.holder = nil
		return fmt.Errorf("dc holder did not start: %s", strings.TrimSpace(stderr.String()))
	}
	go func() { cmd.Wait(); close(d.holderDone) }() //nolint:errcheck // it is killed in Close
	return nil
}

// provision gives the DC its domain: a copy of the provisioned template for its
// realm, domain and administrator password (made the first time one is asked for),
// with the template's address and directory replaced by the DC's own and the
// site's subnet added, in one Python process. A copy costs about half a second
// where provisioning costs five.
func (d *DC) provision(ctx context.Context) error {
	tpl, err := d.template(ctx)
	if err != nil {
		return err
	}
	for _, sub := range []string{"state", "tls"} {
		if _, err := (runner.Exec{}).Run(ctx, "cp", "-a", filepath.Join(tpl, sub)+"/.", d.path(sub)); err != nil {
			return fmt.Errorf("copy the template: %w", err)
		}
	}
	b, err := os.ReadFile(filepath.Join(tpl, "state", "etc", "smb.conf"))
	if err != nil {
		return err
	}
	conf := []byte(strings.ReplaceAll(string(b), tpl+"/", d.Dir+"/"))
	if err := os.WriteFile(d.ConfPath, conf, 0o644); err != nil {
		return err
	}
	// Tools inside the namespace that are not given -s read /etc/samba/smb.conf:
	// the DC's own.
	if err := os.WriteFile(d.path("etc", "samba", "smb.conf"), conf, 0o644); err != nil {
		return err
	}
	err = d.driver(ctx, map[string]any{
		"rewrite_a": map[string]string{"conf": d.ConfPath, "old": templateAddr, "new": d.Addr},
		"cmds":      [][]string{{"sites", "subnet", "create", d.SiteSubnet, d.Site, "-s", d.ConfPath}},
	})
	if err != nil {
		return fmt.Errorf("provision from the template: %w", err)
	}
	return nil
}

// templateAddr is the address a template is provisioned for: a documentation
// address (RFC 5737), never on any wire; every copy replaces it.
const templateAddr = "192.0.2.1"

// templates holds this process's provisioned templates, by realm, domain and
// administrator password. RemoveTemplates deletes them.
var templates = struct {
	sync.Mutex
	dirs map[string]string
}{dirs: map[string]string{}}

// template returns the directory of the template for d's domain, provisioning it
// first (in d's namespaces) when there is none. A template is laid out as a DC's
// directory: its smb.conf names paths under it, which a copy replaces.
func (d *DC) template(ctx context.Context) (string, error) {
	key := d.Realm + "\x00" + d.Domain + "\x00" + d.AdminPassword
	templates.Lock()
	defer templates.Unlock()
	if dir, ok := templates.dirs[key]; ok {
		if _, err := os.Stat(filepath.Join(dir, "state", "etc", "smb.conf")); err == nil {
			return dir, nil
		}
		delete(templates.dirs, key)
	}
	dir, err := os.MkdirTemp("", "basin-addc-template-")
	if err != nil {
		return "", err
	}
	if err := d.provisionTemplate(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("provision: %w", err)
	}
	templates.dirs[key] = dir
	d.MadeTemplate = true
	return dir, nil
}

// RemoveTemplates deletes the templates this process provisioned. Test packages
// that start DCs call it when their tests end (TestMain); a DC already started
// does not need its template.
func RemoveTemplates() {
	templates.Lock()
	defer templates.Unlock()
	for key, dir := range templates.dirs {
		os.RemoveAll(dir)
		delete(templates.dirs, key)
	}
}

// provisionTemplate makes the domain and the fixture objects, offline, in one
// Python process, for templateAddr and with every path under dir, then drops the
// DNS forwarder provision takes from the namespace's resolv.conf (the DC itself).
// winbindd's socket stays at /run/samba/winbindd, the path libwbclient has
// compiled in (the DC's smbd finds winbindd only there).
func (d *DC) provisionTemplate(ctx context.Context, dir string) error {
	at := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	for _, p := range []string{"etc", "state", "run", "logs", "tls"} {
		if err := os.MkdirAll(at(p), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(at("etc", "empty.conf"), nil, 0o644); err != nil {
		return err
	}
	conf := at("state", "etc", "smb.conf")
	opts := []string{
		"interfaces = lo eth0", "bind interfaces only = yes",
		"log file = " + at("logs", "log.%m"), "pid directory = " + at("run"),
		"ncalrpc dir = " + at("run", "ncalrpc"), "winbindd socket directory = /run/samba/winbindd",
		"ntp signd socket directory = " + at("run", "ntp_signd"),
	}
	// A small self-signed key: Samba's own first-start key generation (RSA 4096)
	// costs seconds of CPU. Without openssl, Samba generates one.
	if _, err := exec.LookPath("openssl"); err == nil {
		cmd := exec.CommandContext(ctx, "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
			"-subj", "/CN="+d.FQDN, "-keyout", at("tls", "key.pem"), "-out", at("tls", "cert.pem"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("tls key: %v: %s", err, out)
		}
		opts = append(opts, "tls keyfile = "+at("tls", "key.pem"), "tls certfile = "+at("tls", "cert.pem"),
			"tls cafile = ")
	}
	prov := []string{"domain", "provision", "-s", at("etc", "empty.conf"), "--targetdir=" + at("state"),
		"--realm=" + d.Realm, "--domain=" + d.Domain, "--server-role=dc", "--dns-backend=SAMBA_INTERNAL",
		"--adminpass=" + d.AdminPassword, "--host-name=" + HostName, "--host-ip=" + templateAddr, "--use-rfc2307"}
	for _, o := range opts {
		prov = append(prov, "--option="+o)
	}
	// The delegated user: create and delete computer objects in the OU (not other
	// classes), and everything on the computer objects under it, including Reset
	// Password (in CR) that a join needs.
	sddl := fmt.Sprintf("(OA;CI;CCDC;%[1]s;;@@SID:%[2]s@@)(OA;CIIO;RPWPCRLCLORCSDDTSW;;%[1]s;@@SID:%[2]s@@)",
		computerClass, d.Delegated.Name)
	cmds := [][]string{
		prov,
		{"ou", "create", d.OU, "-s", conf},
		{"user", "create", d.Delegated.Name, d.Delegated.Password, "-s", conf},
		{"group", "add", UsersGroup, "-s", conf},
		{"dsacl", "set", "--objectdn=" + d.OU, "--sddl=" + sddl, "-s", conf},
		{"sites", "create", d.Site, "-s", conf},
	}
	for _, u := range d.Users {
		cmds = append(cmds, []string{"user", "create", u.Name, u.Password, "-s", conf})
	}
	cmds = append(cmds, []string{"group", "addmembers", UsersGroup, d.Users[0].Name, "-s", conf})
	if err := d.driver(ctx, map[string]any{"cmds": cmds}); err != nil {
		return err
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "dns forwarder") {
			continue
		}
		out = append(out, l)
	}
	return os.WriteFile(conf, []byte(strings.Join(out, "\n")), 0o644)
}

// sambaTool runs samba-tool commands in one Python process inside the namespace;
// the commands (with their passwords) go on stdin.
func (d *DC) sambaTool(ctx context.Context, cmds [][]string) error {
	return d.driver(ctx, map[string]any{"cmds": cmds})
}

// driver runs driver.py inside the namespace with req on stdin.
func (d *DC) driver(ctx context.Context, req map[string]any) error {
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = d.run(ctx, bytes.NewReader(in), "", []string{"/usr/bin/python3", "-c", driverPy})
	return err
}

func (d *DC) startSamba() error {
	f, err := os.OpenFile(d.path("logs", "samba.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := d.command(context.Background(), "samba", "-s", d.ConfPath, "--foreground", "--no-process-group",
		"--debug-stdout", "-d1")
	cmd.Stdout, cmd.Stderr = f, f
	// samba's children go with it: the group is signalled in Close, and Pdeathsig
	// ends samba (and so its children) if the test process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start samba: %w", err)
	}
	d.samba = cmd
	go func() { cmd.Wait(); close(d.dead) }() //nolint:errcheck // the exit is in samba.out
	return nil
}

func (d *DC) sambaLog() string {
	b, _ := os.ReadFile(d.path("logs", "samba.out"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "samba.out (tail):\n" + string(b)
}

// waitReady waits, each step bounded by timeout: LDAP accepts connections, the DNS
// answers the domain's DC SRV record, a Kerberos logon to the DC's SMB succeeds.
func (d *DC) waitReady(ctx context.Context, timeout time.Duration) error {
	steps := []struct {
		what  string
		check func(context.Context) error
	}{
		{"ldap", func(ctx context.Context) error {
			c, err := d.Dial(ctx, "tcp", net.JoinHostPort(d.Addr, "389"))
			if err == nil {
				c.Close()
			}
			return err
		}},
		{"dns srv", func(ctx context.Context) error {
			srv, err := d.LookupSRV(ctx, "_ldap._tcp.dc._msdcs."+d.DNSDomain)
			if err == nil && len(srv) == 0 {
				err = errors.New("no answer")
			}
			return err
		}},
		{"kerberos logon", func(ctx context.Context) error {
			_, err := d.ExecAs(ctx, User{d.AdminUser + "@" + d.Realm, d.AdminPassword}, "smbclient",
				"//"+d.FQDN+"/netlogon", "--use-kerberos=required", "-c", "ls")
			return err
		}},
	}
	for _, s := range steps {
		if err := poll(ctx, timeout, d.dead, s.check); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// poll calls check until it succeeds, samba exits, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, dead <-chan struct{}, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-dead:
			return fmt.Errorf("samba exited (last check: %w)", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// command is argv inside the DC's network and mount namespaces, with KRB5_CONFIG
// set to the DC's krb5.conf.
func (d *DC) command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"-t", strconv.Itoa(d.holder.Process.Pid), "-m", "-n", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = append(os.Environ(), "KRB5_CONFIG="+d.Krb5Conf)
	return cmd
}

// run runs argv inside the namespaces, with stdin and, when secret is not empty, the
// secret on an inherited pipe named by PASSWD_FD (Samba's tools read it there). It
// returns standard output; errors carry argv (never a secret), the exit code and
// standard error.
func (d *DC) run(ctx context.Context, stdin *bytes.Reader, secret string, argv []string) ([]byte, error) {
	if d.holder == nil {
		return nil, errors.New("addc: dc not started")
	}
	cmd := d.command(ctx, argv...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	// No controlling terminal: a tool that wants a password cannot prompt for one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if secret != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		go func() {
			w.WriteString(secret + "\n") //nolint:errcheck // the reader reports a short password
			w.Close()
		}()
		cmd.ExtraFiles = []*os.File{r}
		cmd.Env = append(cmd.Env, "PASSWD_FD=3")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		shown := argv
		if len(argv) == 3 && argv[1] == "-c" {
			shown = []string{argv[0], "-c", "<driver>"}
		}
		msg := stderr.String()
		if len(msg) > 3000 {
			msg = "…" + msg[len(msg)-3000:]
		}
		return stdout.Bytes(), &runner.Error{Argv: shown, ExitCode: code, Stderr: msg, Err: err}
	}
	return stdout.Bytes(), nil
}

// Exec runs a command inside the DC's network and mount namespaces and returns its
// standard output. For samba-tool it adds "-s <the DC's smb.conf>"; other Samba
// tools find the DC's smb.conf at /etc/samba/smb.conf there. KRB5_CONFIG names a
// krb5.conf for the realm.
func (d *DC) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	return d.run(ctx, nil, "", d.withConf(argv))
}

// ExecAs is Exec with "-U <u.Name>" added and u's password passed on an inherited
// pipe (PASSWD_FD), so it never appears in argv. u.Name may be "user",
// "DOMAIN\user" or "user@REALM".
func (d *DC) ExecAs(ctx context.Context, u User, argv ...string) ([]byte, error) {
	argv = append(d.withConf(argv), "-U", u.Name)
	return d.run(ctx, nil, u.Password, argv)
}

func (d *DC) withConf(argv []string) []string {
	argv = append([]string(nil), argv...)
	if len(argv) > 0 && argv[0] == "samba-tool" {
		argv = append(argv, "-s", d.ConfPath)
	}
	return argv
}

// ComputerExists finds the computer object name (its sAMAccountName, with or
// without the trailing $) and returns its parent's DN.
func (d *DC) ComputerExists(ctx context.Context, name string) (ou string, ok bool, err error) {
	acct := strings.TrimSuffix(name, "$") + "$"
	if strings.ContainsAny(acct, `()*\`) {
		return "", false, fmt.Errorf("addc: computer name %q", name)
	}
	out, err := d.Exec(ctx, "ldbsearch", "-H", d.path("state", "private", "sam.ldb"), "-b", d.BaseDN,
		"(&(objectClass=computer)(sAMAccountName="+acct+"))", "dn")
	if err != nil {
		return "", false, fmt.Errorf("find computer %s: %w", name, err)
	}
	dn := parseDN(string(out))
	if dn == "" {
		return "", false, nil
	}
	return parentDN(dn), true, nil
}

// parseDN returns the first "dn:" of ldbsearch's LDIF output.
func parseDN(ldif string) string {
	for _, l := range strings.Split(ldif, "\n") {
		if v, ok := strings.CutPrefix(l, "dn: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parentDN cuts a DN's first RDN (at the first comma not escaped by a backslash).
func parentDN(dn string) string {
	for i := 0; i < len(dn); i++ {
		switch dn[i] {
		case '\\':
			i++
		case ',':
			return dn[i+1:]
		}
	}
	return ""
}

// LookupA asks the DC's DNS for fqdn's A records, from inside the DC's namespace
// (so it works whatever the caller's routes).
func (d *DC) LookupA(ctx context.Context, fqdn string) ([]string, error) {
	r, err := d.query(ctx, fqdn, dns.TypeA)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	return addrs, nil
}

// LookupSRV asks the DC's DNS for name's SRV records, from inside its namespace.
func (d *DC) LookupSRV(ctx context.Context, name string) ([]*dns.SRV, error) {
	r, err := d.query(ctx, name, dns.TypeSRV)
	if err != nil {
		return nil, err
	}
	var srv []*dns.SRV
	for _, rr := range r.Answer {
		if s, ok := rr.(*dns.SRV); ok {
			srv = append(srv, s)
		}
	}
	return srv, nil
}

func (d *DC) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	c, err := d.Dial(ctx, "udp", net.JoinHostPort(d.Addr, "53"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	cl := &dns.Client{Net: "udp"}
	r, _, err := cl.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: c})
	if err != nil {
		return nil, fmt.Errorf("dns %s %s: %w", dns.TypeToString[qtype], name, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("dns %s %s: %s", dns.TypeToString[qtype], name, dns.RcodeToString[r.Rcode])
	}
	return r, nil
}

// Dial connects from inside the DC's network namespace.
func (d *DC) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	target, err := netns.GetFromName(d.Netns)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", d.Netns, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	// The socket belongs to the namespace it was made in; connect may park the
	// goroutine, which stays on this locked thread.
	var dl net.Dialer
	c, err := dl.DialContext(ctx, network, address)
	if serr := netns.Set(orig); serr != nil {
		// The thread stays in the wrong namespace: leave it locked so it dies with
		// the goroutine instead of running others.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("restore netns: %w", serr)
	}
	runtime.UnlockOSThread()
	return c, err
}

// Close stops the DC and removes everything it made: samba and its children (and
// any other process left in its network namespace), the holder with its mount
// namespace, the veth and the network namespace. It is idempotent and safe after a
// partial start. The state directory stays (t.TempDir removes it).
func (d *DC) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.samba != nil && !isClosed(d.dead) {
		// Only while samba is not reaped: after that its pid, and so its
		// group's id, may be another process's (killNetns ends what is left).
		syscall.Kill(-d.samba.Process.Pid, syscall.SIGTERM) //nolint:errcheck // gone already is fine
		select {
		case <-d.dead:
		case <-time.After(15 * time.Second):
			syscall.Kill(-d.samba.Process.Pid, syscall.SIGKILL) //nolint:errcheck
			<-d.dead
		}
	}
	if d.madeNetns {
		if err := killNetns(d.Netns); err != nil {
			errs = append(errs, err)
		}
	}
	if d.holder != nil {
		d.holder.Process.Kill() //nolint:errcheck // killNetns may have ended it
		<-d.holderDone
	}
	if d.madeVeth {
		if _, err := (runner.Exec{}).Run(context.Background(), "ip", "link", "del", d.veth); err != nil &&
			!runner.StderrContains(err, "Cannot find device") {
			errs = append(errs, err)
		}
	}
	if d.madeNetns {
		if _, err := (runner.Exec{}).Run(context.Background(), "ip", "netns", "del", d.Netns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killNetns kills every process in the named network namespace (samba's helpers
// can outlive their parents) and waits, bounded, until none is left and every one
// it saw has been reaped.
func killNetns(name string) error {
	nsFile := filepath.Join("/run/netns", name)
	if _, err := os.Stat(nsFile); err != nil {
		return nil
	}
	// Through pidfds, checked in the namespace once held: a pid listed may be
	// another process's by the time it is signalled.
	started := map[int]uint64{}
	for _, pid := range PidsInNetns(nsFile) {
		if st, ok := runner.StartTime(pid); ok {
			started[pid] = st
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	if err := runner.KillAll(runner.InNetns(nsFile), 20*time.Second); err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	// Then until those are reaped too (a process with the same pid and start
	// time is the same process).
	for {
		var left []int
		for pid, st := range started {
			if now, ok := runner.StartTime(pid); ok && now == st {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of netns %s killed but not reaped: %v", name, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PidsInNetns lists the processes whose network namespace is the one at nsFile
// (e.g. /run/netns/bad-dc). Zombies are left out: they hold no namespace.
func PidsInNetns(nsFile string) []int { return runner.Matching(runner.InNetns(nsFile)) }

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
