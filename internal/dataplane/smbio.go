package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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
//
// Samba outlives Basin, and so do the sums: after every read the instance's
// Accountant is saved into its directory (smbIOFile), and the next Basin takes
// it up when it first reads the instance, so its shares' counters go on where
// they were (same ShareIO.Since) and what smbd counted while Basin was down is
// counted, as the metrics sampler's saved readings expect.
type smbAccounts struct {
	mu   sync.Mutex
	accs map[string]*smbAccount
}

// smbIOFile, in an instance's directory, is its Accountant's state
// (smb.AccountantState, JSON), rewritten after every read that changed it (a
// temporary file renamed over it; not synced: a crash of Basin loses nothing
// the kernel has, and a crash of the machine restarts smbd too).
const smbIOFile = "io.json"

func (in *smbInstance) ioFile() string { return filepath.Join(in.dir, smbIOFile) }

type smbAccount struct {
	acc  smb.Accountant
	read time.Time
	// restored: acc was taken up from file, so it holds a read (an earlier
	// Basin's) although this one has made none.
	restored bool
	// tries counts, per smbd child the Accountant could not place yet (no tree
	// connect, no record: a connection being set up, or smbd's own helpers),
	// the reads that found it so.
	tries map[int]int
	// file is where acc is saved ("" nowhere); saved what it holds (nil:
	// unknown, the next save writes), failing whether the last save failed.
	file    string
	saved   []byte
	failing bool
}

// maxTries is how many reads WatchSMB spends on a child before giving up on it.
const maxTries = 3

// SMBIO reads the SMB I/O of every running Samba instance of the network: by AD
// connection, each share's counters since the instance's Accountant started
// (smb.ShareIO, by lower-case share name; every share the instance serves,
// idle ones zero), which a restart of Basin does not change (smbIOFile). Per
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
			if io, ok := m.smbIO.last(network, in); ok {
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
		a := m.smbIO.account(network, in)
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
	a := m.smbIO.account(network, in)
	a.acc.Update(parent, procs, tcons, slices.Collect(maps.Keys(addrs)))
	a.read = time.Now()
	a.save(in.logger())
	tries := map[int]int{}
	for pid := range children {
		if !a.acc.Knows(pid) {
			tries[pid] = a.tries[pid] + 1
		}
	}
	a.tries = tries
	return a.acc.Shares(), nil
}

// account returns an instance's account, made on first use: from the
// Accountant an earlier Basin saved in the instance's directory if there is
// one, else empty. Call with mu held.
func (s *smbAccounts) account(network string, in *smbInstance) *smbAccount {
	if s.accs == nil {
		s.accs = map[string]*smbAccount{}
	}
	k := network + "/" + in.id
	if s.accs[k] == nil {
		a := &smbAccount{file: in.ioFile()}
		a.restore(in.logger())
		s.accs[k] = a
	}
	return s.accs[k]
}

// restore takes up the Accountant saved in a.file, if any. One that cannot be
// read, or of another version, is logged and left for the first save to
// replace: the Accountant starts empty (a new ShareIO.Since, which the
// sampler does not compare with the old sums).
func (a *smbAccount) restore(log *slog.Logger) {
	b, err := os.ReadFile(a.file)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var st smb.AccountantState
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	var acc *smb.Accountant
	if err == nil {
		acc, err = smb.RestoreAccountant(st)
	}
	if err != nil {
		log.Warn("smb i/o state ignored: the shares' counters start again", "file", a.file, "err", err)
		return
	}
	a.acc, a.restored, a.saved = *acc, true, b
	log.Info("smb i/o state taken up", "since", st.Since, "shares", len(st.Shares))
}

// save writes the Accountant to a.file if it changed since the last save. A
// failed write removes the file rather than leave an older state: a start
// from it would count again what was counted since (its sums below the
// sampler's saved reading).
func (a *smbAccount) save(log *slog.Logger) {
	if a.file == "" {
		return
	}
	b, err := json.Marshal(a.acc.State())
	if err == nil && bytes.Equal(b, a.saved) {
		return
	}
	if err == nil {
		err = writeFileAtomic(a.file, b, 0o600)
	}
	if err != nil {
		a.saved = nil
		if rerr := os.Remove(a.file); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		if !a.failing {
			log.Warn("smb i/o state not saved: a restart of Basin would count the shares from zero", "file", a.file, "err", err)
		}
		a.failing = true
		return
	}
	if a.failing {
		log.Info("smb i/o state saved again", "file", a.file)
	}
	a.saved, a.failing = b, false
}

// logger is the instance's logger (none in tests).
func (in *smbInstance) logger() *slog.Logger {
	if in.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return in.log
}

// last returns an instance's shares' I/O as its last read left them (this
// Basin's, or the one it took up); ok is false if it was never read.
func (s *smbAccounts) last(network string, in *smbInstance) (map[string]smb.ShareIO, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.account(network, in)
	if a.read.IsZero() && !a.restored {
		return nil, false
	}
	return a.acc.Shares(), true
}

// prune forgets the accounts of the network's instances that are gone (ids
// are those it has), and deletes their saved state: an instance that comes
// back starts its counters again, as it does in memory.
func (s *smbAccounts) prune(network string, ids map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, a := range s.accs {
		if n, id, _ := strings.Cut(k, "/"); n == network && !ids[id] {
			if a.file != "" {
				os.Remove(a.file)
			}
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
				if parent := in.pid("smbd"); parent != 0 && in.alive() && m.smbIO.stale(network, in, childPIDs(parent)) {
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
func (s *smbAccounts) stale(network string, in *smbInstance, children map[int]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.account(network, in)
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
