package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/runner"
)

// The data plane outlives Basin (Options.Detach): when Basin stops, crashes or
// is replaced by another build, each sandbox — its namespaces, holder, daemons,
// endpoint addresses, exports, Samba instances and traffic shaping — goes on
// serving, and the next Basin adopts it rather than build it again. What it
// needs to find them is recorded beside each sandbox's state:
//
//	state.json   the sandbox: its network, bridge, namespace and veth (for a
//	             teardown without the configuration), the holder's and each
//	             daemon's pid and start time (runner.ProcID)
//	exports/<id>.json  each export its Ganesha holds (beside the .conf it was
//	             loaded from): the export, and the device its path was
//	             mounted from when it was loaded; a file per export, so that
//	             an export costs the same at the thousandth volume as at the
//	             first
//	smb/<id>/procs.json   a Samba instance's holder and daemons
//
// A sandbox is adopted only if its holder is the process recorded (pid and
// start time) and sits in the namespace Basin named for the bridge, and the
// veth still joins that bridge; each daemon only if it is the process recorded,
// in that namespace, and every daemon it depends on was adopted too (otherwise
// it is ended and started again, as after a dependency's restart). Anything
// else is torn down and built again as after a crash, as before.

// stateVersion is the format of state.json, exports/<id>.json and procs.json. A Basin
// that finds another version does not adopt (it rebuilds).
const stateVersion = 1

// sandboxState is state.json.
type sandboxState struct {
	Version int                      `json:"version"`
	Network string                   `json:"network"`
	Bridge  string                   `json:"bridge"`
	Prefix  string                   `json:"prefix"`
	Netns   string                   `json:"netns"`
	Veth    string                   `json:"veth"`
	Holder  runner.ProcID            `json:"holder"`
	Daemons map[string]runner.ProcID `json:"daemons"`
}

// loadedRecord is exports/<id>.json.
type loadedRecord struct {
	Version  int        `json:"version"`
	Export   nfs.Export `json:"export"`
	Rendered string     `json:"rendered"`
	Dev      uint64     `json:"dev"`
	FSType   string     `json:"fsType"`
}

func (sb *sandbox) stateFile() string { return filepath.Join(sb.dir, "state.json") }
func (sb *sandbox) loadedRecordFile(id uint64) string {
	return filepath.Join(sb.dir, "exports", fmt.Sprintf("%d.json", id))
}

// readJSONVersioned reads path into v and checks its version field.
func readJSONVersioned(path string, v any, version func() int) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if got := version(); got != stateVersion {
		return fmt.Errorf("%s: format %d, this Basin reads %d", path, got, stateVersion)
	}
	return nil
}

// recorder keeps a set of processes (a holder and daemons) in a file, rewritten
// whenever one starts.
type recorder struct {
	mu      sync.Mutex
	write   func(holder runner.ProcID, daemons map[string]runner.ProcID) error
	holder  runner.ProcID
	daemons map[string]runner.ProcID
	log     func(msg string, args ...any)
}

func (r *recorder) setHolder(p runner.Process) {
	id, err := runner.ID(p.Pid())
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.holder = runner.ProcID{}
	} else {
		r.holder = id
	}
	r.saveLocked()
}

// started is a supervisor's Started hook.
func (r *recorder) started(name string, p runner.Process) {
	id, err := runner.ID(p.Pid())
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.daemons == nil {
		r.daemons = map[string]runner.ProcID{}
	}
	if err != nil {
		delete(r.daemons, name) // gone already: its next start records it
	} else {
		r.daemons[name] = id
	}
	r.saveLocked()
}

func (r *recorder) saveLocked() {
	if err := r.write(r.holder, r.daemons); err != nil && r.log != nil {
		r.log("recording the data plane's processes", "err", err)
	}
}

// saveState writes state.json.
func (sb *sandbox) saveState(holder runner.ProcID, daemons map[string]runner.ProcID) error {
	return writeJSON(sb.stateFile(), sandboxState{Version: stateVersion, Network: sb.net.Name, Bridge: sb.net.Bridge,
		Prefix: sb.net.Prefix.String(), Netns: sb.ns, Veth: vethName(sb.net), Holder: holder, Daemons: daemons})
}

