package smb

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Setting is an SMB share flag, numbered as the v1 API's SMBSettings enum
// (google.cloud.netapp.v1.SMBSettings), so the controller converts with Setting(n).
type Setting int32

// The API's SMB settings.
const (
	EncryptData            Setting = 1
	Browsable              Setting = 2
	ChangeNotify           Setting = 3
	NonBrowsable           Setting = 4
	Oplocks                Setting = 5
	ShowSnapshot           Setting = 6
	ShowPreviousVersions   Setting = 7
	AccessBasedEnumeration Setting = 8
	ContinuouslyAvailable  Setting = 9
)

// DefaultSettings apply when a volume names none: what a plain SMB share offers.
var DefaultSettings = []Setting{Browsable, ChangeNotify, Oplocks}

// SnapshotName is a snapshot's entry name in a share's snapshot directory: its
// creation time, UTC, in DefaultSnapshotFormat.
func SnapshotName(created time.Time) string {
	return created.UTC().Format("@GMT-2006.01.02-15.04.05")
}

var snapshotNameRE = regexp.MustCompile(`^@GMT-\d{4}\.\d{2}\.\d{2}-\d{2}\.\d{2}\.\d{2}$`)

// ValidSnapshotName reports whether name is one SnapshotName makes.
func ValidSnapshotName(name string) bool { return snapshotNameRE.MatchString(name) }

// DefaultSnapshotFormat is shadow_copy2's default name layout, in UTC: each entry
// of a share's snapshot directory must be named by its creation time in this
// layout (e.g. "@GMT-2026.11.22-22.36.56").
const DefaultSnapshotFormat = "@GMT-%Y.%m.%d-%H.%M.%S"

// MaxShareName is the v1 API's limit (and Windows' NNLEN).
const MaxShareName = 80

