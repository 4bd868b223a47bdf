package smb

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Fixed identity mapping (a change of idmap backend needs `net cache flush` and
// orphans the numeric owners already on disk): the domain's users and groups map by
// RID, uid/gid = DomainIDMin + RID, the same in every sandbox and after every
// rebuild, so ownership on volumes never moves. Never change these on a directory
// that has volumes.
const (
	DefaultIDMin = 3000 // idmap config * (tdb): BUILTIN and well-known SIDs
	DefaultIDMax = 7999
	DomainIDMin  = 100000 // idmap config <DOMAIN> (rid)
	DomainIDMax  = 2099999999
)

// WinbinddSocketDir is the directory libwbclient and nss_winbind have compiled in
// (they ignore `winbindd socket directory`): every sandbox needs its own /run/samba
// (a private /run) so each winbindd's socket is its own.
const WinbinddSocketDir = "/run/samba/winbindd"

// GlobalOptions is one sandbox's Samba identity and layout.
type GlobalOptions struct {
	// Realm is the AD domain's DNS name ("basin.test"); rendered upper case.
	Realm string
	// Workgroup is the domain's NetBIOS name ("BASIN"), as `net ads workgroup`
	// reports it from a CLDAP ping (WorkgroupArgs, ParseWorkgroup). It is not
	// derived from the realm: an AD's NetBIOS name may differ from its first label.
	Workgroup string
	// MachineName is the SMB server's NetBIOS name (MachineName's result).
	MachineName string
	// StateDir holds every Samba directory of the sandbox (absolute): private/,
	// lock/, state/, cache/, run/ (pid, ncalrpc) and log/ (see Dirs).
	StateDir string
	// Addresses are addresses smbd listens on (`bind interfaces only`) besides
	// the loopback one. Basin's instances give none: their endpoints reach smbd
	// on its loopback address through the sandbox's NAT (dataplane/smbnat.go),
	// so that an endpoint's coming or going never restarts smbd.
	Addresses []netip.Addr
	// Loopback is the loopback address smbd also listens on; the zero Addr is
	// 127.0.0.1. Several Samba instances share one network namespace (one per AD
	// connection of a sandbox) and each needs a loopback address of its own, or
	// their smbds would compete for 127.0.0.1:445.
	Loopback netip.Addr
	// AESOnly restricts Kerberos to AES (`kerberos encryption types = strong`); the
	// AD connection's aesEncryption. The join ignores it (pitfall 12): run
	// EnctypesArgs after joining too.
	AESOnly bool
	// LDAPSigning is the AD connection's ldapSigning. Samba 4.17 already signs and
	// seals its LDAP to the DC by default (`client ldap sasl wrapping = seal`);
	// Basin pins seal in every case, which satisfies "require signed LDAP" and never
	// weakens it (`sign` would drop the sealing).
	LDAPSigning bool
	// LogLevel is Samba's `log level` (0-10); 0 renders 1.
	LogLevel int
	// DCs are the domain controllers the instance talks to (`password server`),
	// as Discover found them for the connection's site (or domain-wide when the
	// site has none); empty lets Samba find DCs through DNS itself, which is
	// site-aware only by the subnet its CLDAP ping reports.
	DCs []string
}

// Dirs are the directories a GlobalOptions' smb.conf names; the sandbox creates
// them (0700 for Private) before starting anything.
type Dirs struct {
	Private, Lock, State, Cache, Run, NCALRPC, Log string
}

// Dirs returns the directories under o.StateDir.
// render writes Samba's directory parameters, in the order [global] lists them.
func (d Dirs) render(p func(k, v string)) {
	p("private dir", d.Private)
	p("lock directory", d.Lock)
	p("state directory", d.State)
	p("cache directory", d.Cache)
	p("pid directory", d.Run)
	p("ncalrpc dir", d.NCALRPC)
}

func (o GlobalOptions) Dirs() Dirs {
	d := o.StateDir
	return Dirs{
		Private: filepath.Join(d, "private"),
		Lock:    filepath.Join(d, "lock"),
		State:   filepath.Join(d, "state"),
		Cache:   filepath.Join(d, "cache"),
		Run:     filepath.Join(d, "run"),
		NCALRPC: filepath.Join(d, "run", "ncalrpc"),
		Log:     filepath.Join(d, "log"),
	}
}

// maxSocketPath is the longest path of a unix socket: sun_path holds 108
// bytes with its terminating NUL.
const maxSocketPath = 107

// CheckSocketPaths refuses a state directory under which Samba's sockets would
// not fit a socket address: winbindd's privileged pipe is the longest, and a
// winbindd that cannot bind it exits at once ("socket path is too long").
func (o GlobalOptions) CheckSocketPaths() error {
	p := filepath.Join(o.Dirs().State, "winbindd_privileged", "pipe")
	if len(p) > maxSocketPath {
		return fmt.Errorf("the data directory's path is too long for Samba's sockets: %s is %d bytes, a socket's path at most %d; "+
			"use a data directory with a path %d bytes shorter", p, len(p), maxSocketPath, len(p)-maxSocketPath)
	}
	return nil
}

// Keytab is the sandbox's Kerberos keytab. `kerberos method = secrets and keytab`
// makes Samba keep the *default* keytab, which is /etc/krb5.keytab unless
// KRB5_KTNAME says otherwise: every Samba process of the sandbox (net, winbindd,
// smbd, samba-dcerpcd) must run with Environ's variables.
func (o GlobalOptions) Keytab() string { return filepath.Join(o.Dirs().Private, "krb5.keytab") }

// Environ is the environment every Samba tool and daemon of the sandbox needs
// besides PATH: the sandbox's keytab (never the host's /etc/krb5.keytab) and a
// Kerberos configuration path of its own, so a host /etc/krb5.conf never applies.
// That file may be absent: MIT krb5 then runs on defaults and finds KDCs through
// DNS, as the spike did; net and winbindd point KRB5_CONFIG at the krb5.conf they
// write under the lock directory once they know a DC.
func (o GlobalOptions) Environ() []string {
	return []string{
		"KRB5_KTNAME=FILE:" + o.Keytab(),
		"KRB5_CONFIG=" + filepath.Join(o.StateDir, "krb5.conf"),
	}
}

// Validate checks every value RenderGlobal inserts; errors name the field.
func (o GlobalOptions) Validate() error {
	if err := validateRealm("domain", o.Realm); err != nil {
		return err
	}
	if err := validateWorkgroup("workgroup", o.Workgroup); err != nil {
		return err
	}
	if err := validateMachineName("machineName", o.MachineName); err != nil {
		return err
	}
	if err := validateDir("stateDir", o.StateDir); err != nil {
		return err
	}
	for _, a := range o.Addresses {
		if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return invalid("addresses", "%q is not a unicast address without zone", a)
		}
	}
	if o.Loopback.IsValid() && (!o.Loopback.Is4() || !o.Loopback.IsLoopback()) {
		return invalid("loopback", "%q is not an IPv4 loopback address", o.Loopback)
	}
	if o.LogLevel < 0 || o.LogLevel > 10 {
		return invalid("logLevel", "must be 0-10")
	}
	for _, dc := range o.DCs {
		if err := validateServer(dc); err != nil {
			return invalid("dcs", "%q is not a host name or address", dc)
		}
	}
	return nil
}

