package dataplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/smb"
)

// smbIOTimeout bounds one instance's read (tdbdump and smbstatus).
const smbIOTimeout = 5 * time.Second

// smbAccounts keeps each Samba instance's smb.Accountant ("network/id"): what its
// shares did, summed over its smbd's processes and restarts.
type smbAccounts struct {
	mu   sync.Mutex
	accs map[string]*smb.Accountant
}

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
	for _, in := range ins {
		if !in.alive() || in.pid("smbd") == 0 {
			continue
		}
		io, err := m.instanceIO(ctx, network, in)
		if err != nil {
			errs = append(errs, fmt.Errorf("samba instance %s: %w", in.id, err))
			continue
		}
		out[in.ad] = io
	}
	return out, errors.Join(errs...)
}

// instanceIO reads one instance and updates its Accountant.
func (m *Manager) instanceIO(ctx context.Context, network string, in *smbInstance) (map[string]smb.ShareIO, error) {
	ctx, cancel := context.WithTimeout(ctx, smbIOTimeout)
	defer cancel()
	parent := in.pid("smbd")
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
	m.smbIO.mu.Lock()
	defer m.smbIO.mu.Unlock()
	if m.smbIO.accs == nil {
		m.smbIO.accs = map[string]*smb.Accountant{}
	}
	k := network + "/" + in.id
	acc := m.smbIO.accs[k]
	if acc == nil {
		acc = &smb.Accountant{}
		m.smbIO.accs[k] = acc
	}
	acc.Update(parent, procs, tcons, slices.Collect(maps.Keys(addrs)))
	return acc.Shares(), nil
}
