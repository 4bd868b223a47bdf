// Package ganeshatest runs a bare NFS-Ganesha for tests that need a real one:
// btrfs volumes on loop images, exports with CLIENT blocks, and a network of
// loopback addresses that stand for different client hosts.
//
// Main re-runs the test binary inside a network namespace of its own
// (nfsatk-<pid>) and a private mount namespace, so Ganesha listens on nothing
// outside it, every mount vanishes with the namespace, and loop devices are
// detached lazily as soon as they are mounted. Only test code imports it.
package ganeshatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DefaultBin is Basin's patched Ganesha (scripts/ganesha/build.sh).
const DefaultBin = "/usr/local/lib/basin/ganesha/bin/ganesha.nfsd"

// PatchedBin is the patched Ganesha the tests run: the one in
// $BASIN_GANESHA_PREFIX (a build of one's own, scripts/ganesha/build.sh
// --prefix) if set, else DefaultBin.
func PatchedBin() string {
	if prefix := os.Getenv("BASIN_GANESHA_PREFIX"); prefix != "" {
		return filepath.Join(prefix, "bin", "ganesha.nfsd")
	}
	return DefaultBin
}

// DebianBin is Debian's unpatched Ganesha.
const DebianBin = "/usr/bin/ganesha.nfsd"

const innerEnv = "NFSATK_INNER"

// Main runs the tests: as root it re-executes the test binary inside a fresh
// network namespace nfsatk-<pid> and a private mount namespace and removes the
// namespace afterwards; without root it runs them as they are (they skip).
func Main(m *testing.M) {
	if os.Getenv(innerEnv) != "" || os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	ns := fmt.Sprintf("nfsatk-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "ganeshatest: ip netns add %s: %v %s\n", ns, err, out)
		os.Exit(1)
	}
	code := 1
	defer func() {
		exec.Command("ip", "netns", "delete", ns).Run()
		os.Exit(code)
	}()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	args := append([]string{"netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, os.Stdin
	cmd.Env = append(os.Environ(), innerEnv+"="+ns)
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, err)
	}
}

// Need skips t unless it runs as root inside Main's namespaces with the tools
// the harness needs.
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a bare Ganesha on btrfs loop images)")
	}
	if os.Getenv(innerEnv) == "" {
		t.Skip("needs ganeshatest.Main in TestMain")
	}
	for _, tool := range []string{"mkfs.btrfs", "btrfs", "losetup", "mount", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
}

// Run runs a command and fails t on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Scratch makes a scratch directory /tmp/nfsatk-<name>-* removed at cleanup
// (after the mounts below it are gone).
func Scratch(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nfsatk-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Btrfs is one btrfs filesystem on a loop image.
type Btrfs struct {
	Image, Dev string
	t          testing.TB
}

// NewBtrfs makes a btrfs filesystem of size bytes on image and attaches it to
// a loop device.
func NewBtrfs(t testing.TB, image string, size int64) *Btrfs {
	t.Helper()
	f, err := os.Create(image)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	Run(t, "mkfs.btrfs", "-q", image)
	dev := strings.TrimSpace(Run(t, "losetup", "--find", "--show", image))
	b := &Btrfs{Image: image, Dev: dev, t: t}
	// Detach at cleanup (a no-op once Settle made it autoclear).
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return b
}

// Mount mounts the filesystem (opts such as "subvol=live,ro") on dir, made if
// need be, and unmounts it at cleanup.
func (b *Btrfs) Mount(dir, opts string) {
	b.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	args := []string{"-t", "btrfs"}
	if opts != "" {
		args = append(args, "-o", opts)
	}
	Run(b.t, "mount", append(args, b.Dev, dir)...)
	b.t.Cleanup(func() { Unmount(dir) })
}

// Settle marks the loop device to go with its last mount (losetup -d on a
// mounted device sets autoclear), so that even a crashed test, whose mounts
// die with the private mount namespace, leaves no loop device behind. Call it
// once the filesystem's lasting mounts are made.
func (b *Btrfs) Settle() { exec.Command("losetup", "-d", b.Dev).Run() }

// Unmount unmounts dir, lazily if it is busy.
func Unmount(dir string) {
	if exec.Command("umount", dir).Run() != nil {
		exec.Command("umount", "-l", dir).Run()
	}
}

// Client is an allowed host in an export's CLIENT block.
type Client struct {
	IP     string
	Access string // RW, RO or None
	Squash string // e.g. no_root_squash
}

// Export is one EXPORT block.
type Export struct {
	ID      int
	Path    string
	Pseudo  string
	Clients []Client
	// Extra is more of the block, e.g. "Attr_Expiration_Time = 0;".
	Extra string
	// FSAL is the export's FSAL block; "" = "FSAL { Name = VFS; }".
	FSAL string
}

// Server is a running ganesha.nfsd.
type Server struct {
	Bin       string
	Dir       string
	Host      string // 127.0.0.1
	NFSPort   int
	MountPort int
	// Env is added to the daemon's environment (by default its DBus system
	// bus is a path that does not exist: no DBus).
	Env  []string
	cmd  *exec.Cmd
	done chan struct{}
}

// ConfPath is the server's ganesha.conf.
func (s *Server) ConfPath() string { return filepath.Join(s.Dir, "ganesha.conf") }

// LogPath is where the server logs.
func (s *Server) LogPath() string { return filepath.Join(s.Dir, "ganesha.log") }

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.LogPath())
	return string(b)
}