// recordLoaded records le as loaded (exports/<id>.json); callers hold
// exportMu.
func (sb *sandbox) recordLoaded(le loadedExport) error {
	return writeJSON(sb.loadedRecordFile(le.ex.ID), loadedRecord{Version: stateVersion, Export: le.ex, Rendered: le.rendered, Dev: le.dev, FSType: le.fsType})
}

// forgetLoaded forgets export id (its record and, with conf, the file it was
// loaded from); callers hold exportMu.
func (sb *sandbox) forgetLoaded(id uint64, conf bool) {
	delete(sb.loaded, id)
	os.Remove(sb.loadedRecordFile(id))
	if conf {
		os.Remove(sb.exportFile(id))
	}
}

// readLoaded reads the exports recorded as loaded; a record that cannot be
// read is left out (its export, if Ganesha holds it, is removed by
// syncLoaded and made again by the controller).
func (sb *sandbox) readLoaded() (map[uint64]loadedExport, error) {
	files, err := filepath.Glob(filepath.Join(sb.dir, "exports", "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[uint64]loadedExport{}
	for _, f := range files {
		var r loadedRecord
		if err := readJSONVersioned(f, &r, func() int { return r.Version }); err != nil {
			sb.log.Warn("export record ignored", "file", f, "err", err)
			os.Remove(f)
			continue
		}
		if filepath.Base(f) != fmt.Sprintf("%d.json", r.Export.ID) {
			sb.log.Warn("export record ignored: not named after its export", "file", f)
			os.Remove(f)
			continue
		}
		out[r.Export.ID] = loadedExport{ex: r.Export, rendered: r.Rendered, dev: r.Dev, fsType: r.FSType}
	}
	return out, nil
}

// sameNetns reports whether process pid is in the network namespace bound at
// nsFile.
func sameNetns(pid int, nsFile string) bool {
	return runner.InNetns(nsFile)(pid)
}

// vethOnBridge reports whether the host link veth is a port of bridge.
func vethOnBridge(veth, bridge string) bool {
	target, err := os.Readlink(filepath.Join("/sys/class/net", veth, "master"))
	return err == nil && filepath.Base(target) == bridge
}

// adoptSandbox takes over the sandbox an earlier Basin left serving on n. Any
// error means there is nothing (whole) to adopt: the caller removes what is
// left and builds afresh when needed.
func (m *Manager) adoptSandbox(ctx context.Context, n Network) (_ *sandbox, err error) {
	st, err := m.recordedState(n.Name)
	if err != nil {
		return nil, err
	}
	ns := nsName(n)
	if st.Bridge != n.Bridge || st.Netns != ns {
		return nil, fmt.Errorf("recorded for bridge %s, namespace %s", st.Bridge, st.Netns)
	}
	if err := m.opts.Ganesha.Check(); err != nil {
		return nil, err
	}
	nsFile := filepath.Join("/run/netns", ns)
	holder, err := runner.Adopt(st.Holder)
	if err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	defer func() {
		if err != nil {
			// removeSandbox ends it with everything in the namespace.
			holder = nil
		}
	}()
	if !sameNetns(holder.Pid(), nsFile) {
		return nil, fmt.Errorf("holder %d is not in namespace %s", holder.Pid(), ns)
	}
	if !vethOnBridge(vethName(n), n.Bridge) {
		return nil, fmt.Errorf("veth %s is not on bridge %s", vethName(n), n.Bridge)
	}
	if _, ok := m.cephAddr(n); ok && !vethOnBridge(cephVethName(n), m.opts.Ceph.Bridge) {
		return nil, fmt.Errorf("veth %s is not on Ceph bridge %s", cephVethName(n), m.opts.Ceph.Bridge)
	}
	if err := m.ensureBridge(ctx, n); err != nil {
		return nil, err
	}
	sb := m.newSandbox(n)
	sb.holder = holder
	go func() { holder.Wait(); close(sb.dead) }() //nolint:errcheck // only its end matters
	if sb.addrT, err = openNetlinkAddrs(ns, "eth0"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sb.addrT.Close()
		}
	}()
	if err := sb.readBaseMounts(); err != nil {
		return nil, err
	}
	if sb.loaded, err = sb.readLoaded(); err != nil {
		return nil, err
	}
	sb.rec.holder, sb.rec.daemons = st.Holder, map[string]runner.ProcID{}
	adopt := func(name string) runner.Process {
		id, ok := st.Daemons[name]
		if !ok {
			return nil
		}
		p, err := runner.Adopt(id)
		if err != nil {
			sb.log.Info("daemon not running; starting it", "daemon", name, "pid", id.Pid)
			return nil
		}
		if !sameNetns(p.Pid(), nsFile) {
			sb.log.Warn("recorded daemon is not in the sandbox; not adopting it", "daemon", name, "pid", id.Pid)
			return nil
		}
		return p
	}
	if err := sb.startDaemons(ctx, adopt); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sb.sup.detach()
		}
	}()
	if err := sb.syncLoaded(ctx); err != nil {
		return nil, err
	}
	sb.rec.mu.Lock()
	sb.rec.saveLocked()
	sb.rec.mu.Unlock()
	sb.log.Info("sandbox adopted", "namespace", ns, "holder", holder.Pid(), "exports", len(sb.loaded))
	return sb, nil
}

