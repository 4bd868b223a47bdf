package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/basin-nas/basin/internal/smb"
)

// SMBMembership is what an instance is joined as.
type SMBMembership struct {
	AD          string       // the AD connection's resource name (instance key with the network)
	Realm       string       // "BASIN.TEST"
	Workgroup   string       // NetBIOS domain; "" = discover (net ads workgroup) at join
	MachineName string       // "BASIN-1A2B" (smb.MachineName), chosen by the caller, kept across restarts
	DNS         []netip.Addr // the connection's DNS servers
	Site        string
	OUPath      string // smb.OUPath result; "" = default Computers container
	AESOnly     bool
	LDAPSigning bool
	KDC         netip.Addr // optional (kdcIp); with KDCHostname
	KDCHostname string
	// Local are the policy's grants on the server (BUILTIN groups, privileges),
	// applied whenever the instance starts and changed live.
	Local smb.LocalGroups `json:"local,omitzero"`
	// DCs are the domain controllers found for Site through DNS (Site's own, or
	// the domain's when the site has none), by host name: the instance talks to
	// these only (smb.GlobalOptions.DCs). Found at the join and whenever DNS,
	// Site or Realm change; kept in the record, so a restart needs no DNS. Set by
	// the data plane: callers leave it empty.
	DCs []string `json:"dcs,omitempty"`
}

// sameDiscovery reports whether a and b find their DCs the same way.
func sameDiscovery(a, b SMBMembership) bool {
	return strings.EqualFold(a.Realm, b.Realm) && a.Site == b.Site && slices.Equal(a.DNS, b.DNS)
}

// discoverDCs finds mb's domain controllers from inside the sandbox's network
// (where the DNS servers and DCs are reached from): the site's, or the domain's
// when the site has none (smb.Discover). A failure is a *smb.JoinError.
func (m *Manager) discoverDCs(ctx context.Context, sb *sandbox, mb SMBMembership) ([]string, error) {
	servers := make([]string, len(mb.DNS))
	for i, a := range mb.DNS {
		servers[i] = a.String()
	}
	var dcs []smb.DC
	err := inNetns(sb.ns, func() (err error) {
		dcs, err = smb.Discover(ctx, servers, mb.Realm, mb.Site)
		return err
	})
	if err != nil {
		return nil, &smb.JoinError{Kind: smb.ErrDCUnreachable, Reason: smb.ErrDCUnreachable.Error(), Detail: err.Error()}
	}
	hosts := make([]string, 0, len(dcs))
	for _, dc := range dcs {
		hosts = append(hosts, dc.Host)
	}
	return slices.Compact(hosts), nil
}

// SMBCredentials are an AD user's, for joining and leaving. They are never
// logged and never put in argv, the environment or a file: net reads the
// password from a pipe.
type SMBCredentials struct {
	Username string
	Password []byte
}

func (c SMBCredentials) zero() bool { return c.Username == "" && len(c.Password) == 0 }

// validate checks the membership before anything runs.
func (mb SMBMembership) validate() error {
	if mb.AD == "" {
		return fmt.Errorf("smb membership: the AD connection's name is required")
	}
	if len(mb.DNS) == 0 {
		return fmt.Errorf("smb membership: at least one DNS server is required")
	}
	o := smb.GlobalOptions{Realm: mb.Realm, Workgroup: mb.Workgroup, MachineName: mb.MachineName, StateDir: "/x"}
	if o.Workgroup == "" {
		o.Workgroup = "X"
	}
	return o.Validate()
}

// sameMachine reports whether rec (what an instance is joined as) is the machine
// mb asks for: same machine name in the same realm.
func sameMachine(rec, mb SMBMembership) bool {
	return strings.EqualFold(rec.MachineName, mb.MachineName) && strings.EqualFold(rec.Realm, mb.Realm)
}

// joinPlan is what JoinDomain does for an instance, decided from what is on disk.
type joinPlan int

const (
	planJoin     joinPlan = iota // nothing recorded: join afresh (credentials needed)
	planResume                   // joined as asked: re-render, check, (re)start
	planConflict                 // joined as another machine: leave first
)

func planFor(rec SMBMembership, recorded bool, mb SMBMembership) joinPlan {
	switch {
	case !recorded:
		return planJoin
	case sameMachine(rec, mb):
		return planResume
	default:
		return planConflict
	}
}

// instanceLock serialises the operations on one instance (join, leave, shares).
func (m *Manager) instanceLock(network, id string) *sync.Mutex {
	m.smbMu.Lock()
	defer m.smbMu.Unlock()
	if m.smbLocks == nil {
		m.smbLocks = map[string]*sync.Mutex{}
	}
	k := network + "/" + id
	if m.smbLocks[k] == nil {
		m.smbLocks[k] = &sync.Mutex{}
	}
	return m.smbLocks[k]
}

func (m *Manager) instanceDir(network, id string) string {
	return filepath.Join(m.sandboxDir(network), "smb", id)
}

