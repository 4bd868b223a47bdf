package dataplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/smb"
)

// A Samba instance is one (network, AD connection) pair: samba-dcerpcd, winbindd
// and smbd joined to that AD as one machine, in the sandbox's network namespace
// but in a mount namespace of its own (a slave of the sandbox's), where its own
// tmpfs covers /run/samba (libwbclient's compiled-in socket directory) and its own
// files cover /etc (resolver, hosts, nsswitch with winbind) and /var (Samba's
// compiled-in log and state paths). Everything it keeps lives in
// <sandbox>/smb/<id>/, which survives Basin restarts and sandbox rebuilds:
//
//	membership.json  what it is joined as (written once the join succeeded)
//	addrs.json       share name → endpoint address
//	smb.conf         smb.RenderGlobal's output; shares are in the registry
//	dcerpcd.conf     smb.RenderDCERPC's: samba-dcerpcd's, on the loopback alone
//	krb5.conf        KRB5_CONFIG of every process of the instance
//	etc/ var/        bound over /etc and /var inside its mount namespace
//	private/ lock/ state/ cache/ run/ log/   Samba's directories (smb.Dirs)
//	winbindd/        bound at /run/samba/winbindd: winbindd's socket, which
//	                 the sandbox's Ganesha reaches too when it serves Kerberos
//	                 with this instance's identity (nfskrb5.go)

// smbInstanceID names an AD connection's instance: "s" and the first 8 hex digits
// of the SHA-256 of the AD connection's resource name.
func smbInstanceID(ad string) string {
	h := sha256.Sum256([]byte(ad))
	return "s" + hex.EncodeToString(h[:4])
}

// smbLoopback is the instance's own loopback address (127.x.y.z from its id), so
// that several smbds in one network namespace never bind the same address.
func smbLoopback(id string) netip.Addr {
	h := sha256.Sum256([]byte("basin-smb-loopback " + id))
	z := h[2]
	if z == 0 || z == 255 {
		z = 1
	}
	return netip.AddrFrom4([4]byte{127, 1 + h[0]%254, h[1], z})
}

// Capability bounding sets of the instance's daemons (setpriv syntax). None has
// sys_admin, sys_ptrace, net_admin, sys_module or kill (a daemon signals only its
// own children, whose real or saved uid is still root). The root test's scenario
// (join, NTLM and Kerberos logons, writes as a domain user with NT ACLs, restarts)
// runs with these; winbindd's and samba-dcerpcd's are what remained after
// removing setuid, setgid, fowner and kill (winbindd) and chown, fowner and kill
// (samba-dcerpcd) from a working set.
const (
	// smbd becomes each user (setuid/setgid; its children keep root as their
	// saved id), binds 445, creates files for any owner with their NT ACLs in
	// the user.NTACL xattr (chown, fowner, fsetid, dac_override, dac_read_search:
	// the same file rights as Ganesha's; security.* xattrs would need
	// sys_admin, smb.NTACLName) and raises its descriptor limit. It takes a
	// kernel lease on a file it holds an oplock on (a dual-protocol share's
	// `kernel oplocks`, smb.Locking) as root, for files of any owner (lease).
	smbdCaps = "-all,+chown,+dac_override,+dac_read_search,+fowner,+fsetid,+setuid,+setgid,+net_bind_service,+sys_resource,+lease"
	// winbindd gives its privileged pipe directory its group (chown), opens its
	// state as root (dac_override) and raises its descriptor limit.
	winbinddCaps = "-all,+chown,+dac_override,+sys_resource"
	// samba-dcerpcd and its rpcd_* workers answer the named pipes smbd forwards,
	// as the connected user for some calls (setuid/setgid); it binds epmapper's
	// port 135 on the instance's loopback address (net_bind_service: without it
	// the bind failed, and when epmapper's setup happened to finish last
	// samba-dcerpcd never accepted a connection on any pipe, see services).
	dcerpcdCaps = "-all,+dac_override,+setuid,+setgid,+net_bind_service,+sys_resource"
)