// syncLoaded makes what the sandbox records as loaded and what its Ganesha holds
// agree after adoption: an export recorded but not held (Ganesha was started
// again) is loaded again if its volume is still mounted as it was, else
// forgotten; one held but not recorded (a crash between the two) is removed,
// since its volume's state is unknown (the controller exports it again).
func (sb *sandbox) syncLoaded(ctx context.Context) error {
	sb.exportMu.Lock()
	defer sb.exportMu.Unlock()
	held, err := sb.bus.ShowExports(ctx)
	if err != nil {
		return fmt.Errorf("list exports: %w", err)
	}
	in := map[uint64]string{}
	for _, e := range held {
		in[e.ID] = e.Path
	}
	for id, le := range sb.loaded {
		if p, ok := in[id]; ok && p == le.ex.Pseudo {
			continue
		}
		if dev, _, err := exportDev(le.ex); err != nil || dev != le.dev {
			sb.forgetLoaded(id, true)
			continue
		}
		if err := sb.bus.AddExport(ctx, sb.exportFile(id), id); err != nil {
			sb.log.Warn("reload export", "export", id, "err", err)
			sb.forgetLoaded(id, false)
		}
	}
	for _, e := range held {
		if e.ID == 0 {
			continue // the pseudo root
		}
		if _, ok := sb.loaded[e.ID]; !ok {
			sb.log.Warn("removing an export nobody recorded", "export", e.ID, "pseudo", e.Path)
			if err := sb.bus.RemoveExport(ctx, e.ID); err != nil {
				return err
			}
		}
	}
	return sb.writeMtab(nil)
}

// cmdProcess is a started holder as a runner.Process.
type cmdProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *cmdProcess) Pid() int { return p.cmd.Process.Pid }
func (p *cmdProcess) Wait() error {
	<-p.done
	return nil
}
func (p *cmdProcess) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// startHolderProcess starts a holder (a process that owns namespaces and sleeps),
// in a session of its own, and waits for the "ready" line its script prints once
// its namespaces are built. A detached holder outlives Basin; otherwise it is
// killed with Basin (parent-death signal).
func startHolderProcess(cmd *exec.Cmd, what string, detached bool) (runner.Process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	p := &cmdProcess{cmd: cmd, done: make(chan struct{})}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s did not start: %s", what, strings.TrimSpace(stderr.String()))
	}
	go func() { cmd.Wait(); close(p.done) }() //nolint:errcheck // only its end matters
	return p, nil
}

// holderTail ends a holder's script: once ready it lets go of Basin's pipes
// (a holder that outlives Basin holds nothing of it) and sleeps.
const holderTail = `echo ready
exec sleep infinity </dev/null >/dev/null 2>&1`

