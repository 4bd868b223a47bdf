// Package nfs is the NFS-Ganesha driver: it renders the daemon's configuration and
// one EXPORT block per volume, and adds, updates and removes exports at run time over
// Ganesha's DBus interface (org.ganesha.nfsd.exportmgr, which takes effect at once,
// without a restart), and reads the exports' statistics (stats.go: ExportIO per
// export, ExportsIO for many at once). It knows nothing of Basin's model: the
// controller translates a volume and its export policy into an Export.
//
// Imported by the dataplane and controller packages.
package nfs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/godbus/dbus/v5"
)

// Access of a client rule.
type Access string

// Accesses, as Ganesha spells them.
const (
	AccessRW   Access = "RW"
	AccessRO   Access = "RO"
	AccessNone Access = "None"
)

// Squash of a client rule.
type Squash string

// Squashes, as Ganesha spells them.
const (
	NoRootSquash Squash = "No_Root_Squash"
	RootSquash   Squash = "Root_Squash"
	AllSquash    Squash = "All_Squash"
)

// AnonID is what squashed users become unless a rule says otherwise (nobody).
const AnonID = 65534

// Flavor is an RPC security flavor as Ganesha's SecType names it: AUTH_SYS,
// or RPCSEC_GSS with Kerberos V5 and one of its three services.
type Flavor string

// Flavors, as Ganesha spells them.
const (
	FlavorSys   Flavor = "sys"
	FlavorKrb5  Flavor = "krb5"  // authentication only
	FlavorKrb5i Flavor = "krb5i" // and integrity of every call and reply
	FlavorKrb5p Flavor = "krb5p" // and privacy (encrypted)
)

// Client is one CLIENT block: who it matches and what they get. Ganesha evaluates
// CLIENT blocks in order and the first match wins; no match means the export's own
// Access_Type, which Basin sets to None.
type Client struct {
	Clients   []string // IPv4 addresses and CIDRs
	Access    Access
	Squash    Squash
	AnonUID   int64 // for Root_Squash / All_Squash
	Protocols []int // NFS versions the rule applies to: 3, 4
	// Sec are the flavors the rule admits (its SecType); empty: the export's,
	// AUTH_SYS. A client of the rule's addresses that calls with another
	// flavor is refused, NFS4ERR_WRONGSEC for NFSv4: the block's addresses
	// matched, so no later block is tried.
	Sec []Flavor
}

// Export is one volume's NFS export, or one of its snapshot directory's: the
// directory itself at "/<shareName>/.snapshot" and each snapshot below it (with
// Basin's Ganesha patch 0006, LOOKUP of ".snapshot" at the volume's root crosses
// into the first, and of a name in it into the snapshot of that name).
type Export struct {
	ID        uint64
	Path      string // the volume's mount point; with Ceph, its path in the CephFS
	Pseudo    string // "/<shareName>"
	Protocols []int  // 3 and/or 4
	Clients   []Client
	// NoAttrCache: Ganesha caches none of the export's attributes (and so drops
	// what it knew of a directory's entries as soon as they change): for a
	// directory Basin changes behind it, the snapshot directory.
	NoAttrCache bool
	// NTFS: the volume's NT ACLs are authoritative (securityStyle NTFS):
	// Ganesha refuses a change of mode, owner, group or ACL
	// (Basin_NTFS_Security, Basin patch 0014) with NFS3ERR_PERM /
	// NFS4ERR_PERM, as ONTAP's default `-ntfs-unix-security-ops fail`. Access
	// follows the POSIX ACL Samba derives from each NT ACL.
	NTFS bool
	// Ceph, when set, serves Path from a CephFS through FSAL_CEPH as the
	// volume's own cephx user, instead of a local mount through FSAL_VFS.
	Ceph *CephFSAL
}

// CephFSAL is what FSAL_CEPH needs to serve one export: the file system, and
// the cephx user (without "client.") and key it mounts it as.
type CephFSAL struct {
	FS, UserID, Secret string
}

// cephName and cephKey are what a CephFSAL may hold: names Ceph makes, and a
// base64 key; nothing Ganesha's parser treats specially.
var (
	cephName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	cephKey  = regexp.MustCompile(`^[A-Za-z0-9+/]{16,}={0,2}$`)
)

