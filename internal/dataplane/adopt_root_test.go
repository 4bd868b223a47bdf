package dataplane

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/runner"
)

// A real sandbox left serving by a Manager that detached (Basin stopped) is
// adopted by the next Manager: the same holder and daemons (pid and start
// time), its export still loaded and its address still up, nothing restarted,
// and an NFS client reading throughout never fails. The adopted Ganesha killed
// is restarted with its exports. A sandbox whose holder died while no Basin ran
// is not adopted but removed, and built again on the next export. Names: bridge
// bsa0, namespace basin-bsa0, subnet 10.99.215.0/24.
func TestSandboxAdoptedAfterDetach(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Ganesha)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := Network{Name: "bsa", Bridge: "bsa0", Prefix: netip.MustParsePrefix("10.99.215.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.215.10"), LastEndpoint: netip.MustParseAddr("10.99.215.127")}
	dataDir, mounts := sharedMounts(t, ctx)
	vol := tmpfsVolume(t, mounts, "v1", "size=4m")
	data := bytes.Repeat([]byte("adopted "), 8192)
	if err := os.WriteFile(filepath.Join(vol, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var restarts atomic.Int32
	opts := Options{Ganesha: testGanesha(), DataDir: dataDir, Networks: []Network{n}, Detach: true,
		OnRestart: func(daemon, reason string) { restarts.Add(1); t.Logf("%s restarted: %s", daemon, reason) }}
	var last *Manager
	t.Cleanup(func() {
		if last != nil {
			if err := last.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}
		if _, err := os.Stat("/run/netns/basin-bsa0"); err == nil {
			t.Error("namespace basin-bsa0 left behind")
		}
		if linkExists("bsa0") {
			t.Error("bridge bsa0 left behind")
		}
	})
	m1 := New(opts)
	last = m1
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := n.FirstEndpoint
	ex := nfs.Export{ID: 31, Path: vol, Pseudo: "/v1", Protocols: []int{3, 4},
		Clients: []nfs.Client{{Clients: []string{n.HostAddr().String()}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
	if err := m1.Export(ctx, "bsa", addr, ex); err != nil {
		t.Fatal(err)
	}
	procs := func(m *Manager) map[string]runner.ProcID {
		t.Helper()
		m.mu.Lock()
		sb := m.sandboxes["bsa"]
		m.mu.Unlock()
		if sb == nil {
			t.Fatal("no sandbox bsa")
		}
		out := map[string]runner.ProcID{}
		for _, name := range []string{"holder", "dbus", "rpcbind", "ganesha"} {
			pid := 0
			if name == "holder" {
				pid = sb.holder.Pid()
			} else {
				pid = sb.pid(name)
			}
			id, err := runner.ID(pid)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name] = id
		}
		return out
	}
	before := procs(m1)

	// A client reads the volume throughout, on one connection.
	c, err := nfs3.Mount(ctx, addr.String(), "/v1", nfs3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fh, _, err := c.Lookup(ctx, c.Root, "f")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reads int
	var failures []string
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		buf := make([]byte, len(data))
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			k, _, err := c.Read(rctx, fh, buf, 0)
			rcancel()
			mu.Lock()
			reads++
			if err != nil || !bytes.Equal(buf[:k], data) {
				failures = append(failures, time.Now().Format("15:04:05.000")+": "+errString(err))
			}
			mu.Unlock()
		}
	}()

	m1.Detach()
	time.Sleep(300 * time.Millisecond) // served with no Basin at all
	for name, id := range before {
		if cur, err := runner.ID(id.Pid); err != nil || cur != id {
			t.Fatalf("%s (%v) ended with the detach: %v", name, id, err)
		}
	}
	m2 := New(opts)
	last = m2
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if after := procs(m2); !mapsEqual(after, before) {
		t.Fatalf("after adoption the sandbox runs %v, want the same processes %v", after, before)
	}
	v, err := m2.View(ctx, "bsa")
	if err != nil || !v.Exported(addr, ex) || !v.HasAddr(addr) {
		t.Fatalf("adopted sandbox: export served %v, address %v (%v)", v.Exported(addr, ex), v.HasAddr(addr), err)
	}
	if n := restarts.Load(); n != 0 {
		t.Fatalf("%d daemon restarts during the adoption", n)
	}
	// Exporting what is loaded already changes nothing.
	if err := m2.Export(ctx, "bsa", addr, ex); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-stopped
	mu.Lock()
	t.Logf("%d reads on one connection across the detach and the adoption", reads)
	if reads < 20 || len(failures) > 0 {
		t.Errorf("%d of %d reads failed: %v", len(failures), reads, failures)
	}
	mu.Unlock()

	// The adopted Ganesha killed: restarted, with its export.
	syscall.Kill(before["ganesha"].Pid, syscall.SIGKILL)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := m2.View(ctx, "bsa")
		if p := m2.GaneshaPID("bsa"); p != 0 && p != before["ganesha"].Pid && err == nil && v.Exported(addr, ex) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the adopted Ganesha, killed, did not serve its export again")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The holder dies while no Basin runs: nothing to adopt; the next start
	// removes what is left, and an export builds the sandbox again.
	holder := procs(m2)["holder"]
	m2.Detach()
	syscall.Kill(holder.Pid, syscall.SIGKILL)
	m3 := New(opts)
	last = m3
	if err := m3.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(m3.Sandboxes()) != 0 {
		t.Fatalf("sandboxes %v adopted though their holder was dead", m3.Sandboxes())
	}
	for name, id := range before {
		if name == "ganesha" {
			continue
		}
		if _, err := runner.Adopt(id); err == nil {
			t.Errorf("%s (%v) still runs after the start that found its holder dead", name, id)
		}
	}
	if err := m3.Export(ctx, "bsa", addr, ex); err != nil {
		t.Fatal(err)
	}
	if v, err := m3.View(ctx, "bsa"); err != nil || !v.Exported(addr, ex) {
		t.Fatalf("rebuilt sandbox does not serve the export (%v)", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "wrong data"
	}
	return err.Error()
}

func mapsEqual(a, b map[string]runner.ProcID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A Teardown whose configuration gives a network another bridge than the one
// its sandbox was left serving on (the bridge changed while Basin was
// stopped; a teardown run with other flags) still takes that sandbox down —
// its daemons, namespace and veth, and the bridge Basin made for it — so that
// nothing holds the volumes' mounts. Names: bridges bsc0 (recorded) and bsc1
// (configured), subnet 10.99.216.0/24.
func TestTeardownOfSandboxOnOtherBridge(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Ganesha)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := Network{Name: "bsc", Bridge: "bsc0", Prefix: netip.MustParsePrefix("10.99.216.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.216.10"), LastEndpoint: netip.MustParseAddr("10.99.216.127")}
	dataDir, mounts := sharedMounts(t, ctx)
	vol := tmpfsVolume(t, mounts, "v1", "size=4m")
	opts := Options{Ganesha: testGanesha(), DataDir: dataDir, Networks: []Network{n}, Detach: true}
	m1 := New(opts)
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the test found, leave nothing: the recorded configuration
		// takes it all down.
		m1.Detach()
		if err := New(opts).Teardown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ex := nfs.Export{ID: 41, Path: vol, Pseudo: "/v1", Protocols: []int{3, 4},
		Clients: []nfs.Client{{Clients: []string{n.HostAddr().String()}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
	if err := m1.Export(ctx, "bsc", n.FirstEndpoint, ex); err != nil {
		t.Fatal(err)
	}
	ganesha, err := runner.ID(m1.GaneshaPID("bsc"))
	if err != nil {
		t.Fatal(err)
	}
	m1.Detach()

	moved := n
	moved.Bridge = "bsc1"
	if err := New(Options{Ganesha: testGanesha(), DataDir: dataDir, Networks: []Network{moved}}).Teardown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Adopt(ganesha); err == nil {
		t.Errorf("Ganesha (%v) of the sandbox on bsc0 still runs after the teardown", ganesha)
	}
	if _, err := os.Stat("/run/netns/basin-bsc0"); err == nil {
		t.Error("namespace basin-bsc0 left behind")
	}
	for _, l := range []string{"bsc0", "bsc1"} {
		if linkExists(l) {
			t.Errorf("bridge %s left behind", l)
		}
	}
}
