package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/smb"
)

// smbIOTimeout bounds one instance's read (tdbdump and smbstatus).
const smbIOTimeout = 5 * time.Second

// smbWatchGap is the least time between two reads of an instance by WatchSMB.
const smbWatchGap = 2 * time.Second

// smbAccounts keeps, per Samba instance ("network/id"), its smb.Accountant (what
// its shares did, summed over its smbd's processes and restarts), the smbd
// children it had when last read and when that was. mu also serialises the
// reads: an Accountant must see them in order.
type smbAccounts struct {
	mu   sync.Mutex
	accs map[string]*smbAccount
}

type smbAccount struct {
	acc  smb.Accountant
	read time.Time
	// tries counts, per smbd child the Accountant could not place yet (no tree
	// connect, no record: a connection being set up, or smbd's own helpers),
	// the reads that found it so.
	tries map[int]int
}

// maxTries is how many reads WatchSMB spends on a child before giving up on it.
const maxTries = 3

// SMBIO reads the SMB I/O of every running Samba instance of the network: by AD
// connection, each share's counters since this Manager started (smb.ShareIO, by
// lower-case share name; every share the instance serves, idle ones zero). Per
// instance and call it reads smbd's profile database (tdbdump) and its tree
// connects (smbstatus -S), and sums each process's growth into its share
// (smb.Accountant). An instance that is not running is absent; one whose read
// failed is absent too, and the error says which.
func (m *Manager) SMBIO(ctx context.Context, network string) (map[string]map[string]smb.ShareIO, error) {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	out := map[string]map[string]smb.ShareIO{}
	if sb == nil || !sb.alive() {
		return out, nil
	}
	sb.smbMu.Lock()
	ins := slices.Collect(maps.Values(sb.smb))
	sb.smbMu.Unlock()
	var errs []error
	ids := map[string]bool{}
	for _, in := range ins {
		ids[in.id] = true
		if !in.alive() || in.pid("smbd") == 0 {
			// Not serving (stopped, or smbd restarting): nothing was served
			// since the last read, whose counters therefore stand.
			if io, ok := m.smbIO.last(network, in.id); ok {
				out[in.ad] = io
			}
			continue
		}
		io, err := m.instanceIO(ctx, network, in)
		if err != nil {
			errs = append(errs, fmt.Errorf("samba instance %s: %w", in.id, err))
			continue
		}
		out[in.ad] = io
	}
	m.smbIO.prune(network, ids)
	return out, errors.Join(errs...)
}

// instanceIO reads one instance and updates its Accountant.
func (m *Manager) instanceIO(ctx context.Context, network string, in *smbInstance) (map[string]smb.ShareIO, error) {
	ctx, cancel := context.WithTimeout(ctx, smbIOTimeout)
	defer cancel()
	m.smbIO.mu.Lock()
	defer m.smbIO.mu.Unlock()
	parent := in.pid("smbd")
	if parent == 0 { // it went between the caller's look and the lock
		a := m.smbIO.account(network, in.id)
		return a.acc.Shares(), nil
	}
	children := childPIDs(parent)
	dirs := smb.GlobalOptions{StateDir: in.dir}.Dirs()
	dump, err := m.run.Run(ctx, "tdbdump", filepath.Join(dirs.Cache, smb.ProfileFile))
	if err != nil {
		return nil, err
	}
	procs, err := smb.ParseProfileDump(dump)
	if err != nil {
		return nil, err
	}
	// --fast: the tree connects as recorded, without asking whether each
	// process still lives (the profile says which do).
	status, err := m.run.Run(ctx, "smbstatus", "-s", in.conf(), "-S", "-j", "--fast")
	if err != nil {
		return nil, err
	}
	tcons, err := smb.ParseTcons(status)
	if err != nil {
		return nil, err
	}
	addrs, err := readAddrs(in.addrsFile())
	if err != nil {
		return nil, err
	}
	a := m.smbIO.account(network, in.id)
	a.acc.Update(parent, procs, tcons, slices.Collect(maps.Keys(addrs)))
	a.read = time.Now()
	tries := map[int]int{}
	for pid := range children {
		if !a.acc.Knows(pid) {
			tries[pid] = a.tries[pid] + 1
		}
	}
	a.tries = tries
	return a.acc.Shares(), nil
}

// account returns an instance's account, made on first use. Call with mu held.
func (s *smbAccounts) account(network, id string) *smbAccount {
	if s.accs == nil {
		s.accs = map[string]*smbAccount{}
	}
	k := network + "/" + id
	if s.accs[k] == nil {
		s.accs[k] = &smbAccount{}
	}
	return s.accs[k]
}

// last returns an instance's shares' I/O as its last read left them; ok is
// false if it was never read.
func (s *smbAccounts) last(network, id string) (map[string]smb.ShareIO, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accs[network+"/"+id]
	if a == nil || a.read.IsZero() {
		return nil, false
	}
	return a.acc.Shares(), true
}

// prune forgets the accounts of the network's instances that are gone (ids
// are those it has).
func (s *smbAccounts) prune(network string, ids map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.accs {
		if n, id, _ := strings.Cut(k, "/"); n == network && !ids[id] {
			delete(s.accs, k)
		}
	}
}

// childPIDs lists a process's children (none if it is gone).
func childPIDs(pid int) map[int]bool {
	out := map[int]bool{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return out
	}
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out[n] = true
		}
	}
	return out
}

// WatchSMB reads a Samba instance as SMBIO does whenever its smbd has a child
// its Accountant cannot place yet (a new client connection: no tree connect or
// profile record seen), at most every smbWatchGap and maxTries times per child,
// until ctx ends. So a connection's share is learnt while it lives, and a
// connection shorter than a sampling pass still counts for its share
// (smb.Accountant): one that lasts a few seconds does. It looks once a second
// (each smbd's children in /proc) and reads nothing while no connection comes.
func (m *Manager) WatchSMB(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m.mu.Lock()
		boxes := maps.Clone(m.sandboxes)
		m.mu.Unlock()
		for network, sb := range boxes {
			if !sb.alive() {
				continue
			}
			sb.smbMu.Lock()
			ins := slices.Collect(maps.Values(sb.smb))
			sb.smbMu.Unlock()
			for _, in := range ins {
				if parent := in.pid("smbd"); parent != 0 && in.alive() && m.smbIO.stale(network, in.id, childPIDs(parent)) {
					if _, err := m.instanceIO(ctx, network, in); err != nil && ctx.Err() == nil {
						m.log.Debug("smb i/o", "network", network, "smb", in.id, "err", err)
					}
				}
			}
		}
	}
}

// stale reports whether an instance has a child its Accountant cannot place yet
// (and has not tried maxTries times), and its last read is smbWatchGap old.
func (s *smbAccounts) stale(network, id string, children map[int]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.account(network, id)
	if time.Since(a.read) < smbWatchGap {
		return false
	}
	for pid := range children {
		if !a.acc.Knows(pid) && a.tries[pid] < maxTries {
			return true
		}
	}
	return false
}
