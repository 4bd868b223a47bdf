package pkg

import (
	"bytes"
	"context"
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

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/clienthost"
)

// What the test makes, all of its own: the package's data directory (it runs
// only where there is none, for purge deletes it), a bridge and subnet no other
// test uses, and package versions below any real build's.
const (
	dataDir  = "/var/lib/basin"
	confDir  = "/etc/basin"
	bridge   = "bpk26"
	subnet   = "10.99.227.0/24"
	version1 = "0.0~pkgtest1"
	version2 = "0.0~pkgtest2"
	project  = "pk"
)

var packages = []string{"basin", "basin-ganesha"}

// TestPackageLifecycle builds two versions of the packages with make deb,
// installs the first with apt-get, runs the service as systemd would (the
// installed unit's ExecStart, Environment, capability bounding set and
// no-new-privileges, READY=1 and STOPPING=1 on NOTIFY_SOCKET, SIGTERM to the
// main process only), makes a pool and a volume, upgrades to the second while
// a client on the volume's network writes and reads it, checks that the client
// lost nothing, removes the packages (configuration and data kept: a reinstall
// serves the volume again), and purges them (both gone). The host is left as it
// was found.
func TestPackageLifecycle(t *testing.T) {
	preflight(t)
	t.Cleanup(func() { checkHostAsFound(t) }) // last: after every other cleanup
	dist := t.TempDir()
	var debs1, debs2 []string
	timed(t, "make deb "+version1+" (Ganesha built once, then reused)", func() { debs1 = makeDeb(t, version1, dist) })
	timed(t, "make deb "+version2, func() { debs2 = makeDeb(t, version2, dist) })
	checkDepends(t, debs1)

	// A bridge of the test's own: the client host's port on it outlives
	// Basin's restarts (Basin leaves alone a bridge it did not make).
	run(t, "ip", "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "delete", bridge).Run() })
	run(t, "ip", "link", "set", bridge, "up")

	t.Cleanup(func() { purge(t) })
	timed(t, "apt-get install "+version1, func() { aptInstall(t, debs1) })
	checkInstalled(t, version1)
	unitFile := "/lib/systemd/system/basin.service"
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		if out, err := exec.Command("systemd-analyze", "verify", unitFile).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
		}
	}
	// The administrator's settings, in the package's config file (a conffile:
	// upgrades and removal keep it).
	listen := freeAddr(t)
	conf := appendConfig(t, fmt.Sprintf("\n# The package test's own (test/pkg).\ndata-dir = %s\nlisten = %s\nnetwork = default=%s,%s\n"+
		"store-size = 6G\nqos-floor-mibps = 1000\n", dataDir, listen, bridge, subnet))

	u := parseUnit(t, unitFile)
	sm := &serviceManager{t: t, unit: u, listen: listen}
	t.Cleanup(sm.cleanup)
	sm.start("start " + version1)

	c, err := client.New("http://"+listen, filepath.Join(dataDir, "owner-key.json"))
	if err != nil {
		t.Fatal(err)
	}
	loc := "/v1/projects/" + project + "/locations/local"
	timed(t, "pool and volume created", func() {
		mutate(t, c, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "2",
			"network": "projects/" + project + "/global/networks/default"})
		mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1",
			"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": subnet,
				"accessType": "READ_WRITE", "nfsv3": true, "nfsv4": false, "hasRootAccess": "true"}}}})
	})
	ep := endpoint(t, c, loc+"/volumes/vol1")
	host := clienthost.New(t, bridge, netip.MustParsePrefix("10.99.227.200/24"))

	// The upgrade, under a client's I/O: dpkg replaces the files while the old
	// Basin serves, then the service manager restarts it (as the postinst's
	// try-restart does under systemd).
	st := startStream(t, host, ep.String(), "/vol1")
	st.waitOps(t, 200, time.Minute)
	st.mark("install " + version2)
	timed(t, "apt-get install "+version2+" (upgrade, Basin serving)", func() { aptInstall(t, debs2) })
	checkInstalled(t, version2)
	if got := readFile(t, filepath.Join(confDir, "basin.conf")); got != conf {
		t.Errorf("the upgrade changed the administrator's basin.conf:\n%s", got)
	}
	st.mark("restart")
	restartAt := time.Now()
	sm.stop("stop " + version1)
	sm.start("start " + version2)
	st.mark("after restart")
	st.waitOps(t, st.opsNow()+200, 3*time.Minute)
	t.Logf("restart: %.1f s from SIGTERM to the new Basin's READY=1", sm.lastReady.Sub(restartAt).Seconds())
	st.stopAndVerify(t)
	st.report(t)
	if ev := st.eventsIn("install " + version2); len(ev) > 0 {
		t.Errorf("the client's I/O failed while dpkg installed the upgrade, before any restart: %v", ev)
	}
	if n := st.failed(); n > 0 {
		t.Errorf("%d of the client's I/O operations failed for good across the upgrade (see the log above)", n)
	}
	t.Run("ClientNotInterrupted", func(t *testing.T) {
		if ev := append(st.eventsIn("restart"), st.eventsIn("after restart")...); len(ev) > 0 {
			t.Errorf("the restart interrupted the client's I/O %d times: %v", len(ev), ev)
		}
	})
	if out := run(t, "/usr/bin/basin", "version"); strings.TrimSpace(out) != "basin "+version2 {
		t.Errorf("basin version says %q after the upgrade", out)
	}

	// Removal: the service stopped first (as the prerm does under systemd),
	// then the packages; configuration and data stay.
	sm.stop("stop " + version2)
	timed(t, "apt-get remove", func() { apt(t, "remove", packages...) })
	for _, p := range []string{"/usr/bin/basin", "/usr/lib/basin", unitFile} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after apt-get remove", p)
		}
	}
	if got := readFile(t, filepath.Join(confDir, "basin.conf")); got != conf {
		t.Errorf("apt-get remove changed basin.conf")
	}
	if s := pkgStatus("basin"); s != "rc" {
		t.Errorf("basin's status after remove is %q, want rc (configuration kept)", s)
	}
	for _, p := range []string{"basin.db", "owner-key.json", "secrets.key"} {
		if _, err := os.Stat(filepath.Join(dataDir, p)); err != nil {
			t.Errorf("apt-get remove took Basin's data: %v", err)
		}
	}
	// Kept means usable: installed again, Basin serves the volume and its data.
	timed(t, "apt-get install "+version2+" again", func() { aptInstall(t, debs2) })
	sm.start("start " + version2 + " after remove")
	if got := endpoint(t, c, loc+"/volumes/vol1"); got != ep {
		t.Errorf("vol1's endpoint is %s after the reinstall, was %s", got, ep)
	}
	st.verifyAgain(t)
	sm.stop("stop " + version2 + " after remove")

	// Purge: configuration and data gone too.
	timed(t, "apt-get purge", func() { apt(t, "purge", packages...) })
	for _, p := range []string{confDir, dataDir} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after apt-get purge", p)
		}
	}
	for _, p := range packages {
		if s := pkgStatus(p); s != "" && s != "un" && s != "pn" {
			t.Errorf("%s's status after purge is %q", p, s)
		}
	}
}

