// Package dataplane runs Basin's per-network sandboxes (docs/architecture.md): for
// each network in use, a network namespace attached to the network's bridge by a
// veth pair, plus a mount namespace whose root holds nothing of the host (read-only
// /usr, a generated /etc, the sandbox's state and the volumes' mount points), in
// which Basin supervises a private dbus-daemon, rpcbind and Basin's hardened
// ganesha.nfsd, each with a reduced capability set. Each exported volume gets its
// own endpoint address inside the sandbox; its export is loaded at run time over
// DBus, only onto a mounted volume, and loaded again if Ganesha restarts.
//
// A tour:
//   - sandbox.go builds a sandbox (namespaces, the holder process that owns the
//     pivot_root'ed mount namespace) and describes its daemons as Services: a
//     command, a capability bounding set, an optional wrapper run before setpriv,
//     dependencies, a readiness probe and a hook that re-applies state after a
//     restart (Ganesha gets its exports back).
//   - supervisor.go runs Services and knows nothing of Ganesha: dependencies
//     first, each started once what it depends on is ready; a daemon that exits is
//     restarted with backoff, and its dependents with it, and one its Watch finds
//     wedged is killed and restarted the same way. It starts processes through
//     runner.Starter, so it is tested with runner.FakeStarter, without root.
//   - watchdog.go is Ganesha's Watch: it logs and counts NFS requests in flight
//     past a bound (Ganesha reports them over DBus) and finds a Ganesha that
//     finishes nothing and answers no NULL call wedged. logcap.go bounds every
//     daemon's log file.
//   - view.go observes a network at once for the controller: View runs one
//     `ip addr show`, reads the mount table once and lists Ganesha's exports in one
//     DBus call, whatever the number of volumes.
//   - smb.go and smbinstance.go run Samba as instances, one per (network, AD
//     connection): samba-dcerpcd, winbindd and smbd joined to that AD as one
//     machine, under a supervisor of their own, in the sandbox's network namespace
//     but a mount namespace of their own (a private /run/samba, their own /etc and
//     /var), listening only on their own endpoint addresses. Their joined state
//     lives in <sandbox>/smb/<id>/ and survives Basin restarts and sandbox
//     rebuilds, which bring joined instances back without credentials.
//
// With Options.Detach the data plane outlives Basin (adopt.go): Detach leaves
// every sandbox serving, and the next Manager's Start adopts what it finds running
// as recorded. Without it daemons die with Basin (parent-death signal). Start
// removes what cannot be adopted and sandboxes are rebuilt on demand; Stop and
// Teardown remove everything Start and the sandboxes made: processes,
// namespaces, veths, and bridges and addresses Basin created.
//
// Imported by the daemon and controller packages; it imports nfs, smb, qos,
// runner and mountinfo only.
package dataplane

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/qos"
	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/internal/smb"
)

// Network is a configured network: a Linux bridge, the subnet on it, and the range
// of the subnet volumes' endpoint addresses are taken from (the rest is left to the
// host and to client machines).
type Network struct {
	Name   string
	Bridge string
	Prefix netip.Prefix
	// FirstEndpoint and LastEndpoint bound the endpoint range, both included.
	FirstEndpoint, LastEndpoint netip.Addr
	// ServiceAddr is the sandbox's own address for the connections it opens
	// itself: its Samba instances' to the AD's DNS servers and domain controllers,
	// which they need before any volume has an endpoint. It is on the sandbox's
	// eth0 while an instance is joined. The zero Addr is the subnet's last host
	// address (10.99.0.254 in 10.99.0.0/24).
	ServiceAddr netip.Addr
}

// serviceAddr is ServiceAddr or its default.
func (n Network) serviceAddr() netip.Addr {
	if n.ServiceAddr.IsValid() {
		return n.ServiceAddr
	}
	p := n.Prefix.Masked()
	a := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1 // the broadcast's host part
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) + host - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// HostAddr is the host's address on the bridge: the subnet's first address.
func (n Network) HostAddr() netip.Addr { return n.Prefix.Masked().Addr().Next() }