// instance returns the instance's running namespace (holder), starting it if
// needed; the daemons are started by the caller.
func (sb *sandbox) instance(id, ad string) (*smbInstance, error) {
	sb.smbMu.Lock()
	defer sb.smbMu.Unlock()
	if in := sb.smb[id]; in != nil {
		if in.alive() {
			return in, nil
		}
		in.stop()
		delete(sb.smb, id)
	}
	in := &smbInstance{id: id, ad: ad, dir: filepath.Join(sb.dir, "smb", id), sb: sb,
		log: sb.log.With("smb", id, "ad", ad)}
	if _, err := os.Stat(in.dir); err != nil {
		return nil, fmt.Errorf("samba instance %s: %w", id, err)
	}
	if err := in.startHolder(); err != nil {
		return nil, err
	}
	sb.smb[id] = in
	return in, nil
}

// dropInstance stops an instance and forgets it.
func (sb *sandbox) dropInstance(id string) {
	sb.smbMu.Lock()
	in := sb.smb[id]
	delete(sb.smb, id)
	sb.smbMu.Unlock()
	if in != nil {
		in.stop()
	}
}

// stopInstances stops every instance of the sandbox (state kept).
func (sb *sandbox) stopInstances() {
	sb.smbMu.Lock()
	ins := sb.smb
	sb.smb = map[string]*smbInstance{}
	sb.smbMu.Unlock()
	for _, in := range ins {
		in.stop()
	}
}

// detachInstances leaves every instance of the sandbox serving (Basin stops
// with its data plane running).
func (sb *sandbox) detachInstances() {
	sb.smbMu.Lock()
	ins := sb.smb
	sb.smb = map[string]*smbInstance{}
	sb.smbMu.Unlock()
	for _, in := range ins {
		in.detach()
	}
}

// bringUp makes a recorded instance run: files and config rendered from its
// record, namespace and daemons started. It is what a rebuilt sandbox does for
// every joined instance, and what JoinDomain does for one already joined.
func (m *Manager) bringUp(ctx context.Context, sb *sandbox, id string, rec SMBMembership) (*smbInstance, error) {
	dir := m.instanceDir(sb.net.Name, id)
	addrs, err := readAddrs(filepath.Join(dir, "addrs.json"))
	if err != nil {
		return nil, err
	}
	if err := sb.addAddr(ctx, sb.net.serviceAddr()); err != nil {
		return nil, err
	}
	if err := sb.loopback(smbLoopback(id), true); err != nil {
		return nil, err
	}
	list := addrList(addrs)
	// Its files first: the holder reads etc/hostname and binds etc/ and var/.
	files := &smbInstance{id: id, ad: rec.AD, dir: dir, sb: sb}
	if err := files.prepareDirs(rec, list); err != nil {
		return nil, err
	}
	in, err := sb.instance(id, rec.AD)
	if err != nil {
		return nil, err
	}
	for _, a := range list {
		if err := sb.addAddr(ctx, a); err != nil {
			return nil, err
		}
	}
	if err := in.renderConf(rec); err != nil {
		return nil, err
	}
	if err := sb.applySMBNAT(ctx); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := in.startDaemons(ctx, m.opts.Starter, m.opts.ReadyTimeout, m.opts.OnRestart); err != nil {
		return nil, fmt.Errorf("samba instance %s: %w", id, err)
	}
	in.log.Info("samba instance running", "machine", rec.MachineName, "start", time.Since(t0))
	if err := in.applyLocalGroups(ctx, rec); err != nil {
		return in, err
	}
	return in, nil
}

// startInstances brings back every joined instance of a freshly built sandbox
// (after a Basin restart or a rebuild); failures are logged, JoinDomain reports
// them.
func (m *Manager) startInstances(ctx context.Context, sb *sandbox) {
	ents, _ := os.ReadDir(filepath.Join(sb.dir, "smb"))
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), "v") {
			// A ValidateDomain's namespace left by a crash.
			os.RemoveAll(filepath.Join(sb.dir, "smb", e.Name()))
			continue
		}
		rec, ok, err := readMembership(filepath.Join(sb.dir, "smb", e.Name(), "membership.json"))
		if err != nil || !ok {
			if err != nil {
				m.log.Warn("samba instance record", "network", sb.net.Name, "smb", e.Name(), "err", err)
			}
			continue
		}
		lock := m.instanceLock(sb.net.Name, e.Name())
		lock.Lock()
		if _, err := m.bringUp(ctx, sb, e.Name(), rec); err != nil {
			m.log.Warn("samba instance not started", "network", sb.net.Name, "smb", e.Name(), "err", err)
		}
		lock.Unlock()
	}
}