// validateDir checks an absolute, clean directory path that goes into smb.conf.
func validateDir(field, p string) error {
	if err := checkValue(field, p, 512); err != nil {
		return err
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return invalid(field, "must be a clean absolute path below /")
	}
	if strings.ContainsAny(p, `"\`) {
		return invalid(field, `must not contain '"' or '\'`)
	}
	return nil
}

// RenderGlobal renders the sandbox's smb.conf: a [global] section only, shares
// live in the registry (`registry shares = yes`, ShareParams). Values are checked
// first (Validate). Settings and why:
//
//   - security = ads, member server, no NetBIOS, port 445 only, no printing;
//   - every directory under StateDir, `winbindd socket directory` the compiled-in
//     path (pitfall 3), no `dns forwarder` (a DC setting: pitfall 2 is a DC's);
//   - `rpc start on demand helpers = no`: samba-dcerpcd runs under the supervisor
//     (pitfall 6);
//   - `kerberos method = secrets and keytab` (see Keytab and Environ);
//   - `password server`: the DCs of the connection's site (DCs), when known;
//   - idmap rid for the domain with fixed ranges (pitfall 13);
//   - `server multi channel support = yes` (the 4.17 default, pinned);
//   - `wide links = no` and `allow insecure wide links = no` (Samba's defaults,
//     pinned): a symlink a tenant plants over NFS resolves only within its
//     share. Every volume of the network is mounted in the instance's view, so
//     this is what keeps a link to another volume (or project) out of reach;
//     TestSMBTenantIsolation (test/e2e) shows it failing without them;
//   - `smbd profiling level = on`: each smbd process counts its requests, their
//     bytes and time, the per-volume SMB metrics (profile.go, Accountant);
//   - acl_xattr and `map acl inherit`, NT ACLs in the user.NTACL xattr
//     (NTACLName): security.* xattrs need CAP_SYS_ADMIN to write, which smbd
//     does not get (it would let it enter any namespace). acl_xattr hides the
//     name from SMB clients where it is loaded (NTFS-style shares), and
//     UNIX-style shares, which do not load it, serve no EAs at all (`ea
//     support = no`); Basin serves NFSv3 and v4.1, neither of which reaches
//     xattrs, and gives no shell: nothing else can rewrite it;
//   - no `log file`: the daemons are started with --log-basename, so each logs
//     to a file named after itself (log.smbd, log.winbindd, log.wb-<domain>,
//     log.rpcd_*). The usual `log.%m` names a file after the client's
//     machine name, which a client chooses (its NTLM workstation name): one
//     client could make any number of files. `max log size` (MaxLogKiB) rotates
//     each to .old; the data plane also truncates any that grows past its
//     bound between Samba's checks (Samba checks only while running as root);
//   - vfs_fruit's global settings (file semantics: FileSemantics).
//
// NTACLName is the xattr NT ACLs are kept in (see RenderGlobal).
const NTACLName = "user.NTACL"