// DefaultGaneshaPrefix is where scripts/ganesha/build.sh installs Basin's NFS-Ganesha.
const DefaultGaneshaPrefix = "/usr/local/lib/basin/ganesha"

// GaneshaPatchSet names the patches this Basin relies on (names with '/' refused in
// every NFSv3 procedure, no server-side symlink following, handles confined to
// their export's filesystem, `..` never claiming a filesystem; `.snapshot` reached
// by name; special files' content never opened and no device nodes; requests in
// flight over DBus for the watchdog; log lines at a bounded rate; POSIX ACLs
// checked, GETATTR never opening a file's data, Basin_NTFS_Security exports;
// ganesha-rados-grace exiting cleanly; docs/security.md). scripts/ganesha/build.sh records the set it applied in
// <prefix>/BASIN-PATCHES.
const GaneshaPatchSet = "basin-ganesha-4.3-11"

// Ganesha locates the NFS-Ganesha build sandboxes run.
type Ganesha struct {
	// Prefix is its install prefix; "" = DefaultGaneshaPrefix.
	Prefix string
}

func (g Ganesha) prefix() string {
	if g.Prefix == "" {
		return DefaultGaneshaPrefix
	}
	return g.Prefix
}

// Binary is the path of ganesha.nfsd.
func (g Ganesha) Binary() string { return filepath.Join(g.prefix(), "bin", "ganesha.nfsd") }

// PluginsDir is where its FSAL modules are.
func (g Ganesha) PluginsDir() string { return filepath.Join(g.prefix(), "lib", "ganesha") }