var (
	// shareNameRE is the v1 API's shareName rule (internal/intent); it already
	// excludes every character Samba or Windows treat specially in a share name
	// (/\[]:|<>+=;,*?" and controls) and '$' (hidden and IPC shares).
	shareNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$`)
	// reservedShares are section names smb.conf gives a meaning of their own.
	reservedShares = []string{"global", "homes", "printers", "print$", "ipc$"}
	// formatRE is a strftime layout for shadow:format: conversions and safe text.
	formatRE = regexp.MustCompile(`^[A-Za-z0-9@._:+-]*(%[YmdHMSjy][A-Za-z0-9@._:+-]*)+$`)
)

// ValidateShareName checks a share name: the v1 API's rule (1-80 letters, digits,
// '_' or '-', starting with a letter or digit) and none of the names smb.conf
// reserves (global, homes, printers, print$, ipc$; case-insensitive).
func ValidateShareName(name string) error {
	if !shareNameRE.MatchString(name) {
		return invalid("shareName", "must be 1-%d letters, digits, '_' or '-', starting with a letter or digit", MaxShareName)
	}
	for _, r := range reservedShares {
		if strings.EqualFold(name, r) {
			return invalid("shareName", "%q is reserved by Samba", name)
		}
	}
	return nil
}

// ShareSpec is one volume's SMB share.
type ShareSpec struct {
	Name string // shareName
	Path string // the volume's mount point as smbd sees it (absolute)
	// Settings are the volume's smbSettings; empty means DefaultSettings.
	Settings []Setting
	// SnapshotDir is the directory whose entries are the volume's read-only
	// snapshots, named by their UTC creation time in SnapshotFormat (absolute;
	// outside Path). Required with ShowSnapshot or ShowPreviousVersions.
	SnapshotDir string
	// SnapshotFormat is shadow:format; "" means DefaultSnapshotFormat.
	SnapshotFormat string
	// Snapshots are the entries SnapshotDir should hold: each snapshot's name
	// in SnapshotFormat (its UTC creation time) and the directory its read-only
	// tree is mounted on. The data plane keeps SnapshotDir's entries to these.
	Snapshots map[string]string
	// Comment is the share's description ("" = none).
	Comment string
	// NFS says the volume is served over NFS too (a dual-protocol volume):
	// SMB byte-range locks must then be POSIX locks NFS clients meet (see
	// ShareParams).
	NFS bool
	// UnixStyle says the volume's security style is UNIX (a dual-protocol
	// volume's choice): its mode bits, not NT ACLs, decide (see ShareParams).
	UnixStyle bool
}

// ShareParams returns the registry parameters of a share (`net conf setparm
// <share> <key> <value>` each), keyed by Samba's canonical parameter names (what
// `net conf list` reads back). The settings map as follows:
//
//   - security style: an NTFS volume (every SMB-only one) keeps NT ACLs in
//     user.NTACL (acl_xattr), and Samba writes the POSIX ACL it derives from
//     each (`acl_xattr:ignore system acls = no`, pinned): what NFS clients
//     of a dual-protocol volume are checked against. A UNIX volume
//     (UnixStyle) has no acl_xattr: Windows sees its mode bits (and POSIX
//     ACL) as an NT ACL (`nt acl support = yes`, ONTAP's default), an owner's
//     ACL edit becomes a chmod or POSIX ACL change, anyone else's is refused
//     (STATUS_ACCESS_DENIED); new files take the client's mode, not an
//     inherited ACL (`inherit acls = no`), and only owners change
//     permissions (`dos filemode = no`), and no SMB extended attributes (`ea
//     support = no`: SMB EAs are user.* xattrs, and nothing else would keep
//     clients from reading or planting user.NTACL). docs/design-dual-protocol.md;
//   - always: path, `read only = no`, `guest ok = no`, and the VFS stack
//     `fruit streams_xattr`, then acl_xattr on NTFS volumes (VFSObjects): alternate data streams, kept
//     in user.DosStream.* xattrs of their file (so they follow it through
//     renames, snapshots, clones and NFS-side deletes; a stream's size is bound
//     by the filesystem's largest xattr value, btrfs's node size less its
//     headers: about 3.9 KiB on Basin's volumes, whose btrfs has 4 KiB
//     nodes — a write beyond fails, nothing else is affected), macOS metadata
//     as NTFS and ONTAP keep it (Fruit: Finder info in the AFP_AfpInfo stream,
//     resource forks — which may be megabytes — in ._ AppleDouble files beside
//     their file, hidden from SMB clients), and, on NTFS volumes, NT ACLs in
//     user.NTACL (acl_xattr);
//   - locking (Locking): a volume served over SMB only keeps byte-range locks
//     in Samba's own lock database (`posix locking = no`), where every
//     connection of the instance sees them, and its handles can be durable
//     with locks held; a dual-protocol volume (NFS) maps them to POSIX locks
//     too, so NFS clients' locks and SMB clients' conflict, and has no durable
//     handles: Samba 4.17 panics reconnecting a durable handle that holds
//     byte-range locks under posix locking (it refuses the handle's new cookie,
//     then frees the handle with its file still open: source3/smbd/durable.c,
//     vfs_default_durable_reconnect). A dual-protocol volume's exclusive and
//     batch oplocks are kernel leases (`kernel oplocks = yes`): an NFS client
//     opening the file breaks the lease, smbd sends the SMB client its oplock
//     break, and the NFS call is answered NFS3ERR_JUKEBOX / NFS4ERR_DELAY
//     (Ganesha opens without blocking) until the client has flushed and let
//     go. The cost: Samba grants no SMB2 lease on such a share (a lease
//     cannot be backed by one kernel lease), so SMB3 clients cache nothing
//     there; oplock clients keep batch and exclusive oplocks;
//   - ENCRYPT_DATA: `server smb encrypt = required` (SMB3 clients only);
//   - BROWSABLE / NON_BROWSABLE: `browseable = yes / no` (both is an error);
//     neither: yes;
//   - ACCESS_BASED_ENUMERATION: `access based share enum = yes` (shares) and
//     `hide unreadable = yes` (files and folders);
//   - SHOW_SNAPSHOT, SHOW_PREVIOUS_VERSIONS: shadow_copy2 below the stream
//     modules (a stream of a previous version is read from that version's
//     file) and above acl_xattr, with shadow:snapdir/basedir/format/sort,
//     `shadow:localtime = no`: snapshots show in the Previous Versions tab
//     (clients ask by the TWrp create context: Samba 4.17 does not honour an
//     @GMT token in an SMB2 path);
//   - CONTINUOUSLY_AVAILABLE: durable handles with `kernel oplocks`, `kernel
//     share modes` and `posix locking` off (Samba refuses a durable handle under
//     either kernel setting, and one that holds byte-range locks under posix
//     locking), on a dual-protocol volume too, where SMB byte-range locks are
//     then not seen by NFS clients; and oplocks as with OPLOCKS: a durable
//     handle rides on a batch oplock or a handle lease, so a share without
//     oplocks grants none (smbtorture smb2.durable-open.reopen1a and
//     durable-v2-open.reopen1a fail there and pass with them; test/e2e
//     TestSMBShareSmbtorture). Samba 4.17 has no persistent handles and no CA
//     share capability: handles survive a network drop of up to 60 s, not an
//     smbd restart;
//   - OPLOCKS (or CONTINUOUSLY_AVAILABLE): `oplocks` and `level2 oplocks` yes
//     (leases follow the global `smb2 leases`); without either, both no;
//   - CHANGE_NOTIFY: nothing. `change notify` is a global parameter in Samba 4.17
//     (`net conf setparm` refuses it in a share: "Global parameter 'change notify'
//     not allowed in service definition"), on in every share; the flag is
//     accepted, and its absence cannot switch notifications off for one share.
func ShareParams(v ShareSpec) (map[string]string, error) {
	if err := ValidateShareName(v.Name); err != nil {
		return nil, err
	}
	if err := validateDir("path", v.Path); err != nil {
		return nil, err
	}
	if v.Comment != "" {
		if err := checkValue("description", v.Comment, 256); err != nil {
			return nil, err
		}
	}
	settings := v.Settings
	if len(settings) == 0 {
		settings = DefaultSettings
	}
	has := map[Setting]bool{}
	for _, s := range settings {
		if s < EncryptData || s > ContinuouslyAvailable {
			return nil, invalid("smbSettings", "unknown setting %d", s)
		}
		has[s] = true
	}
	if has[Browsable] && has[NonBrowsable] {
		return nil, invalid("smbSettings", "BROWSABLE and NON_BROWSABLE exclude each other")
	}
	oplocks := has[Oplocks] || has[ContinuouslyAvailable]
	p := map[string]string{
		"path":        v.Path,
		"read only":   "no",
		"guest ok":    "no",
		"vfs objects": strings.Join(VFSObjects(false), " "),
		"browseable":  yesNo(!has[NonBrowsable]),
		"oplocks":     yesNo(oplocks),
		// level2 oplocks needs oplocks; it is what lets several clients cache reads.
		"level2 oplocks": yesNo(oplocks),
	}
	maps.Copy(p, Fruit())
	maps.Copy(p, Locking(v.NFS))
	if v.UnixStyle {
		p["vfs objects"] = strings.Join(slices.DeleteFunc(VFSObjects(false), isACLXattr), " ")
		p["nt acl support"] = "yes"
		p["inherit acls"] = "no"
		p["dos filemode"] = "no"
		// Without acl_xattr nothing hides user.NTACL (Basin's name for the
		// NT ACL's xattr; only security.NTACL is Samba's own secret): an SMB
		// client could read it, or plant one that would decide access in a
		// clone that follows NT ACLs. SMB EAs are user.* xattrs: none here.
		p["ea support"] = "no"
	} else {
		p["acl_xattr:ignore system acls"] = "no"
	}
	if v.Comment != "" {
		p["comment"] = v.Comment
	}
	if has[EncryptData] {
		p["server smb encrypt"] = "required"
	}
	if has[AccessBasedEnumeration] {
		p["access based share enum"] = "yes"
		p["hide unreadable"] = "yes"
	}
	if has[ShowSnapshot] || has[ShowPreviousVersions] {
		if err := validateDir("snapshotDirectory", v.SnapshotDir); err != nil {
			return nil, err
		}
		if v.SnapshotDir == v.Path || strings.HasPrefix(v.SnapshotDir, v.Path+"/") {
			return nil, invalid("snapshotDirectory", "must be outside the share's path")
		}
		format := v.SnapshotFormat
		if format == "" {
			format = DefaultSnapshotFormat
		}
		if len(format) > 64 || !formatRE.MatchString(format) {
			return nil, invalid("snapshotFormat", "must be a strftime layout of %%Y %%m %%d %%H %%M %%S %%j %%y and letters, digits or @._:+-")
		}
		objs := VFSObjects(true)
		if v.UnixStyle {
			objs = slices.DeleteFunc(objs, isACLXattr)
		}
		p["vfs objects"] = strings.Join(objs, " ")
		p["shadow:snapdir"] = v.SnapshotDir
		p["shadow:basedir"] = v.Path
		p["shadow:format"] = format
		p["shadow:sort"] = "desc"
		p["shadow:localtime"] = "no"
	}
	if has[ContinuouslyAvailable] {
		p["durable handles"] = "yes"
		p["kernel oplocks"] = "no"
		p["kernel share modes"] = "no"
		p["posix locking"] = "no"
	}
	return p, nil
}

// VFSObjects is a share's VFS stack, top first: fruit (macOS clients' special
// streams) above streams_xattr (it hands every other named stream on, and
// must sit right below it), then shadow_copy2 when the share shows snapshots
// (it turns a previous version's base file into the snapshot's, whose
// xattrs hold that version's streams), then acl_xattr (NT ACLs of the file
// the modules above settled on).
func VFSObjects(snapshots bool) []string {
	if snapshots {
		return []string{"fruit", "streams_xattr", "shadow_copy2", "acl_xattr"}
	}
	return []string{"fruit", "streams_xattr", "acl_xattr"}
}

func isACLXattr(o string) bool { return o == "acl_xattr" }

// Fruit are vfs_fruit's per-share settings (its global ones are in
// RenderGlobal's file semantics): Finder info in an AFP_AfpInfo stream (60
// bytes, an xattr through streams_xattr, as NTFS and ONTAP keep it); resource
// forks in ._ AppleDouble files (Samba's default: they may be far larger than
// an xattr can hold), hidden from SMB clients, and not kept when they only
// hold what macOS writes to mean "empty".
func Fruit() map[string]string {
	return map[string]string{
		"fruit:metadata":                            "stream",
		"fruit:resource":                            "file",
		"fruit:veto_appledouble":                    "yes",
		"fruit:wipe_intentionally_left_blank_rfork": "yes",
		"fruit:delete_empty_adfiles":                "yes",
	}
}

// Locking is a share's byte-range locking and oplocks, by whether the volume
// is served over NFS too (see ShareParams).
func Locking(nfs bool) map[string]string {
	if nfs {
		return map[string]string{"posix locking": "yes", "durable handles": "no", "kernel oplocks": "yes"}
	}
	return map[string]string{"posix locking": "no", "durable handles": "yes"}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Op is a registry change: set a parameter or delete it.
type Op string

// Registry operations.
const (
	SetParm Op = "setparm"
	DelParm Op = "delparm"
)

// Step is one `net conf` change of a share.
type Step struct {
	Op    Op
	Key   string
	Value string // SetParm only
}

// Args is the step's argv for share in the registry of the smb.conf at conf:
// net -s <conf> conf setparm <share> <key> <value> (or delparm without value).
func (s Step) Args(conf, share string) []string {
	a := []string{NetBinary, "-s", conf, "conf", string(s.Op), share, s.Key}
	if s.Op == SetParm {
		a = append(a, s.Value)
	}
	return a
}

// ShareDiff returns the steps that turn a share's parameters old into new: a
// setparm for each key new adds or changes, then a delparm for each key only old
// has; each group in key order. `net conf setparm` creates a missing share, so the
// diff from nil creates one. Changes reach new connections without a reload
// (`vfs objects` only on new tree connects).
func ShareDiff(old, new map[string]string) []Step {
	var steps []Step
	for _, k := range slices.Sorted(maps.Keys(new)) {
		if ov, ok := old[k]; !ok || ov != new[k] {
			steps = append(steps, Step{Op: SetParm, Key: k, Value: new[k]})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := new[k]; !ok {
			steps = append(steps, Step{Op: DelParm, Key: k})
		}
	}
	return steps
}

// DelShareArgs is the argv that removes a share from the registry.
func DelShareArgs(conf, share string) []string {
	return []string{NetBinary, "-s", conf, "conf", "delshare", share}
}
