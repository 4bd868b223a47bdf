package e2e

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/runner"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// TestTwoBasinsOnOneHost: a Basin's cleanup touches only what it started. Two
// servers run on one host, each with its data directory and bridge; the second is
// stopped, restarted, killed, restarted after its sandbox's holder was killed, and
// stopped, and a third, given the first one's bridge, must refuse to start. All
// the while a client reads the first one's volume over NFS, and afterwards every
// process and link of the first one is the one it was (same pid and start time,
// same interfaces, addresses and namespace).
func TestTwoBasinsOnOneHost(t *testing.T) {
	// Small stores (allocated in full): three Basins at once on this host.
	a := newServer(t)
	a.storage = []string{"--store-size", "3G"}
	a.start()
	ca := a.client()
	nfsPool(t, ca)
	a.openVolume(ca, "avol")
	ep := endpoint(t, ca, "avol")
	ha := a.host(201)
	nfs := ha.NFS(3, 0, 0)
	data := bytes.Repeat([]byte("survivor "), 4096)
	if err := nfs.Write(ep, "/avol/f", data); err != nil {
		t.Fatal(err)
	}
	before := footprintOf(t, a)

	// A client reads A's volume throughout.
	var mu sync.Mutex
	var reads int
	var failures []string
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			got, err := nfs.Read(ep, "/avol/f")
			mu.Lock()
			reads++
			if err != nil || !bytes.Equal(got, data) {
				failures = append(failures, fmt.Sprintf("%s: %d bytes, %v", time.Now().Format("15:04:05.000"), len(got), err))
			}
			mu.Unlock()
		}
	}()

	b := newServer(t)
	b.storage = []string{"--store-size", "3G"}
	b.start()
	cb := b.client()
	nfsPool(t, cb)
	b.openVolume(cb, "bvol")
	// Each Basin's sandbox is a server of its own to an NFSv4.1 client, with an
	// owner of its own (its host name), not one server reached at two addresses
	// (which a client may trunk: one client ID for both).
	oa, ob := serverOwner(t, ha, ep), serverOwner(t, b.host(201), endpoint(t, cb, "bvol"))
	if oa.Major == ob.Major || !strings.Contains(oa.Major, a.bridge) || !strings.Contains(ob.Major, b.bridge) {
		t.Errorf("NFSv4.1 server owners %+v and %+v: want one per sandbox, named by its bridge", oa, ob)
	}
	b.stop(syscall.SIGTERM)
	b.start()
	b.stop(syscall.SIGKILL)
	b.start() // cleans up what the killed one left
	// B's sandbox dies under it (its holder killed): the next change rebuilds it.
	holder := sandboxHolder(t, b)
	syscall.Kill(holder, syscall.SIGKILL)
	b.openVolume(cb, "bvol2")
	b.stop(syscall.SIGTERM)

	// A third Basin configured onto A's bridge must not start, and not touch it.
	netSeq++
	// Its store is the smallest there is: A's and B's are allocated in full
	// already, and the host's free space must not decide whether C is refused
	// for the bridge or for its store.
	c := &server{t: t, dataDir: t.TempDir(), addr: freeAddr(t), bridge: a.bridge,
		subnet:  netip.MustParsePrefix(fmt.Sprintf("10.99.%d.0/24", netSeq)),
		storage: []string{"--store-size", "1G"}}
	c.log = &bytes.Buffer{}
	c.cmd = exec.Command(basinBin, c.args()...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(c.log.String(), a.bridge) {
			t.Errorf("a Basin on another's bridge exited with %v, without naming the bridge:\n%s", err, c.log)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("a Basin on another Basin's bridge (%s) started", a.bridge)
		c.cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	assertNothingLeft(t, c.dataDir)

	// A few more reads after everything, then compare.
	time.Sleep(time.Second)
	close(stop)
	<-stopped
	after := footprintOf(t, a)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d reads of A's volume while B stopped, restarted, was killed, rebuilt its sandbox and stopped, and C was refused", reads)
	if reads < 10 || len(failures) > 0 {
		t.Errorf("%d of %d reads of A's volume failed: %v", len(failures), reads, failures)
	}
	before.diff(t, after)
}

// serverOwner returns what the NFSv4.1 server at ep answers host h's
// EXCHANGE_ID with.
func serverOwner(t *testing.T, h *clienthost.Host, ep netip.Addr) nfsraw.ServerOwner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *nfsraw.Client
	if err := h.Within(func() (err error) { c, err = nfsraw.Dial41(ctx, ep.String(), 2049, nfsraw.Auth{}); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ServerOwner()
}

// footprint is what of a server the host holds: its processes (by pid, with
// start time and name) and its links.
type footprint struct {
	procs map[int]string // pid → "starttime comm"
	links map[string]string
}

// footprintOf reads s's processes (basin serve and its descendants, and whatever
// else is in its sandbox's network namespace, alive in two readings a second
// apart: not the short-lived commands basin serve runs now and then) and links
// (its bridge, the interfaces on it, its sandbox's namespace, interfaces and
// addresses).
func footprintOf(t *testing.T, s *server) footprint {
	t.Helper()
	first := processesOf(s)
	time.Sleep(time.Second)
	fp := footprint{procs: map[int]string{}, links: map[string]string{}}
	for pid, p := range processesOf(s) {
		if first[pid] == p {
			fp.procs[pid] = p
		}
	}
	if len(fp.procs) < 5 {
		t.Fatalf("only %d processes of the server found: %v", len(fp.procs), fp.procs)
	}
	s.links(t, fp.links)
	return fp
}

// processesOf returns basin serve's descendants and whatever is in its sandbox's
// network namespace, as pid → "starttime comm".
func processesOf(s *server) map[int]string {
	procs := map[int]string{}
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procFields(pid); len(f) > 20 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	ns := "/run/netns/basin-" + s.bridge
	inNetns := runner.InNetns(ns)
	for pid := range parent {
		mine := inNetns(pid)
		for p := pid; p > 1 && !mine; p = parent[p] {
			mine = p == s.cmd.Process.Pid
		}
		if f := procFields(pid); mine && len(f) > 20 && f[0] != "Z" {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			procs[pid] = f[19] + " " + strings.TrimSpace(string(comm))
		}
	}
	return procs
}

// links records s's bridge, the interfaces on it, its sandbox's namespace, and
// the sandbox's interfaces and addresses.
func (s *server) links(t *testing.T, links map[string]string) {
	t.Helper()
	ns := "/run/netns/basin-" + s.bridge
	ifindex := func(name string) string {
		b, _ := os.ReadFile("/sys/class/net/" + name + "/ifindex")
		return strings.TrimSpace(string(b))
	}
	links["bridge "+s.bridge] = ifindex(s.bridge)
	ports, _ := os.ReadDir("/sys/class/net/" + s.bridge + "/brif")
	for _, p := range ports {
		links["bridge port "+p.Name()] = ifindex(p.Name())
	}
	h := sha1.Sum([]byte(s.bridge))
	links["sandbox veth"] = ifindex("bsb" + hex.EncodeToString(h[:4]))
	if fi, err := os.Stat(ns); err == nil {
		links["netns"] = fmt.Sprint(fi.Sys().(*syscall.Stat_t).Ino)
	}
	// Brief forms: addresses and states without flags that change on their own
	// (an IPv6 link-local address stops being "tentative").
	for _, argv := range [][]string{{"ip", "-br", "addr", "show", "dev", s.bridge}, {"ip", "-n", "basin-" + s.bridge, "-br", "link"},
		{"ip", "-n", "basin-" + s.bridge, "-br", "addr"}} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
		links[strings.Join(argv, " ")] = strings.Join(strings.Fields(string(out)), " ")
	}
}

// diff fails t with every difference between f and g.
func (f footprint) diff(t *testing.T, g footprint) {
	t.Helper()
	for _, pid := range slices.Sorted(maps.Keys(f.procs)) {
		if g.procs[pid] != f.procs[pid] {
			t.Errorf("process %d (%s) is gone or not the same: now %q", pid, f.procs[pid], g.procs[pid])
		}
	}
	for _, pid := range slices.Sorted(maps.Keys(g.procs)) {
		if _, ok := f.procs[pid]; !ok {
			t.Errorf("new process %d (%s)", pid, g.procs[pid])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.links)) {
		if f.links[k] != g.links[k] {
			t.Errorf("%s changed: %q, now %q", k, f.links[k], g.links[k])
		}
	}
}

// procFields returns the fields of /proc/<pid>/stat after the command name
// (state, ppid, …; starttime is index 19).
func procFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// sandboxHolder returns the pid of the process holding s's sandbox namespaces: a
// child of basin serve in the sandbox's network namespace that is neither a
// daemon nor nsenter.
func sandboxHolder(t *testing.T, s *server) int {
	t.Helper()
	for _, pid := range runner.Matching(runner.InNetns("/run/netns/basin-" + s.bridge)) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if f := procFields(pid); len(f) > 1 && f[1] == strconv.Itoa(s.cmd.Process.Pid) && strings.TrimSpace(string(comm)) == "sleep" {
			return pid
		}
	}
	t.Fatalf("no sandbox holder of %s", filepath.Base(s.dataDir))
	return 0
}