// Check refuses a Ganesha without Basin's hardening: Debian's own build lets a
// client leave its export with a crafted name, handle or symlink.
func (g Ganesha) Check() error {
	data, err := os.ReadFile(filepath.Join(g.prefix(), "BASIN-PATCHES"))
	if err == nil && strings.TrimSpace(string(data)) == GaneshaPatchSet {
		if _, err = os.Stat(g.Binary()); err == nil {
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("it carries patch set %q", strings.TrimSpace(string(data)))
	}
	return fmt.Errorf("NFS-Ganesha with Basin's patch set %s is not installed in %s (%v); run scripts/setup.sh, which builds it", GaneshaPatchSet, g.prefix(), err)
}

// Options configures a Manager.
type Options struct {
	// DataDir holds sandboxes/<network>/ with each sandbox's state.
	DataDir  string
	Networks []Network
	// NodeID, set when several nodes may share a segment (a cluster), goes
	// into each sandbox's MAC beside the bridge's name: two nodes whose
	// bridges have one name on one segment answer on MACs of their own.
	NodeID string
	// Runner runs the short commands (ip, mount); Starter starts the daemons.
	Runner  runner.Runner
	Starter runner.Starter
	Logger  *slog.Logger
	// ReadyTimeout bounds how long a (re)starting Ganesha may take; default 20 s.
	ReadyTimeout time.Duration
	// Ganesha is the NFS-Ganesha build to run.
	Ganesha Ganesha
	// LockDir holds a lock file per bridge, held while a Manager uses the bridge
	// (from Start to Stop); default DefaultLockDir.
	LockDir string
	// OnRestart, if set, is called whenever a sandbox's daemon (dbus, rpcbind,
	// ganesha, smbd, winbindd, samba-dcerpcd) is started again, with its name and
	// why: RestartExited, RestartWedged or RestartDependency
	// (internal/metrics.Health counts them). It must not block.
	OnRestart func(daemon, reason string)
	// StuckRequestAfter: an NFS request in flight longer than this is stuck: the
	// Ganesha watchdog logs it and reports it to OnStuckRequests (watchdog.go).
	// Default DefaultStuckRequestAfter (30 s).
	StuckRequestAfter time.Duration
	// WedgedAfter: a Ganesha that for this long finished no request and
	// answered no NFS NULL call is wedged: it is killed and started again, like
	// one that died. Default DefaultWedgedAfter (60 s); detection takes at most
	// this and one look of the watchdog (5 s, less with shorter bounds).
	WedgedAfter time.Duration
	// OnStuckRequests, if set, is called after each look of a network's Ganesha
	// watchdog with the requests found stuck since its last look and those stuck
	// now (internal/metrics.Health counts them). It must not block.
	OnStuckRequests func(network string, found, stuck int)
	// Detach makes the data plane outlive Basin: daemons and holders are
	// started detached (no parent-death signal, sessions of their own, output
	// into files), Detach leaves them serving, and the next Manager's Start
	// adopts them (adopt.go). Without it every daemon dies with Basin, as Stop
	// ends them.
	Detach bool
	// Ceph, when set, links the sandboxes to a Ceph cluster, for exports of
	// CephFS volumes (cephlink.go).
	Ceph *CephLink
	// TestKrb5ClockSkew, if set, replaces MIT's default 5 minutes as the
	// clock skew Ganesha's Kerberos acceptor allows, which is also how long
	// after a ticket's end it still takes the ticket and keeps a context
	// made with it: for tests only, which see a ticket expire without
	// waiting 5 minutes more (nfskrb5.go).
	TestKrb5ClockSkew time.Duration
}

// Manager owns the sandboxes.
type Manager struct {
	opts Options
	run  runner.Runner
	log  *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	// fenced: Fence ran; no sandbox is (re)built from then on.
	fenced bool
	// locks are the open lock files of the networks' bridges (Start to Stop).
	locks []*os.File

	// smbMu guards smbLocks: one lock per Samba instance ("network/id").
	smbMu    sync.Mutex
	smbLocks map[string]*sync.Mutex
	// smbJoins counts the domain joins this Manager ran (tests: a restart must
	// not join again).
	smbJoins atomic.Int64
	// smbIO sums each Samba instance's I/O per share (SMBIO).
	smbIO smbAccounts
	// upgrading ends the rolling restart of adopted daemons that run an
	// earlier build (upgradeStale), started by Start; upgraded is closed when
	// it is done.
	upgrading context.CancelFunc
	upgraded  chan struct{}
}

// New returns a Manager; Start must be called first.
func New(opts Options) *Manager {
	if opts.Runner == nil {
		opts.Runner = runner.Exec{}
	}
	if opts.Starter == nil {
		opts.Starter = runner.ExecStarter{Detached: opts.Detach}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 20 * time.Second
	}
	if opts.StuckRequestAfter <= 0 {
		opts.StuckRequestAfter = DefaultStuckRequestAfter
	}
	if opts.WedgedAfter <= 0 {
		opts.WedgedAfter = DefaultWedgedAfter
	}
	if opts.LockDir == "" {
		opts.LockDir = DefaultLockDir
	}
	return &Manager{opts: opts, run: opts.Runner, log: opts.Logger, sandboxes: map[string]*sandbox{}}
}

// Network returns the configured network called name.
func (m *Manager) Network(name string) (Network, bool) {
	for _, n := range m.opts.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return Network{}, false
}

func (m *Manager) sandboxDir(name string) string {
	return filepath.Join(m.opts.DataDir, "sandboxes", name)
}

// nsName names a network's sandbox namespace after its bridge: bridges are host-wide,
// so two Basins (or two networks) never share a namespace.
func nsName(n Network) string { return "basin-" + n.Bridge }

// vethName is the host end of a sandbox's veth pair (at most 15 characters).
func vethName(n Network) string {
	h := sha1.Sum([]byte(n.Bridge))
	return "bsb" + hex.EncodeToString(h[:4])
}

// Start checks that the hardened Ganesha is installed, takes its networks'
// bridges (lockBridges: another running Basin's are refused), adopts the
// sandboxes an earlier Basin left serving on them (adopt.go), and removes what
// cannot be adopted: sandbox processes, namespaces and veths a killed Basin
// left. Sandboxes of networks no longer configured are torn down, with the
// bridges Basin created for them. Bridges it created are kept (and reused)
// until a teardown.
func (m *Manager) Start(ctx context.Context) (err error) {
	if err := m.opts.Ganesha.Check(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(m.opts.DataDir, "sandboxes"), 0o700); err != nil {
		return err
	}
	// The daemons' orphans become Basin's, reaped at once (see runner.StartReaper).
	if err := runner.StartReaper(); err != nil {
		m.log.Warn("orphans of the daemons are left to init to reap", "err", err)
	}
	if err := m.lockBridges(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			m.unlockBridges()
		}
	}()
	// Said at start rather than at a pool's first join: no Samba instance can
	// run where its sockets' paths would not fit (every instance id has the
	// same length).
	for _, n := range m.opts.Networks {
		if err := (smb.GlobalOptions{StateDir: m.instanceDir(n.Name, smbInstanceID(""))}).CheckSocketPaths(); err != nil {
			m.log.Warn("SMB volumes cannot be served on this network", "network", n.Name, "err", err)
		}
	}
	var errs []error
	for _, n := range m.opts.Networks {
		t0 := time.Now()
		// A sandbox recorded on another bridge (the network's bridge changed
		// in the configuration) goes, with the bridge Basin made for it.
		if st, err := m.recordedState(n.Name); err == nil && st.Bridge != n.Bridge {
			errs = append(errs, m.removeRecorded(ctx, n.Name, st))
		}
		sb, err := m.adoptSandbox(ctx, n)
		if err == nil {
			m.mu.Lock()
			m.sandboxes[n.Name] = sb
			m.mu.Unlock()
			m.startInstances(ctx, sb)
			m.log.Info("data plane adopted", "network", n.Name, "took", time.Since(t0))
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			m.log.Info("not adopting the sandbox left running; rebuilding it", "network", n.Name, "reason", err)
		}
		errs = append(errs, m.removeSandbox(ctx, n))
	}
	errs = append(errs, m.removeUnconfigured(ctx))
	// Daemons adopted from an earlier Basin that run a build other than the
	// one installed (an upgrade) are restarted one at a time, in the background.
	uctx, cancel := context.WithCancel(context.Background())
	m.upgrading, m.upgraded = cancel, make(chan struct{})
	go func() { defer close(m.upgraded); m.upgradeStale(uctx) }()
	return errors.Join(errs...)
}

