package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/runner"
)

// ipRunner models a sandbox's eth0 addresses (addrTable) and counts every call
// (each stood for a process before addresses went over netlink); as a runner it
// runs nothing.
type ipRunner struct {
	mu    sync.Mutex
	addrs []string // CIDRs
	runs  int
}

func (r *ipRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	return nil, &runner.Error{Argv: append([]string{name}, args...), ExitCode: 2, Stderr: "unexpected command"}
}

func (r *ipRunner) Add(p netip.Prefix) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	if !slices.Contains(r.addrs, p.String()) {
		r.addrs = append(r.addrs, p.String())
	}
	return nil
}

func (r *ipRunner) Del(p netip.Prefix) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	if i := slices.Index(r.addrs, p.String()); i >= 0 {
		r.addrs = slices.Delete(r.addrs, i, i+1)
	}
	return nil
}

func (r *ipRunner) Cut(p netip.Prefix) error { return r.Del(p) }

func (r *ipRunner) List() ([]netip.Prefix, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	var out []netip.Prefix
	for _, a := range r.addrs {
		out = append(out, netip.MustParsePrefix(a))
	}
	return out, nil
}

func (r *ipRunner) Close() {}

func (r *ipRunner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs
}

// fakeBus models Ganesha's export table.
type fakeBus struct {
	mu      sync.Mutex
	exports map[uint64]string // id → pseudo path
	calls   int
}

func (b *fakeBus) Ping(context.Context) error { return nil }
func (b *fakeBus) AddExport(_ context.Context, file string, id uint64) error {
	return errors.New("not modelled")
}
func (b *fakeBus) RemoveExport(_ context.Context, id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.exports, id)
	return nil
}
func (b *fakeBus) ShowExports(context.Context) ([]nfs.ExportInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	var out []nfs.ExportInfo
	for id, p := range b.exports {
		out = append(out, nfs.ExportInfo{ID: id, Path: p})
	}
	return out, nil
}

var testNet = Network{Name: "bsx", Bridge: "bsx0", Prefix: netip.MustParsePrefix("10.99.77.0/24"),
	FirstEndpoint: netip.MustParseAddr("10.99.77.10"), LastEndpoint: netip.MustParseAddr("10.99.77.127")}

// fakeSandbox is a running sandbox as the Manager sees it — namespace, addresses,
// Ganesha's export table and Basin's record of it — without namespaces or daemons.
func fakeSandbox(t *testing.T, run runner.Runner, bus ganeshaBus) (*Manager, *sandbox) {
	t.Helper()
	m := New(Options{DataDir: t.TempDir(), Networks: []Network{testNet}, Runner: run})
	sb := &sandbox{net: testNet, ns: nsName(testNet), run: run, log: slog.New(slog.DiscardHandler), bus: bus,
		timeout: readyTimeoutForTests, dead: make(chan struct{}), loaded: map[uint64]loadedExport{}}
	if a, ok := run.(addrTable); ok {
		sb.addrT = a
	}
	m.sandboxes[testNet.Name] = sb
	return m, sb
}

// readyTimeoutForTests keeps a fake sandbox from waiting long for a bus that fails.
const readyTimeoutForTests = 100 * time.Millisecond

// load records ex as loaded onto the mount on its path, and Ganesha as holding it.
func load(t *testing.T, sb *sandbox, bus *fakeBus, ex nfs.Export) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(ex.Path, &st); err != nil {
		t.Fatal(err)
	}
	sb.loaded[ex.ID] = loadedExport{ex: ex, rendered: ex.Render(), dev: st.Dev}
	bus.exports[ex.ID] = ex.Pseudo
}

func testExport(id uint64) nfs.Export {
	// "/" is a mount point everywhere; many exports may name it.
	return nfs.Export{ID: id, Path: "/", Pseudo: fmt.Sprintf("/v%d", id), Protocols: []int{3, 4},
		Clients: []nfs.Client{{Clients: []string{"10.99.77.200"}, Access: nfs.AccessRW, Squash: nfs.RootSquash, Protocols: []int{3, 4}}}}
}

