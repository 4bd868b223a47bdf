package dataplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Upgrading the daemons is a rolling restart. A daemon Basin adopts may run a
// build of its program that is no longer the one installed: a package upgrade
// replaced the file (the running process keeps the old, deleted inode), or
// Basin was configured with another --ganesha-prefix. Each such daemon is
// started again, one network (and one Samba instance) at a time, so that at
// any moment at most one network's NFS or one instance's SMB pauses: Ganesha
// with NFSv4 grace, its exports in its configuration, and its clients'
// records (their opens and locks are reclaimed, sandbox.go); smbd and its
// helpers as after a crash (SMB clients reconnect; Samba 4.17 keeps no
// handle across an smbd restart).

// sameProgram reports whether process pid runs the file path names (the
// same inode, whatever the path it was started by).
func sameProgram(pid int, path string) (bool, error) {
	running, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return false, err
	}
	installed, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(running, installed), nil
}

// RestartGanesha starts the network's Ganesha again (SIGTERM, then a new
// process with its exports and grace) and returns how long it served nothing:
// from the stop to the new one answering. NFSv4 clients then reclaim their
// state; new opens and locks wait for grace to end (at most GracePeriod, or
// once every client it had reclaimed).
func (m *Manager) RestartGanesha(ctx context.Context, network string) (time.Duration, error) {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil || !sb.alive() || sb.sup == nil {
		return 0, fmt.Errorf("network %q has no running sandbox", network)
	}
	pause, err := sb.sup.restart(ctx, "ganesha", RestartUpgrade)
	if err != nil {
		return pause, fmt.Errorf("restart ganesha of %s: %w", network, err)
	}
	sb.log.Info("ganesha restarted", "pause", pause)
	return pause, nil
}

// BuildID identifies the Ganesha build: a digest of its program, its library
// and its VFS module. A package upgrade rewrites the files even when the build
// in it is the same one (the build is cached and reused): the digest tells a
// new build from the same one written again, so only a new build costs a
// restart.
func (g Ganesha) BuildID() (string, error) {
	h := sha256.New()
	for _, f := range []string{g.Binary(), filepath.Join(g.prefix(), "lib", "libganesha_nfsd.so"), filepath.Join(g.PluginsDir(), "libfsalvfs.so")} {
		file, err := os.Open(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && f != g.Binary() {
				continue
			}
			return "", err
		}
		_, err = io.Copy(h, file)
		file.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ganeshaBuildFile records the BuildID of the build the sandbox's Ganesha was
// last started from (prepareGanesha).
func (sb *sandbox) ganeshaBuildFile() string { return filepath.Join(sb.dir, "ganesha.build") }

// staleGanesha reports whether the sandbox's Ganesha runs another build than
// the installed one: the build recorded when it started differs from the
// installed one's, or, with no record, its program is another file.
func (sb *sandbox) staleGanesha() bool {
	pid := sb.pid("ganesha")
	if pid == 0 {
		return false
	}
	if rec, err := os.ReadFile(sb.ganeshaBuildFile()); err == nil {
		cur, err := sb.ganesha.BuildID()
		return err == nil && strings.TrimSpace(string(rec)) != cur
	}
	same, err := sameProgram(pid, sb.ganesha.Binary())
	return err == nil && !same
}

// staleSamba returns the first daemon of the instance, in their order of
// dependence, that runs another build than the installed one ("" if none):
// restarting it restarts what depends on it.
func (in *smbInstance) staleSamba() string {
	sup := in.sup.Load()
	if sup == nil {
		return ""
	}
	for _, svc := range sup.services {
		pid := sup.pid(svc.Name)
		if pid == 0 {
			continue
		}
		path, err := exec.LookPath(svc.Argv[0])
		if err != nil {
			continue
		}
		if same, err := sameProgram(pid, path); err == nil && !same {
			return svc.Name
		}
	}
	return ""
}

// upgradeStale restarts, one at a time, every adopted daemon that runs a
// build other than the installed one, and logs each pause. It runs in the
// background after Start; ctx ends it.
func (m *Manager) upgradeStale(ctx context.Context) {
	for _, name := range m.Sandboxes() {
		m.mu.Lock()
		sb := m.sandboxes[name]
		m.mu.Unlock()
		if sb == nil {
			continue
		}
		if sb.staleGanesha() {
			sb.log.Info("ganesha runs an earlier build than the one installed: restarting it")
			if _, err := m.RestartGanesha(ctx, name); err != nil && !errors.Is(err, context.Canceled) {
				sb.log.Warn("upgrade of ganesha", "err", err)
			}
		}
		sb.smbMu.Lock()
		ins := make([]*smbInstance, 0, len(sb.smb))
		for _, in := range sb.smb {
			ins = append(ins, in)
		}
		sb.smbMu.Unlock()
		for _, in := range ins {
			daemon := in.staleSamba()
			if daemon == "" {
				continue
			}
			sup := in.sup.Load()
			if sup == nil {
				continue
			}
			in.log.Info("samba runs an earlier build than the one installed: restarting it", "daemon", daemon)
			pause, err := sup.restart(ctx, daemon, RestartUpgrade)
			if err != nil {
				in.log.Warn("upgrade of samba", "daemon", daemon, "err", err)
				continue
			}
			in.log.Info("samba restarted", "daemon", daemon, "pause", pause)
		}
		if ctx.Err() != nil {
			return
		}
	}
}
