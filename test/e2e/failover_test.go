package e2e

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/storage/cephfs"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/store/pgtest"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/ceph"
	"github.com/basin-nas/basin/test/clienthost"
)

// nfsWriter writes a new file every 100 ms through an NFSv3 client on a
// client host, each with FILE_SYNC, and remembers the writes the server
// acknowledged. When a call fails it reconnects, as a hard-mounted client
// does: to the same address, with the handle it has (nfs3.Attach), and
// tries the same write again.
type nfsWriter struct {
	t      *testing.T
	h      *clienthost.Host
	ep     netip.Addr
	c      *nfs3.Client
	root   []byte
	acked  []string // file names, each holding its own name
	at     []time.Time
	errors []string // what failed, other than a connection or a timeout
}

// run writes until stop returns true (checked after each write that was
// acknowledged) or ctx ends.
func (w *nfsWriter) run(ctx context.Context, stop func() bool) {
	for i := len(w.acked); ctx.Err() == nil; {
		name := fmt.Sprintf("w%05d", i)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := writePath(wctx, w.c, name, name)
		cancel()
		if err == nil {
			w.acked, w.at = append(w.acked, name), append(w.at, time.Now())
			i++
			if stop() {
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var st nfs3.Status
		if errors.As(err, &st) {
			// The server answered, and refused: a client would see it.
			w.errors = append(w.errors, fmt.Sprintf("%s at %s: %v", name, time.Now().Format(time.StampMilli), err))
		}
		w.c.Close()
		time.Sleep(200 * time.Millisecond)
		for ctx.Err() == nil {
			var c *nfs3.Client
			err := w.h.Within(func() (err error) {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				c, err = nfs3.Attach(actx, w.ep.String(), w.root, nfs3.Options{Auth: nfs3.Auth{Machine: "failover"}})
				return err
			})
			if err == nil {
				w.c = c
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// pauseAround is the longest time between two acknowledged writes after t.
func (w *nfsWriter) pauseAround(t time.Time) time.Duration { return longestGapAfter(w.at, t) }

// longestGapAfter is the longest time between two successive times of at
// (in order) whose second is after t.
func longestGapAfter(at []time.Time, t time.Time) time.Duration {
	var longest time.Duration
	for i := 1; i < len(at); i++ {
		if at[i].After(t) {
			longest = max(longest, at[i].Sub(at[i-1]))
		}
	}
	return longest
}

// failoverPair is two --failover nodes on one PostgreSQL database and the
// package's Ceph cluster, their bridges joined into one segment with one
// subnet, v1 on node1 and v2 on node2, and a client host writing to v1.
type failoverPair struct {
	a, b   *server
	ca, cb *client.Client
	st     store.Store
	w      *nfsWriter
	cl     *ceph.Cluster
	// flags are a node's cluster flags; dbA, if set, turns node1's
	// database URL into the one it uses (through a proxy the test cuts).
	flags func(id string) []string
}

func startFailoverPair(t *testing.T, ctx context.Context, dbA func(string) string) *failoverPair {
	t.Helper()
	// Basin's user may blocklist addresses of the Ceph network: a lost
	// node's clients are cut off before another serves its volumes.
	a, cl := cephServerCaps(t, "fo", cephfs.FailoverCap(cephSubnet+"."))
	b, _ := cephServerCaps(t, "fo", cephfs.FailoverCap(cephSubnet+"."))
	db := pgtest.Start(t).NewDatabase(t)
	keyFile := clusterKeyFile(t)
	// One segment: node2's network is node1's subnet, on a bridge of its own
	// joined to node1's once both exist; its sandbox reaches Ceph from
	// addresses of its own.
	b.subnet = a.subnet
	last := len(b.storage) - 1
	b.storage[last] = strings.Replace(b.storage[last], cephSubnet+".100-"+cephSubnet+".109", cephSubnet+".110-"+cephSubnet+".119", 1)
	if b.storage[last] == a.storage[last] {
		t.Fatalf("node2's --ceph-network is node1's: %s", b.storage[last])
	}
	// The segment's bridges are the operator's, as on hosts whose bridge
	// enslaves the uplink: Basin neither makes nor removes them, so a node
	// that stops (or fences itself) leaves the segment to the others.
	operatorBridge(t, a.bridge)
	operatorBridge(t, b.bridge)
	joinBridges(t, a.bridge, b.bridge)
	public := "http://" + a.addr + "/"
	p := &failoverPair{a: a, b: b, cl: cl}
	p.flags = func(id string) []string {
		d := db
		if id == "node1" && dbA != nil {
			d = dbA(db)
		}
		return []string{"--store", d, "--secrets-key-file", keyFile, "--node-id", id, "--public-url", public, "--rate-limit", "0", "--failover"}
	}
	a.start(p.flags("node1")...)
	b.start(p.flags("node2")...)
	p.ca = a.client()
	var err error
	if p.cb, err = client.New("http://"+b.addr, a.ownerKey()); err != nil {
		t.Fatal(err)
	}
	if p.st, err = store.OpenPostgres(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.st.Close() })
	nfsPool(t, p.ca)
	policy := map[string]any{"rules": []any{rule(a.subnet.String(), "READ_WRITE", true, true, "true")}}
	volume := func(id string) {
		mutate(t, p.ca, "POST", loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1",
			"protocols": []string{"NFSV3", "NFSV4"}, "unixPermissions": "0777", "exportPolicy": policy})
	}
	zone := func(id string) string {
		var v client.Object
		if err := p.ca.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v); err != nil {
			t.Fatal(err)
		}
		z, _ := v["zone"].(string)
		return z
	}
	// Placement takes the node with the fewest volumes: v1 on one, v2 on
	// the other.
	volume("v1")
	volume("v2")
	if z1, z2 := zone("v1"), zone("v2"); z1 != "node1" || z2 != "node2" {
		t.Fatalf("v1 on %q, v2 on %q; want node1 and node2", z1, z2)
	}
	h := a.host(150)
	ep := endpoint(t, p.ca, "v1")
	p.w = &nfsWriter{t: t, h: h, ep: ep}
	p.w.c = mount3(t, ctx, h, ep, "/v1")
	p.w.root = p.w.c.Root
	p.w.run(ctx, func() bool { return len(p.w.acked) >= 10 })
	return p
}

// Two nodes with --failover on one PostgreSQL database and the package's
// Ceph cluster, their bridges joined into one segment with one subnet. A
// client writes to a volume of node1 continuously (FILE_SYNC, each write
// checked later). node1's Basin and its whole data plane are killed at once
// (SIGKILL of every process of the node, its sandbox's link cut): node2 takes
// the volume over at the same address and the client goes on. Every write
// acknowledged before, during and after reads back; the pause is logged with
// its breakdown. Then node1 comes back and node2 is drained: both volumes
// move to node1 while the client writes, with no error.
func TestCephFSFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, nil)
	a, b, cb, st, w, cl, flags := p.a, p.b, p.cb, p.st, p.w, p.cl, p.flags
	// An NFSv4.1 client writes to the same volume from another host, all along.
	w4, err := newNFS4Writer(ctx, a.host(151), endpoint(t, p.ca, "v1"), "v1", "failover-v4")
	if err != nil {
		t.Fatal(err)
	}
	stop4 := w4.start(ctx)
	defer stop4()
	if err := w4.waitAcked(ctx, 10); err != nil {
		t.Fatal(err)
	}

	// The NFSv3 client writes up to the kill (it stood still while the
	// NFSv4.1 one started), so the pause measured is the failover's alone.
	before := len(w.acked)
	w.run(ctx, func() bool { return len(w.acked) >= before+3 })

	// node1 dies: Basin, Ganesha and the rest of its data plane at once,
	// and its sandbox's link.
	killed := time.Now()
	killNode(t, a)
	before = len(w.acked)
	acked4, _, _ := w4.snapshot()
	w.run(ctx, func() bool { return len(w.acked) >= before+20 })
	if len(w.acked) < before+20 {
		t.Fatalf("the client wrote %d times after the failover, then the test's time ran out", len(w.acked)-before)
	}
	resumed := w.at[before]
	if err := w4.waitAcked(ctx, len(acked4)+20); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	_, at4, _ := w4.snapshot()
	pause4 := longestGapAfter(at4, killed)
	t.Logf("failover, NFSv4.1: writes paused %s (a new client ID and session at the same address, the file handle kept; its opens are not reclaimed)",
		pause4.Round(time.Millisecond))
	if pause4 > 30*time.Second {
		t.Errorf("NFSv4.1 writes paused %s across the failover, want 30 s at most", pause4)
	}
	var h1 model.Hosting
	if err := st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindHosting, model.HostingName("default", "node1"), &h1) }); err != nil {
		t.Fatalf("no hosting of node1's volumes: %v", err)
	}
	if h1.Host != "node2" || h1.From != "node1" || !h1.Released || h1.Reason != model.HostingLost {
		t.Fatalf("hosting %+v; want node2 from node1, released, lost", h1)
	}
	t.Logf("failover, NFSv3: writes paused %s (the last before the kill to the first after); node2 took the volumes %s after the kill, the client wrote again %s after that",
		w.pauseAround(killed).Round(time.Millisecond), h1.Since.Sub(killed).Round(time.Millisecond), resumed.Sub(h1.Since).Round(time.Millisecond))
	t.Logf("node2's fence: %s", grepLines(b.log.String(), "cut a lost node's clients off the storage"))
	if p := w.pauseAround(killed); p > time.Minute {
		t.Errorf("writes paused %s across the failover", p)
	}
	var v1 client.Object
	if err := cb.Do(ctx, "GET", loc+"/volumes/v1", nil, nil, &v1); err != nil {
		t.Fatal(err)
	}
	if v1["state"] != "READY" || !strings.Contains(fmt.Sprint(v1["stateDetails"]), "served by node node2") {
		t.Errorf("v1 after the failover: %v, %v", v1["state"], v1["stateDetails"])
	}
	checkAcked(t, ctx, w)
	// node1's sandbox's address and its volume mounts' (the last of its
	// --ceph-network range).
	blocklisted := func() bool {
		out, err := cl.Ceph(ctx, "osd", "blocklist", "ls")
		if err != nil {
			t.Fatalf("osd blocklist ls: %v: %s", err, out)
		}
		sb, mounts := strings.Contains(string(out), cephSubnet+".100:0/0"), strings.Contains(string(out), cephSubnet+".109:0/0")
		if sb != mounts {
			t.Errorf("node1's sandbox's Ceph address blocklisted: %v, its mounts': %v\n%s", sb, mounts, out)
		}
		return sb
	}
	if !blocklisted() {
		t.Errorf("node1's Ceph addresses %[1]s.100 and %[1]s.109 are not on the blocklist after the failover", cephSubnet)
	}

	// node1 back; node2 drained: both volumes move to node1 while the
	// client writes.
	a.start(flags("node1")...)
	if blocklisted() {
		t.Errorf("node1's Ceph address is still on the blocklist once it is back")
	}
	// The client writes up to the drain (it stood still while node1
	// started), so the pause measured is the drain's alone.
	before = len(w.acked)
	w.run(ctx, func() bool { return len(w.acked) >= before+3 })
	var drained client.Object
	if err := cb.Do(ctx, "POST", "/v1/nodes/node2:drain", nil, nil, &drained); err != nil || drained["drained"] != true {
		t.Fatalf("drain node2: %v %v", drained, err)
	}
	drainedAt := time.Now()
	before = len(w.acked)
	w.run(ctx, func() bool {
		var h model.Hosting
		st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindHosting, model.HostingName("default", "node1"), &h) })
		return h.Host == "node1" && h.Released && len(w.acked) >= before+20
	})
	t.Logf("drain, NFSv3: writes paused %s at most", w.pauseAround(drainedAt).Round(time.Millisecond))
	if len(w.errors) > 0 {
		t.Errorf("the client saw errors: %q", w.errors)
	}
	acked4, _, _ = w4.snapshot()
	if err := w4.waitAcked(ctx, len(acked4)+5); err != nil {
		t.Fatalf("after the drain: %v", err)
	}
	stop4()
	acked4, at4, errs4 := w4.snapshot()
	pause4 = longestGapAfter(at4, drainedAt)
	t.Logf("drain, NFSv4.1: writes paused %s at most", pause4.Round(time.Millisecond))
	// node1's Ganesha recorded the client before it was killed and starts
	// in grace for it: the client's RECLAIM_COMPLETE (same owner, same
	// address) ends that grace, not its 40 s period.
	if pause4 > 10*time.Second {
		t.Errorf("NFSv4.1 writes paused %s across the drain, want 10 s at most", pause4)
	}
	w4.mu.Lock()
	t.Logf("the NFSv4.1 client (killed %s, drained %s): %s", killed.Format("15:04:05.000"), drainedAt.Format("15:04:05.000"), strings.Join(w4.events, "; "))
	w4.mu.Unlock()
	if len(errs4) > 0 {
		t.Errorf("the NFSv4.1 client saw errors: %q", errs4)
	}
	for _, name := range acked4 {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := readPath(rctx, w.c, name)
		cancel()
		if err != nil || got != name {
			t.Errorf("acknowledged NFSv4.1 write %s reads back %q, %v", name, got, err)
		}
	}
	t.Logf("%d acknowledged NFSv4.1 writes read back", len(acked4))
	for _, id := range []string{"v1", "v2"} {
		var h model.Hosting
		st.View(ctx, func(tx store.Tx) error {
			return tx.Get(store.KindHosting, model.HostingName("default", map[string]string{"v1": "node1", "v2": "node2"}[id]), &h)
		})
		if h.Host != "node1" || !h.Released {
			t.Errorf("%s after node2's drain: hosting %+v, want served by node1", id, h)
		}
	}
	checkAcked(t, ctx, w)
	b.stop(syscall.SIGTERM)
	a.stop(syscall.SIGTERM)
}