// stopUpgrades ends the rolling restart Start began and waits for it.
func (m *Manager) stopUpgrades() {
	if m.upgrading != nil {
		m.upgrading()
		<-m.upgraded
	}
}

// Detach stops managing the sandboxes and leaves them serving (Options.Detach):
// the next Start adopts them. The bridges' locks are let go.
func (m *Manager) Detach() {
	m.stopUpgrades()
	m.mu.Lock()
	boxes := m.sandboxes
	m.sandboxes = map[string]*sandbox{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range boxes {
		wg.Add(1)
		go func() { defer wg.Done(); sb.detach() }()
	}
	wg.Wait()
	m.unlockBridges()
}

// Stop stops every sandbox, removes the bridges and host addresses Basin made, and
// lets the bridges go: the teardown of the whole data plane.
func (m *Manager) Stop(ctx context.Context) error {
	errs := m.stopSandboxes(ctx)
	for _, n := range m.opts.Networks {
		errs = append(errs, m.removeBridge(ctx, n))
	}
	m.unlockBridges()
	return errors.Join(errs...)
}

// Fence takes this node off its networks at once and then stops every
// sandbox, for a node that may have lost its serving lease (failover): first
// the host end of each sandbox's veth and of its link to the Ceph cluster go
// (the sandbox's endpoint addresses go with its end, so no NFS or SMB client
// reaches it from that moment), then the sandboxes' daemons and namespaces.
// The bridges stay: the segment is the other nodes' too. Each step is tried
// whatever the one before did.
func (m *Manager) Fence(ctx context.Context) error {
	m.mu.Lock()
	m.fenced = true // nothing in flight builds a sandbox again
	m.mu.Unlock()
	var errs []error
	for _, n := range m.opts.Networks {
		errs = append(errs, deleteLink(ctx, m.run, vethName(n)))
	}
	for _, n := range m.opts.Networks {
		errs = append(errs, m.deleteCephLink(ctx, n))
	}
	return errors.Join(append(errs, m.stopSandboxes(ctx)...)...)
}

// stopSandboxes stops every sandbox's daemons and removes its namespace and
// links.
func (m *Manager) stopSandboxes(ctx context.Context) []error {
	m.stopUpgrades()
	m.mu.Lock()
	boxes := m.sandboxes
	m.sandboxes = map[string]*sandbox{}
	m.mu.Unlock()
	for _, sb := range boxes {
		sb.stop()
	}
	var errs []error
	for _, n := range m.opts.Networks {
		errs = append(errs, m.removeSandbox(ctx, n))
	}
	return errs
}

// removeSandbox kills every process in the network's namespace and deletes the
// namespace and the host end of its veth. Absent things are fine. The namespace
// is this Basin's: its name comes from the bridge, which Start locked. Processes
// are signalled through pidfds once seen in the namespace (runner.Signal), never
// by a pid that may have gone to another process since it was listed.
func (m *Manager) removeSandbox(ctx context.Context, n Network) error {
	ns := nsName(n)
	if file := filepath.Join("/run/netns", ns); linkExistsAt(file) {
		if err := runner.KillAll(runner.InNetns(file), 20*time.Second); err != nil {
			return fmt.Errorf("sandbox %s: %w", ns, err)
		}
		if _, err := m.run.Run(ctx, "ip", "netns", "delete", ns); err != nil {
			return fmt.Errorf("delete namespace %s: %w", ns, err)
		}
	}
	if err := deleteLink(ctx, m.run, vethName(n)); err != nil {
		return fmt.Errorf("delete veth: %w", err)
	}
	return m.deleteCephLink(ctx, n)
}

// deleteLink deletes a host network link if it exists. The kernel tears a deleted
// namespace down asynchronously, taking the host end of its veth with it, so the
// link can vanish between the check and the delete: that is success too.
func deleteLink(ctx context.Context, run runner.Runner, name string) error {
	if !linkExists(name) {
		return nil
	}
	if _, err := run.Run(ctx, "ip", "link", "delete", name); err != nil && linkExists(name) {
		return err
	}
	return nil
}

func linkExists(name string) bool { return linkExistsAt(filepath.Join("/sys/class/net", name)) }

// linkExistsAt reports whether path (a link's /sys entry, a namespace's file) exists.
func linkExistsAt(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// marker files record what Basin created on the host, so a later run (even after a
// crash, even with the network's bridge or subnet changed since) removes exactly
// that: <network>.bridge-created holds the bridge's name, <network>.addr-added the
// bridge and the host address put on it. (Empty markers, of Basins before they
// named what they made, stand for the network's configured bridge and address.)
func (m *Manager) marker(n Network, what string) string {
	return filepath.Join(m.opts.DataDir, "sandboxes", n.Name+"."+what)
}

// readMarker returns a marker's fields; ok is false when there is none.
func (m *Manager) readMarker(n Network, what string) (fields []string, ok bool) {
	data, err := os.ReadFile(m.marker(n, what))
	if err != nil {
		return nil, false
	}
	return strings.Fields(string(data)), true
}

func (m *Manager) ensureBridge(ctx context.Context, n Network) error {
	host := netip.PrefixFrom(n.HostAddr(), n.Prefix.Bits()).String()
	if !linkExists(n.Bridge) {
		if err := os.WriteFile(m.marker(n, "bridge-created"), []byte(n.Bridge+"\n"), 0o600); err != nil {
			return err
		}
		if _, err := m.run.Run(ctx, "ip", "link", "add", n.Bridge, "type", "bridge"); err != nil {
			return fmt.Errorf("create bridge %s: %w", n.Bridge, err)
		}
	}
	out, err := m.run.Run(ctx, "ip", "-o", "addr", "show", "dev", n.Bridge)
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), " "+host+" ") {
		if err := os.WriteFile(m.marker(n, "addr-added"), []byte(n.Bridge+" "+host+"\n"), 0o600); err != nil {
			return err
		}
		if _, err := m.run.Run(ctx, "ip", "addr", "add", host, "dev", n.Bridge); err != nil {
			return fmt.Errorf("address %s on %s: %w", host, n.Bridge, err)
		}
	}
	_, err = m.run.Run(ctx, "ip", "link", "set", n.Bridge, "up")
	return err
}