// preflight skips the test where it cannot run, or would change what it did
// not make.
func preflight(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (installs packages, runs Basin)")
	}
	for _, tool := range []string{"apt-get", "dpkg", "dpkg-deb", "dpkg-shlibdeps", "make", "git", "go", "setpriv", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (scripts/setup.sh --test installs what this test needs)", tool)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, ".git")); err != nil {
		t.Skip("not in a git tree: make deb takes its version from git")
	}
	for _, p := range packages {
		if s := pkgStatus(p); s != "" && s != "un" && s != "pn" {
			t.Skipf("package %s is on this machine (status %s): the test would replace it", p, s)
		}
	}
	for _, p := range []string{dataDir, confDir, "/sys/class/net/" + bridge, "/run/netns/basin-" + bridge} {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("%s exists: the test installs, runs and purges Basin there, and would take it", p)
		}
	}
	if out, _ := exec.Command("ip", "-o", "addr").Output(); bytes.Contains(out, []byte(" 10.99.227.")) {
		t.Skipf("%s is in use on this host", subnet)
	}
}

// checkHostAsFound: nothing of the test's is left on the machine.
func checkHostAsFound(t *testing.T) {
	for _, p := range packages {
		if s := pkgStatus(p); s != "" && s != "un" && s != "pn" {
			t.Errorf("package %s left in state %s", p, s)
		}
	}
	for _, p := range []string{dataDir, confDir, "/usr/lib/basin", "/sys/class/net/" + bridge, "/run/netns/basin-" + bridge} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(dataDir)) {
		t.Errorf("mounts under %s left behind", dataDir)
	}
	out, _ := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[1], dataDir+"/") {
			t.Errorf("loop device left attached: %s", line)
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cmdline, []byte(dataDir+"/")) {
			t.Errorf("process %s left running: %q", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

// pkgStatus is dpkg's status of a package in two letters (ii, rc, un…), "" if
// dpkg does not know it.
func pkgStatus(p string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Abbrev}", p).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func makeDeb(t *testing.T, version, dist string) []string {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "deb", "VERSION="+version, "DIST="+dist)
	cmd.Dir = repo
	// xz at level 1: the same packages, built in seconds where dpkg-deb's
	// default level takes half a minute.
	cmd.Env = append(os.Environ(), "DEB_XZ_LEVEL=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deb VERSION=%s: %v\n%s", version, err, out)
	}
	arch := strings.TrimSpace(run(t, "dpkg", "--print-architecture"))
	var debs []string
	for _, p := range packages {
		f := filepath.Join(dist, p+"_"+version+"_"+arch+".deb")
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
		debs = append(debs, f)
	}
	return debs
}