// smbDaemons are the names SMBPID knows.
var smbDaemons = []string{"samba-dcerpcd", "winbindd", "smbd"}

// toolTimeout bounds one run of a Samba tool (net, smbcontrol).
const toolTimeout = 90 * time.Second

// dcerpcdBinary is Debian's path of samba-dcerpcd.
const dcerpcdBinary = "/usr/libexec/samba/samba-dcerpcd"

// smbInstance is one running (or starting) instance.
type smbInstance struct {
	id, ad string
	dir    string // <sandbox>/smb/<id>
	sb     *sandbox
	log    *slog.Logger

	holder runner.Process
	dead   chan struct{} // closed when the holder exits
	rec    recorder      // procs.json: holder and daemons, for the next Basin
	// adopt are the daemons an earlier Basin left running, recorded in
	// procs.json, whose holder this instance adopted: startDaemons adopts them.
	adopt  map[string]runner.ProcID
	sup    atomic.Pointer[supervisor] // nil until the daemons run; read without the instance's lock (metrics)
	cancel context.CancelFunc
	probe  probeState // smbd's readiness probe (smbhealth.go)
}

func (in *smbInstance) conf() string           { return filepath.Join(in.dir, "smb.conf") }
func (in *smbInstance) dcerpcdConf() string    { return filepath.Join(in.dir, "dcerpcd.conf") }
func (in *smbInstance) dirs() smb.Dirs         { return smb.GlobalOptions{StateDir: in.dir}.Dirs() }
func (in *smbInstance) membershipFile() string { return filepath.Join(in.dir, "membership.json") }
func (in *smbInstance) addrsFile() string      { return filepath.Join(in.dir, "addrs.json") }

// globalOptions is what the instance's smb.conf is rendered from. smbd
// listens on the instance's loopback address alone, whatever its endpoints:
// they reach it through NAT (smbnat.go), so that an endpoint's coming or going
// never restarts smbd.
func (in *smbInstance) globalOptions(mb SMBMembership) smb.GlobalOptions {
	return smb.GlobalOptions{Realm: mb.Realm, Workgroup: mb.Workgroup, MachineName: mb.MachineName, StateDir: in.dir,
		Loopback: smbLoopback(in.id), AESOnly: mb.AESOnly, LDAPSigning: mb.LDAPSigning, DCs: mb.DCs}
}

// environ is every instance process's environment besides Basin's own.
func (in *smbInstance) environ() []string {
	return smb.GlobalOptions{StateDir: in.dir}.Environ()
}

func (in *smbInstance) alive() bool {
	if in.holder == nil {
		return false
	}
	select {
	case <-in.dead:
		return false
	default:
		return in.sb.alive()
	}
}

// fqdn is the instance's machine name in DNS.
func fqdn(mb SMBMembership) string {
	return strings.ToLower(mb.MachineName) + "." + strings.ToLower(mb.Realm)
}

