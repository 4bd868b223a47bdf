package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A node started without --failover after one with it removes the mounts'
// link its data directory records, but only once nothing runs in its
// namespace: a ceph-fuse left there by a crash still serves through it.
func TestDropUnusedMountLink(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (network namespaces, bridges)")
	}
	ctx := context.Background()
	br := fmt.Sprintf("bml%d", os.Getpid()%1000000)
	runIP(t, "link", "add", br, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "delete", br).Run() })
	dir := t.TempDir()

	// Nothing recorded: nothing to do.
	if kept, err := DropUnusedMountLink(ctx, dir, nil); kept || err != nil {
		t.Fatalf("no record: kept %v, err %v", kept, err)
	}

	l := NewMountLink(dir, br, netip.MustParsePrefix("10.99.250.9/24"), nil)
	if err := l.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Remove(context.Background()) }) //nolint:errcheck
	sleeper := exec.Command("ip", "netns", "exec", l.Name(), "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() }) //nolint:errcheck
	// ip netns exec enters the namespace before it runs sleep.
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := pidsInNetns(l.Path())
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never showed in the namespace")
		}
		time.Sleep(20 * time.Millisecond)
	}

	kept, err := DropUnusedMountLink(ctx, dir, nil)
	if err != nil || !kept {
		t.Fatalf("a process in the namespace: kept %v, err %v; want it kept", kept, err)
	}
	if !linkExistsAt(l.Path()) || !linkExists(l.veth()) {
		t.Fatal("the link was removed under a process that uses it")
	}

	sleeper.Process.Kill() //nolint:errcheck
	sleeper.Wait()         //nolint:errcheck
	kept, err = DropUnusedMountLink(ctx, dir, nil)
	if err != nil || kept {
		t.Fatalf("nothing in the namespace: kept %v, err %v; want it removed", kept, err)
	}
	if linkExistsAt(l.Path()) || linkExists(l.veth()) {
		t.Error("the namespace or its veth is still there")
	}
	if _, err := os.Stat(filepath.Join(dir, mountLinkRecord)); !os.IsNotExist(err) {
		t.Errorf("the record is still there: %v", err)
	}
}