// rotateLogs keeps the daemons' log files of a detached sandbox under their
// bound while Basin runs: daemons that outlive Basin write their files directly
// (a pipe to Basin would break when it exits), so the file is rotated from
// outside, a copy of its content to <file>.1 and the file emptied (the daemons
// append, and go on at its new start).
func rotateLogs(ctx context.Context, every time.Duration, limit int64, files func() []string, warn func(string, ...any)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, f := range files() {
			if fi, err := os.Stat(f); err == nil && fi.Size() > limit {
				if err := rotateFile(f, limit); err != nil {
					warn("rotate daemon log", "file", f, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rotateFile replaces path.1 with path's last limit bytes and empties path.
func rotateFile(path string, limit int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	from := max(fi.Size()-limit, 0)
	tail := make([]byte, fi.Size()-from)
	n, _ := f.ReadAt(tail, from)
	if err := writeFileAtomic(path+".1", tail[:n], 0o600); err != nil {
		return err
	}
	return os.Truncate(path, 0)
}

// pidString is strconv.Itoa, for argv.
func pidString(p runner.Process) string { return strconv.Itoa(p.Pid()) }

// recordedState reads network name's state.json.
func (m *Manager) recordedState(name string) (sandboxState, error) {
	var st sandboxState
	err := readJSONVersioned(filepath.Join(m.sandboxDir(name), "state.json"), &st, func() int { return st.Version })
	return st, err
}

// removeUnconfigured tears down the sandboxes an earlier Basin left on networks
// this one is not configured with (state.json names their bridge, namespace and
// veth), and the bridges and host addresses it created for them. A bridge
// another Basin now holds is left alone.
func (m *Manager) removeUnconfigured(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(m.opts.DataDir, "sandboxes"))
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, ok := m.Network(e.Name()); ok {
			continue
		}
		st, err := m.recordedState(e.Name())
		if err != nil {
			continue
		}
		errs = append(errs, m.removeRecorded(ctx, e.Name(), st))
	}
	return errors.Join(errs...)
}

// removeRecorded removes a recorded sandbox of a network that is not
// configured: its processes, namespace and veth, and the bridge and address
// Basin created for it. Its directory (a Samba instance's joined state) stays.
func (m *Manager) removeRecorded(ctx context.Context, name string, st sandboxState) error {
	n := Network{Name: name, Bridge: st.Bridge}
	prefix, perr := netip.ParsePrefix(st.Prefix)
	if st.Bridge == "" || nsName(n) != st.Netns || vethName(n) != st.Veth || perr != nil {
		return fmt.Errorf("sandbox %s: state.json names %q, %q, %q, %q", name, st.Bridge, st.Prefix, st.Netns, st.Veth)
	}
	n.Prefix = prefix
	lock, err := lockBridge(filepath.Join(m.opts.LockDir, st.Bridge+".lock"), m.opts.DataDir)
	if err != nil {
		m.log.Warn("not removing the sandbox of a network no longer configured", "network", name, "err", err)
		return nil
	}
	defer lock.Close()
	m.log.Info("removing the sandbox of a network no longer configured", "network", name, "bridge", st.Bridge)
	if err := m.removeSandbox(ctx, n); err != nil {
		return err
	}
	if err := m.removeBridge(ctx, n); err != nil {
		return err
	}
	os.Remove(filepath.Join(m.opts.DataDir, "sandboxes", name, "state.json"))
	return nil
}

// Teardown removes the whole data plane a stopped Basin left serving: every
// sandbox recorded in the data directory or configured (processes, namespaces,
// veths, Samba instances' namespaces and daemons), and the bridges and host
// addresses Basin created. Joined Samba instances' state is kept: a later start
// brings them back. It refuses bridges another running Basin holds.
func (m *Manager) Teardown(ctx context.Context) error {
	if err := m.lockBridges(); err != nil {
		return err
	}
	defer m.unlockBridges()
	var errs []error
	for _, n := range m.opts.Networks {
		// A sandbox recorded on another bridge than the configured one (the
		// bridge changed while Basin was stopped) goes too, as Start does.
		var errn []error
		if st, err := m.recordedState(n.Name); err == nil && st.Bridge != n.Bridge {
			errn = append(errn, m.removeRecorded(ctx, n.Name, st))
		}
		errn = append(errn, m.removeSandbox(ctx, n), m.removeBridge(ctx, n))
		// The record goes only with what it records: a teardown that failed
		// can be run again and still finds the sandbox.
		if err := errors.Join(errn...); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(filepath.Join(m.sandboxDir(n.Name), "state.json"))
	}
	errs = append(errs, m.removeUnconfigured(ctx))
	return errors.Join(errs...)
}