// prepareDirs makes the instance's directories and writes its files: Samba's
// directories, etc/ (the sandbox's /etc with the instance's resolver, hosts and
// nsswitch.conf), var/ and krb5.conf. Directories bound into the mount namespace are
// created once and never replaced (a bind mount keeps pointing at a deleted
// directory, not at its replacement); files are rewritten in place of themselves,
// which the bind of the whole directory sees. Each directory gets its mode on every
// start (instanceDirModes), so an instance made by an older Basin is corrected too.
func (in *smbInstance) prepareDirs(mb SMBMembership, addrs []netip.Addr) error {
	for _, dm := range instanceDirModes(in.dir) {
		if err := os.MkdirAll(dm.path, dm.mode); err != nil {
			return err
		}
		if err := os.Chmod(dm.path, dm.mode); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(filepath.Join(in.dir, "var", "run")); errors.Is(err, os.ErrNotExist) {
		if err := os.Symlink("../run", filepath.Join(in.dir, "var", "run")); err != nil {
			return err
		}
	}
	return in.writeFiles(mb, addrs)
}

type dirMode struct {
	path string
	mode os.FileMode
}

// instanceDirModes are the instance's directories (parents first) and their
// modes: Samba's own defaults (Debian's /run/samba, /var/lib/samba,
// /var/cache/samba are 0755, /var/lib/samba/private 0700). smbd's children run as
// the connected user and still use the lock, state and cache directories: an
// smbd tells whether another is alive by opening its lock file
// (lock/msg.lock/<pid>), and with a lock directory others cannot cross, every
// other connection looks dead — share modes, oplock and lease breaks, pending
// deletes and byte-range locks between connections were ignored. private/ (the
// machine secret, the message sockets) stays 0700, log/ 0700 (only root
// writes it). The instance's mount namespace shows it nothing of the sandbox but
// its own directory (instanceHolderScript), so these modes open nothing of
// another instance or of the sandbox to its users.
func instanceDirModes(dir string) []dirMode {
	d := smb.GlobalOptions{StateDir: dir}.Dirs()
	return []dirMode{
		{dir, 0o755},
		{d.Private, 0o700},
		{d.Lock, 0o755},
		{d.State, 0o755},
		{d.Cache, 0o755},
		{d.Run, 0o755},
		{d.NCALRPC, 0o755},
		{d.Log, 0o700},
		{filepath.Join(dir, "etc"), 0o755},
		// winbindd refuses a socket directory that is not root's with mode 0755.
		{filepath.Join(dir, "winbindd"), 0o755},
		{filepath.Join(dir, "var"), 0o755},
		{filepath.Join(dir, "var", "log"), 0o755},
		{filepath.Join(dir, "var", "log", "samba"), 0o700},
		{filepath.Join(dir, "var", "lib"), 0o755},
		{filepath.Join(dir, "var", "lib", "samba"), 0o755},
		{filepath.Join(dir, "var", "cache"), 0o755},
		{filepath.Join(dir, "var", "cache", "samba"), 0o755},
	}
}

// writeFiles writes etc/ and krb5.conf from the membership.
func (in *smbInstance) writeFiles(mb SMBMembership, addrs []netip.Addr) error {
	etc := filepath.Join(in.dir, "etc")
	ents, err := os.ReadDir(filepath.Join(in.sb.dir, "etc"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		// The instance keeps an mtab of its own (writeMtab).
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || e.Name() == "mtab" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(in.sb.dir, "etc", e.Name()))
		if err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(etc, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	for name, content := range instanceEtc(mb, addrs, smbLoopback(in.id)) {
		if err := writeFileAtomic(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(etc, "mtab")); errors.Is(err, fs.ErrNotExist) {
		if err := writeFileAtomic(filepath.Join(etc, "mtab"), nil, 0o644); err != nil {
			return err
		}
	}
	return writeFileAtomic(filepath.Join(in.dir, "krb5.conf"), []byte(renderKrb5(mb)), 0o644)
}

// instanceEtc are the instance's own files in its /etc: its host name is its
// machine name (its own UTS namespace: see instanceHolderScript), its resolver
// is the AD connection's DNS servers, its hosts file names its machine (and the
// KDC when one is given), and nsswitch.conf asks winbind for users and groups
// (smbd needs getpwnam of domain users: without it a good password gets
// LOGON_FAILURE).
func instanceEtc(mb SMBMembership, addrs []netip.Addr, loopback netip.Addr) map[string]string {
	var resolv strings.Builder
	for _, a := range mb.DNS {
		fmt.Fprintf(&resolv, "nameserver %s\n", a)
	}
	fmt.Fprintf(&resolv, "search %s\n", strings.ToLower(mb.Realm))
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	self := loopback
	if len(addrs) > 0 {
		self = addrs[0]
	}
	fmt.Fprintf(&hosts, "%s %s %s\n", self, fqdn(mb), strings.ToLower(mb.MachineName))
	if mb.KDC.IsValid() && mb.KDCHostname != "" {
		fmt.Fprintf(&hosts, "%s %s\n", mb.KDC, strings.ToLower(mb.KDCHostname))
	}
	return map[string]string{
		"hostname":      strings.ToLower(mb.MachineName) + "\n",
		"resolv.conf":   resolv.String(),
		"hosts":         hosts.String(),
		"nsswitch.conf": "passwd: files winbind\ngroup: files winbind\nshadow: files\nhosts: files dns\nservices: files\nrpc: files\nnetgroup: files\n",
	}
}

// renderKrb5 is the instance's krb5.conf: the realm, and its KDCs: the one the
// AD connection names, else the DCs discovery found for its site, else DNS.
func renderKrb5(mb SMBMembership) string {
	realm := strings.ToUpper(mb.Realm)
	var b strings.Builder
	fmt.Fprintf(&b, "[libdefaults]\n\tdefault_realm = %s\n\tdns_lookup_realm = false\n", realm)
	if mb.AESOnly {
		b.WriteString("\tdefault_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96\n")
		b.WriteString("\tdefault_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96\n")
		b.WriteString("\tpermitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96\n")
	}
	switch {
	case mb.KDC.IsValid():
		kdc := mb.KDC.String()
		if mb.KDCHostname != "" {
			kdc = strings.ToLower(mb.KDCHostname)
		}
		fmt.Fprintf(&b, "\tdns_lookup_kdc = false\n[realms]\n\t%s = {\n\t\tkdc = %s\n\t\tadmin_server = %s\n\t}\n", realm, kdc, kdc)
	case len(mb.DCs) > 0:
		// The site's DCs (or the domain's, when the site has none) are its KDCs:
		// MIT Kerberos knows nothing of AD sites.
		fmt.Fprintf(&b, "\tdns_lookup_kdc = false\n[realms]\n\t%s = {\n", realm)
		for _, dc := range mb.DCs {
			fmt.Fprintf(&b, "\t\tkdc = %s\n", dc)
		}
		fmt.Fprintf(&b, "\t\tadmin_server = %s\n\t}\n", mb.DCs[0])
	default:
		b.WriteString("\tdns_lookup_kdc = true\n")
	}
	return b.String()
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// renderConf writes smb.conf for the membership, and samba-dcerpcd's
// dcerpcd.conf (the same).
func (in *smbInstance) renderConf(mb SMBMembership) error {
	o := in.globalOptions(mb)
	rpc, err := smb.RenderDCERPC(o)
	if err != nil {
		return err
	}
	conf, err := smb.RenderGlobal(o)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(in.dcerpcdConf(), []byte(rpc), 0o644); err != nil {
		return err
	}
	return writeFileAtomic(in.conf(), []byte(conf), 0o644)
}

// instanceHolderScript builds the instance's mount namespace inside the
// sandbox's: a private tmpfs at /run/samba (with the instance's winbindd/ at
// /run/samba/winbindd, so that winbindd's socket lives in the instance's
// directory, where the sandbox's Ganesha can be given it), the instance's etc/ and var/ over
// /etc and /var, and a tmpfs over the sandbox's directory holding only the
// instance's own directory (moved back to its path): the instance's processes,
// whatever user they act as, see neither the sandbox's files (Ganesha's
// configuration, its bus) nor another instance's (another domain's tenants'
// lock and state databases), while Samba's directories inside their own keep
// Samba's modes (instanceDirModes). Volumes stay visible: they are mounted
// outside the sandbox's directory. Its UTS namespace is its own, named after
// its machine (etc/hostname): smbd resolves its host name to its DNS name for
// every negotiate and NTLM logon (get_mydnsfullname, not cached when it fails),
// and the host's name, which no hosts file of the instance holds, went to the
// domain's DNS servers each time, and could not be answered. Then it sleeps.
const instanceHolderScript = `set -eu
inst="$1"; box="$2"
if [ -s "$inst/etc/hostname" ]; then hostname "$(cat "$inst/etc/hostname")"; fi
mkdir -p /run/samba
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs /run/samba
mkdir /run/samba/winbindd
mount --bind "$inst/winbindd" /run/samba/winbindd
mount --bind "$inst/etc" /etc
mount -o remount,bind,ro,nosuid,nodev /etc
mount --bind "$inst/var" /var
mkdir /run/samba/.inst
mount --rbind "$inst" /run/samba/.inst
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs "$box"
mkdir -p "$inst"
mount --move /run/samba/.inst "$inst"
rmdir /run/samba/.inst
` + holderTail

// startHolder starts the process owning the instance's mount namespace: it
// enters the sandbox holder's namespaces and unshares a mount namespace whose
// mounts follow the sandbox's (volumes mounted later appear).
func (in *smbInstance) startHolder() error {
	in.rec.write = in.saveProcs
	in.rec.log = in.log.Warn
	if p, daemons, ok := in.adoptHolder(); ok {
		in.holder, in.adopt = p, daemons
		in.rec.holder, in.rec.daemons = mustID(p), map[string]runner.ProcID{}
	} else {
		cmd := exec.Command("nsenter", "-t", pidString(in.sb.holder), "-m", "-n", "--",
			"unshare", "--mount", "--uts", "--propagation", "slave", "--", "sh", "-c", instanceHolderScript, "smb-holder", in.dir, in.sb.dir)
		p, err := startHolderProcess(cmd, "samba instance holder", in.sb.detached)
		if err != nil {
			return err
		}
		in.holder = p
		in.rec.setHolder(p)
	}
	in.dead = make(chan struct{})
	dead, p := in.dead, in.holder
	go func() { p.Wait(); close(dead) }() //nolint:errcheck // only its end matters
	return nil
}

// procsState is an instance's procs.json.
type procsState struct {
	Version int                      `json:"version"`
	Holder  runner.ProcID            `json:"holder"`
	Daemons map[string]runner.ProcID `json:"daemons"`
}

func (in *smbInstance) procsFile() string { return filepath.Join(in.dir, "procs.json") }

func (in *smbInstance) saveProcs(holder runner.ProcID, daemons map[string]runner.ProcID) error {
	return writeJSON(in.procsFile(), procsState{Version: stateVersion, Holder: holder, Daemons: daemons})
}

// mustID is p's ProcID, the zero one if it is gone already.
func mustID(p runner.Process) runner.ProcID {
	id, _ := runner.ID(p.Pid())
	return id
}

// adoptHolder takes over the instance's holder an earlier Basin left running,
// with the daemons it recorded, if the holder is the process recorded and in
// the sandbox's network namespace. Daemons recorded without an adoptable
// holder are ended: they run in a mount namespace nobody holds any more.
func (in *smbInstance) adoptHolder() (runner.Process, map[string]runner.ProcID, bool) {
	var st procsState
	if err := readJSONVersioned(in.procsFile(), &st, func() int { return st.Version }); err != nil {
		return nil, nil, false
	}
	nsFile := filepath.Join("/run/netns", in.sb.ns)
	if p, err := runner.Adopt(st.Holder); err == nil {
		if sameNetns(p.Pid(), nsFile) {
			in.log.Info("samba instance holder adopted", "holder", p.Pid())
			return p, st.Daemons, true
		}
	}
	for name, id := range st.Daemons {
		if p, err := runner.Adopt(id); err == nil && sameNetns(p.Pid(), nsFile) {
			in.log.Info("ending a samba daemon left without its namespace's holder", "daemon", name, "pid", id.Pid)
			p.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
			p.Wait()                  //nolint:errcheck // only its end matters
			killSession(id.Pid)
		}
	}
	os.Remove(in.procsFile())
	return nil, nil, false
}

// run runs argv inside the instance's namespaces with its environment, and
// password (if not empty) on the pipe net reads (smb.PasswordPipe): never in argv
// or the environment. It returns standard output and error together.
func (in *smbInstance) run(ctx context.Context, password []byte, argv ...string) (string, error) {
	if in.holder == nil {
		return "", errors.New("samba instance not started")
	}
	// No Samba tool may hang an operation: net's own network timeouts are
	// shorter than this.
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	args := append([]string{"-t", pidString(in.holder), "-m", "-n", "-u", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), in.environ()...)
	// No controlling terminal: net cannot prompt for what it was not given.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if len(password) > 0 {
		r, err := smb.PasswordPipe(string(password))
		if err != nil {
			return "", err
		}
		defer r.Close()
		cmd.ExtraFiles = []*os.File{r}
		cmd.Env = append(cmd.Env, smb.PasswordEnv)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	in.log.Debug("samba tool", "argv", argv, "took", time.Since(t0), "err", err)
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		msg := out.String()
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return out.String(), &runner.Error{Argv: argv, ExitCode: code, Stderr: msg, Err: err}
	}
	return out.String(), nil
}

// services are the instance's daemons: samba-dcerpcd with its rpcd_* workers as
// children (no on-demand helpers that would escape the supervisor), winbindd and
// smbd, each in the foreground, in no process group of their own, and restarted
// independently: winbindd as eagerly as smbd, since no logon works without it;
// neither needs a re-join (secrets.tdb is kept).
func (in *smbInstance) services() []Service {
	root := filepath.Join("/proc", pidString(in.holder), "root")
	conf := in.conf()
	// Each daemon logs to log/log.<its name> (winbindd's children to
	// log.wb-<domain>, samba-dcerpcd's workers to log.rpcd_*): names no client
	// chooses (see boundLogs).
	flags := func(conf string) []string {
		return []string{"-s", conf, "--foreground", "--no-process-group", "--log-basename=" + in.dirs().Log}
	}
	fg := flags(conf)
	svcs := []Service{
		// samba-dcerpcd reads dcerpcd.conf (smb.RenderDCERPC: its TCP
		// endpoints on the loopback address only). It is ready once it
		// accepts on its pipes (pipeServed), not when they exist: Samba 4.17
		// creates every listening socket first and accepts on none until each
		// rpcd_* server's setup has finished, and when one failed last (epmapper
		// without port 135) it never did: winbindd's first call to the local SAM
		// waited, and smbd with it, before listening, for as long as it was let.
		{Name: "samba-dcerpcd", Argv: append([]string{dcerpcdBinary, "--libexec-rpcds"}, flags(in.dcerpcdConf())...), Env: in.environ(),
			Caps: dcerpcdCaps, Ready: pipeServed(filepath.Join(in.dirs().NCALRPC, "np", "winreg"))},
		// winbindd after samba-dcerpcd: its local domain's child asks
		// samba-dcerpcd (SAM) as soon as it starts, and logged "Can't
		// connect to a running samba-dcerpcd" when both started together.
		{Name: "winbindd", Argv: append([]string{"winbindd"}, fg...), Env: in.environ(), Caps: winbinddCaps,
			DependsOn: []string{"samba-dcerpcd"},
			Ready:     dialReady(filepath.Join(root, smb.WinbinddSocketDir, "pipe"))},
		// smbd starts once winbindd and samba-dcerpcd answer, and starts again
		// after either restarts: an smbd that came up while winbindd was down
		// left clients hanging (NT_STATUS_IO_TIMEOUT) in about one run in four.
		{Name: "smbd", Argv: append([]string{"smbd"}, fg...), Env: in.environ(), Caps: smbdCaps,
			DependsOn: []string{"samba-dcerpcd", "winbindd"},
			Ready:     in.smbdReady},
	}
	for i := range svcs {
		svcs[i].AfterExit = killSession
	}
	return svcs
}

// killSession ends every process left in the session sid (a daemon started by
// setsid leads its own, and its children stay in it: a killed smbd's children
// would keep its listening sockets, accepting connections nobody serves), and
// waits, bounded, until they are gone. Each is signalled through a pidfd once it
// is seen to be in the session (runner.Signal): the session's leader has exited
// by now, and a pid of the listing may have been reused. Then it waits, bounded,
// until they are reaped too (Basin reaps them: runner.StartReaper): Samba takes a
// process that still has its pid, a zombie, for alive, and the next smbd's
// notifyd could not take its name while the last one's lingered.
func killSession(sid int) {
	runner.KillAll(runner.InSession(sid), 10*time.Second) //nolint:errcheck // bounded; what is left dies with the sandbox
	runner.WaitSessionGone(sid, 5*time.Second)            //nolint:errcheck // bounded; a zombie left is init's to reap
}

// command runs a daemon in the instance's namespaces, with only its bounding
// set. The starter gives it a session of its own (runner.ExecStarter): with
// --no-process-group a Samba daemon stays in its parent's process group, and
// smbd ending on SIGTERM signals its whole group, which would otherwise be
// Basin's.
func (in *smbInstance) command(s Service) runner.Command {
	args := []string{"-t", pidString(in.holder), "-m", "-n", "-u", "--",
		"setpriv", "--bounding-set", s.Caps, "--inh-caps", "-all", "--no-new-privs", "--"}
	return runner.Command{Name: "nsenter", Args: append(args, s.Argv...), Env: s.Env}
}

func (in *smbInstance) output(name string) io.WriteCloser {
	f, err := os.OpenFile(filepath.Join(in.dir, "log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		in.log.Warn("daemon output", "daemon", name, "err", err)
		return nopCloser{io.Discard}
	}
	return f
}

// startDaemons starts the supervisor and waits until every daemon is ready;
// onRestart is the supervisor's OnRestart.
func (in *smbInstance) startDaemons(ctx context.Context, starter runner.Starter, timeout time.Duration, onRestart func(daemon, reason string)) error {
	if sup := in.sup.Load(); sup != nil {
		return in.waitReady(ctx, sup, timeout)
	}
	var adopt func(string) runner.Process
	if in.adopt != nil {
		recorded, nsFile := in.adopt, filepath.Join("/run/netns", in.sb.ns)
		in.adopt = nil
		adopt = func(name string) runner.Process {
			id, ok := recorded[name]
			if !ok {
				return nil
			}
			p, err := runner.Adopt(id)
			if err != nil || !sameNetns(p.Pid(), nsFile) {
				in.log.Info("samba daemon not running; starting it", "daemon", name, "pid", id.Pid)
				return nil
			}
			return p
		}
	}
	sup, err := newSupervisor(supervisorOptions{Starter: starter, Command: in.command, Output: in.output,
		Log: in.log, ReadyTimeout: timeout, OnRestart: onRestart, Adopt: adopt, Started: in.rec.started}, in.services())
	if err != nil {
		return err
	}
	life, cancel := context.WithCancel(context.Background())
	dead, sbDead := in.dead, in.sb.dead
	go func() {
		select {
		case <-dead:
		case <-sbDead:
		case <-life.Done():
		}
		cancel()
	}()
	in.sup.Store(sup)
	in.cancel = cancel
	sup.start(life)
	go in.boundLogs(life)
	return in.waitReady(ctx, sup, timeout)
}

// waitReady waits until every daemon is ready; an error says what smbd's last
// probe met.
func (in *smbInstance) waitReady(ctx context.Context, sup *supervisor, timeout time.Duration) error {
	err := sup.waitReadyTimeout(ctx, timeout)
	if err == nil {
		return nil
	}
	if perr := in.lastProbe(); perr != nil {
		return fmt.Errorf("%w (%v)", err, perr)
	}
	return err
}

// waitReadyTimeout is waitReady bounded by timeout (and ctx).
func (s *supervisor) waitReadyTimeout(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	return s.waitReady(rctx)
}

// stopDaemons stops the daemons; the namespace stays.
func (in *smbInstance) stopDaemons() {
	if sup := in.sup.Swap(nil); sup != nil {
		sup.stop()
	}
	if in.cancel != nil {
		in.cancel()
		in.cancel = nil
	}
}

// stop stops the daemons and the holder (ending the mount namespace). Processes
// a daemon left behind die with the sandbox's namespace at the latest.
func (in *smbInstance) stop() {
	in.stopDaemons()
	if in.holder != nil {
		// The holder execs down to one process (nsenter, unshare, sh, sleep).
		// Killed by its pidfd: not by pid or process group, which a holder that
		// died earlier may have left to another process.
		in.holder.Signal(syscall.SIGKILL) //nolint:errcheck // gone already is fine
		<-in.dead
	}
	os.Remove(in.procsFile())
}

// detach stops supervising the instance and leaves it serving, recorded in
// procs.json for the next Basin.
func (in *smbInstance) detach() {
	if sup := in.sup.Swap(nil); sup != nil {
		sup.detach()
	}
	if in.cancel != nil {
		in.cancel()
		in.cancel = nil
	}
}

func (in *smbInstance) pid(daemon string) int {
	sup := in.sup.Load()
	if sup == nil {
		return 0
	}
	return sup.pid(daemon)
}

// readMembership reads the recorded membership; ok is false when there is none.
func readMembership(path string) (SMBMembership, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return SMBMembership{}, false, nil
	}
	if err != nil {
		return SMBMembership{}, false, err
	}
	var mb SMBMembership
	if err := json.Unmarshal(data, &mb); err != nil {
		return SMBMembership{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return mb, true, nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(data, '\n'), 0o600)
}

// readAddrs reads share name → endpoint address (empty when absent).
func readAddrs(path string) (map[string]netip.Addr, error) {
	m := map[string]netip.Addr{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// addrList is the sorted set of the map's addresses.
func addrList(m map[string]netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range m {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// parseConfList parses `net conf list` (smb.conf syntax: "[share]" headers and
// "\tkey = value" lines) into share → parameters, leaving out [global].
func parseConfList(out string) map[string]map[string]string {
	shares := map[string]map[string]string{}
	var cur map[string]string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			name := line[1 : len(line)-1]
			if strings.EqualFold(name, "global") {
				cur = nil
				continue
			}
			cur = map[string]string{}
			shares[name] = cur
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || cur == nil {
			continue
		}
		cur[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return shares
}

// dialInNetns connects from inside the named network namespace.
func dialInNetns(ctx context.Context, nsName, network, address string) (c net.Conn, err error) {
	err = inNetns(nsName, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// inNetns runs fn on a thread inside the named network namespace: sockets fn
// opens (on its own goroutine, without handing work to others) belong to it.
func inNetns(nsName string, fn func() error) error {
	target, err := netns.GetFromName(nsName)
	if err != nil {
		return fmt.Errorf("netns %s: %w", nsName, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if serr := netns.Set(orig); serr != nil {
		// This thread stays in the wrong namespace: keep it locked so it dies
		// with the goroutine.
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", serr))
	}
	runtime.UnlockOSThread()
	return ferr
}

func (in *smbInstance) localGroupsFile() string { return filepath.Join(in.dir, "localgroups.json") }

// applyLocalGroups makes the instance's BUILTIN groups and privileges what rec
// asks (smb.LocalGroupsPlan from what was applied before, recorded beside the
// membership). It runs with the daemons up: names become SIDs through winbindd. A
// name the domain does not know is a *smb.JoinError naming the field; what was
// applied before it stays recorded.
func (in *smbInstance) applyLocalGroups(ctx context.Context, rec SMBMembership) error {
	var applied smb.LocalGroups
	if data, err := os.ReadFile(in.localGroupsFile()); err == nil {
		if err := json.Unmarshal(data, &applied); err != nil {
			return fmt.Errorf("%s: %w", in.localGroupsFile(), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	steps, err := smb.LocalGroupsPlan(in.conf(), rec.Workgroup, applied, rec.Local)
	if err != nil || len(steps) == 0 {
		return err
	}
	for _, s := range steps {
		out, err := in.run(ctx, nil, s.Argv...)
		if err == nil || (s.Exists != nil && s.Exists(out)) {
			continue
		}
		if s.Member != "" {
			return smb.MemberError(s.Field, s.Member, out)
		}
		return fmt.Errorf("%s: %s", strings.Join(s.Argv[:3], " "), firstLine(out))
	}
	in.log.Info("local groups applied", "administrators", len(rec.Local.Administrators),
		"backupOperators", len(rec.Local.BackupOperators), "securityOperators", len(rec.Local.SecurityOperators))
	return writeJSON(in.localGroupsFile(), rec.Local)
}