// checkAcked reads back every write w was told was done.
func checkAcked(t *testing.T, ctx context.Context, w *nfsWriter) {
	t.Helper()
	for _, name := range w.acked {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := readPath(rctx, w.c, name)
		cancel()
		if err != nil || got != name {
			t.Fatalf("%s, acknowledged, reads %q, %v", name, got, err)
		}
	}
	t.Logf("%d acknowledged writes read back", len(w.acked))
}

// operatorBridge makes bridge br, up, as an operator would, removed at the
// end of the test (before the servers' checks that nothing of theirs is
// left).
func operatorBridge(t *testing.T, br string) {
	t.Helper()
	for _, args := range [][]string{{"link", "add", br, "type", "bridge"}, {"link", "set", br, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "delete", br).Run() }) //nolint:errcheck // best effort
}

// joinBridges makes one segment of two bridges with a veth pair, removed at
// the end of the test.
func joinBridges(t *testing.T, a, b string) {
	t.Helper()
	va, vb := fmt.Sprintf("vj%05da", os.Getpid()%100000), fmt.Sprintf("vj%05db", os.Getpid()%100000)
	for _, args := range [][]string{
		{"link", "add", va, "type", "veth", "peer", "name", vb},
		{"link", "set", va, "master", a, "up"},
		{"link", "set", vb, "master", b, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "delete", va).Run() }) //nolint:errcheck // gone with a bridge already
}