// removeBridge removes what the markers of network n say Basin made: the bridge
// it created (with its address), or the host address it put on a bridge it did
// not create. A bridge Basin did not create is never deleted, and one recorded
// under another name than n's (the configuration changed) is deleted only if no
// other Basin holds it.
func (m *Manager) removeBridge(ctx context.Context, n Network) error {
	if f, ok := m.readMarker(n, "bridge-created"); ok {
		bridge := n.Bridge
		if len(f) > 0 {
			bridge = f[0]
		}
		if bridge != n.Bridge {
			lock, err := lockBridge(filepath.Join(m.opts.LockDir, bridge+".lock"), m.opts.DataDir)
			if err != nil {
				m.log.Warn("not deleting a bridge this Basin once made: another Basin holds it", "bridge", bridge, "err", err)
				bridge = ""
			} else {
				defer lock.Close()
			}
		}
		if bridge != "" && linkExists(bridge) {
			if _, err := m.run.Run(ctx, "ip", "link", "delete", bridge); err != nil {
				return fmt.Errorf("delete bridge %s: %w", bridge, err)
			}
		}
		os.Remove(m.marker(n, "bridge-created"))
		os.Remove(m.marker(n, "addr-added"))
		return nil
	}
	if f, ok := m.readMarker(n, "addr-added"); ok {
		bridge, host := n.Bridge, netip.PrefixFrom(n.HostAddr(), n.Prefix.Bits()).String()
		if len(f) == 2 {
			bridge, host = f[0], f[1]
		}
		m.run.Run(ctx, "ip", "addr", "del", host, "dev", bridge) //nolint:errcheck // absent is fine
		os.Remove(m.marker(n, "addr-added"))
	}
	return nil
}