// checkDepends: basin depends on what it runs, and basin-ganesha on the
// package of every shared library its binaries link (other than its own).
func checkDepends(t *testing.T, debs []string) {
	t.Helper()
	basinDeps := depends(t, debs[0])
	for _, p := range []string{"basin-ganesha", "btrfs-progs", "iproute2", "mount", "rpcbind", "dbus", "samba", "winbind",
		"libnss-winbind", "samba-vfs-modules", "samba-common-bin", "tdb-tools", "libc6"} {
		if !slices.Contains(basinDeps, p) {
			t.Errorf("basin does not depend on %s: %v", p, basinDeps)
		}
	}
	ganeshaDeps := depends(t, debs[1])
	dir := t.TempDir()
	run(t, "dpkg-deb", "-x", debs[1], dir)
	root := filepath.Join(dir, "usr/lib/basin/ganesha")
	elves := []string{filepath.Join(root, "bin/ganesha.nfsd"), filepath.Join(root, "lib/ganesha/libfsalvfs.so"),
		filepath.Join(root, "lib/ganesha/libfsalceph.so")}
	libs, _ := filepath.Glob(filepath.Join(root, "lib/libganesha_nfsd.so.*"))
	elves = append(elves, libs...)
	for _, elf := range elves {
		for _, line := range strings.Split(run(t, "readelf", "-d", elf), "\n") {
			_, rest, ok := strings.Cut(line, "Shared library: [")
			if !ok {
				continue
			}
			soname := strings.TrimSuffix(strings.TrimSpace(rest), "]")
			if strings.HasPrefix(soname, "libganesha_nfsd.so") {
				continue
			}
			owner := libraryPackage(t, soname)
			if !slices.Contains(ganeshaDeps, owner) {
				t.Errorf("%s links %s (package %s), which basin-ganesha does not depend on: %v", filepath.Base(elf), soname, owner, ganeshaDeps)
			}
		}
	}
	t.Logf("basin depends on %v", basinDeps)
	t.Logf("basin-ganesha depends on %v", ganeshaDeps)
}

// depends lists the package names of a .deb's Depends (alternatives and
// versions dropped).
func depends(t *testing.T, deb string) []string {
	t.Helper()
	var names []string
	for _, d := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Depends")), ",") {
		for _, alt := range strings.Split(d, "|") {
			name, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
			name, _, _ = strings.Cut(name, ":")
			names = append(names, name)
		}
	}
	return names
}

// libraryPackage is the package that ships a shared library, as the dynamic
// linker's cache finds it.
func libraryPackage(t *testing.T, soname string) string {
	t.Helper()
	for _, line := range strings.Split(run(t, "ldconfig", "-p"), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || fields[0] != soname || !strings.Contains(line, "x86-64") {
			continue
		}
		path := fields[len(fields)-1]
		for _, p := range []string{path, "/usr" + path} {
			if out, err := exec.Command("dpkg", "-S", p).Output(); err == nil {
				pkg, _, _ := strings.Cut(string(out), ":")
				return pkg
			}
		}
	}
	t.Fatalf("no package ships %s", soname)
	return ""
}

func aptInstall(t *testing.T, debs []string) {
	t.Helper()
	apt(t, "install", append([]string{"--no-install-recommends"}, debs...)...)
}

