// Package e2e runs the real `basin serve` binary, as root, on a real btrfs store, and
// checks what a user would: crash safety, clean shutdown, restart, and the CLI.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/cli"
	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/test/addc"
)

var basinBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped, needs root (loop devices, mounts, btrfs quota)")
		os.Exit(0)
	}
	basinBin = os.Getenv("BASIN_BIN")
	if basinBin == "" {
		dir, err := os.MkdirTemp("", "basin-e2e-bin")
		if err != nil {
			panic(err)
		}
		basinBin = filepath.Join(dir, "basin")
		out, err := exec.Command("go", "build", "-o", basinBin, "github.com/basin-nas/basin/cmd/basin").CombinedOutput()
		if err != nil {
			fmt.Printf("build basin: %v\n%s", err, out)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
	}
	code := m.Run()
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	addc.RemoveTemplates()
	os.Exit(code)
}

// atExit runs, last first, when the package's tests end (things tests share,
// such as sharedCeph's cluster).
var atExit []func()

type server struct {
	t       *testing.T
	dataDir string
	addr    string
	bridge  string
	subnet  netip.Prefix
	cmd     *exec.Cmd
	log     *bytes.Buffer
	env     []string
	// keep: a clean stop leaves the data plane serving, as by default; tests
	// keep the old teardown on a clean stop unless they set it (args).
	keep bool
	// left: the last stop left the data plane running (keep, or SIGKILL); the
	// test's cleanup then takes it down with basin teardown.
	left bool
	// bin is the basin binary start runs (default basinBin): a test replaces
	// it to upgrade the server.
	bin string
	// storage are the flags that say where volumes live (default: a 12 GiB
	// btrfs store image).
	storage []string
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// netSeq numbers the test networks (bridge and 10.99.<netSeq>.0/24).
// BASIN_E2E_NETSEQ moves the first one, so that a developer can run one e2e
// test beside another run of the suite without their subnets colliding.
var netSeq = func() int {
	if n, err := strconv.Atoi(os.Getenv("BASIN_E2E_NETSEQ")); err == nil && n >= 1 && n <= 200 {
		return n
	}
	return 20
}()

// e2eFloorMibps is the throughput floor the e2e servers run with.
const e2eFloorMibps = 1000

// newServer prepares a server on a fresh data dir, with a network "default" on a
// bridge and subnet of its own; start launches it.
func newServer(t *testing.T, env ...string) *server {
	netSeq++
	s := &server{t: t, dataDir: t.TempDir(), addr: freeAddr(t), env: env,
		bridge: fmt.Sprintf("bte%04d%02d", os.Getpid()%10000, netSeq), subnet: netip.MustParsePrefix(fmt.Sprintf("10.99.%d.0/24", netSeq))}
	t.Cleanup(func() {
		if s.cmd != nil && s.cmd.ProcessState == nil {
			s.stop(syscall.SIGTERM)
		}
		if s.left {
			s.teardown()
		}
		assertNothingLeft(t, s.dataDir)
		assertNoNetworkLeft(t, s.bridge)
		if t.Failed() {
			t.Logf("server log:\n%s", s.log)
			logs, _ := filepath.Glob(filepath.Join(s.dataDir, "sandboxes", "*", "logs", "ganesha.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s (tail):\n%s", l, b[max(0, len(b)-8<<10):])
			}
		}
	})
	return s
}

func (s *server) start(extra ...string) {
	s.t.Helper()
	s.log = &bytes.Buffer{}
	if s.bin == "" {
		s.bin = basinBin
	}
	s.cmd = exec.Command(s.bin, s.args(extra...)...)
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server not ready:\n%s", s.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// args is basin serve's command line for s, with extra flags last.
func (s *server) args(extra ...string) []string {
	storage := s.storage
	if storage == nil {
		storage = []string{"--store-size", "12G"}
	}
	args := append([]string{"serve", "--data-dir", s.dataDir, "--listen", s.addr, "--location", "us-east4",
		"--network", "default=" + s.bridge + "," + s.subnet.String(),
		// Pools of 100 GiB on a 12 GiB store (allocated in full on the host):
		// volumes are thin-provisioned, those of 1 GiB whole; client hosts live
		// at .128 and above, outside the default endpoint range (.10–.127).
		"--overcommit-ratio", "1000",
		// Volumes here are of 1 or 10 GiB, which the real floor (4 MiB/s) would
		// hold to a crawl: tests not about service levels give every volume a
		// ceiling far above what they move (traffic still crosses the tc tree).
		// The QoS tests pass their own --qos-floor-mibps, which comes later and wins.
		"--qos-floor-mibps", fmt.Sprint(e2eFloorMibps)}, storage...)
	args = append(args, extra...)
	if !s.keep {
		args = append(args, "--teardown-on-exit")
	}
	if prefix := os.Getenv("BASIN_GANESHA_PREFIX"); prefix != "" {
		args = append(args, "--ganesha-prefix", prefix)
	}
	return args
}

func (s *server) stop(sig syscall.Signal) {
	s.t.Helper()
	s.left = s.keep || sig == syscall.SIGKILL
	s.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if sig == syscall.SIGTERM && err != nil {
			s.t.Errorf("basin serve exited with %v after SIGTERM:\n%s", err, s.log)
		}
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		s.t.Fatalf("basin serve did not stop after %v", sig)
	}
}

// teardown runs basin teardown on the server's data directory and networks:
// what a stop left serving goes.
func (s *server) teardown() {
	s.t.Helper()
	args := append([]string{"teardown"}, s.args()[1:]...)
	out, err := exec.Command(basinBin, args...).CombinedOutput()
	if err != nil {
		s.t.Errorf("basin teardown: %v\n%s", err, out)
	}
	s.left = false
}

func (s *server) client() *client.Client {
	s.t.Helper()
	c, err := client.New("http://"+s.addr, filepath.Join(s.dataDir, "owner-key.json"))
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

const loc = "/v1/projects/p1/locations/us-east4"

func mutate(t *testing.T, c *client.Client, method, path string, body any) client.Object {
	t.Helper()
	var op client.Object
	if err := c.Do(context.Background(), method, path, nil, body, &op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	done, err := c.Wait(context.Background(), op)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return done
}

// assertNothingLeft checks that no mount, loop device (the store's or a volume's)
// or process refers to dir.
func assertNothingLeft(t *testing.T, dir string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), dir) {
		t.Errorf("mounts left under %s:\n%s", dir, grepLines(string(mi), dir))
	}
	out, _ := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[1], dir+"/") {
			t.Errorf("loop device left attached: %s", line)
		}
	}
	if pids := processesMentioning(dir); len(pids) > 0 {
		t.Errorf("processes left running: %v", pids)
	}
}