// ValidateDomain checks, from network's sandbox, what joining mb as cred needs,
// without joining or writing anything to the domain: DCs found through the AD
// connection's DNS servers for its site (or domain-wide), one of them answering a
// CLDAP ping, the credentials binding, the container for the computer existing
// and (for an OU) the user allowed to create computers in it. mb.MachineName may
// be empty. Failures are *smb.JoinError in plain words. It runs in a throwaway
// instance namespace (the connection's resolver and Kerberos configuration),
// removed before it returns.
func (m *Manager) ValidateDomain(ctx context.Context, network string, mb SMBMembership, cred SMBCredentials) (err error) {
	if mb.AD == "" || len(mb.DNS) == 0 {
		return fmt.Errorf("smb membership: the AD connection's name and DNS servers are required")
	}
	if cred.zero() {
		return &smb.JoinError{Kind: smb.ErrBadCredentials, Reason: "checking the domain needs the AD user's name and password"}
	}
	sb, err := m.sandboxFor(ctx, network)
	if err != nil {
		return err
	}
	// The domain is reached from the sandbox's own address, as a join would.
	if err := sb.addAddr(ctx, sb.net.serviceAddr()); err != nil {
		return err
	}
	if mb.DCs, err = m.discoverDCs(ctx, sb, mb); err != nil {
		return err
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	id := "v" + hex.EncodeToString(rnd[:])
	dir := m.instanceDir(network, id)
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	defer sb.dropInstance(id)
	in := &smbInstance{id: id, ad: mb.AD, dir: dir, sb: sb}
	if mb.MachineName == "" {
		mb.MachineName = "BASIN-CHECK"
	}
	if err := in.prepareDirs(mb, nil); err != nil {
		return err
	}
	conf, err := smb.RenderDiscovery(mb.Realm, dir)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, "discovery.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	if in, err = sb.instance(id, mb.AD); err != nil {
		return err
	}
	args, err := smb.WorkgroupArgs(filepath.Join(dir, "discovery.conf"), mb.DCs[0])
	if err != nil {
		return err
	}
	out, err := in.run(ctx, nil, args...)
	if _, perr := smb.ParseWorkgroup(out); err != nil || perr != nil {
		if jerr := smb.ClassifyJoinError(out); jerr != nil && !errors.Is(jerr, smb.ErrJoinFailed) {
			return jerr
		}
		return &smb.JoinError{Kind: smb.ErrDCUnreachable, Reason: "the domain controller " + mb.DCs[0] + " did not answer", Detail: firstLine(out)}
	}
	dn, err := smb.ContainerDN(mb.OUPath, mb.Realm)
	if err != nil {
		return err
	}
	if args, err = smb.DirectoryCheckArgs(filepath.Join(dir, "discovery.conf"), cred.Username, mb.DCs[0], dn); err != nil {
		return err
	}
	out, _ = in.run(ctx, cred.Password, args...)
	return smb.CheckDirectory(out, dn, mb.OUPath != "")
}

