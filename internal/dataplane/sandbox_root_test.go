package dataplane

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/runner"
)

// countRunner counts the processes it runs.
type countRunner struct {
	runner.Exec
	n int
}

func (c *countRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	c.n++
	return c.Exec.Run(ctx, name, args...)
}

// A real sandbox (root, Basin's Ganesha): an export is served and observed in one
// View; daemons keep their capability sets; Ganesha restarted on its own or with
// its bus gets its exports back; Stop leaves nothing behind. Names: bridge bsx0,
// namespace basin-bsx0, subnet 10.99.213.0/24.
func TestSandboxSupervisesRealDaemons(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Ganesha)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	ctx := context.Background()
	n := Network{Name: "bsx", Bridge: "bsx0", Prefix: netip.MustParsePrefix("10.99.213.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.213.10"), LastEndpoint: netip.MustParseAddr("10.99.213.127")}
	dataDir, mounts := sharedMounts(t, ctx)
	vol := tmpfsVolume(t, mounts, "v1", "size=1m")

	run := &countRunner{}
	m := New(Options{Ganesha: testGanesha(), DataDir: dataDir, Networks: []Network{n}, Runner: run})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat("/run/netns/basin-bsx0"); err == nil {
			t.Error("namespace basin-bsx0 left behind")
		}
		if linkExists("bsx0") {
			t.Error("bridge bsx0 left behind")
		}
	})
	addr := n.FirstEndpoint
	ex := nfs.Export{ID: 11, Path: vol, Pseudo: "/v1", Protocols: []int{3, 4},
		Clients: []nfs.Client{{Clients: []string{"10.99.213.200"}, Access: nfs.AccessRW, Squash: nfs.RootSquash, Protocols: []int{3, 4}}}}
	if err := m.Export(ctx, "bsx", addr, ex); err != nil {
		t.Fatal(err)
	}
	served := func() bool {
		t.Helper()
		before := run.n
		v, err := m.View(ctx, "bsx")
		if err != nil {
			t.Fatal(err)
		}
		if run.n-before != 0 {
			t.Fatalf("a View ran %d processes (addresses and exports are read without one)", run.n-before)
		}
		return v.Exported(addr, ex) && v.HasAddr(addr)
	}
	if !served() {
		t.Fatal("export not served after Export")
	}
	// Ganesha's mount table is Basin's file: the sandbox's own mounts and the
	// exported path, nothing else of the volumes'.
	mtab := func() string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(m.sandboxes["bsx"].dir, "etc", "mtab"))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got := mtab(); !strings.Contains(got, "basin "+vol+" tmpfs rw 0 0\n") || !strings.Contains(got, " / tmpfs ") ||
		!strings.Contains(got, " "+mounts+" ") {
		t.Fatalf("mtab after the export:\n%s", got)
	}

	// Capabilities: Ganesha's bounding set has no sys_admin, and no new privileges.
	pid := m.GaneshaPID("bsx")
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var bnd uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:\t"); ok {
			bnd, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	const capSysAdmin, capChown = 21, 0
	if bnd&(1<<capSysAdmin) != 0 || bnd&(1<<capChown) == 0 || !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Fatalf("ganesha CapBnd %x, status:\n%s", bnd, status)
	}

	waitServed := func(what string, old int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if p := m.GaneshaPID("bsx"); p != 0 && p != old && served() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: export not served again (ganesha pid %d, was %d)", what, m.GaneshaPID("bsx"), old)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitServed("after SIGKILL of ganesha", pid)

	pid = m.GaneshaPID("bsx")
	dbusPid := m.sandboxes["bsx"].pid("dbus")
	t.Logf("ganesha %d, dbus %d", pid, dbusPid)
	syscall.Kill(dbusPid, syscall.SIGKILL)
	waitServed("after SIGKILL of dbus-daemon", pid)

	t.Logf("ganesha now %d", m.GaneshaPID("bsx"))
	if err := m.Unexport(ctx, "bsx", addr, ex.ID); err != nil {
		t.Fatal(err)
	}
	if got := mtab(); strings.Contains(got, vol) {
		t.Fatalf("mtab still lists %s after the unexport:\n%s", vol, got)
	}
	if v, err := m.View(ctx, "bsx"); err != nil || v.Exported(netip.Addr{}, ex) || v.HasAddr(addr) {
		t.Fatalf("after Unexport: %v", err)
	}
}