// apt runs apt-get as an administrator would, without questions: a changed
// conffile is kept.
func apt(t *testing.T, verb string, args ...string) string {
	t.Helper()
	argv := append([]string{"-y", "-q", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold", verb}, args...)
	cmd := exec.Command("apt-get", argv...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("apt-get %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// purge takes the packages off the machine, whatever state the test left them in.
func purge(t *testing.T) {
	var installed []string
	for _, p := range packages {
		if s := pkgStatus(p); s != "" && s != "un" && s != "pn" {
			installed = append(installed, p)
		}
	}
	if len(installed) == 0 {
		return
	}
	if out, err := exec.Command("dpkg", append([]string{"--purge"}, installed...)...).CombinedOutput(); err != nil {
		t.Errorf("dpkg --purge %v: %v\n%s", installed, err, out)
	}
}

func checkInstalled(t *testing.T, version string) {
	t.Helper()
	for _, p := range packages {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status} ${Version}", p).Output()
		if err != nil || string(out) != "install ok installed "+version {
			t.Fatalf("%s: %q %v, want %s installed", p, out, err, version)
		}
	}
	if out := run(t, "dpkg-query", "-W", "-f=${Conffiles}", "basin"); !strings.Contains(out, "/etc/basin/basin.conf ") {
		t.Errorf("/etc/basin/basin.conf is not a conffile: %q", out)
	}
	for _, f := range []string{"/usr/bin/basin", "/usr/lib/basin/ganesha/BASIN-PATCHES", "/usr/share/doc/basin/docs/operations.md",
		"/usr/share/doc/basin/copyright", "/usr/share/doc/basin-ganesha/copyright"} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	// Ganesha loads its own library, and finds every other one.
	out := run(t, "ldd", "/usr/lib/basin/ganesha/bin/ganesha.nfsd")
	if strings.Contains(out, "not found") || !strings.Contains(out, "=> /usr/lib/basin/ganesha/lib/libganesha_nfsd.so") {
		t.Errorf("ldd ganesha.nfsd:\n%s", out)
	}
}

// appendConfig adds lines to the installed basin.conf and returns its content.
func appendConfig(t *testing.T, lines string) string {
	t.Helper()
	path := filepath.Join(confDir, "basin.conf")
	content := readFile(t, path) + lines
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return content
}

// serviceManager runs the unit as systemd does where systemd is not PID 1:
// ExecStart with only the unit's Environment (and systemd's PATH), under its
// capability bounding set and no-new-privileges (setpriv), in a session of its
// own, with NOTIFY_SOCKET on a socket it reads for READY=1 and STOPPING=1; a
// stop is SIGTERM to the main process alone (KillMode=process).
type serviceManager struct {
	t         *testing.T
	unit      unit
	listen    string
	cmd       *exec.Cmd
	log       *logFile
	exited    chan struct{}
	notes     chan string
	sock      *net.UnixConn
	sessions  []int // the sessions (main PIDs) of every start
	lastReady time.Time
}

func (sm *serviceManager) start(what string) {
	t := sm.t
	t.Helper()
	u := sm.unit
	if u.typ != "notify" || u.killMode != "process" || len(u.execStart) == 0 {
		t.Fatalf("the unit is not what this service manager runs: Type=%s KillMode=%s ExecStart=%v", u.typ, u.killMode, u.execStart)
	}
	dir := t.TempDir()
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	sm.sock = sock
	sm.notes = make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				close(sm.notes)
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if line != "" {
					sm.notes <- line
				}
			}
		}
	}()
	var caps []string
	for _, c := range u.caps {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	argv := []string{"--bounding-set", "-all," + strings.Join(caps, ",")}
	if u.noNewPrivs {
		argv = append(argv, "--no-new-privs")
	}
	argv = append(append(argv, "--"), u.execStart...)
	sm.cmd = exec.Command("setpriv", argv...)
	sm.cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "NOTIFY_SOCKET=" + sock.LocalAddr().String()}, u.env...)
	sm.cmd.Dir = "/"
	// The journal's stand-in: a file, which nothing waits on to close (a
	// daemon Basin leaves running may hold it).
	f, err := os.Create(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sm.log = &logFile{path: f.Name()}
	sm.cmd.Stdout, sm.cmd.Stderr = f, f
	sm.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	started := time.Now()
	if err := sm.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sm.sessions = append(sm.sessions, sm.cmd.Process.Pid)
	sm.exited = make(chan struct{})
	go func() { sm.cmd.Wait(); close(sm.exited) }()
	timeout := time.After(u.timeoutStart)
	for ready := false; !ready; {
		select {
		case n := <-sm.notes:
			ready = n == "READY=1"
		case <-sm.exited:
			t.Fatalf("%s: basin serve exited before READY=1 (%v):\n%s", what, sm.cmd.ProcessState, sm.log)
		case <-timeout:
			t.Fatalf("%s: no READY=1 after %v:\n%s", what, u.timeoutStart, sm.log)
		}
	}
	sm.lastReady = time.Now()
	// READY=1 means what /readyz says.
	resp, err := http.Get("http://" + sm.listen + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: READY=1 sent, but /readyz answers %v %v", what, resp, err)
	}
	resp.Body.Close()
	t.Logf("%s: READY=1 after %.1f s", what, sm.lastReady.Sub(started).Seconds())
}

// stop sends SIGTERM to the main process only and waits for it to exit; it
// must have said STOPPING=1 and exit 0.
func (sm *serviceManager) stop(what string) {
	t := sm.t
	t.Helper()
	start := time.Now()
	pid := sm.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-sm.exited:
	case <-time.After(sm.unit.timeoutStop):
		t.Fatalf("%s: basin serve still running %v after SIGTERM:\n%s", what, sm.unit.timeoutStop, sm.log)
	}
	sm.sock.Close()
	stopping := false
	for n := range sm.notes {
		stopping = stopping || n == "STOPPING=1"
	}
	if !stopping {
		t.Errorf("%s: basin serve never said STOPPING=1", what)
	}
	if !sm.cmd.ProcessState.Success() {
		t.Errorf("%s: basin serve exited with %v:\n%s", what, sm.cmd.ProcessState, sm.log)
	}
	_, err := os.Stat("/run/netns/basin-" + bridge)
	t.Logf("%s: exited %.1f s after SIGTERM; its data plane (sandbox namespace basin-%s) left serving: %v",
		what, time.Since(start).Seconds(), bridge, err == nil)
	sm.cmd = nil
}