// MaxLogKiB is Samba's `max log size`: a log file past it is renamed to .old
// (one kept) the next time its daemon checks.
const MaxLogKiB = "5000"

// RenderDCERPC renders samba-dcerpcd's smb.conf: RenderGlobal's, listening on
// the instance's loopback address alone. samba-dcerpcd started on its own (not
// as smbd's on-demand helper) serves every transport its rpcd_* servers list:
// besides the named pipes smbd forwards and ncalrpc, lsarpc, samr, srvsvc, wkssvc,
// netdfs and winreg over TCP on ports of the dynamic range, and epmapper on 135,
// on every `interfaces` address, the tenants' endpoints included. A member
// server answers those pipes over SMB only; bound to the loopback address,
// nothing outside the sandbox's network namespace reaches them. The rest of the
// file is RenderGlobal's, so that the two read the same directories and
// registry (its rpcd_* workers are started with this file too).
func RenderDCERPC(o GlobalOptions) (string, error) {
	o.Addresses = nil
	return RenderGlobal(o)
}

func RenderGlobal(o GlobalOptions) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	d := o.Dirs()
	realm := strings.ToUpper(o.Realm)
	wg := strings.ToUpper(o.Workgroup)
	lo := "127.0.0.1"
	if o.Loopback.IsValid() {
		lo = o.Loopback.String()
	}
	ifaces := []string{lo}
	for _, a := range o.Addresses {
		ifaces = append(ifaces, a.String())
	}
	level := o.LogLevel
	if level == 0 {
		level = 1
	}
	encTypes := "all"
	if o.AESOnly {
		encTypes = "strong"
	}
	var b strings.Builder
	p := func(k, v string) { fmt.Fprintf(&b, "\t%s = %s\n", k, v) }
	b.WriteString("# Rendered by Basin (internal/smb); do not edit: shares live in the registry.\n[global]\n")
	p("netbios name", o.MachineName)
	p("workgroup", wg)
	p("realm", realm)
	p("security", "ads")
	p("server role", "member server")
	p("interfaces", strings.Join(ifaces, " "))
	p("bind interfaces only", "yes")
	p("disable netbios", "yes")
	p("smb ports", "445")
	p("server min protocol", "SMB2_02")
	p("server multi channel support", "yes")
	d.render(p)
	p("winbindd socket directory", WinbinddSocketDir)
	p("max log size", MaxLogKiB)
	p("log level", fmt.Sprint(level))
	p("smbd profiling level", ProfilingLevel)
	p("rpc start on demand helpers", "no")
	p("registry shares", "yes")
	p("usershare max shares", "0")
	p("load printers", "no")
	p("printing", "bsd")
	p("printcap name", "/dev/null")
	p("disable spoolss", "yes")
	p("kerberos method", "secrets and keytab")
	p("kerberos encryption types", encTypes)
	p("client ldap sasl wrapping", "seal")
	if len(o.DCs) > 0 {
		p("password server", strings.Join(o.DCs, " "))
	}
	p("winbind refresh tickets", "yes")
	p("winbind use default domain", "no")
	p("allow trusted domains", "no")
	p("restrict anonymous", "2")
	p("idmap config * : backend", "tdb")
	p("idmap config * : range", fmt.Sprintf("%d-%d", DefaultIDMin, DefaultIDMax))
	p("idmap config "+wg+" : backend", "rid")
	p("idmap config "+wg+" : range", fmt.Sprintf("%d-%d", DomainIDMin, DomainIDMax))
	p("template shell", "/bin/false")
	p("template homedir", "/nonexistent")
	for _, kv := range fileSemantics() {
		p(kv[0], kv[1])
	}
	return b.String(), nil
}