// sandboxFor returns the running sandbox of a network, building it if needed.
func (m *Manager) sandboxFor(ctx context.Context, network string) (*sandbox, error) {
	n, ok := m.Network(network)
	if !ok {
		return nil, fmt.Errorf("network %q is not configured", network)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced {
		return nil, errors.New("this node fenced itself: its data plane serves nothing until Basin is started again")
	}
	if sb := m.sandboxes[network]; sb != nil && sb.alive() {
		return sb, nil
	} else if sb != nil {
		sb.stop()
		delete(m.sandboxes, network)
	}
	if err := m.ensureBridge(ctx, n); err != nil {
		return nil, err
	}
	if err := m.removeSandbox(ctx, n); err != nil {
		return nil, err
	}
	sb, err := m.startSandbox(ctx, n)
	if err != nil {
		return nil, err
	}
	m.sandboxes[network] = sb
	// Joined Samba instances come back with their sandbox (a Basin restart, a
	// rebuild after the holder died).
	m.startInstances(ctx, sb)
	return sb, nil
}

// Warm starts the network's sandbox if it is not running, with no export:
// a failover node starts one on every network so that a volume moving to it is
// exported into a running Ganesha, not one that takes ~3 s to start.
func (m *Manager) Warm(ctx context.Context, network string) error {
	_, err := m.sandboxFor(ctx, network)
	return err
}

// Export makes ex reachable on addr in the network's sandbox: the export loaded
// in Ganesha, provided its path is a mounted volume, and then the endpoint
// address. In that order: a client that reconnects the moment the address
// answers (a volume moved here, or re-exported by a revert) is served; with
// the address first, a request Ganesha read before the export was loaded was
// answered NFS3ERR_STALE, which a real client hands its application.
func (m *Manager) Export(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) error {
	sb, err := m.sandboxFor(ctx, network)
	if err != nil {
		return err
	}
	if err := sb.export(ctx, ex); err != nil {
		return err
	}
	return sb.addAddr(ctx, addr)
}

// Unexport removes, if addr is valid, the endpoint address from the network's
// sandbox and then export id (a volume's snapshot exports share its address:
// they pass the zero Addr; an SMB-only volume, which has no export, passes id
// 0: its address alone goes). Clients keep their connections: a volume reverted
// or remounted comes back at the same address. A sandbox that is not running
// has nothing to remove but stale files.
func (m *Manager) Unexport(ctx context.Context, network string, addr netip.Addr, id uint64) error {
	return m.unexport(ctx, network, addr, id, false)
}

// Release is Unexport for a volume leaving this node (another serves it at
// the same address): the address goes with its clients' connections, reset
// (netlinkAddrs.Cut), before the export. A client never meets the export
// missing, which Ganesha answers NFS3ERR_STALE, but is told its connection
// ended and reconnects, to the address's next holder.
func (m *Manager) Release(ctx context.Context, network string, addr netip.Addr, id uint64) error {
	return m.unexport(ctx, network, addr, id, true)
}

func (m *Manager) unexport(ctx context.Context, network string, addr netip.Addr, id uint64, cut bool) error {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil {
		os.Remove(filepath.Join(m.sandboxDir(network), "exports", fmt.Sprintf("%d.conf", id)))
		return nil
	}
	switch {
	case !addr.IsValid():
	case cut:
		if err := sb.cutAddr(ctx, addr); err != nil {
			return err
		}
	default:
		if err := sb.delAddr(ctx, addr); err != nil {
			return err
		}
	}
	if id == 0 {
		return nil // an SMB-only volume's address: no export of its own
	}
	return sb.unexport(ctx, id)
}

// QoSLink returns the link all of a network's traffic crosses — its sandbox's
// eth0, inside the sandbox's namespace — while the sandbox runs.
func (m *Manager) QoSLink(network string) (qos.Link, bool) {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil || !sb.alive() {
		return qos.Link{}, false
	}
	return qos.Link{Netns: sb.ns, Dev: "eth0"}, true
}

// Sandboxes lists the networks whose sandbox is running.
func (m *Manager) Sandboxes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for n, sb := range m.sandboxes {
		if sb.alive() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// GaneshaPID returns the pid of a sandbox's running ganesha.nfsd (0 if none), for
// tests, diagnostics and the metrics sampler (which reads the sandbox's TCP tables
// through /proc/<pid>/net).
func (m *Manager) GaneshaPID(network string) int {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil {
		return 0
	}
	return sb.pid("ganesha")
}

// statsBus is what reads Ganesha's statistics (nfs.DBus).
type statsBus interface {
	ExportIO(ctx context.Context, id uint64) (nfs.ExportIO, error)
	ExportsIO(ctx context.Context, ids []uint64) (map[uint64]nfs.ExportIO, error)
}

var _ statsBus = (*nfs.DBus)(nil)

// stats returns the statistics reader of the network's running sandbox. It never
// builds a sandbox: with none running there is nothing to read.
func (m *Manager) stats(network string) (statsBus, error) {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil || !sb.alive() {
		return nil, fmt.Errorf("network %q has no running sandbox", network)
	}
	st, ok := sb.bus.(statsBus)
	if !ok {
		return nil, fmt.Errorf("network %q: its Ganesha bus reads no statistics", network)
	}
	return st, nil
}

// ExportIO reads export id's cumulative NFS counters from the network's Ganesha
// (for the metrics sampler, when ExportsIO fails): five DBus calls.
func (m *Manager) ExportIO(ctx context.Context, network string, id uint64) (nfs.ExportIO, error) {
	st, err := m.stats(network)
	if err != nil {
		return nfs.ExportIO{}, err
	}
	return st.ExportIO(ctx, id)
}

// ExportsIO reads the cumulative NFS counters of the network's exports ids in
// 1+len(ids) DBus calls (nfs.DBus.ExportsIO; the metrics sampler's read, once per
// network and interval). Exports Ganesha does not have are absent.
func (m *Manager) ExportsIO(ctx context.Context, network string, ids []uint64) (map[uint64]nfs.ExportIO, error) {
	st, err := m.stats(network)
	if err != nil {
		return nil, err
	}
	return st.ExportsIO(ctx, ids)
}