// cleanup stops a Basin still running and ends what is left of the sessions
// the test started.
func (sm *serviceManager) cleanup() {
	if sm.cmd != nil {
		syscall.Kill(sm.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-sm.exited:
		case <-time.After(2 * time.Minute):
			syscall.Kill(sm.cmd.Process.Pid, syscall.SIGKILL)
			<-sm.exited
		}
		if sm.t.Failed() {
			sm.t.Logf("basin serve's log:\n%s", sm.log)
		}
	}
	// What the stops left serving (the data plane outlives Basin), as the
	// prerm of a removal takes it down.
	if _, err := os.Stat("/usr/bin/basin"); err == nil {
		exec.Command("/usr/bin/basin", "teardown", "--config", filepath.Join(confDir, "basin.conf")).Run()
	}
	for _, s := range sm.sessions {
		for _, pid := range sessionProcesses(s) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// sessionProcesses lists the processes of session sid (those a service's main
// process started, which KillMode=process leaves running).
func sessionProcesses(sid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session …; comm may hold spaces.
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 3 && f[0] != "Z" && f[3] == strconv.Itoa(sid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// logFile is a service's output, written to a file.
type logFile struct{ path string }

func (l *logFile) String() string {
	data, _ := os.ReadFile(l.path)
	return string(data)
}

func mutate(t *testing.T, c *client.Client, method, path string, body any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var op client.Object
	if err := c.Do(ctx, method, path, nil, body, &op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if _, err := c.Wait(ctx, op); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

// endpoint is a volume's NFS address, from its mountOptions.
func endpoint(t *testing.T, c *client.Client, path string) netip.Addr {
	t.Helper()
	var v client.Object
	if err := c.Do(context.Background(), "GET", path, nil, nil, &v); err != nil {
		t.Fatal(err)
	}
	mo, _ := v["mountOptions"].([]any)
	if len(mo) == 0 {
		t.Fatalf("%s has no mountOptions: %v", path, v)
	}
	ip, _ := mo[0].(map[string]any)["ipAddress"].(string)
	a, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func timed(t *testing.T, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	t.Logf("%s: %.1f s", what, time.Since(start).Seconds())
}

var errGaveUp = errors.New("gave up")