// A View of any number of exports costs one address listing and one call to
// Ganesha, and answers for every export and address.
func TestViewListsOnce(t *testing.T) {
	for _, n := range []int{5, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := context.Background()
			run := &ipRunner{}
			bus := &fakeBus{exports: map[uint64]string{}}
			m, sb := fakeSandbox(t, run, bus)
			for i := range n {
				ex := testExport(uint64(i + 1))
				load(t, sb, bus, ex)
				if i%2 == 0 {
					if err := sb.addAddr(ctx, netip.AddrFrom4([4]byte{10, 99, 77, byte(10 + i%100)})); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := run.count()
			v, err := m.View(ctx, testNet.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got := run.count() - before; got != 1 {
				t.Fatalf("a View of %d exports listed addresses %d times, want 1", n, got)
			}
			if bus.calls != 1 {
				t.Fatalf("a View of %d exports made %d Ganesha calls, want 1", n, bus.calls)
			}
			for i := range n {
				ex := testExport(uint64(i + 1))
				addr := netip.AddrFrom4([4]byte{10, 99, 77, 10})
				if !v.Exported(addr, ex) || !v.Exported(netip.Addr{}, ex) {
					t.Fatalf("export %d not served", ex.ID)
				}
			}
			if v.Exported(netip.MustParseAddr("10.99.77.9"), testExport(1)) || v.HasAddr(netip.MustParseAddr("10.99.77.9")) {
				t.Fatal("served on an address the sandbox does not have")
			}
			if !v.HasAddr(netip.MustParseAddr("10.99.77.10")) {
				t.Fatal("an endpoint address is missing")
			}
			if run.count()-before != 1 {
				t.Fatal("asking a View listed addresses again")
			}
		})
	}
}

// An export is served only if it is loaded as rendered, under its pseudo path, in
// Ganesha, onto the mount now on its path.
func TestViewExported(t *testing.T) {
	ctx := context.Background()
	run := &ipRunner{addrs: []string{"10.99.77.10/24", "10.99.77.11/16"}}
	bus := &fakeBus{exports: map[uint64]string{}}
	m, sb := fakeSandbox(t, run, bus)
	for id := uint64(1); id <= 6; id++ {
		load(t, sb, bus, testExport(id))
	}
	changed := testExport(1)
	changed.Clients[0].Access = nfs.AccessRO
	delete(bus.exports, 2)  // Ganesha restarted and has not got it back
	bus.exports[3] = "/old" // Ganesha kept an old pseudo path
	le := sb.loaded[4]      // a remount (a revert) since it was loaded
	le.dev++
	sb.loaded[4] = le
	notMounted := testExport(5) // loaded onto a directory that is no mount point
	notMounted.Path = t.TempDir()
	load(t, sb, bus, notMounted)
	v, err := m.View(ctx, testNet.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ex   nfs.Export
		want bool
	}{
		{"as loaded", testExport(6), true},
		{"another rendering", changed, false},
		{"not in Ganesha", testExport(2), false},
		{"another pseudo path in Ganesha", testExport(3), false},
		{"another mount on its path", testExport(4), false},
		{"not on a mount point", notMounted, false},
		{"never loaded", testExport(7), false},
	} {
		if got := v.Exported(netip.MustParseAddr("10.99.77.10"), tc.ex); got != tc.want {
			t.Errorf("%s: Exported = %v, want %v", tc.name, got, tc.want)
		}
	}
	if v.HasAddr(netip.MustParseAddr("10.99.77.11")) {
		t.Error("an address of another prefix length counts as an endpoint")
	}
	if ok, err := m.Exported(ctx, testNet.Name, netip.MustParseAddr("10.99.77.10"), testExport(6)); err != nil || !ok {
		t.Errorf("Manager.Exported = %v, %v", ok, err)
	}
}

// A network without a running sandbox has nothing served, and asking costs nothing.
func TestViewWithoutSandbox(t *testing.T) {
	run := &ipRunner{}
	m := New(Options{DataDir: t.TempDir(), Networks: []Network{testNet}, Runner: run})
	for _, network := range []string{testNet.Name, "unknown"} {
		v, err := m.View(context.Background(), network)
		if err != nil || v == nil || v.Exported(netip.Addr{}, testExport(1)) || v.HasAddr(netip.MustParseAddr("10.99.77.10")) {
			t.Fatalf("%s: view %v, %v", network, v, err)
		}
	}
	if run.count() != 0 {
		t.Fatalf("%d processes run", run.count())
	}
	var nilView *View
	if nilView.Exported(netip.Addr{}, testExport(1)) || nilView.HasAddr(netip.MustParseAddr("10.99.77.10")) {
		t.Fatal("a nil View serves something")
	}
}

// Adding an address that is there and deleting one that is not succeed, over
// netlink in a namespace of the test's own (root); an address outside the
// network is refused before any call.
func TestAddrsAreIdempotent(t *testing.T) {
	run := &ipRunner{}
	_, sb := fakeSandbox(t, run, &fakeBus{})
	if err := sb.addAddr(context.Background(), netip.MustParseAddr("10.99.78.1")); err == nil || run.count() != 0 {
		t.Fatalf("an address outside the network: %v after %d calls", err, run.count())
	}
	if os.Getuid() != 0 {
		t.Skip("the rest needs root (a network namespace)")
	}
	const ns = "basin-addrtest"
	exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	a, err := openNetlinkAddrs(ns, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p := netip.MustParsePrefix("10.99.77.10/24")
	for range 2 {
		if err := a.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.List(); err != nil || !slices.Equal(got, []netip.Prefix{p}) {
		t.Fatalf("after adding twice: %v, %v", got, err)
	}
	for range 2 {
		if err := a.Del(p); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.List(); err != nil || len(got) != 0 {
		t.Fatalf("after deleting twice: %v, %v", got, err)
	}
	if _, err := openNetlinkAddrs("basin-nonexistent", "eth0"); err == nil {
		t.Fatal("a namespace that does not exist opened")
	}
}

// NewView serves exactly its exports on exactly its addresses.
func TestNewView(t *testing.T) {
	a := netip.MustParseAddr("10.99.77.10")
	v := NewView([]netip.Addr{a}, []nfs.Export{testExport(1)})
	changed := testExport(1)
	changed.Pseudo = "/other"
	if !v.Exported(a, testExport(1)) || v.Exported(a, changed) || v.Exported(a, testExport(2)) ||
		v.Exported(netip.MustParseAddr("10.99.77.11"), testExport(1)) || !v.HasAddr(a) {
		t.Fatal("NewView does not serve what it was given")
	}
}

// Each daemon runs inside the sandbox's namespaces under setpriv with its own
// capability bounding set, no inheritable capabilities and no new privileges; a
// wrapper runs before setpriv; a service without capabilities keeps none.
func TestServiceCommands(t *testing.T) {
	sb := &sandbox{dir: "/data/sandboxes/bsx", holder: pidProc(4242), bus: &fakeBus{},
		ganesha: Ganesha{Prefix: "/opt/ganesha"}}
	want := map[string]string{
		"dbus": "nsenter -t 4242 -m -n -u -- setpriv --bounding-set -all --inh-caps -all --no-new-privs -- " +
			"dbus-daemon --config-file=/data/sandboxes/bsx/bus.conf --nofork --nopidfile",
		"rpcbind": "nsenter -t 4242 -m -n -u -- " + strings.Join(rpcbindArgv, " ") + " setpriv --bounding-set " + rpcbindCaps +
			" --inh-caps -all --no-new-privs -- rpcbind -f -w",
		"ganesha": "nsenter -t 4242 -m -n -u -- setpriv --bounding-set " + ganeshaCaps + " --inh-caps -all --no-new-privs -- " +
			"/opt/ganesha/bin/ganesha.nfsd -F -f /data/sandboxes/bsx/ganesha.conf -L STDERR " +
			"-p /data/sandboxes/bsx/ganesha.pid -N NIV_EVENT",
	}
	for _, s := range sb.services() {
		if got := strings.Join(sb.command(s).Argv(), " "); got != want[s.Name] {
			t.Errorf("%s:\n got %s\nwant %s", s.Name, got, want[s.Name])
		}
		delete(want, s.Name)
	}
	if len(want) != 0 {
		t.Errorf("services missing: %v", want)
	}
	if strings.Contains(ganeshaCaps, "sys_admin") || strings.Contains(ganeshaCaps, "sys_ptrace") || strings.Contains(ganeshaCaps, "net_admin") {
		t.Error("ganesha keeps an administrative capability")
	}
	if got := strings.Join(sb.command(Service{Name: "x", Argv: []string{"x"}}).Argv(), " "); !strings.Contains(got, "--bounding-set -all ") {
		t.Errorf("a service without capabilities: %s", got)
	}
}

// orderBus records the order in which exports are loaded.
type orderBus struct {
	fakeBus
	added []uint64
}

func (b *orderBus) AddExport(_ context.Context, _ string, id uint64) error {
	b.added = append(b.added, id)
	return nil
}

// Every start of Ganesha includes the sandbox's exports in its configuration
// in the order of their pseudo paths, so a volume's snapshot directory is there
// before the snapshots Ganesha mounts in it; an export whose volume is not
// mounted as it was, or whose file is gone, is left out and forgotten (an
// included file that is missing would stop Ganesha). Once Ganesha answers, an
// export it lacks is loaded over DBus (syncLoaded).
func TestGaneshaStartIncludesSnapshotDirectoryFirst(t *testing.T) {
	bus := &orderBus{fakeBus: fakeBus{exports: map[uint64]string{}}}
	_, sb := fakeSandbox(t, &ipRunner{}, bus)
	sb.dir = t.TempDir()
	for _, d := range []string{"etc", "exports"} {
		if err := os.Mkdir(filepath.Join(sb.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for id, pseudo := range map[uint64]string{1: "/vol1/.snapshot/s1", 2: "/vol1", 3: "/vol1/.snapshot/s0", 4: "/vol1/.snapshot", 5: "/a",
		6: "/unmounted", 7: "/nofile"} {
		ex := testExport(id)
		ex.Pseudo = pseudo
		load(t, sb, &bus.fakeBus, ex)
		if id != 7 {
			os.WriteFile(sb.exportFile(id), []byte(ex.Render()), 0o600)
		}
	}
	le := sb.loaded[6]
	le.dev++ // its path shows another filesystem now
	sb.loaded[6] = le
	if err := sb.prepareGanesha(); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(sb.dir, "ganesha.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var included []string
	for _, line := range strings.Split(string(conf), "\n") {
		if inc, ok := strings.CutPrefix(line, "%include "); ok {
			included = append(included, inc)
		}
	}
	want := []string{`"exports/5.conf"`, `"exports/2.conf"`, `"exports/4.conf"`, `"exports/3.conf"`, `"exports/1.conf"`}
	if !slices.Equal(included, want) {
		t.Fatalf("ganesha.conf includes %v, want %v", included, want)
	}
	if !strings.Contains(string(conf), "Graceless = false;") {
		t.Fatalf("ganesha.conf without grace:\n%s", conf)
	}
	for _, id := range []uint64{6, 7} {
		if _, ok := sb.loaded[id]; ok {
			t.Errorf("export %d still recorded as loaded", id)
		}
	}
	// Ganesha came up with 1, 2, 4, 5 (3 failed to load): reload adds 3.
	bus.exports = map[uint64]string{1: "/vol1/.snapshot/s1", 2: "/vol1", 4: "/vol1/.snapshot", 5: "/a"}
	if err := sb.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bus.added, []uint64{3}) {
		t.Fatalf("loaded over DBus after the start: %v, want [3]", bus.added)
	}
}

// recordingBus is a fakeBus that loads exports.
type recordingBus struct{ fakeBus }

func (b *recordingBus) AddExport(_ context.Context, _ string, id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.exports[id] = fmt.Sprintf("/v%d", id)
	return nil
}

// Each export loaded is recorded in a file of its own beside its .conf (the
// next Basin adopts the sandbox from them), written when it is loaded and
// removed when it is unloaded: a record of all of them, rewritten at every
// export, made a cold start at 1,000 volumes quadratic. A record that cannot
// be read, or is of another format, is left out.
func TestLoadedRecords(t *testing.T) {
	bus := &recordingBus{fakeBus{exports: map[uint64]string{}}}
	_, sb := fakeSandbox(t, &ipRunner{}, bus)
	sb.dir = t.TempDir()
	for _, d := range []string{"etc", "exports"} {
		os.Mkdir(filepath.Join(sb.dir, d), 0o755)
	}
	ctx := context.Background()
	for id := uint64(1); id <= 3; id++ {
		if err := sb.export(ctx, testExport(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.unexport(ctx, 2); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(sb.dir, "exports", "*"))
	for i := range files {
		files[i] = filepath.Base(files[i])
	}
	slices.Sort(files)
	if want := []string{"1.conf", "1.json", "3.conf", "3.json"}; !slices.Equal(files, want) {
		t.Fatalf("exports/ holds %v, want %v", files, want)
	}
	got, err := sb.readLoaded()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].rendered != testExport(1).Render() || got[3].ex.Pseudo != "/v3" || got[3].dev != sb.loaded[3].dev {
		t.Fatalf("read back %+v, want exports 1 and 3 as loaded", got)
	}
	// Another format, garbage, a record under another export's name: left out.
	os.WriteFile(filepath.Join(sb.dir, "exports", "7.json"), []byte(`{"version": 99, "export": {"ID": 7}}`), 0o600)
	os.WriteFile(filepath.Join(sb.dir, "exports", "8.json"), []byte(`{`), 0o600)
	os.WriteFile(filepath.Join(sb.dir, "exports", "9.json"), []byte(`{"version": 1, "export": {"ID": 3}}`), 0o600)
	if got, err := sb.readLoaded(); err != nil || len(got) != 2 {
		t.Fatalf("with bad records: %d read (%v), want the 2 good ones", len(got), err)
	}
}