// SnapshotDirName is the name of a volume's snapshot directory.
const SnapshotDirName = ".snapshot"

// MaxExportID is the largest Export_Id: Ganesha's is 16 bits, and 0 is its pseudo root.
const MaxExportID = 65535

// safePath is what export paths may contain: they are written into Ganesha's
// configuration, so nothing that its parser treats specially.
var safePath = regexp.MustCompile(`^/[A-Za-z0-9._@/-]*$`)

// Validate checks everything Render writes into Ganesha's configuration: an ID in
// 1..MaxExportID, clean absolute paths, IPv4 addresses or CIDRs as clients, known
// access and squash values, NFS versions 3 and 4.
func (e Export) Validate() error {
	if e.ID < 1 || e.ID > MaxExportID {
		return fmt.Errorf("export id %d is outside 1..%d", e.ID, MaxExportID)
	}
	for _, p := range []string{e.Path, e.Pseudo} {
		if !safePath.MatchString(p) || strings.Contains(p, "//") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			return fmt.Errorf("export %d: unsafe path %q", e.ID, p)
		}
	}
	if err := checkVersions(e.Protocols); err != nil {
		return fmt.Errorf("export %d: %w", e.ID, err)
	}
	if c := e.Ceph; c != nil && (!cephName.MatchString(c.FS) || !cephName.MatchString(c.UserID) || !cephKey.MatchString(c.Secret)) {
		return fmt.Errorf("export %d: CephFS %q, user %q: a name or the key is malformed", e.ID, c.FS, c.UserID)
	}
	for _, c := range e.Clients {
		for _, a := range c.Clients {
			if p, err := netip.ParsePrefix(a); err == nil && p.Addr().Is4() {
				continue
			}
			if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
				continue
			}
			return fmt.Errorf("export %d: client %q is not an IPv4 address or CIDR", e.ID, a)
		}
		if !slices.Contains([]Access{AccessRW, AccessRO, AccessNone}, c.Access) {
			return fmt.Errorf("export %d: access %q", e.ID, c.Access)
		}
		if !slices.Contains([]Squash{NoRootSquash, RootSquash, AllSquash}, c.Squash) {
			return fmt.Errorf("export %d: squash %q", e.ID, c.Squash)
		}
		if c.AnonUID < 0 || c.AnonUID > 1<<32-1 {
			return fmt.Errorf("export %d: anonymous uid %d", e.ID, c.AnonUID)
		}
		if err := checkVersions(c.Protocols); err != nil {
			return fmt.Errorf("export %d: %w", e.ID, err)
		}
		for _, f := range c.Sec {
			if !slices.Contains([]Flavor{FlavorSys, FlavorKrb5, FlavorKrb5i, FlavorKrb5p}, f) {
				return fmt.Errorf("export %d: security flavor %q", e.ID, f)
			}
		}
	}
	return nil
}

func checkVersions(vs []int) error {
	for _, v := range vs {
		if v != 3 && v != 4 {
			return fmt.Errorf("NFS version %d", v)
		}
	}
	return nil
}

// exportID converts an export id for Ganesha's DBus calls, refusing what does not fit.
func exportID(id uint64) (uint16, error) {
	if id < 1 || id > MaxExportID {
		return 0, fmt.Errorf("export id %d is outside 1..%d", id, MaxExportID)
	}
	return uint16(id), nil
}