// assertNoNetworkLeft checks that a server's sandbox namespace, bridge and veth
// are gone (its own only: other Basins on the host have theirs).
func assertNoNetworkLeft(t *testing.T, bridge string) {
	t.Helper()
	if _, err := os.Stat("/run/netns/basin-" + bridge); err == nil {
		t.Errorf("sandbox namespace basin-%s left behind", bridge)
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); err == nil {
		t.Errorf("bridge %s left behind", bridge)
	}
	h := sha1.Sum([]byte(bridge))
	if veth := "bsb" + hex.EncodeToString(h[:4]); linkPresent(veth) {
		t.Errorf("sandbox veth %s left behind", veth)
	}
}

func linkPresent(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// processesMentioning lists pids whose command line holds the path s whole (an
// argument that is s, or starts with s and "/" or "," or "="): a data directory
// /tmp/x/001 does not match /tmp/x/0010's processes.
func processesMentioning(s string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err == nil && mentionsPath(cmdline, s) {
			if stat, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil && !bytes.Contains(stat, []byte(") Z ")) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// mentionsPath reports whether a NUL-separated command line holds path whole.
func mentionsPath(cmdline []byte, path string) bool {
	for rest := cmdline; ; {
		i := bytes.Index(rest, []byte(path))
		if i < 0 {
			return false
		}
		rest = rest[i+len(path):]
		if len(rest) == 0 || strings.IndexByte("\x00/,= ", rest[0]) >= 0 {
			return true
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// storageState lists, straight from the kernel and the store, what the store holds.
type storageState struct {
	images  []string // volume keys with a filesystem image
	mounts  []string // live volume mount points (keys)
	loops   []string // volume keys whose image is attached to a loop device
	partial []string // unfinished (".new") images
}

func inspect(t *testing.T, dataDir string) storageState {
	t.Helper()
	var st storageState
	imgs, _ := filepath.Glob(filepath.Join(dataDir, "store", "images", "*.img"))
	for _, img := range imgs {
		st.images = append(st.images, strings.TrimSuffix(filepath.Base(img), ".img"))
	}
	partial, _ := filepath.Glob(filepath.Join(dataDir, "store", "images", "*.new"))
	for _, p := range partial {
		st.partial = append(st.partial, filepath.Base(p))
	}
	out, err := exec.Command("losetup", "-l", "-n", "-O", "BACK-FILE").Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.TrimSpace(l); strings.HasPrefix(f, filepath.Join(dataDir, "store", "images")+"/") {
			st.loops = append(st.loops, strings.TrimSuffix(filepath.Base(f), ".img"))
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], filepath.Join(dataDir, "mounts")+"/") && !strings.Contains(f[4], "@") {
			st.mounts = append(st.mounts, filepath.Base(f[4]))
		}
	}
	slices.Sort(st.images)
	slices.Sort(st.loops)
	slices.Sort(st.mounts)
	return st
}

// records reads the volumes and operations straight from the database of a stopped
// server.
func records(t *testing.T, dataDir string) ([]*model.Volume, []*model.Operation) {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dataDir, "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var vols []*model.Volume
	var ops []*model.Operation
	st.View(context.Background(), func(tx store.Tx) (err error) {
		if vols, err = store.List[model.Volume](tx, store.KindVolume, ""); err != nil {
			return err
		}
		ops, err = store.List[model.Operation](tx, store.KindOperation, "")
		return err
	})
	return vols, ops
}

// TestCrashDuringVolumeCreate kills basin serve with SIGKILL while volumes are being
// created, at a spread of moments, restarts it, and checks that every operation
// ends completed or cleanly failed, with storage matching the records exactly: no
// orphan filesystem image, loop device or mount.
func TestCrashDuringVolumeCreate(t *testing.T) {
	// Each storage step waits 40 ms, so a create spans ~200 ms: the kills below
	// land before, inside and after it.
	s := newServer(t, "BASIN_FAULT_STEP_DELAY=40ms")
	s.start()
	c := s.client()
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100", "network": "projects/p1/global/networks/default"})
	interrupted := 0
	for i, delay := range []time.Duration{0, 15, 45, 80, 120, 160, 200, 260} {
		id := fmt.Sprintf("vol%d", i)
		go c.Do(context.Background(), "POST", loc+"/volumes?volumeId="+id, nil,
			map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}}, nil)
		time.Sleep(delay * time.Millisecond)
		s.stop(syscall.SIGKILL)
		_, ops := records(t, s.dataDir)
		for _, op := range ops {
			if op.Target == "projects/p1/locations/us-east4/volumes/"+id && !op.Done {
				interrupted++
			}
		}
		s.start()
		c = s.client()
		waitAllDone(t, c)
		assertStorageMatchesRecords(t, s)
	}
	if interrupted < 3 {
		t.Fatalf("only %d of the kills landed inside a volume creation; the test did not test", interrupted)
	}
	t.Logf("%d kills interrupted a volume creation", interrupted)
	s.stop(syscall.SIGTERM)
}

func waitAllDone(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var list struct {
			Operations []client.Object `json:"operations"`
		}
		if err := c.Do(context.Background(), "GET", loc+"/operations", nil, nil, &list); err != nil {
			t.Fatal(err)
		}
		pending := 0
		for _, op := range list.Operations {
			if done, _ := op["done"].(bool); !done {
				pending++
			}
			if e, ok := op["error"].(map[string]any); ok && e["code"] != 1.0 {
				t.Errorf("operation failed: %v", op)
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations still pending after restart", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func assertStorageMatchesRecords(t *testing.T, s *server) {
	t.Helper()
	var list struct {
		Volumes []client.Object `json:"volumes"`
	}
	if err := s.client().Do(context.Background(), "GET", loc+"/volumes", nil, nil, &list); err != nil {
		t.Fatal(err)
	}
	for _, v := range list.Volumes {
		if v["state"] != "READY" {
			t.Errorf("volume %v is %v after recovery", v["name"], v["state"])
		}
	}
	// Compare with the kernel's view, using the records for keys.
	s.stop(syscall.SIGKILL) // freeze the state; the next start adopts it
	vols, _ := records(t, s.dataDir)
	var want []string
	for _, v := range vols {
		want = append(want, v.Key)
	}
	slices.Sort(want)
	got := inspect(t, s.dataDir)
	if !slices.Equal(got.images, want) || !slices.Equal(got.loops, want) || !slices.Equal(got.mounts, want) || len(got.partial) > 0 {
		t.Fatalf("storage does not match records:\n got  %+v\n want %v", got, want)
	}
	if len(list.Volumes) != len(vols) {
		t.Fatalf("API lists %d volumes, store has %d", len(list.Volumes), len(vols))
	}
	s.start()
}

// TestShutdownAndRestart: SIGTERM leaves no mount or loop device behind; the next
// start brings back every volume, snapshot and file.
func TestShutdownAndRestart(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "EXTREME", "capacityGib": "10", "network": "projects/p1/global/networks/default"})
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "2", "protocols": []string{"NFSV3"}})
	mp := filepath.Join(s.dataDir, "mounts", onlyMount(t, s))
	if err := os.WriteFile(filepath.Join(mp, "hello"), []byte("world"), 0o644); err != nil {
		t.Fatal(err)
	}
	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	// Usage comes from the volume's filesystem: 100 MiB written shows as 1 GiB used
	// (rounded up) once an operation on the volume refreshes it.
	f, _ := os.Create(filepath.Join(mp, "data"))
	f.Write(make([]byte, 100<<20))
	f.Sync()
	f.Close()
	syscall.Sync()
	done := mutate(t, c, "PATCH", loc+"/volumes/vol1?updateMask=description", map[string]any{"description": "x"})
	if used := done["response"].(map[string]any)["usedGib"]; used != "1" {
		t.Fatalf("usedGib after writing 100 MiB = %v, want \"1\"", used)
	}
	var snap client.Object
	c.Do(context.Background(), "GET", loc+"/volumes/vol1/snapshots/s1", nil, nil, &snap)
	if ub, _ := snap["usedBytes"].(float64); ub <= 0 {
		t.Fatalf("snapshot usedBytes = %v", snap["usedBytes"])
	}
	s.stop(syscall.SIGTERM)
	assertNothingLeft(t, s.dataDir)
	s.start()
	c = s.client()
	var v client.Object
	if err := c.Do(context.Background(), "GET", loc+"/volumes/vol1", nil, nil, &v); err != nil || v["state"] != "READY" {
		t.Fatalf("after restart: %v %v", v, err)
	}
	if got, err := os.ReadFile(filepath.Join(mp, "hello")); err != nil || string(got) != "world" {
		t.Fatalf("file after restart: %q %v", got, err)
	}
	var snaps struct {
		Snapshots []client.Object `json:"snapshots"`
	}
	c.Do(context.Background(), "GET", loc+"/volumes/vol1/snapshots", nil, nil, &snaps)
	if len(snaps.Snapshots) != 1 {
		t.Fatalf("snapshots after restart: %v", snaps)
	}
	// A second server on the same data dir is refused.
	other := exec.Command(basinBin, "serve", "--data-dir", s.dataDir, "--listen", freeAddr(t))
	if out, err := other.CombinedOutput(); err == nil || !strings.Contains(string(out), "in use") {
		t.Fatalf("second server on the same data dir: %v %s", err, out)
	}
	s.stop(syscall.SIGTERM)
}

