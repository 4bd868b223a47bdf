package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

// liveClient is one client's I/O loop: it writes a block and reads it back,
// again and again, over a small file, checking every byte; it records every
// failure and the longest time between two I/Os that completed (the pause a
// user would see).
type liveClient struct {
	name  string
	block int
	// write and read one block at off.
	write func(ctx context.Context, off int64, p []byte) error
	read  func(ctx context.Context, off int64, p []byte) error

	mu       sync.Mutex
	ops      int
	fails    []string
	last     time.Time
	maxPause time.Duration
	pausedAt time.Time
	written  map[int64][]byte // offset → what was last written there
}

// liveBlocks is how many blocks each client's file holds.
const liveBlocks = 32

func (c *liveClient) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.fails) < 20 {
		c.fails = append(c.fails, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

// done records an I/O that completed.
func (c *liveClient) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.last.IsZero() && now.Sub(c.last) > c.maxPause {
		c.maxPause, c.pausedAt = now.Sub(c.last), c.last
	}
	c.last = now
	c.ops++
}

// run loops until ctx ends. Each I/O has 10 s: one that takes longer is a
// failure (and a pause).
func (c *liveClient) run(ctx context.Context) {
	c.written = map[int64][]byte{}
	for i := 0; ctx.Err() == nil; i++ {
		off := int64(i%liveBlocks) * int64(c.block)
		unit := fmt.Sprintf("%s %08d|", c.name, i)
		p := bytes.Repeat([]byte(unit), c.block/len(unit)+1)[:c.block]
		octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.write(octx, off, p)
		cancel()
		if err != nil {
			c.fail("write %d at %d: %v", i, off, err)
			continue
		}
		c.mu.Lock()
		c.written[off] = p
		c.mu.Unlock()
		c.done()
		got := make([]byte, c.block)
		octx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = c.read(octx, off, got)
		cancel()
		if err != nil {
			c.fail("read %d at %d: %v", i, off, err)
			continue
		}
		if !bytes.Equal(got, p) {
			c.fail("read %d at %d: %q…, want %q…", i, off, got[:24], p[:24])
			continue
		}
		c.done()
		time.Sleep(5 * time.Millisecond)
	}
}

// verify reads back every block the client wrote.
func (c *liveClient) verify(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for off, want := range c.written {
		got := make([]byte, c.block)
		if err := c.read(ctx, off, got); err != nil {
			return fmt.Errorf("%s: read back at %d: %w", c.name, off, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: read back at %d: %q…, want %q…", c.name, off, got[:24], want[:24])
		}
	}
	return nil
}

// buildReplacement builds a second basin binary that differs from the first (its
// version), as an upgrade replaces one build with another.
func buildReplacement(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "basin-next")
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=e2e-replacement", "github.com/basin-nas/basin/cmd/basin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the replacement basin: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.Contains(string(out), "e2e-replacement") {
		t.Fatalf("replacement basin version: %q %v", out, err)
	}
	return bin
}

// TestLiveRestart (issue 26, criterion 1): NFSv3, NFSv4.1 and SMB
// clients write and read back continuously, every I/O checked, while Basin is
// stopped with SIGTERM and started, killed with SIGKILL and started, and
// replaced by another build of itself: no I/O fails, none waits a second, no
// client is re-attached or re-mounted (the same connections and sessions
// throughout), the daemons serving them are the same processes, and every
// byte written reads back.
func TestLiveRestart(t *testing.T) {
	s := newServer(t)
	s.keep = true
	l := startSMBLab(t, s, nil)
	c := l.c
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	replacement := buildReplacement(t)

	mutate(t, c, "POST", loc+"/volumes?volumeId=live", map[string]any{"shareName": "live", "storagePool": "pool1", "capacityGib": "1",
		"protocols": []string{"NFSV3", "NFSV4"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, true, "true")}}})
	ep := endpoint(t, c, "live")
	sh := l.volume("lives", map[string]any{"unixPermissions": "0777"})
	const block = 64 << 10

	// NFSv3 from one host, NFSv4.1 from another, SMB 3 from the lab's.
	h3, h4 := s.host(201), s.host(202)
	var v3 *nfs3.Client
	if err := h3.Within(func() (err error) { v3, err = nfs3.Mount(ctx, ep.String(), "/live", nfs3.Options{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer v3.Close()
	fh3, err := v3.Create(ctx, v3.Root, "v3.dat", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v3.Create(ctx, v3.Root, "v41.dat", 0o666); err != nil {
		t.Fatal(err)
	}
	var v4 *nfsraw.Client
	if err := h4.Within(func() (err error) { v4, err = nfsraw.Dial41(ctx, ep.String(), 2049, nfsraw.Auth{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	fh4, err := v4.LookupPath(ctx, "live", "v41.dat")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := l.dialNTLM(ctx, sh, l.user("alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Logoff()
	share, err := sess.Mount(sh.Share)
	if err != nil {
		t.Fatal(err)
	}
	defer share.Umount()
	sf, err := share.Create("smb.dat")
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()

	clients := []*liveClient{
		{name: "nfsv3", block: block,
			write: func(ctx context.Context, off int64, p []byte) error {
				_, err := v3.Write(ctx, fh3, p, off, nfs3.FileSync)
				return err
			},
			read: func(ctx context.Context, off int64, p []byte) error {
				n, _, err := v3.Read(ctx, fh3, p, off)
				if err == nil && n != len(p) {
					err = fmt.Errorf("short read: %d of %d", n, len(p))
				}
				return err
			}},
		{name: "nfsv4.1", block: block,
			write: func(ctx context.Context, off int64, p []byte) error {
				w := &nfsraw.Write{Offset: uint64(off), Data: p}
				err := v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, w)
				if err == nil && int(w.Count) != len(p) {
					err = fmt.Errorf("short write: %d of %d", w.Count, len(p))
				}
				return err
			},
			read: func(ctx context.Context, off int64, p []byte) error {
				rd := &nfsraw.Read{Offset: uint64(off), Count: uint32(len(p))}
				if err := v4.Run(ctx, &nfsraw.PutFH{FH: fh4}, rd); err != nil {
					return err
				}
				if copy(p, rd.Data) != len(p) {
					return fmt.Errorf("short read: %d of %d", len(rd.Data), len(p))
				}
				return nil
			}},
		{name: "smb3", block: block,
			write: func(ctx context.Context, off int64, p []byte) error {
				return bounded(ctx, func() error { _, err := sf.WriteAt(p, off); return err })
			},
			read: func(ctx context.Context, off int64, p []byte) error {
				return bounded(ctx, func() error { _, err := sf.ReadAt(p, off); return err })
			}},
	}

	// What serves the clients, before: the same processes must serve them after.
	serving := func() map[string][]int {
		out := map[string][]int{}
		for _, d := range []string{"ganesha.nfsd", "smbd", "winbindd", "samba-dcerpcd", "rpcbind", "dbus-daemon"} {
			_, main := daemonPIDs(s.dataDir, d)
			slices.Sort(main)
			out[d] = main
		}
		return out
	}
	before := serving()
	if len(before["ganesha.nfsd"]) != 1 || len(before["smbd"]) != 1 {
		t.Fatalf("daemons before the restarts: %v", before)
	}
	bridgeIndex := func() string {
		b, _ := os.ReadFile("/sys/class/net/" + s.bridge + "/ifindex")
		return strings.TrimSpace(string(b))
	}
	bridge := bridgeIndex()
	// Traffic shaping is adopted, not rebuilt: the sandbox's IFB (and its
	// HTB tree) is the same device after every restart.
	ifb := func() string {
		out, err := exec.Command("ip", "-n", "basin-"+s.bridge, "-o", "link", "show", "type", "ifb").Output()
		if err != nil || !strings.Contains(string(out), "ifb") {
			t.Fatalf("the sandbox's IFB: %v %s", err, out)
		}
		return strings.Fields(string(out))[0] + strings.Fields(string(out))[1]
	}
	shaper := ifb()

	loopCtx, stopLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); cl.run(loopCtx) }()
	}
	settle := func() { time.Sleep(3 * time.Second) }
	settle()
	restarts := []struct {
		what string
		do   func()
	}{
		{"stopped with SIGTERM and started", func() { s.stop(syscall.SIGTERM); s.start() }},
		{"killed with SIGKILL and started", func() { s.stop(syscall.SIGKILL); s.start() }},
		{"replaced by another build", func() {
			s.stop(syscall.SIGTERM)
			s.bin = replacement
			s.start()
		}},
	}
	for _, r := range restarts {
		t0 := time.Now()
		r.do()
		t.Logf("basin %s: ready again after %v", r.what, time.Since(t0).Round(time.Millisecond))
		if !strings.Contains(s.log.String(), "data plane adopted") {
			t.Errorf("basin %s: the log does not say the data plane was adopted:\n%s", r.what, s.log)
		}
		settle()
	}
	if out, err := exec.Command(s.bin, "version").Output(); err != nil || !strings.Contains(string(out), "e2e-replacement") {
		t.Fatalf("the server runs %q (%v), want the replacement", out, err)
	}
	stopLoops()
	wg.Wait()

	for _, cl := range clients {
		t.Logf("%s: %d I/Os, longest pause %v (after %s), failures %d", cl.name, cl.ops, cl.maxPause.Round(time.Millisecond),
			cl.pausedAt.Format("15:04:05.000"), len(cl.fails))
		if len(cl.fails) > 0 {
			t.Errorf("%s: I/O failed:\n%s", cl.name, strings.Join(cl.fails, "\n"))
		}
		if cl.maxPause >= time.Second {
			t.Errorf("%s: paused %v, want under 1 s", cl.name, cl.maxPause)
		}
		if cl.ops < 100 {
			t.Errorf("%s: only %d I/Os in all", cl.name, cl.ops)
		}
		if err := cl.verify(ctx); err != nil {
			t.Error(err)
		}
	}
	if after := serving(); !equalPIDs(before, after) {
		t.Errorf("the daemons serving the clients changed: before %v, after %v", before, after)
	}
	if got := ifb(); got != shaper {
		t.Errorf("the sandbox's IFB was made anew (%s, was %s): shaping was rebuilt", got, shaper)
	}
	if got := bridgeIndex(); got != bridge {
		t.Errorf("bridge %s was made anew (ifindex %s, was %s)", s.bridge, got, bridge)
	}
	for _, h := range []interface{ Master() string }{h3, h4, l.h} {
		if m := h.Master(); m != s.bridge {
			t.Errorf("a client host's port is on %q, want %s (it was never re-attached)", m, s.bridge)
		}
	}
}

// bounded runs fn, giving up when ctx ends first (go-smb2's files take no
// context per call; fn then finishes on its own).
func bounded(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func equalPIDs(a, b map[string][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestTeardown: a stopped Basin leaves its data plane serving (namespace,
// bridge, Ganesha, the volume's mount) and an NFS client reads on with no
// Basin at all; basin teardown refuses while a Basin serves the data
// directory, then takes everything down (the harness checks nothing is left)
// and keeps the data: the next start serves the volume's file again.
func TestTeardown(t *testing.T) {
	s := newServer(t)
	s.keep = true
	s.start()
	c := s.client()
	nfsPool(t, c)
	s.openVolume(c, "kept")
	ep := endpoint(t, c, "kept")
	nfs := s.host(201).NFS(3, 0, 0)
	if err := nfs.Write(ep, "/kept/f", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	s.stop(syscall.SIGTERM)
	if _, err := os.Stat("/run/netns/basin-" + s.bridge); err != nil {
		t.Fatalf("the sandbox's namespace went with Basin: %v", err)
	}
	if pids := s.ganeshaPIDs(); len(pids) != 1 {
		t.Fatalf("ganesha after the stop: %v", pids)
	}
	if got, err := nfs.Read(ep, "/kept/f"); err != nil || string(got) != "kept" {
		t.Fatalf("read with no Basin running: %q %v", got, err)
	}

	// Refused while a Basin serves the data directory.
	s.start()
	args := append([]string{"teardown"}, s.args()[1:]...)
	if out, err := exec.Command(s.bin, args...).CombinedOutput(); err == nil || !strings.Contains(string(out), "in use") {
		t.Fatalf("teardown beside a running Basin: %v\n%s", err, out)
	}
	if got, err := nfs.Read(ep, "/kept/f"); err != nil || string(got) != "kept" {
		t.Fatalf("read after a refused teardown: %q %v", got, err)
	}
	s.stop(syscall.SIGTERM)
	s.teardown()
	assertNothingLeft(t, s.dataDir)
	assertNoNetworkLeft(t, s.bridge)
	// Nothing answers at the address any more: a client waits in vain, so
	// the check waits 5 s, not the minute a read may take.
	gone := *nfs
	gone.Timeout = 5 * time.Second
	if _, err := gone.Read(ep, "/kept/f"); err == nil {
		t.Fatal("the volume is still served after the teardown")
	}

	// The data stays: a start builds everything and serves it again.
	s.start()
	h := s.host(202)
	if got, err := h.NFS(3, 0, 0).Read(ep, "/kept/f"); err != nil || string(got) != "kept" {
		t.Fatalf("read after the teardown and a start: %q %v", got, err)
	}
}
