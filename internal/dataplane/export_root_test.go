package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/internal/nfs3"
)

// A volume coming to a node (a move, a revert's re-export) is loaded in
// Ganesha before its endpoint address appears: a client that reconnects the
// moment the address answers, with the handle it holds, is served, never
// answered NFS3ERR_STALE for an export not loaded yet (an error a real client
// hands its application). Root, Basin's Ganesha.
func TestExportLoadedBeforeAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := Network{Name: "bso", Bridge: "bso0", Prefix: netip.MustParsePrefix("10.99.217.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.217.10"), LastEndpoint: netip.MustParseAddr("10.99.217.127")}
	m, mounts := rootManager(t, ctx, n)
	addr := n.FirstEndpoint
	vol := tmpfsVolume(t, mounts, "v1", "size=4m")
	ex := nfs.Export{ID: 31, Path: vol, Pseudo: "/v1", Protocols: []int{3, 4},
		Clients: []nfs.Client{{Clients: []string{n.HostAddr().String()}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
	if err := m.Export(ctx, "bso", addr, ex); err != nil {
		t.Fatal(err)
	}
	c, err := nfs3.Mount(ctx, addr.String(), "/v1", nfs3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := c.Root
	c.Close()
	m.mu.Lock()
	sb := m.sandboxes["bso"]
	m.mu.Unlock()
	watch, err := openNetlinkAddrs(sb.ns, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	present := func() bool {
		ps, err := watch.List()
		if err != nil {
			t.Error(err)
			return false
		}
		for _, p := range ps {
			if p.Addr() == addr {
				return true
			}
		}
		return false
	}

	for round := range 5 {
		if err := m.Release(ctx, "bso", addr, ex.ID); err != nil {
			t.Fatal(err)
		}
		// The client: the moment the address is there, it reconnects and asks
		// for its root's attributes with the handle it holds.
		var stale atomic.Bool
		done := make(chan error, 1)
		go func() {
			deadline := time.Now().Add(30 * time.Second)
			for !present() {
				if time.Now().After(deadline) {
					done <- errors.New("the address never came back")
					return
				}
			}
			var last error
			for time.Now().Before(deadline) {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				cl, err := nfs3.Attach(actx, addr.String(), root, nfs3.Options{})
				if err == nil {
					_, err = cl.GetAttr(actx, root)
					cl.Close()
				}
				cancel()
				_, answered := nfs3.StatusOf(err)
				switch {
				case errors.Is(err, nfs3.ErrStale):
					stale.Store(true)
				case err == nil || answered:
					done <- err
					return
				}
				last = err // rpcbind or Ganesha not answering yet
			}
			done <- fmt.Errorf("no GETATTR answered within 30 s; the last attempt: %w", last)
		}()
		time.Sleep(20 * time.Millisecond) // the client watches before the export starts
		if err := m.Export(ctx, "bso", addr, ex); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			// What the sandbox listens on and holds, for the failure.
			for _, args := range [][]string{{"ss", "-ltnp"}, {"ss", "-tn"}, {"ip", "addr", "show", "eth0"}} {
				out, _ := exec.Command("nsenter", append([]string{"--net=/run/netns/" + sb.ns}, args...)...).CombinedOutput()
				t.Logf("%v in the sandbox:\n%s", args, out)
			}
			t.Logf("ganesha pid %d", m.GaneshaPID("bso"))
			t.Fatalf("round %d: %v", round, err)
		}
		if stale.Load() {
			t.Fatalf("round %d: a client reconnecting as the address came back was answered NFS3ERR_STALE: the address came before the export", round)
		}
	}

	// Id 0 is an SMB-only volume's address alone: it goes, the exports stay
	// (Ganesha refuses to remove export 0, its pseudo root).
	if err := m.Release(ctx, "bso", addr, 0); err != nil {
		t.Fatal(err)
	}
	if present() {
		t.Fatalf("%s still on the sandbox after its release", addr)
	}
	held, err := sb.bus.ShowExports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, e := range held {
		ids = append(ids, e.ID)
	}
	if !slices.Contains(ids, ex.ID) {
		t.Fatalf("exports after the release of an address alone: %v, want %d still there", ids, ex.ID)
	}
}