// JoinDomain makes (network, mb.AD) a joined, running instance: discovery,
// config, `net ads join` as cred (password on the pipe), enctypes when AESOnly,
// daemons started and answering. Idempotent: an instance already joined as
// mb.MachineName to mb.Realm (testjoin passes) only re-renders its config and
// (re)starts daemons, without credentials being needed (cred may be zero then);
// if it is running and mb changed (the policy was updated), the running daemons
// take the change (reconfigure; an aesEncryption change needs cred). A
// failed join leaves no state behind (no instance dir, no daemons; and if the
// computer object was created but a later step failed: leave). Errors from the
// domain are *smb.JoinError (plain words).
func (m *Manager) JoinDomain(ctx context.Context, network string, mb SMBMembership, cred SMBCredentials) error {
	if err := mb.validate(); err != nil {
		return err
	}
	if err := (smb.GlobalOptions{StateDir: m.instanceDir(network, smbInstanceID(mb.AD))}).CheckSocketPaths(); err != nil {
		return err
	}
	// The sandbox first: building it brings its joined instances up, each under
	// its instance lock.
	sb, err := m.sandboxFor(ctx, network)
	if err != nil {
		return err
	}
	id := smbInstanceID(mb.AD)
	lock := m.instanceLock(network, id)
	lock.Lock()
	defer lock.Unlock()
	dir := m.instanceDir(network, id)
	rec, recorded, err := readMembership(filepath.Join(dir, "membership.json"))
	if err != nil {
		return err
	}
	switch planFor(rec, recorded, mb) {
	case planConflict:
		return fmt.Errorf("samba instance of %s on %s is joined as %s to %s: leave the domain first", mb.AD, network, rec.MachineName, rec.Realm)
	case planResume:
		if mb.Workgroup == "" {
			mb.Workgroup = rec.Workgroup
		}
		mb.DCs = rec.DCs
		if !sameDiscovery(rec, mb) {
			// New DNS servers, site or realm: find the DCs again.
			if mb.DCs, err = m.discoverDCs(ctx, sb, mb); err != nil {
				return err
			}
		}
		if err := writeJSON(filepath.Join(dir, "membership.json"), mb); err != nil {
			return err
		}
		sb.smbMu.Lock()
		running := sb.smb[id] != nil && sb.smb[id].alive()
		sb.smbMu.Unlock()
		in, err := m.bringUp(ctx, sb, id, mb)
		if err != nil {
			return startError(err)
		}
		if running {
			// Already serving under this join (a rebuilt sandbox brings its
			// instances up by itself): no call to the domain, so neither a
			// restart of Basin nor a resync waits on a DC that cannot be reached.
			// A changed policy is applied to the running daemons.
			if reflect.DeepEqual(rec, mb) {
				return nil
			}
			return m.reconfigure(ctx, in, rec, mb, cred)
		}
		args, err := smb.CheckJoinArgs(in.conf())
		if err != nil {
			return err
		}
		out, err := in.run(ctx, nil, args...)
		if err == nil {
			return nil
		}
		if cred.zero() {
			return &smb.JoinError{Kind: smb.ErrJoinFailed, Reason: "the server's machine account does not work any more; join again with credentials",
				Detail: firstLine(out)}
		}
		// The machine account is gone or broken: join again under the same name.
		m.log.Warn("samba instance's testjoin failed; joining again", "network", network, "smb", id, "out", firstLine(out))
		sb.dropInstance(id)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if cred.zero() {
		return &smb.JoinError{Kind: smb.ErrBadCredentials, Reason: "joining the domain needs the AD user's name and password"}
	}
	return m.join(ctx, sb, id, mb, cred)
}

// join joins a fresh instance; on failure it leaves nothing behind.
func (m *Manager) join(ctx context.Context, sb *sandbox, id string, mb SMBMembership, cred SMBCredentials) (err error) {
	dir := m.instanceDir(sb.net.Name, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	joined, recorded := false, false
	var in *smbInstance
	defer func() {
		if err == nil {
			return
		}
		if recorded {
			// Joined and recorded: only the daemons' start failed. The join
			// stays; the next JoinDomain starts them again (no credentials, no
			// new computer object).
			sb.dropInstance(id)
			return
		}
		if joined && in != nil {
			if args, aerr := smb.LeaveArgs(in.conf(), cred.Username, ""); aerr == nil {
				if out, lerr := in.run(context.Background(), cred.Password, args...); lerr != nil {
					m.log.Warn("leave after a failed join", "network", sb.net.Name, "smb", id, "out", firstLine(out))
				}
			}
		}
		sb.dropInstance(id)
		sb.loopback(smbLoopback(id), false) //nolint:errcheck // best effort after a failed join
		os.RemoveAll(dir)
	}()
	// The config for discovery, then the joined one.
	probe := mb
	if probe.Workgroup == "" {
		probe.Workgroup = "BASIN"
	}
	in = &smbInstance{id: id, ad: mb.AD, dir: dir, sb: sb}
	if err := in.prepareDirs(probe, nil); err != nil {
		return err
	}
	// The instance's connections to the domain leave from the sandbox's own
	// address (no endpoint may exist yet).
	if err := sb.addAddr(ctx, sb.net.serviceAddr()); err != nil {
		return err
	}
	if err := sb.loopback(smbLoopback(id), true); err != nil {
		return err
	}
	if in, err = sb.instance(id, mb.AD); err != nil {
		return err
	}
	if mb.DCs, err = m.discoverDCs(ctx, sb, mb); err != nil {
		return err
	}
	if mb.Workgroup == "" {
		disc, err := smb.RenderDiscovery(mb.Realm, dir)
		if err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dir, "discovery.conf"), []byte(disc), 0o644); err != nil {
			return err
		}
		args, err := smb.WorkgroupArgs(filepath.Join(dir, "discovery.conf"), mb.DCs[0])
		if err != nil {
			return err
		}
		out, err := in.run(ctx, nil, args...)
		if err != nil {
			if jerr := smb.ClassifyJoinError(out); jerr != nil {
				return jerr
			}
			return err
		}
		if mb.Workgroup, err = smb.ParseWorkgroup(out); err != nil {
			return &smb.JoinError{Kind: smb.ErrDCUnreachable, Reason: "the domain's NetBIOS name could not be found", Detail: firstLine(out)}
		}
	}
	if err := in.writeFiles(mb, nil); err != nil {
		return err
	}
	if err := in.renderConf(mb); err != nil {
		return err
	}
	args, err := smb.JoinArgs(smb.JoinOptions{Conf: in.conf(), Username: cred.Username, OUPath: mb.OUPath, Server: mb.DCs[0]})
	if err != nil {
		return err
	}
	t0 := time.Now()
	out, runErr := in.run(ctx, cred.Password, args...)
	if jerr := smb.ClassifyJoinError(out); jerr != nil || runErr != nil {
		if jerr == nil {
			jerr = &smb.JoinError{Kind: smb.ErrJoinFailed, Reason: smb.ErrJoinFailed.Error(), Detail: firstLine(out)}
		}
		return jerr
	}
	joined = true
	m.smbJoins.Add(1)
	in.log.Info("joined the domain", "machine", mb.MachineName, "realm", mb.Realm, "took", time.Since(t0))
	if mb.AESOnly {
		args, err := smb.EnctypesArgs(in.conf(), cred.Username, mb.MachineName, true)
		if err != nil {
			return err
		}
		if out, err := in.run(ctx, cred.Password, args...); err != nil {
			return &smb.JoinError{Kind: smb.ErrJoinFailed, Reason: "the machine account could not be restricted to AES", Detail: firstLine(out)}
		}
	}
	if err := writeJSON(filepath.Join(dir, "membership.json"), mb); err != nil {
		return err
	}
	recorded = true
	if _, err := m.bringUp(ctx, sb, id, mb); err != nil {
		return startError(err)
	}
	return nil
}