// Render returns the EXPORT block Ganesha reads from the export's own file. Call
// Validate first: Render writes what it is given.
func (e Export) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Generated by Basin; do not edit.\nEXPORT {\n")
	fmt.Fprintf(&b, "\tExport_Id = %d;\n\tPath = %q;\n\tPseudo = %q;\n", e.ID, e.Path, e.Pseudo)
	fmt.Fprintf(&b, "\tProtocols = %s;\n\tTransports = TCP;\n\tSecType = sys;\n", versions(e.Protocols))
	// Nobody matches unless a CLIENT block says so: no policy, no access.
	fmt.Fprintf(&b, "\tAccess_Type = None;\n\tSquash = Root_Squash;\n\tAnonymous_Uid = %d;\n\tAnonymous_Gid = %d;\n", AnonID, AnonID)
	if e.NoAttrCache {
		b.WriteString("\tAttr_Expiration_Time = 0;\n")
	}
	if e.NTFS {
		b.WriteString("\tBasin_NTFS_Security = true;\n")
	}
	if c := e.Ceph; c != nil {
		fmt.Fprintf(&b, "\tFSAL {\n\t\tName = CEPH;\n\t\tFilesystem = %q;\n\t\tUser_Id = %q;\n\t\tSecret_Access_Key = %q;\n\t}\n", c.FS, c.UserID, c.Secret)
	} else {
		b.WriteString("\tFSAL {\n\t\tName = VFS;\n\t}\n")
	}
	for _, c := range e.Clients {
		anon := int64(AnonID)
		if c.Squash != NoRootSquash && c.AnonUID != 0 {
			anon = c.AnonUID
		}
		fmt.Fprintf(&b, "\tCLIENT {\n\t\tClients = %s;\n\t\tAccess_Type = %s;\n\t\tSquash = %s;\n", clientList(c.Clients), c.Access, c.Squash)
		fmt.Fprintf(&b, "\t\tAnonymous_Uid = %d;\n\t\tAnonymous_Gid = %d;\n\t\tProtocols = %s;\n", anon, anon, versions(c.Protocols))
		if len(c.Sec) > 0 {
			fmt.Fprintf(&b, "\t\tSecType = %s;\n", flavors(c.Sec))
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// clientList is a CLIENT block's Clients value. A prefix of every address
// (0.0.0.0/0, Trident's default export rule) is Ganesha's "*": its parser
// takes prefix lengths 1 to 99 only (conf_lex.l's CIDR), and refuses the
// whole export for a /0.
func clientList(clients []string) string {
	out := make([]string, len(clients))
	for i, a := range clients {
		out[i] = a
		if p, err := netip.ParsePrefix(a); err == nil && p.Bits() == 0 {
			out[i] = "*"
		}
	}
	return strings.Join(out, ", ")
}

// flavors lists fs once each, in Ganesha's order: sys, krb5, krb5i, krb5p.
func flavors(fs []Flavor) string {
	var out []string
	for _, f := range []Flavor{FlavorSys, FlavorKrb5, FlavorKrb5i, FlavorKrb5p} {
		if slices.Contains(fs, f) {
			out = append(out, string(f))
		}
	}
	return strings.Join(out, ", ")
}

func versions(vs []int) string {
	s := slices.Clone(vs)
	slices.Sort(s)
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ", ")
}

// ConfigOptions shape the daemon configuration of one sandbox. The zero values of
// the grace and include fields give the configuration Basin has always rendered:
// no grace period and no export at start.
type ConfigOptions struct {
	StateDir   string // recovery state lives here (StateDir/recov)
	PluginsDir string // where Ganesha finds its FSAL modules; "" = its built-in default

	// Grace turns NFSv4 grace on (Graceless = false): a restarted Ganesha lets
	// the NFSv4 clients it had reclaim their opens and locks before anyone
	// takes new ones, from the client records its fs recovery backend keeps
	// under StateDir/recov. LeaseLifetime and GracePeriod (whole seconds; 0:
	// DefaultLeaseLifetime and DefaultGracePeriod) are rendered only with it.
	Grace         bool
	LeaseLifetime time.Duration
	GracePeriod   time.Duration

	// Includes are export files (EXPORT blocks, Export.Render) that Ganesha
	// reads with the configuration, each on a %include line, in this order
	// (parents before the exports below them, as a reload loads them): their
	// exports exist before Ganesha opens its listeners. A relative path is
	// taken from the directory of ganesha.conf, which spares the data
	// directory's name the few characters Ganesha's lexer allows in an include
	// path (Validate). Every file must exist when Ganesha starts: a
	// missing or repeated one is a parse error, and Ganesha exits. An EXPORT
	// block that fails (its path gone) only leaves that export out.
	Includes []string

	// Identity, if set, is the server's name to its NFSv4 clients: its
	// Server_Owner and Server_Scope (EXCHANGE_ID), which are otherwise the
	// host name. A client reclaims its state only from a server of the same
	// scope (RFC 8881 section 8.4.2.1), so a server that takes over another's
	// clients takes its identity.
	Identity string
	// RADOS, if set, keeps the NFSv4 client records in a Ceph cluster
	// (RecoveryBackend rados_cluster) instead of under StateDir/recov: a
	// Ganesha on another node with the same NodeID finds them. Needs Grace.
	RADOS *RADOSRecovery
	// Krb5, if set, turns RPCSEC_GSS with Kerberos V5 on (NFS_KRB5,
	// Active_krb5): Ganesha accepts tickets for Krb5.Principal, decrypted with
	// the keys in Krb5.Keytab, from clients whose CLIENT block admits a
	// Kerberos flavor (Client.Sec). Without it, AUTH_SYS alone is served.
	Krb5 *Krb5
}

// Krb5 is Ganesha's Kerberos acceptor identity.
type Krb5 struct {
	// Principal is the service's host-based name, service@host
	// ("nfs@srv.example.com"), as Ganesha imports it
	// (GSS_C_NT_HOSTBASED_SERVICE): the principal nfs/srv.example.com.
	Principal string
	// Keytab is the keytab file holding the principal's keys.
	Keytab string
	// IdmapConf, if set, is libnfsidmap's configuration (NFSV4 IdmapConf),
	// which decides how principals map to users by name; "" is Ganesha's
	// default, /etc/idmapd.conf.
	IdmapConf string
}

// krb5Principal is what Krb5.Principal may be: a service name, '@', a DNS name.
var krb5Principal = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}@[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$`)

// RADOSRecovery is Ganesha's RADOS_KV block: the cephx user UserID (its key
// in the keyring CephConf names) keeps the client records of node NodeID,
// and the grace database object GraceOID, in RADOS pool Pool, namespace
// Namespace. The node must be a member of the grace database before Ganesha
// starts (ganesha-rados-grace add).
type RADOSRecovery struct {
	CephConf, UserID, Pool, Namespace, NodeID string
	// GraceOID is the grace database's object (GraceOID(NodeID, generation)).
	GraceOID string
}

// GraceOID names a grace database object: one per identity, so that a
// restart or move puts only that identity's clients in grace, and one per
// generation of it. Generation 0 (an identity served where it was born, never
// moved) is grace-<nodeID>; each later host of the identity starts a database
// of its own, grace-<nodeID>.e<gen>, into which its client records were
// carried (dataplane's carryGrace), so that two Ganeshas of one identity
// never share one.
func GraceOID(nodeID string, gen int64) string {
	if gen == 0 {
		return "grace-" + nodeID
	}
	return fmt.Sprintf("grace-%s.e%d", nodeID, gen)
}

// Grace defaults: see RenderConfig.
const (
	DefaultLeaseLifetime = 20 * time.Second
	DefaultGracePeriod   = 40 * time.Second
)

// Ganesha 4.3's bounds on Lease_Lifetime and Grace_Period (support/nfs_read_conf.c).
const (
	maxLeaseLifetime = 180 * time.Second
	maxGracePeriod   = 270 * time.Second
)

// includePath is what Ganesha 4.3's lexer takes after %include (INCLPATH in
// config_parsing/conf_lex.l): letters, digits, '-', '.', '_' and '/', no
// empty component.
// configWord is what Basin writes as a quoted name in ganesha.conf (a node
// id, a pool, a cephx user): nothing the lexer or Ceph treats specially.
var configWord = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// objectName is a RADOS object name Basin makes (GraceOID): configWord's
// characters, longer.
var objectName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

var includePath = regexp.MustCompile(`^/?[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// configPath reports whether p is an absolute path Ganesha's parser reads
// back as given inside quotes.
func configPath(p string) bool {
	return filepath.IsAbs(p) && !strings.ContainsAny(p, "\"\\") && !strings.ContainsFunc(p, unicode.IsControl)
}

// leaseAndGrace returns the lease and grace periods to render, whole seconds.
func (o ConfigOptions) leaseAndGrace() (lease, grace time.Duration) {
	lease, grace = o.LeaseLifetime, o.GracePeriod
	if lease == 0 {
		lease = DefaultLeaseLifetime
	}
	if grace == 0 {
		grace = DefaultGracePeriod
	}
	return lease, grace
}

// Validate checks what RenderConfig writes from o: a state directory
// Ganesha's parser reads back as given, include paths its lexer accepts (each
// once, none with a ".." component), and with Grace a lease of 1 s to 180 s
// and a grace period of at least the lease and at most 270 s, in whole
// seconds (Ganesha's bounds; a grace shorter than the lease would let an idle
// client's state go before it noticed the restart).
func (o ConfigOptions) Validate() error {
	if !filepath.IsAbs(o.StateDir) || strings.ContainsAny(o.StateDir, "\"\\") || strings.ContainsFunc(o.StateDir, unicode.IsControl) {
		return fmt.Errorf("ganesha config: state directory %q", o.StateDir)
	}
	if o.PluginsDir != "" && (!filepath.IsAbs(o.PluginsDir) || strings.ContainsAny(o.PluginsDir, "\"\\") || strings.ContainsFunc(o.PluginsDir, unicode.IsControl)) {
		return fmt.Errorf("ganesha config: plugins directory %q", o.PluginsDir)
	}
	if o.Identity != "" && !configWord.MatchString(o.Identity) {
		return fmt.Errorf("ganesha config: server identity %q", o.Identity)
	}
	if r := o.RADOS; r != nil {
		if !o.Grace {
			return errors.New("ganesha config: RADOS recovery without grace")
		}
		if !filepath.IsAbs(r.CephConf) || strings.ContainsAny(r.CephConf, "\"\\") || strings.ContainsFunc(r.CephConf, unicode.IsControl) {
			return fmt.Errorf("ganesha config: ceph.conf %q", r.CephConf)
		}
		for _, w := range []struct{ what, v string }{{"cephx user", r.UserID}, {"pool", r.Pool}, {"namespace", r.Namespace}, {"node id", r.NodeID}} {
			if !configWord.MatchString(w.v) {
				return fmt.Errorf("ganesha config: RADOS recovery %s %q", w.what, w.v)
			}
		}
		// A node id of 63 characters, "grace-" and ".e<generation>".
		if !objectName.MatchString(r.GraceOID) {
			return fmt.Errorf("ganesha config: RADOS recovery grace object %q", r.GraceOID)
		}
	}
	if k := o.Krb5; k != nil {
		if !krb5Principal.MatchString(k.Principal) {
			return fmt.Errorf("ganesha config: Kerberos principal %q is not service@host", k.Principal)
		}
		if !configPath(k.Keytab) {
			return fmt.Errorf("ganesha config: keytab %q", k.Keytab)
		}
		if k.IdmapConf != "" && !configPath(k.IdmapConf) {
			return fmt.Errorf("ganesha config: idmapd.conf %q", k.IdmapConf)
		}
	}
	seen := map[string]bool{}
	for _, inc := range o.Includes {
		if !includePath.MatchString(inc) || slices.Contains(strings.Split(inc, "/"), "..") {
			return fmt.Errorf("ganesha config: include path %q (Ganesha takes letters, digits, '-', '.', '_' and '/', and Basin no '..')", inc)
		}
		if seen[inc] {
			return fmt.Errorf("ganesha config: %q included twice (Ganesha refuses to start)", inc)
		}
		seen[inc] = true
	}
	if !o.Grace {
		return nil
	}
	lease, grace := o.leaseAndGrace()
	switch {
	case lease < time.Second || lease > maxLeaseLifetime || lease%time.Second != 0:
		return fmt.Errorf("ganesha config: lease lifetime %v is not whole seconds in 1s..%v", lease, maxLeaseLifetime)
	case grace > maxGracePeriod || grace%time.Second != 0:
		return fmt.Errorf("ganesha config: grace period %v is not whole seconds up to %v", grace, maxGracePeriod)
	case grace < lease:
		return fmt.Errorf("ganesha config: grace period %v is shorter than the lease lifetime %v", grace, lease)
	}
	return nil
}

// RenderConfig returns ganesha.conf for a sandbox (Basin's build has no NLM and no
// RQUOTA to turn off): NFSv3, NFSv4.0 (libnfs) and v4.1,
// one pseudo namespace (mount_path_pseudo), numeric owners, nobody as the
// anonymous user, and the fs recovery backend under StateDir/recov. Per-export
// statistics are on (Enable_NFS_Stats, Ganesha's default, said explicitly: the
// metrics sampler reads them). Ganesha 4.3 has no per-connection request limit
// to set: its Dispatch_Max_Reqs_Xprt went away with the 2.6 dispatcher rework.
//
// Without Includes it names no export: Ganesha starts with none, and Basin adds
// each one over DBus once its volume is mounted and verified, so a restarted
// Ganesha can never serve an empty mount-point directory. With Includes,
// Ganesha loads those export files before it opens its listeners (nfs_main.c:
// ReadExports runs before nfs_start), so a client's handles are good the
// moment it can connect; the caller includes only the exports of volumes it
// verified are mounted, and lists their paths in the sandbox's mtab first.
//
// Without Grace, no grace period (Graceless): a restart drops every NFSv4
// open and lock. With Grace, a restarted Ganesha is in grace for GracePeriod
// (counted from before it reads its exports): clients it had (the recovery
// directory names each by address and client owner) may reclaim their opens
// and locks, and new OPENs, LOCKs and LOCKTs, and NFSv4 SETATTR, REMOVE and
// RENAME get NFS4ERR_GRACE (NFSv3 SETATTR NFS3ERR_JUKEBOX; NFSv3 I/O goes on).
// Ganesha ends grace early, at its next reaper pass (every 10 s, or half the
// lease below 20 s), once every client it had sent RECLAIM_COMPLETE — NFSv4.0
// clients never do, so one of them holds grace to its end — and skips it when
// it had no client. The defaults: a 20 s lease (an idle client renews every
// ~13 s, two thirds of it, and notices a restart by then; a client cut off for
// longer than the lease loses its opens and locks) and a 40 s grace, two
// leases: room for an idle client to notice, reconnect and reclaim after
// Ganesha read its exports; it lasts that long only when a client it had never
// comes back.
func RenderConfig(o ConfigOptions) string {
	plugins := ""
	if o.PluginsDir != "" {
		plugins = fmt.Sprintf("\tPlugins_Dir = %q;\n", o.PluginsDir)
	}
	grace := "\tGraceless = true;\n"
	if o.Grace {
		lease, period := o.leaseAndGrace()
		grace = fmt.Sprintf("\tGraceless = false;\n\tLease_Lifetime = %d;\n\tGrace_Period = %d;\n",
			int(lease/time.Second), int(period/time.Second))
	}
	recovery := fmt.Sprintf("\tRecoveryBackend = fs;\n\tRecoveryRoot = %q;\n", o.StateDir+"/recov")
	if o.RADOS != nil {
		recovery = "\tRecoveryBackend = rados_cluster;\n"
	}
	if o.Identity != "" {
		recovery += fmt.Sprintf("\tServer_Owner = %q;\n\tServer_Scope = %q;\n", o.Identity, o.Identity)
	}
	idmap := ""
	if o.Krb5 != nil && o.Krb5.IdmapConf != "" {
		idmap = fmt.Sprintf("\tIdmapConf = %q;\n", o.Krb5.IdmapConf)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Generated by Basin; do not edit.
NFS_CORE_PARAM {
	Protocols = 3, 4;
	Enable_UDP = false;
	mount_path_pseudo = true;
	Enable_NFS_Stats = true;
%s}
NFSV4 {
	Minor_Versions = 0, 1;
%s%s%s	Only_Numeric_Owners = true;
}
%sEXPORT_DEFAULTS {
	Access_Type = None;
	Squash = Root_Squash;
	SecType = sys;
	Protocols = 3, 4;
	Transports = TCP;
	Anonymous_Uid = %d;
	Anonymous_Gid = %d;
}
LOG {
	Default_Log_Level = EVENT;
}
`, plugins, grace, recovery, idmap, o.renderKrb5(), AnonID, AnonID)
	if r := o.RADOS; r != nil {
		fmt.Fprintf(&b, "RADOS_KV {\n\tCeph_Conf = %q;\n\tUserId = %q;\n\tPool = %q;\n\tNamespace = %q;\n\tGrace_Oid = %q;\n\tNodeId = %q;\n}\n",
			r.CephConf, r.UserID, r.Pool, r.Namespace, r.GraceOID, r.NodeID)
	}
	for _, inc := range o.Includes {
		fmt.Fprintf(&b, "%%include %q\n", inc)
	}
	return b.String()
}

// renderKrb5 is the NFS_KRB5 block. Ganesha keeps the credentials it gets
// for callbacks over RPCSEC_GSS under CCacheDir, StateDir/krb5cc: the
// sandbox's own, not the host's /var/run/ganesha.
func (o ConfigOptions) renderKrb5() string {
	k := o.Krb5
	if k == nil {
		return "NFS_KRB5 {\n\tActive_krb5 = false;\n}\n"
	}
	return fmt.Sprintf("NFS_KRB5 {\n\tPrincipalName = %q;\n\tKeytabPath = %q;\n\tCCacheDir = %q;\n\tActive_krb5 = true;\n}\n",
		k.Principal, k.Keytab, o.StateDir+"/krb5cc")
}

// DBus talks to one Ganesha over its (private) system bus. It keeps one
// connection, dialled on first use and dialled again after it fails (the bus
// daemon restarted); a DBus is safe for concurrent use and must not be copied
// after first use. Close drops the connection.
type DBus struct {
	Address string // unix:path=…

	mu   sync.Mutex
	conn *dbus.Conn
}

const (
	ganeshaName = "org.ganesha.nfsd"
	exportMgr   = "/org/ganesha/nfsd/ExportMgr"
	exportIface = "org.ganesha.nfsd.exportmgr"
)

func (d *DBus) call(ctx context.Context, method string, args ...any) (*dbus.Call, error) {
	return d.callIface(ctx, exportIface, method, args...)
}

// callIface calls a method of Ganesha's export manager.
func (d *DBus) callIface(ctx context.Context, iface, method string, args ...any) (*dbus.Call, error) {
	return d.callObject(ctx, exportMgr, iface, method, args...)
}

// callObject calls a method of one of Ganesha's objects. A call that fails for
// want of a working connection (not an error reply) drops the connection; if that
// connection was an old one, the call is made once more on a new one.
func (d *DBus) callObject(ctx context.Context, path dbus.ObjectPath, iface, method string, args ...any) (*dbus.Call, error) {
	for {
		conn, fresh, err := d.connect(ctx)
		if err != nil {
			return nil, err
		}
		call := conn.Object(ganeshaName, path).CallWithContext(ctx, iface+"."+method, 0, args...)
		var reply dbus.Error
		if call.Err == nil || errors.As(call.Err, &reply) || ctx.Err() != nil {
			return call, call.Err
		}
		d.drop(conn)
		if fresh {
			return call, call.Err
		}
	}
}

// connect returns the connection, dialling one if there is none (fresh).
func (d *DBus) connect(ctx context.Context) (conn *dbus.Conn, fresh bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && d.conn.Connected() {
		return d.conn, false, nil
	}
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	type dialed struct {
		conn *dbus.Conn
		err  error
	}
	ch := make(chan dialed, 1)
	go func() {
		// Not dbus.WithContext: the connection outlives this call's context.
		conn, err := dbus.Dial(d.Address)
		if err != nil {
			err = fmt.Errorf("dbus %s: %w", d.Address, err)
		} else if err = conn.Auth(nil); err != nil {
			err = fmt.Errorf("dbus auth: %w", err)
		} else if err = conn.Hello(); err != nil {
			err = fmt.Errorf("dbus hello: %w", err)
		}
		if err != nil && conn != nil {
			conn.Close()
			conn = nil
		}
		ch <- dialed{conn, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, false, r.err
		}
		d.conn = r.conn
		return r.conn, true, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, false, fmt.Errorf("dbus %s: %w", d.Address, ctx.Err())
	}
}

// drop closes conn if it is still the current connection.
func (d *DBus) drop(conn *dbus.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == conn {
		d.conn = nil
	}
	conn.Close()
}

// Close closes the connection, if any; a later call dials again.
func (d *DBus) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		return nil
	}
	err := d.conn.Close()
	d.conn = nil
	return err
}

// Ping checks that Ganesha answers on the bus: org.freedesktop.DBus.Peer.Ping,
// which its bus library answers on the thread that serves the export manager.
// It costs the same whatever Ganesha holds (ShowExports, which this was, returned
// every export: 920 KB at 1,000, before every export loaded).
func (d *DBus) Ping(ctx context.Context) error {
	_, err := d.callIface(ctx, "org.freedesktop.DBus.Peer", "Ping")
	return err
}

// AddExport asks Ganesha to load export id from file; if it is already loaded, it is
// updated in place (clients, access and squash change without a restart).
func (d *DBus) AddExport(ctx context.Context, file string, id uint64) error {
	if _, err := exportID(id); err != nil {
		return err
	}
	sel := fmt.Sprintf("EXPORT(Export_Id=%d)", id)
	_, err := d.call(ctx, "AddExport", file, sel)
	if err == nil {
		return nil
	}
	if msg := err.Error(); !strings.Contains(msg, "already active") && !strings.Contains(msg, "xists") && !strings.Contains(msg, "uplicate") {
		return fmt.Errorf("add export %d: %w", id, err)
	}
	if _, err := d.call(ctx, "UpdateExport", file, sel); err != nil {
		return fmt.Errorf("update export %d: %w", id, err)
	}
	return nil
}

// RemoveExport unloads export id; an export that is not loaded is not an error.
func (d *DBus) RemoveExport(ctx context.Context, id uint64) error {
	id16, err := exportID(id)
	if err != nil {
		return err
	}
	_, err = d.call(ctx, "RemoveExport", id16)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("remove export %d: %w", id, err)
	}
	return nil
}

// HasExport reports whether export id is loaded.
func (d *DBus) HasExport(ctx context.Context, id uint64) (bool, error) {
	id16, err := exportID(id)
	if err != nil {
		return false, err
	}
	_, err = d.call(ctx, "DisplayExport", id16)
	if err == nil {
		return true, nil
	}
	if isNotFound(err) {
		return false, nil
	}
	return false, err
}

// ExportInfo is one export as Ganesha lists it.
type ExportInfo struct {
	ID uint64
	// Path is the export's pseudo path under Basin's configuration
	// (mount_path_pseudo), its real path otherwise.
	Path string
}

// ShowExports lists the exports Ganesha has loaded, in one call, leaving out its
// pseudo root (export 0).
func (d *DBus) ShowExports(ctx context.Context) ([]ExportInfo, error) {
	call, err := d.call(ctx, "ShowExports")
	if err != nil {
		return nil, fmt.Errorf("show exports: %w", err)
	}
	return parseShowExports(call.Body)
}

// parseShowExports reads ShowExports' reply: (tt) a timestamp, then
// a(qs…) — per export its id, its path and statistics Basin does not read.
func parseShowExports(body []any) ([]ExportInfo, error) {
	if len(body) < 2 {
		return nil, fmt.Errorf("show exports: reply %v", body)
	}
	rows, err := structs(body[1])
	if err != nil {
		return nil, fmt.Errorf("show exports: %w", err)
	}
	out := make([]ExportInfo, 0, len(rows))
	for _, row := range rows {
		if len(row) < 2 {
			return nil, fmt.Errorf("show exports: unexpected entry %v", row)
		}
		id, ok1 := row[0].(uint16)
		path, ok2 := row[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("show exports: unexpected entry %v", row)
		}
		if id != 0 {
			out = append(out, ExportInfo{ID: uint64(id), Path: path})
		}
	}
	return out, nil
}

// structs reads an array of structs as godbus decodes it into an interface:
// [][]any, or []any of []any.
func structs(v any) ([][]any, error) {
	switch v := v.(type) {
	case [][]any:
		return v, nil
	case []any:
		rows := make([][]any, 0, len(v))
		for _, r := range v {
			row, ok := r.([]any)
			if !ok {
				return nil, fmt.Errorf("unexpected entry %v", r)
			}
			rows = append(rows, row)
		}
		return rows, nil
	default:
		return nil, fmt.Errorf("unexpected list %T", v)
	}
}

func isNotFound(err error) bool {
	var de dbus.Error
	if errors.As(err, &de) {
		msg := strings.ToLower(fmt.Sprint(de.Body...))
		return strings.Contains(msg, "no export") || strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist")
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "no export") || strings.Contains(s, "not found") || strings.Contains(s, "does not exist")
}