// fileSemantics are the [global] parameters that decide what a share's files
// do for clients (NT ACLs, DOS attributes, links), in the order RenderGlobal
// writes them.
func fileSemantics() [][2]string {
	return [][2]string{
		{"vfs objects", "acl_xattr"},
		{"acl_xattr:security_acl_name", NTACLName},
		{"map acl inherit", "yes"},
		{"store dos attributes", "yes"},
		{"wide links", "no"},
		{"allow insecure wide links", "no"},
		// vfs_fruit's global settings (its per-share ones are Fruit): Apple's
		// SMB extensions for macOS clients, without its NFS ACEs, which let a
		// Mac read and set a file's UNIX mode beside the NT ACL acl_xattr keeps.
		{"fruit:aapl", "yes"},
		{"fruit:nfs_aces", "no"},
	}
}

// FileSemantics returns the [global] parameters of RenderGlobal that decide
// what a share's files do for clients, without the domain, sandbox and
// daemon settings: what a bare Samba needs to behave as Basin's shares do
// (test/e2e compares the two with smbtorture).
func FileSemantics() map[string]string {
	m := map[string]string{}
	for _, kv := range fileSemantics() {
		m[kv[0]] = kv[1]
	}
	return m
}

// RenderDiscovery renders the smallest configuration `net ads workgroup` and `net
// ads lookup` need before the domain's NetBIOS name is known: the realm, ADS
// security and the sandbox's directories (so nothing touches /var/lib/samba).
func RenderDiscovery(realm, stateDir string) (string, error) {
	if err := validateRealm("domain", realm); err != nil {
		return "", err
	}
	if err := validateDir("stateDir", stateDir); err != nil {
		return "", err
	}
	d := GlobalOptions{StateDir: stateDir}.Dirs()
	var b strings.Builder
	p := func(k, v string) { fmt.Fprintf(&b, "\t%s = %s\n", k, v) }
	b.WriteString("# Rendered by Basin (internal/smb) for `net ads workgroup`.\n[global]\n")
	p("realm", strings.ToUpper(realm))
	p("security", "ads")
	p("disable netbios", "yes")
	d.render(p)
	p("log file", filepath.Join(d.Log, "log.%m"))
	p("client ldap sasl wrapping", "seal")
	return b.String(), nil
}