// startError makes a failure to start a joined instance's daemons a
// *smb.JoinError of kind smb.ErrServerStart that says what did not start (the
// probe's last answer, smbhealth.go); a JoinError (a name in the policy's
// groups the domain does not know) stays as it is.
func startError(err error) error {
	var je *smb.JoinError
	if errors.As(err, &je) {
		return err
	}
	return &smb.JoinError{Kind: smb.ErrServerStart, Reason: "the domain was joined, but the SMB server did not start: " + err.Error()}
}

// reconfigure makes a running instance take its changed membership (new is
// already written and rendered): the machine account's Kerberos encryption types
// when AESOnly changed (as cred), Samba's cached DC choice dropped when the DCs
// changed, and smbd and winbindd told to read their configuration again. Local
// groups were applied by bringUp.
func (m *Manager) reconfigure(ctx context.Context, in *smbInstance, old, new SMBMembership, cred SMBCredentials) error {
	if old.AESOnly != new.AESOnly {
		if cred.zero() {
			return &smb.JoinError{Kind: smb.ErrBadCredentials, Reason: "changing aesEncryption needs the AD user's name and password"}
		}
		args, err := smb.EnctypesArgs(in.conf(), cred.Username, new.MachineName, new.AESOnly)
		if err != nil {
			return err
		}
		if out, err := in.run(ctx, cred.Password, args...); err != nil {
			if jerr := smb.ClassifyJoinError(out); jerr != nil {
				return jerr
			}
			return fmt.Errorf("net ads enctypes: %w", err)
		}
	}
	if !slices.Equal(old.DCs, new.DCs) {
		if out, err := in.run(ctx, nil, smb.NetBinary, "cache", "flush", "-s", in.conf()); err != nil {
			return fmt.Errorf("net cache flush: %w: %s", err, firstLine(out))
		}
	}
	for _, d := range []string{"smbd", "winbindd"} {
		if out, err := in.run(ctx, nil, "smbcontrol", "-s", in.conf(), d, "reload-config"); err != nil {
			return fmt.Errorf("smbcontrol %s reload-config: %w: %s", d, err, firstLine(out))
		}
	}
	in.log.Info("samba instance reconfigured", "machine", new.MachineName, "dcs", new.DCs)
	return nil
}

// SMBJoined reports whether (network, ad) has a joined instance recorded on disk
// (after a Basin restart too) and as what.
func (m *Manager) SMBJoined(network, ad string) (SMBMembership, bool) {
	rec, ok, err := readMembership(filepath.Join(m.instanceDir(network, smbInstanceID(ad)), "membership.json"))
	if err != nil || !ok {
		return SMBMembership{}, false
	}
	return rec, true
}