// Config renders ganesha.conf for the exports: NFSv3 and v4.0 over TCP,
// mount_path_pseudo, Access_Type None unless a CLIENT block allows a host.
func Config(dir string, nfsPort, mountPort int, exports []Export) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, `NFS_CORE_PARAM { Protocols = 3, 4; NFS_Port = %d; MNT_Port = %d; Enable_NLM = false; Enable_RQUOTA = false;
  Enable_UDP = false; mount_path_pseudo = true; }
NFSV4 { Minor_Versions = 0, 1; Graceless = true; RecoveryBackend = fs; RecoveryRoot = %q; Only_Numeric_Owners = true; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT_DEFAULTS { Access_Type = None; Squash = root_squash; SecType = sys; Protocols = 3, 4; Transports = TCP; }
LOG { Default_Log_Level = EVENT; Components { FSAL = INFO; NFSPROTO = INFO; } }
`, nfsPort, mountPort, filepath.Join(dir, "recov"))
	for _, x := range exports {
		fsal := x.FSAL
		if fsal == "" {
			fsal = "FSAL { Name = VFS; }"
		}
		fmt.Fprintf(&b, "EXPORT { Export_Id = %d; Path = %q; Pseudo = %q; Protocols = 3, 4; Access_Type = None; Squash = root_squash;\n"+
			"  Anonymous_Uid = 65534; Anonymous_Gid = 65534; SecType = sys; %s %s\n", x.ID, x.Path, x.Pseudo, fsal, x.Extra)
		for _, c := range x.Clients {
			sq := c.Squash
			if sq == "" {
				sq = "root_squash"
			}
			fmt.Fprintf(&b, "  CLIENT { Clients = %s; Access_Type = %s; Squash = %s; }\n", c.IP, c.Access, sq)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// Start runs bin with the exports, on 127.0.0.1 of the test's network
// namespace, and stops it at cleanup.
func Start(t testing.TB, bin string, exports []Export) *Server {
	t.Helper()
	s := NewServer(t, bin)
	if err := os.WriteFile(s.ConfPath(), []byte(Config(s.Dir, s.NFSPort, s.MountPort, exports)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Launch(t)
	// The MOUNT service comes up with NFS; give exports a moment to settle.
	time.Sleep(300 * time.Millisecond)
	return s
}

// NewServer prepares a server of bin in a scratch directory Dir (with Dir/recov
// for its NFSv4 recovery records) on 127.0.0.1 of the test's network namespace,
// NFS on port 2049, and a private /run with an rpcbind of its own. The caller
// writes ConfPath and calls Launch; the server is stopped at cleanup.
func NewServer(t testing.TB, bin string) *Server {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no ganesha.nfsd at %s (scripts/ganesha/build.sh builds it)", bin)
	}
	Run(t, "ip", "link", "set", "lo", "up")
	s := &Server{Bin: bin, Dir: Scratch(t, "ganesha"), Host: "127.0.0.1", NFSPort: 2049, MountPort: 20048}
	os.MkdirAll(filepath.Join(s.Dir, "recov"), 0o700)
	// A private /run (this mount namespace only) for Ganesha's
	// /var/run/ganesha and for an rpcbind of the namespace's own: Ganesha
	// will not start unless it can register NFSv3 and MOUNT.
	if !mounted("/run") {
		Run(t, "mount", "-t", "tmpfs", "tmpfs", "/run")
		t.Cleanup(func() { Unmount("/run") })
	}
	os.MkdirAll("/run/ganesha", 0o755)
	if _, err := os.Stat("/run/rpcbind.sock"); err != nil {
		rpcbind := exec.Command("rpcbind", "-f", "-w")
		rpcbind.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := rpcbind.Start(); err != nil {
			t.Skipf("needs rpcbind: %v", err)
		}
		t.Cleanup(func() { rpcbind.Process.Kill(); rpcbind.Wait() })
		for i := 0; i < 50; i++ {
			if _, err := os.Stat("/run/rpcbind.sock"); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// Launch starts the daemon with ConfPath and waits until it accepts NFS
// connections (30 s at most). After Kill it starts it again, as a supervisor
// restarts a daemon, with the same configuration and recovery directory.
func (s *Server) Launch(t testing.TB) {
	t.Helper()
	select {
	case <-s.done:
	default:
		if s.cmd != nil {
			t.Fatal("ganeshatest: Launch while the server runs")
		}
	}
	s.cmd = exec.Command(s.Bin, "-F", "-f", s.ConfPath(), "-L", s.LogPath(), "-p", filepath.Join(s.Dir, "ganesha.pid"), "-N", "NIV_EVENT")
	s.cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent")
	s.cmd.Env = append(s.cmd.Env, s.Env...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) { cmd.Wait(); close(done) }(s.cmd)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.NFSPort)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("ganesha exited at start:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("ganesha did not listen within 30 s:\n%s", s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends sig to the server's process group and waits until it has
// exited (after SIGTERM at most 20 s, then SIGKILL).
func (s *Server) Kill(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, sig)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// Stop stops the server: SIGTERM, then SIGKILL after 10 s. Its group is signalled
// only while the server is not reaped: after that its pid, and so the group's id,
// may be another process's.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func mounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// Context returns a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// busConf is a private system bus on which root may own any name and call
// anything: Ganesha's export manager, as in Basin's sandboxes.
const busConf = `<busconfig><type>system</type><auth>EXTERNAL</auth>
  <listen>unix:path=%s</listen>
  <policy context="default"><allow user="root"/><allow own="*"/><allow send_type="method_call"/>
    <allow send_type="signal"/><allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/><allow receive_type="method_call"/>
    <allow receive_type="method_return"/><allow receive_type="error"/><allow receive_type="signal"/></policy>
</busconfig>
`

// StartBus runs a dbus-daemon of the test's own with its socket in dir, stopped
// at cleanup, and returns the bus address: give it to a Server as
// DBUS_SYSTEM_BUS_ADDRESS (Env) to reach Ganesha's export manager (internal/nfs.DBus).
func StartBus(t testing.TB, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("needs dbus-daemon")
	}
	sock := filepath.Join(dir, "bus.sock")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(busConf, sock)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+conf, "--nofork", "--nopidfile")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return "unix:path=" + sock
		}
		select {
		case <-done:
			t.Fatalf("dbus-daemon exited: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("dbus-daemon did not listen within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