// onlyMount returns the single volume mount point's key under the server's data dir.
func onlyMount(t *testing.T, s *server) string {
	t.Helper()
	got := inspect(t, s.dataDir).mounts
	if len(got) != 1 {
		t.Fatalf("want one volume mount, have %v", got)
	}
	return got[0]
}

// TestCLI drives the CLI against a real server: create, list, get, update, snapshot,
// revert, delete, in every output format.
func TestCLI(t *testing.T) {
	s := newServer(t)
	s.start()
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := cli.Main(args, cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
			return map[string]string{"BASIN_ENDPOINT": "http://" + s.addr, "BASIN_DATA_DIR": s.dataDir, "BASIN_PROJECT": "p1", "BASIN_LOCATION": "us-east4"}[k]
		}})
		return out.String() + errb.String(), code
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, code := run(args...)
		if code != 0 {
			t.Fatalf("basin %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return out
	}
	mustRun("pools", "create", "pool1", "--service-level=premium", "--capacity-gib", "100", "--labels", "env=dev")
	out := mustRun("pools", "list")
	if !strings.Contains(out, "pool1") || !strings.Contains(out, "PREMIUM") || !strings.HasPrefix(out, "ID") {
		t.Fatalf("pools list:\n%s", out)
	}
	// Flags before positional arguments, fio style.
	mustRun("volumes", "create", "--pool=pool1", "--capacity-gib=10", "--export-rule", "clients=10.99.0.0/24,access=READ_WRITE,root=false,nfsv3", "vol1")
	var v map[string]any
	if err := json.Unmarshal([]byte(mustRun("volumes", "get", "vol1", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v["throughputMibps"] != float64(e2eFloorMibps) || v["shareName"] != "vol1" || v["usedGib"] != "1" { // 10 GiB × 64 MiB/s per TiB, under the floor; usedGib from creation on
		t.Fatalf("volume: %v", v)
	}
	rule := v["exportPolicy"].(map[string]any)["rules"].([]any)[0].(map[string]any)
	if rule["allowedClients"] != "10.99.0.0/24" || rule["hasRootAccess"] != "false" || rule["nfsv4"] != false {
		t.Fatalf("export rule: %v", rule)
	}
	if out := mustRun("volumes", "get", "vol1", "--output", "yaml"); !strings.Contains(out, "shareName: vol1") {
		t.Fatalf("yaml:\n%s", out)
	}
	mustRun("volumes", "update", "vol1", "--capacity-gib", "20")
	mustRun("snapshots", "create", "vol1", "s1", "--description", "first")
	mustRun("snapshots", "create", "vol1", "s2")
	if out := mustRun("snapshots", "list", "vol1"); !strings.Contains(out, "s1") || !strings.Contains(out, "s2") {
		t.Fatalf("snapshots list:\n%s", out)
	}
	mustRun("volumes", "revert", "vol1", "--snapshot", "s1")
	// Global flags before the command, full names as arguments.
	if out := mustRun("--project", "p2", "-o", "json", "volumes", "list", "--project", "p1"); !strings.Contains(out, "projects/p1/locations/us-east4/volumes/vol1") {
		t.Fatalf("global flags before the command:\n%s", out)
	}
	if out := mustRun("-o", "json", "snapshots", "get", "projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"); !strings.Contains(out, `"name": "projects/p1/locations/us-east4/volumes/vol1/snapshots/s1"`) {
		t.Fatalf("snapshot by full name:\n%s", out)
	}
	if out, code := run("volumes", "get", "projects/p9/locations/us-east4/volumes/vol1"); code != 2 || !strings.Contains(out, "is in project p9") {
		t.Fatalf("another project's name: exit %d: %s", code, out)
	}
	if out := mustRun("snapshots", "list", "vol1", "-o", "json"); strings.Contains(out, "/s2") {
		t.Fatalf("s2 survived the revert:\n%s", out)
	}
	mustRun("volumes", "create", "clone1", "--pool", "pool1", "--capacity-gib", "5", "--from-snapshot", "vol1/s1")
	// Errors: exit 1 with the server's status.
	out, code := run("volumes", "delete", "vol1")
	if code != 1 || !strings.Contains(out, "FAILED_PRECONDITION") {
		t.Fatalf("delete with snapshots: exit %d: %s", code, out)
	}
	out, code = run("volumes", "create", "bad", "--pool", "pool1", "--capacity-gib", "500")
	if code != 1 || !strings.Contains(out, "400") {
		t.Fatalf("oversized volume: exit %d: %s", code, out)
	}
	out, code = run("volumes", "get", "--bogus")
	if code != 2 || !strings.Contains(out, "unknown flag --bogus") {
		t.Fatalf("unknown flag: exit %d: %s", code, out)
	}
	mustRun("volumes", "delete", "vol1", "--force")
	if out := mustRun("operations", "list"); !strings.Contains(out, "revert") || !strings.Contains(out, "delete") {
		t.Fatalf("operations list:\n%s", out)
	}
	op := mustRun("volumes", "delete", "clone1", "--async", "-o", "json")
	var opObj map[string]any
	json.Unmarshal([]byte(op), &opObj)
	name, _ := opObj["name"].(string)
	if !strings.Contains(name, "/operations/") {
		t.Fatalf("--async did not print the operation: %s", op)
	}
	// What --async printed is what operations wait takes: the full name.
	mustRun("operations", "wait", name)
	mustRun("operations", "get", name[strings.LastIndex(name, "/")+1:])
	if out := mustRun("locations", "list"); !strings.Contains(out, "us-east4") {
		t.Fatalf("locations:\n%s", out)
	}
	s.stop(syscall.SIGTERM)
}

// TestInsecureNoAuth: the development flag lets requests without credentials in, says
// so loudly, and writes no owner key.
func TestInsecureNoAuth(t *testing.T) {
	s := newServer(t)
	s.start("--insecure-no-auth")
	c, err := client.New("http://"+s.addr, "")
	if err != nil {
		t.Fatal(err)
	}
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "STANDARD", "capacityGib": "10", "network": "projects/p1/global/networks/default"})
	if !strings.Contains(s.log.String(), "authentication is OFF") {
		t.Fatalf("no warning logged:\n%s", s.log)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "owner-key.json")); !os.IsNotExist(err) {
		t.Fatalf("owner key written in insecure mode: %v", err)
	}
	s.stop(syscall.SIGTERM)
	// Restarted without the flag, the same server demands a token.
	s.start()
	err = c.Do(context.Background(), "GET", loc+"/storagePools", nil, nil, nil)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.HTTPStatus != 401 {
		t.Fatalf("unauthenticated request after restart: %v", err)
	}
	s.stop(syscall.SIGTERM)
}