// killNode kills a node as a power cut would: basin serve and every process
// of its data plane (its sandbox's, its ceph-fuse mounts') with SIGKILL, and
// the sandbox's link goes (its endpoint addresses with it).
func killNode(t *testing.T, s *server) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGKILL)
	pids := append(addc.PidsInNetns("/run/netns/basin-"+s.bridge), processesMentioning(s.dataDir)...)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	sum := sha1.Sum([]byte(s.bridge))
	exec.Command("ip", "link", "delete", "bsb"+hex.EncodeToString(sum[:4])).Run() //nolint:errcheck // the check is the client's
	s.stop(syscall.SIGKILL)                                                       // reaps it; what it left goes at the end
}

// pgProxy forwards connections to a PostgreSQL server's Unix socket from a
// socket of its own, until cut: then it closes every connection it carries
// and every new one. A node whose database URL names it can be cut off from
// the database while it goes on running.
type pgProxy struct {
	dir string // holds .s.PGSQL.5432, as a server's socket directory does
	ln  net.Listener
	mu  sync.Mutex
	cut bool
	cs  []net.Conn
}

func newPGProxy(t *testing.T, sockDir string) *pgProxy {
	t.Helper()
	p := &pgProxy{dir: t.TempDir()}
	ln, err := net.Listen("unix", filepath.Join(p.dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	t.Cleanup(func() { ln.Close(); p.cutOff() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("unix", filepath.Join(sockDir, ".s.PGSQL.5432"))
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.cs = append(p.cs, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }() //nolint:errcheck // ends with either side
			go func() { io.Copy(c, up); c.Close() }()  //nolint:errcheck
		}
	}()
	return p
}

// cutOff closes every connection and refuses new ones from now on.
func (p *pgProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
}

// Split brain: node1 is cut off from the database but goes on running (and
// its clients still reach it). It must stop serving before node2 takes its
// volumes: it fences itself (its sandbox's link goes, its daemons stop,
// basin serve exits "fenced") before the takeover is recorded, so no write
// sent through it after the takeover can be acknowledged; the client goes on
// through node2 and every acknowledged write reads back.
func TestCephFSSplitBrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var proxy *pgProxy
	p := startFailoverPair(t, ctx, func(db string) string {
		u, err := url.Parse(db)
		if err != nil {
			t.Fatal(err)
		}
		proxy = newPGProxy(t, u.Query().Get("host"))
		q := u.Query()
		q.Set("host", proxy.dir)
		u.RawQuery = q.Encode()
		return u.String()
	})
	a, w, st := p.a, p.w, p.st
	exited := make(chan error, 1)
	go func() { exited <- a.cmd.Wait() }()
	sum := sha1.Sum([]byte(a.bridge))
	veth := "bsb" + hex.EncodeToString(sum[:4])
	cut := time.Now()
	proxy.cutOff()
	fencedAt := make(chan time.Time, 1) // when node1's sandbox link was seen gone
	go func() {
		for ctx.Err() == nil && linkPresent(veth) {
			time.Sleep(20 * time.Millisecond)
		}
		fencedAt <- time.Now()
	}()
	// Writes go on until node2 serves and has acknowledged 20.
	var took time.Time
	served := 0
	w.run(ctx, func() bool {
		if took.IsZero() {
			var h model.Hosting
			st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindHosting, model.HostingName("default", "node1"), &h) })
			if h.Host == "node2" && h.Released {
				took = time.Now()
			}
			return false
		}
		served++
		return served >= 20
	})
	if served < 20 {
		t.Fatalf("the client wrote %d times once node2 served, then the test's time ran out", served)
	}
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(a.log.String(), "fenced") {
			t.Errorf("node1 exited with %v; want an error, and its log saying it fenced itself:\n%s", err, a.log)
		}
	case <-time.After(time.Minute):
		t.Fatal("node1, cut off from the database, did not exit")
	}
	var h model.Hosting
	if err := st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindHosting, model.HostingName("default", "node1"), &h) }); err != nil {
		t.Fatalf("no hosting of node1's volumes: %v", err)
	}
	if h.Host != "node2" || !h.Released {
		t.Fatalf("hosting %+v; want served by node2", h)
	}
	fenced := <-fencedAt
	if !fenced.Before(h.Since) {
		t.Fatalf("node1's link went at %s, node2 took its volumes at %s: both served at once", fenced.Format(time.StampMilli), h.Since.Format(time.StampMilli))
	}
	t.Logf("split brain, NFSv3: node1 fenced itself %s after it was cut off, node2 took over %s after that; writes paused %s",
		fenced.Sub(cut).Round(time.Millisecond), h.Since.Sub(fenced).Round(time.Millisecond), w.pauseAround(cut).Round(time.Millisecond))
	checkAcked(t, ctx, w)
	if len(w.errors) > 0 {
		t.Errorf("the client saw errors: %q", w.errors)
	}
	p.b.stop(syscall.SIGTERM)
}
