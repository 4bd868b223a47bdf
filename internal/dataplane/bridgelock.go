package dataplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultLockDir is where Managers lock their bridges.
const DefaultLockDir = "/run/basin/bridges"

// Everything Basin makes for a network on the host is named after its bridge: the
// sandbox's namespace (basin-<bridge>), its veth, the bridge and its host address.
// Two Basins on one bridge would share those names, and each one's clean-up — of
// what a killed run left, at start, and of its sandbox, at stop — would kill the
// other's daemons and delete its namespace, veth and address (measured in 2026-11:
// another Basin's sandbox dbus was SIGKILLed as an e2e sandbox was torn down). So
// a Manager holds an exclusive lock per bridge (flock on <LockDir>/<bridge>.lock)
// from Start to Stop, and refuses to start when another holds one. The kernel
// drops the lock when its holder dies, however it dies.

// lockBridges takes the lock of every network's bridge, or none of them.
func (m *Manager) lockBridges() error {
	if err := os.MkdirAll(m.opts.LockDir, 0o755); err != nil {
		return fmt.Errorf("bridge locks: %w", err)
	}
	for _, n := range m.opts.Networks {
		f, err := lockBridge(filepath.Join(m.opts.LockDir, n.Bridge+".lock"), m.opts.DataDir)
		if err != nil {
			m.unlockBridges()
			return fmt.Errorf("network %s: %w", n.Name, err)
		}
		m.locks = append(m.locks, f)
	}
	return nil
}

func (m *Manager) unlockBridges() {
	for _, f := range m.locks {
		f.Close() // releases the flock
	}
	m.locks = nil
}

// lockBridge takes the exclusive lock at path and writes who holds it there; if
// another process holds it, the error says which Basin.
func lockBridge(path, dataDir string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder, _ := os.ReadFile(path)
			bridge := strings.TrimSuffix(filepath.Base(path), ".lock")
			return nil, fmt.Errorf("bridge %s is in use by another Basin (%s); give each Basin bridges of its own",
				bridge, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d, data directory %s\n", os.Getpid(), dataDir)
	}
	return f, nil
}