// TestIAMCLI: accounts, keys, bindings and the audit log through the CLI, and the key
// the CLI wrote used by the CLI itself.
func TestIAMCLI(t *testing.T) {
	s := newServer(t)
	s.start()
	run := func(key string, args ...string) (string, int) {
		var out, errb bytes.Buffer
		env := map[string]string{"BASIN_ENDPOINT": "http://" + s.addr, "BASIN_DATA_DIR": s.dataDir, "BASIN_PROJECT": "p1", "BASIN_LOCATION": "us-east4"}
		if key != "" {
			env["BASIN_KEY_FILE"] = key
		}
		code := cli.Main(args, cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
		return out.String() + errb.String(), code
	}
	mustRun := func(key string, args ...string) string {
		t.Helper()
		out, code := run(key, args...)
		if code != 0 {
			t.Fatalf("basin %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return out
	}
	mustRun("", "iam", "service-accounts", "create", "ci-viewer", "--display-name", "CI")
	email := "ci-viewer@p1.iam.basin.internal"
	if out := mustRun("", "iam", "service-accounts", "list"); !strings.Contains(out, email) {
		t.Fatalf("list:\n%s", out)
	}
	keyFile := filepath.Join(t.TempDir(), "viewer.json")
	mustRun("", "iam", "keys", "create", email, "--output-file", keyFile, "--expires-in", "24h")
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	mustRun("", "iam", "policy", "add-binding", "--role", "roles/netapp.viewer", "--member", email)
	mustRun("", "pools", "create", "pool1", "--service-level", "premium", "--capacity-gib", "10")
	if out := mustRun(keyFile, "pools", "list"); !strings.Contains(out, "pool1") {
		t.Fatalf("viewer list:\n%s", out)
	}
	if out, code := run(keyFile, "pools", "create", "pool2", "--service-level", "premium", "--capacity-gib", "10"); code != 1 || !strings.Contains(out, "403") || !strings.Contains(out, "netapp.storagePools.create") {
		t.Fatalf("viewer create: exit %d: %s", code, out)
	}
	mustRun("", "iam", "service-accounts", "disable", email)
	// The key file given before the command, as the README does it; the 401
	// says why.
	if out, code := run("", "--key-file", keyFile, "pools", "list"); code != 1 || !strings.Contains(out, "401") || !strings.Contains(out, email+" is disabled") {
		t.Fatalf("disabled account: exit %d: %s", code, out)
	}
	mustRun("", "iam", "policy", "remove-binding", "--role", "roles/netapp.viewer", "--member", email)
	if out := mustRun("", "iam", "policy", "get", "-o", "json"); strings.Contains(out, email) {
		t.Fatalf("binding not removed:\n%s", out)
	}
	out := mustRun("", "audit", "list", "-o", "json")
	for _, want := range []string{"iam.serviceAccounts.create", "netapp.storagePools.create", "PERMISSION_DENIED", "UNAUTHENTICATED", "iam.serviceAccounts.disable"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit list lacks %s", want)
		}
	}
	// The JSON-lines file holds the same, and no key material.
	data, err := os.ReadFile(filepath.Join(s.dataDir, "audit.log"))
	if err != nil || !strings.Contains(string(data), "iam.serviceAccountKeys.create") || strings.Contains(string(data), "PRIVATE KEY") {
		t.Fatalf("audit.log: %v\n%s", err, data)
	}
	s.stop(syscall.SIGTERM)
}
