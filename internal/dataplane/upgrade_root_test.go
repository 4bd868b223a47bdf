package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/test/nfsraw"
)

// A network's Ganesha restarted for an upgrade (issue 26, criterion 2) while an
// NFSv4.1 client holds an open (deny write) and a write lock, and has written
// under them: the client finds its session gone, reestablishes it, reclaims its
// open and lock and reads back what it wrote; another client is held off by
// grace, then denied the reclaimed lock and deny mode. The pause (from the
// stop to the new Ganesha answering, and to the client's first I/O) is
// logged; the restart is counted as an upgrade. Then the same through the
// rolling upgrade a start does: Ganesha run from a copy of its build (an
// earlier build, as after a package upgrade replaced the file) is restarted on
// the installed one by the next Manager, and the client reclaims again. Names:
// bridge bsg0, namespace basin-bsg0, subnet 10.99.216.0/24 (the host is .1 and
// a second client .200).
func TestGaneshaUpgradeKeepsNFSv4State(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (namespaces, mounts, Ganesha)")
	}
	if err := testGanesha().Check(); err != nil {
		t.Skipf("needs Basin's Ganesha: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := Network{Name: "bsg", Bridge: "bsg0", Prefix: netip.MustParsePrefix("10.99.216.0/24"),
		FirstEndpoint: netip.MustParseAddr("10.99.216.10"), LastEndpoint: netip.MustParseAddr("10.99.216.127")}
	dataDir, mounts := sharedMounts(t, ctx)
	vol := tmpfsVolume(t, mounts, "v1", "size=4m")

	// The earlier build: a copy of the installed prefix, so its binary is
	// another file than the installed one. Beside it, under /usr: a sandbox
	// sees nothing of the host but /usr.
	old := filepath.Join(filepath.Dir(testGanesha().prefix()), "ganesha-bsg-test")
	os.RemoveAll(old)
	if out, err := exec.Command("cp", "-a", testGanesha().prefix(), old).CombinedOutput(); err != nil {
		t.Fatalf("copy Ganesha: %v %s", err, out)
	}
	t.Cleanup(func() { os.RemoveAll(old) })
	// Another build, not the same one written again: a byte more at the end
	// of its program (which still runs) gives it another BuildID.
	f, err := os.OpenFile(filepath.Join(old, "bin", "ganesha.nfsd"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0})
	f.Close()

	var mu sync.Mutex
	var restarts []string
	opts := Options{Ganesha: Ganesha{Prefix: old}, DataDir: dataDir, Networks: []Network{n}, Detach: true,
		OnRestart: func(daemon, reason string) { mu.Lock(); restarts = append(restarts, daemon+":"+reason); mu.Unlock() }}
	m := New(opts)
	last := m
	t.Cleanup(func() {
		if err := last.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := n.FirstEndpoint
	ex := nfs.Export{ID: 41, Path: vol, Pseudo: "/v1", Protocols: []int{3, 4},
		Clients: []nfs.Client{{Clients: []string{n.Prefix.String()}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
	if err := m.Export(ctx, "bsg", addr, ex); err != nil {
		t.Fatal(err)
	}
	const second = "10.99.216.200"
	if out, err := exec.Command("ip", "addr", "add", second+"/24", "dev", n.Bridge).CombinedOutput(); err != nil {
		t.Fatalf("second client address: %v %s", err, out)
	}

	a := newStateHolder(t, ctx, addr.String(), n.HostAddr().String(), "bsg-client-a")

	// 1. A restart for an upgrade, asked for.
	t0 := time.Now()
	pause, err := m.RestartGanesha(ctx, "bsg")
	if err != nil {
		t.Fatal(err)
	}
	a.recover(t, ctx, t0, "restart")
	t.Logf("RestartGanesha: Ganesha served nothing for %v", pause.Round(time.Millisecond))
	mu.Lock()
	if !slices.Contains(restarts, "ganesha:"+RestartUpgrade) {
		t.Errorf("restarts reported %v, want ganesha:%s", restarts, RestartUpgrade)
	}
	mu.Unlock()

	// Another client: grace holds it off until the only known client has
	// reclaimed (at Ganesha's next reaper pass); then the reclaimed lock and
	// deny mode hold against it.
	b, err := nfsraw.Dial41(ctx, addr.String(), 2049, nfsraw.Auth{LocalIP: second, Machine: "bsg-client-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var bOpen nfsraw.StateID
	for {
		_, bOpen, err = b.OpenFile(ctx, a.root, "data", nfsraw.ShareAccessRead, nfsraw.ShareDenyNone, []byte("b/open"), false)
		if s, ok := nfsraw.StatusOf(err); !ok || s != nfsraw.ErrGrace {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("client B's OPEN for reading after grace: %v", err)
	}
	t.Logf("grace over %v after the restart was asked for", time.Since(t0).Round(time.Millisecond))
	lk := &nfsraw.Lock{Type: nfsraw.ReadLock, Offset: 100, Length: 10, NewOwner: true, OpenStateID: bOpen,
		Owner: nfsraw.LockOwner{ClientID: b.ClientID(), Owner: []byte("b/lock")}}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: a.fh}, lk); !isStatus(err, nfsraw.ErrDenied) {
		t.Fatalf("client B's LOCK inside A's reclaimed write lock: %v, want NFS4ERR_DENIED", err)
	}
	if _, _, err := b.OpenFile(ctx, a.root, "data", nfsraw.ShareAccessWrite, nfsraw.ShareDenyNone, []byte("b/open2"), false); !isStatus(err, nfsraw.ErrShareDenied) {
		t.Fatalf("client B's OPEN for writing against A's deny write: %v, want NFS4ERR_SHARE_DENIED", err)
	}

	// 2. The rolling upgrade of a start: Basin stops (the data plane serves on)
	// and starts with the installed build; the adopted Ganesha, running the
	// earlier one, is restarted on it, and the client reclaims again.
	m.Detach()
	opts.Ganesha = testGanesha()
	m2 := New(opts)
	last = m2
	t1 := time.Now()
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	a.recover(t, ctx, t1, "upgrade at start")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		pid := m2.GaneshaPID("bsg")
		if same, err := sameProgram(pid, testGanesha().Binary()); err == nil && same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ganesha (pid %d) still runs the earlier build", pid)
		}
	}
}

func isStatus(err error, want nfsraw.Status) bool {
	s, ok := nfsraw.StatusOf(err)
	return ok && s == want
}

// stateHolder is an NFSv4.1 client with an open (access both, deny write) of
// file "data" and a write lock on its first holderLen bytes, which it wrote.
type stateHolder struct {
	c                  *nfsraw.Client
	root, fh           []byte
	openOwner, lkOwner []byte
	open, lock         nfsraw.StateID
	data               []byte
}

const holderLen = 4096

func newStateHolder(t *testing.T, ctx context.Context, server, local, owner string) *stateHolder {
	t.Helper()
	var verf [8]byte
	rand.Read(verf[:])
	c, err := nfsraw.Dial41With(ctx, server, 2049, nfsraw.Auth{LocalIP: local, Machine: owner}, nfsraw.Options41{Owner: owner, Verifier: verf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &stateHolder{c: c, openOwner: []byte(owner + "/open"), lkOwner: []byte(owner + "/lock"),
		data: bytes.Repeat([]byte(owner+" wrote this. "), holderLen)[:holderLen]}
	if h.root, err = c.LookupPath(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if h.fh, h.open, err = c.OpenFile(ctx, h.root, "data", nfsraw.ShareAccessBoth, nfsraw.ShareDenyWrite, h.openOwner, true); err != nil {
		t.Fatalf("open: %v", err)
	}
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Length: holderLen, NewOwner: true, OpenStateID: h.open,
		Owner: nfsraw.LockOwner{ClientID: c.ClientID(), Owner: h.lkOwner}}
	if err := c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, lk); err != nil {
		t.Fatalf("lock: %v", err)
	}
	h.lock = lk.StateID
	if w := (&nfsraw.Write{StateID: h.lock, Data: h.data}); c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, w) != nil || w.Count != holderLen {
		t.Fatalf("write under the lock: %d bytes", w.Count)
	}
	return h
}

// recover is what the client does once its server restarted: it retries until
// its session answers or is known gone, establishes a new one (same owner and
// verifier), reclaims its open and lock, says it is done, and reads back and
// writes under the reclaimed lock. It logs how long after t0 each step ended.
func (h *stateHolder) recover(t *testing.T, ctx context.Context, t0 time.Time, what string) {
	t.Helper()
	for {
		err := h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, &nfsraw.Read{StateID: h.lock, Count: 16})
		if err == nil {
			time.Sleep(20 * time.Millisecond) // not restarted yet
			continue
		}
		if nfsraw.NeedsReestablish(err) {
			break
		}
		t.Fatalf("%s: the old session answered %v", what, err)
	}
	for {
		if _, err := h.c.Reestablish(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("%s: reestablish: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	open, err := h.c.ReclaimOpen(ctx, h.fh, nfsraw.ShareAccessBoth, nfsraw.ShareDenyWrite, h.openOwner)
	if err != nil {
		t.Fatalf("%s: reclaim open: %v", what, err)
	}
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Reclaim: true, Length: holderLen, NewOwner: true, OpenStateID: open,
		Owner: nfsraw.LockOwner{ClientID: h.c.ClientID(), Owner: h.lkOwner}}
	if err := h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, lk); err != nil {
		t.Fatalf("%s: reclaim lock: %v", what, err)
	}
	h.open, h.lock = open, lk.StateID
	if err := h.c.Run(ctx, &nfsraw.ReclaimComplete{}); err != nil {
		t.Fatalf("%s: reclaim complete: %v", what, err)
	}
	reclaimed := time.Since(t0)
	rd := &nfsraw.Read{StateID: h.lock, Count: holderLen}
	if err := h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, rd); err != nil || !bytes.Equal(rd.Data, h.data) {
		t.Fatalf("%s: read back under the reclaimed lock: %v (%d bytes)", what, err, len(rd.Data))
	}
	copy(h.data, what)
	if w := (&nfsraw.Write{StateID: h.lock, Data: h.data}); h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, w) != nil || w.Count != holderLen {
		t.Fatalf("%s: write under the reclaimed lock: %d bytes", what, w.Count)
	}
	t.Logf("%s: open and lock reclaimed %v after it began, first I/O %v after", what, reclaimed.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