// LeaveDomain stops the instance, removes its shares, unregisters its DNS name,
// leaves the domain as cred, and removes its state. Idempotent (nothing there:
// nil). A computer object already gone from the domain is no error; any other
// failure to leave keeps the (stopped) instance's state so the leave can be
// retried.
func (m *Manager) LeaveDomain(ctx context.Context, network, ad string, cred SMBCredentials) error {
	id := smbInstanceID(ad)
	dir := m.instanceDir(network, id)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	sb, err := m.sandboxFor(ctx, network)
	if err != nil {
		return err
	}
	lock := m.instanceLock(network, id)
	lock.Lock()
	defer lock.Unlock()
	rec, recorded, err := readMembership(filepath.Join(dir, "membership.json"))
	if err != nil {
		return err
	}
	if !recorded { // a join that never finished: nothing in the domain
		sb.dropInstance(id)
		return os.RemoveAll(dir)
	}
	if err := sb.addAddr(ctx, sb.net.serviceAddr()); err != nil {
		return err
	}
	in, err := sb.instance(id, ad)
	if err != nil {
		return err
	}
	in.stopDaemons()
	if args, err := smb.DNSUnregisterArgs(in.conf(), fqdn(rec)); err == nil {
		if out, err := in.run(ctx, nil, args...); err != nil {
			m.log.Warn("unregister the machine's DNS name", "network", network, "smb", id, "out", firstLine(out))
		}
	}
	args, err := smb.LeaveArgs(in.conf(), cred.Username, "")
	if err != nil {
		return err
	}
	out, err := in.run(ctx, cred.Password, args...)
	if err != nil && !leaveGone(out) {
		jerr := smb.ClassifyJoinError(out)
		if jerr == nil {
			jerr = &smb.JoinError{Kind: smb.ErrJoinFailed, Reason: "leaving the domain failed", Detail: firstLine(out)}
		}
		return jerr
	}
	// Ganesha serving Kerberos as this machine stops: its keys and winbindd
	// go with the instance.
	if k, _ := sb.readKrb5(); k != nil && strings.HasPrefix(k.Keytab, dir+string(filepath.Separator)) {
		if err := m.ServeNFSKerberos(ctx, network, nil); err != nil {
			m.log.Warn("turn Kerberos off in the network's NFS server", "network", network, "err", err)
		}
	}
	addrs, _ := readAddrs(in.addrsFile())
	sb.dropInstance(id)
	if err := sb.loopback(smbLoopback(id), false); err != nil {
		m.log.Warn("remove an instance's loopback address", "err", err)
	}
	for _, a := range addrList(addrs) {
		if err := sb.delAddr(ctx, a); err != nil {
			m.log.Warn("remove an SMB endpoint", "addr", a, "err", err)
		}
	}
	// A metrics read that began before the instance stopped may still write
	// its io.json there (smbio.go): the directory is emptied again then.
	err = os.RemoveAll(dir)
	for i := 0; err != nil && i < 3; i++ {
		time.Sleep(50 * time.Millisecond)
		err = os.RemoveAll(dir)
	}
	if err != nil {
		return err
	}
	// Its endpoints leave the NAT (another instance's volume may get one).
	if err := sb.applySMBNAT(ctx); err != nil {
		m.log.Warn("remove an instance's endpoints from the NAT", "err", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(sb.dir, "smb")); len(ents) == 0 {
		return sb.delAddr(ctx, sb.net.serviceAddr())
	}
	return nil
}

// leaveGone reports whether net ads leave failed because the machine account is
// already gone.
func leaveGone(out string) bool {
	l := strings.ToLower(out)
	return strings.Contains(l, "no such object") || strings.Contains(l, "not found") && strings.Contains(l, "account")
}

// runningInstance returns the instance of a joined (network, ad), brought up if
// it is not running.
// Callers hold the instance lock (and got sb before taking it): see
// lockedInstance.
func (m *Manager) runningInstance(ctx context.Context, sb *sandbox, id string) (*smbInstance, SMBMembership, error) {
	dir := m.instanceDir(sb.net.Name, id)
	rec, ok, err := readMembership(filepath.Join(dir, "membership.json"))
	if err != nil {
		return nil, rec, err
	}
	if !ok {
		return nil, rec, fmt.Errorf("no samba instance of this AD connection is joined on network %s", sb.net.Name)
	}
	sb.smbMu.Lock()
	in := sb.smb[id]
	sb.smbMu.Unlock()
	if in != nil && in.alive() && in.sup.Load() != nil {
		return in, rec, nil
	}
	in, err = m.bringUp(ctx, sb, id, rec)
	return in, rec, err
}

// SMBShare adds or changes a registry share served by the instance on endpoint
// addr (smb.ShareParams / ShareDiff, live, no reload); sends addr's port 445 to
// the instance's smbd (the sandbox's NAT, smbnat.go) and only then puts addr
// on the sandbox's eth0 (as Export does for NFS: a client that reconnects the
// moment the address answers finds its share), and registers the machine's
// FQDN → the instance's endpoint addresses in AD DNS (best effort, a logged
// warning if it fails). A share is reachable only through the endpoints of its
// own instance: the NAT sends each endpoint to its own instance's smbd.
func (m *Manager) SMBShare(ctx context.Context, network, ad string, addr netip.Addr, spec smb.ShareSpec) error {
	params, err := smb.ShareParams(spec)
	if err != nil {
		return err
	}
	in, rec, unlock, err := m.lockedInstance(ctx, network, ad)
	if err != nil {
		return err
	}
	defer unlock()
	if spec.SnapshotDir != "" {
		if spec.SnapshotDir != m.SMBSnapshotDir(network, ad, spec.Name) {
			return fmt.Errorf("share %s: its snapshot directory must be %s", spec.Name, m.SMBSnapshotDir(network, ad, spec.Name))
		}
		if err := syncSnapshotLinks(spec.SnapshotDir, spec.Snapshots); err != nil {
			return fmt.Errorf("share %s: %w", spec.Name, err)
		}
		// shadow_copy2 opens the directory as the connected user: in the
		// instance's view every directory on the way is crossable (0755, see
		// instanceHolderScript), while on the host the sandbox's stay 0700.
	}
	before, after, err := in.setEndpoint(ctx, rec, spec.Name, addr)
	if err != nil {
		return err
	}
	cur, err := in.shares(ctx)
	if err != nil {
		return err
	}
	for _, st := range smb.ShareDiff(cur[spec.Name], params) {
		if out, err := in.run(ctx, nil, st.Args(in.conf(), spec.Name)...); err != nil {
			return fmt.Errorf("share %s: %s: %w", spec.Name, firstLine(out), err)
		}
	}
	cur[spec.Name] = params
	if err := in.writeMtab(cur); err != nil {
		return err
	}
	if err := in.sb.addAddr(ctx, addr); err != nil {
		return err
	}
	if !slices.Equal(before, after) {
		m.registerDNS(ctx, in, rec, after)
	}
	return nil
}

// registerDNS registers the machine's FQDN with the addresses in AD DNS with the
// machine account (best effort), and the endpoints of the Kerberos volumes it
// serves as NFS principal (nfskrb5.go), which clients mount by that name.
func (m *Manager) registerDNS(ctx context.Context, in *smbInstance, rec SMBMembership, addrs []netip.Addr) {
	krb, err := in.krbAddrs()
	if err != nil {
		in.log.Warn("DNS registration", "err", err)
	}
	addrs = slices.Clone(addrs)
	for _, a := range krb {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	var args []string
	if len(addrs) == 0 {
		args, err = smb.DNSUnregisterArgs(in.conf(), fqdn(rec))
	} else {
		args, err = smb.DNSRegisterArgs(in.conf(), fqdn(rec), addrs)
	}
	if err != nil {
		in.log.Warn("DNS registration", "err", err)
		return
	}
	if out, err := in.run(ctx, nil, args...); err != nil {
		in.log.Warn("DNS registration of the machine name failed", "fqdn", fqdn(rec), "out", firstLine(out), "err", err)
	}
}

// setEndpoint records addr as share's endpoint in the instance's addrs.json
// (the zero Addr: share has none any more), rewrites the files naming the
// instance's endpoints when the list changed, and applies the sandbox's NAT
// every time, not only when the list changed: a NAT that failed to apply
// after the list was written is applied by the next call (a no-op when the
// table is as it should be). It returns the instance's endpoints before and
// after.
func (in *smbInstance) setEndpoint(ctx context.Context, rec SMBMembership, share string, addr netip.Addr) (before, after []netip.Addr, err error) {
	addrs, err := readAddrs(in.addrsFile())
	if err != nil {
		return nil, nil, err
	}
	before = addrList(addrs)
	if addr.IsValid() {
		addrs[share] = addr
	} else {
		delete(addrs, share)
	}
	after = addrList(addrs)
	if err := writeJSON(in.addrsFile(), addrs); err != nil {
		return nil, nil, err
	}
	if !slices.Equal(before, after) {
		if err := in.writeFiles(rec, after); err != nil {
			return nil, nil, err
		}
	}
	return before, after, in.sb.applySMBNAT(ctx)
}

// shares reads the instance's registry shares.
func (in *smbInstance) shares(ctx context.Context) (map[string]map[string]string, error) {
	out, err := in.run(ctx, nil, smb.NetBinary, "-s", in.conf(), "conf", "list")
	if err != nil {
		return nil, fmt.Errorf("net conf list: %w", err)
	}
	return parseConfList(out), nil
}

// SMBUnshare takes addr out of the sandbox's NAT (its port 445 no longer
// reaches the instance), then removes the share, cutting open sessions
// (smbcontrol close-share). Idempotent. The address stays on the sandbox's
// eth0 (it may serve NFS too): Unexport or Release takes it off (with export
// id 0 for an SMB-only volume).
func (m *Manager) SMBUnshare(ctx context.Context, network, ad string, addr netip.Addr, share string) error {
	if err := smb.ValidateShareName(share); err != nil {
		return err
	}
	if _, ok := m.SMBJoined(network, ad); !ok {
		return nil
	}
	in, rec, unlock, err := m.lockedInstance(ctx, network, ad)
	if err != nil {
		return err
	}
	defer unlock()
	// The endpoint leaves the NAT first: were that to fail after the share
	// went, nothing would call again (the share is gone), and the endpoint
	// would go on reaching the instance's other shares.
	before, after, err := in.setEndpoint(ctx, rec, share, netip.Addr{})
	if err != nil {
		return err
	}
	cur, err := in.shares(ctx)
	if err != nil {
		return err
	}
	if _, ok := cur[share]; ok {
		if out, err := in.run(ctx, nil, smb.DelShareArgs(in.conf(), share)...); err != nil {
			return fmt.Errorf("delete share %s: %s: %w", share, firstLine(out), err)
		}
	}
	delete(cur, share)
	if err := in.writeMtab(cur); err != nil {
		return err
	}
	// Sessions on the share end now, not at their next reconnect.
	if out, err := in.run(ctx, nil, "smbcontrol", "-s", in.conf(), "smbd", "close-share", share); err != nil {
		in.log.Warn("close-share", "share", share, "out", firstLine(out), "err", err)
	}
	if err := os.RemoveAll(m.SMBSnapshotDir(network, ad, share)); err != nil {
		return err
	}
	if !slices.Equal(before, after) {
		m.registerDNS(ctx, in, rec, after)
	}
	return nil
}

// writeMtab writes the instance's /etc/mtab from its shares (name →
// parameters): a line for each share's path and each snapshot its snapshot
// directory links to. smbd asks for a share's quotas whenever a client asks
// for its free space, and finds the filesystem there first: without the line
// it logged "sys_path_to_bdev() failed" at level 0 for every such request. The
// mount table itself is not used: reading it costs each request time in
// proportion to every volume and snapshot of the host (see the sandbox's
// mtab). The device named is no device, so the quota query that follows fails
// quietly (no volume has user quotas).
func (in *smbInstance) writeMtab(shares map[string]map[string]string) error {
	var lines []string
	add := func(path string) {
		typ := "unknown"
		var st unix.Statfs_t
		if unix.Statfs(path, &st) == nil {
			typ = fsTypeName(st.Type)
		}
		lines = append(lines, "basin "+mtabEscape(path)+" "+typ+" rw 0 0\n")
	}
	for _, params := range shares {
		if p := params["path"]; p != "" {
			add(p)
		}
		if dir := params["shadow:snapdir"]; dir != "" {
			links, err := readSnapshotLinks(dir)
			if err != nil {
				return err
			}
			for _, target := range links {
				if target != "" {
					add(target)
				}
			}
		}
	}
	slices.Sort(lines)
	return writeFileAtomic(filepath.Join(in.dir, "etc", "mtab"), []byte(strings.Join(slices.Compact(lines), "")), 0o644)
}

// lockedInstance returns (network, ad)'s instance running, with its record, under
// its instance lock: the sandbox first (building it starts its instances, each
// under its own lock), then the lock; unlock releases it (nil on error).
func (m *Manager) lockedInstance(ctx context.Context, network, ad string) (in *smbInstance, rec SMBMembership, unlock func(), err error) {
	sb, err := m.sandboxFor(ctx, network)
	if err != nil {
		return nil, rec, nil, err
	}
	lock := m.instanceLock(network, smbInstanceID(ad))
	lock.Lock()
	in, rec, err = m.runningInstance(ctx, sb, smbInstanceID(ad))
	if err != nil {
		lock.Unlock()
		return nil, rec, nil, err
	}
	return in, rec, lock.Unlock, nil
}

// SMBShares lists the instance's registry shares (name → params) for resync.
func (m *Manager) SMBShares(ctx context.Context, network, ad string) (map[string]map[string]string, error) {
	in, _, unlock, err := m.lockedInstance(ctx, network, ad)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return in.shares(ctx)
}

// SMBPID returns the pid of an instance daemon ("smbd", "winbindd",
// "samba-dcerpcd"), 0 if none (tests).
func (m *Manager) SMBPID(network, ad, daemon string) int {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil {
		return 0
	}
	sb.smbMu.Lock()
	in := sb.smb[smbInstanceID(ad)]
	sb.smbMu.Unlock()
	if in == nil {
		return 0
	}
	return in.pid(daemon)
}

// isReady reports whether the service is ready.
func (s *supervisor) isReady(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state[name]
	return st != nil && st.ready
}

func firstLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			return l
		}
	}
	return ""
}

