package cephfs

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/dataplane"
)

// A node with failover mounts its volumes from an address of its own (the
// dataplane's MountLink), so that another node fencing it by that address
// ends its mounts' sessions and frees the caps they hold: here a node cut
// off but still running (its ceph-fuse alive, holding caps on the volume's
// directory) is fenced, and another node's mount of the same volume creates
// a file there at once, while nothing the fenced mount writes is kept.
// Without the address of their own, the mounts' sessions come from the
// host's address, which no fence can cut without cutting every node on the
// host; the other node then waits a minute for the MDS to time them out.
func TestFencingEndsMountSessions(t *testing.T) {
	b := newBackendCaps(t, FailoverCap("10.99.79."))
	c := cluster(t)
	ctx := context.Background()
	addr := netip.MustParsePrefix("10.99.79.60/24")
	linkDir := t.TempDir()
	ml := dataplane.NewMountLink(linkDir, bridge, addr, nil)
	if err := ml.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Remove(context.Background()) }) //nolint:errcheck // best effort
	// Twice: the second keeps what the first made.
	if err := ml.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	b.o.NetNS = ml.Path()
	const key = "fence1"
	if err := b.EnsureVolume(ctx, key, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Mount(ctx, key); err != nil {
		t.Fatal(err)
	}
	var held *os.File
	t.Cleanup(func() {
		for _, pid := range fuseServing(b.fsPath(key)) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if held != nil {
			held.Close() // after the kill: on a fenced mount it could wait
		}
	})
	if err := os.WriteFile(filepath.Join(b.MountPath(key), "before"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	sessionsFrom := func(ip string) int {
		t.Helper()
		out, err := c.Ceph(ctx, "tell", "mds.a", "session", "ls")
		if err != nil {
			t.Fatalf("session ls: %v: %s", err, out)
		}
		var ss []struct {
			Inst string `json:"inst"`
		}
		if err := json.Unmarshal(out, &ss); err != nil {
			t.Fatalf("session ls: %v: %s", err, out)
		}
		n := 0
		for _, s := range ss {
			if strings.Contains(s.Inst, ":"+ip+":") || strings.Contains(s.Inst, " "+ip+":") {
				n++
			}
		}
		return n
	}
	if n := sessionsFrom(addr.Addr().String()); n != 1 {
		t.Fatalf("%d MDS sessions from the mounts' address %s, want 1 (the volume's ceph-fuse)", n, addr.Addr())
	}
	// The fenced node's mount holds caps on the directory: a file it keeps open.
	held, err := os.OpenFile(filepath.Join(b.MountPath(key), "held"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}

	if err := b.FenceClients(ctx, []string{addr.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.UnfenceClients(context.Background(), []string{addr.Addr().String()}) }) //nolint:errcheck // best effort
	for deadline := time.Now().Add(20 * time.Second); sessionsFrom(addr.Addr().String()) > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fenced mount's MDS session is still there 20 s after the blocklist")
		}
	}
	// A write through the fenced mount is never acknowledged as kept.
	synced := make(chan error, 1)
	go func() {
		if _, err := held.Write([]byte("after the fence")); err != nil {
			synced <- err
			return
		}
		synced <- held.Sync()
	}()

	// The node taking over: the same volume, mounted from the host.
	other := New(Options{Conf: b.o.Conf, ID: b.o.ID, Keyring: b.o.Keyring, FS: b.o.FS, Group: b.o.Group, DataDir: t.TempDir()})
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Stop(context.Background()) //nolint:errcheck // best effort
	if err := other.Mount(ctx, key); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	begin := time.Now()
	go func() {
		created <- os.WriteFile(filepath.Join(other.MountPath(key), "taken-over"), []byte("x"), 0o644)
	}()
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the other node created a file %s after mounting", time.Since(begin).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the other node's create still waits 30 s after the fence: the fenced mount's caps hold it")
	}
	if got, err := os.ReadFile(filepath.Join(other.MountPath(key), "before")); err != nil || string(got) != "before" {
		t.Fatalf("what the fenced node wrote before: %q %v", got, err)
	}
	select {
	case err := <-synced:
		if err == nil {
			t.Fatal("a write through the fenced mount was acknowledged by fsync")
		}
		t.Logf("the fenced mount's write: %v", err)
	case <-time.After(5 * time.Second):
		t.Log("the fenced mount's write is still waiting (never acknowledged)")
	}
	if got, err := os.ReadFile(filepath.Join(other.MountPath(key), "held")); err != nil || strings.Contains(string(got), "after") {
		t.Fatalf("the file the fenced node held: %q %v, want it there without the write after the fence", got, err)
	}

	// The fenced node comes back (its Basin had crashed: its ceph-fuse,
	// evicted, is still running; what had files open there died with Basin)
	// and is let in again. Its start drops that mount, which would never
	// serve again, so the volume mounts anew.
	closed := make(chan struct{})
	go func(f *os.File) { f.Close(); close(closed) }(held)
	held = nil
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Log("closing the file on the fenced mount still waits")
	}
	if err := b.UnfenceClients(ctx, []string{addr.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	again := New(b.o)
	if err := again.Start(ctx); err != nil {
		t.Fatalf("start beside an evicted mount: %v", err)
	}
	defer again.Close()
	if n := len(fuseServing(b.fsPath(key))); n != 0 {
		t.Fatalf("%d ceph-fuse of the volume still running after the start", n)
	}
	if err := again.Mount(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(again.MountPath(key), "back"), []byte("back"), 0o644); err != nil {
		t.Fatalf("a write once back: %v", err)
	}
	if n := sessionsFrom(addr.Addr().String()); n != 1 {
		t.Errorf("%d MDS sessions from the mounts' address once back, want 1", n)
	}
	if err := again.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// A link made under other flags (another address) goes when the new one
	// is made: the data directory's record names it.
	moved := dataplane.NewMountLink(linkDir, bridge, netip.MustParsePrefix("10.99.79.61/24"), nil)
	if err := moved.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { moved.Remove(context.Background()) }) //nolint:errcheck // best effort
	if _, err := os.Stat(ml.Path()); err == nil {
		t.Errorf("the link made under the old flags is still there: %s", ml.Path())
	}
	if err := dataplane.RemoveRecordedMountLink(ctx, linkDir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(moved.Path()); err == nil {
		t.Errorf("teardown left the recorded link: %s", moved.Path())
	}
}