// loopback puts an instance's loopback address on the sandbox's lo (add) or
// takes it off: smbd binds only addresses an interface has.
func (sb *sandbox) loopback(a netip.Addr, add bool) error {
	lo, err := openNetlinkAddrs(sb.ns, "lo")
	if err != nil {
		return err
	}
	defer lo.Close()
	if add {
		return lo.Add(netip.PrefixFrom(a, 32))
	}
	return lo.Del(netip.PrefixFrom(a, 32))
}

// SMBSnapshotDir is the directory of share's snapshot entries (shadow_copy2's
// snapdir): inside the instance's directory, which its smbd sees at the same path.
func (m *Manager) SMBSnapshotDir(network, ad, share string) string {
	return filepath.Join(m.instanceDir(network, smbInstanceID(ad)), "snapshots", share)
}

// SMBSnapshotLinks reads share's snapshot entries: name → the directory each
// points at (nil if there are none). It runs no process.
func (m *Manager) SMBSnapshotLinks(network, ad, share string) (map[string]string, error) {
	return readSnapshotLinks(m.SMBSnapshotDir(network, ad, share))
}

func readSnapshotLinks(dir string) (map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	links := map[string]string{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			target = "" // not a link: syncSnapshotLinks replaces it
		}
		links[e.Name()] = target
	}
	return links, nil
}

// syncSnapshotLinks makes dir hold exactly want's entries, each a symbolic link
// named by a snapshot's creation time to its read-only mount (smbd follows them:
// shadow_copy2 resolves a snapshot's root with realpath). Names and targets are
// checked: no entry may lead anywhere but an absolute, clean path.
func syncSnapshotLinks(dir string, want map[string]string) error {
	for name, target := range want {
		if !smb.ValidSnapshotName(name) {
			return fmt.Errorf("snapshot entry %q is not an @GMT name", name)
		}
		if !filepath.IsAbs(target) || filepath.Clean(target) != target {
			return fmt.Errorf("snapshot entry %s: target %q is not an absolute clean path", name, target)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	have, err := readSnapshotLinks(dir)
	if err != nil {
		return err
	}
	for name, target := range have {
		if want[name] != target {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	for name, target := range want {
		if have[name] == target {
			continue
		}
		tmp := filepath.Join(dir, ".new-"+name)
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
