// Package sambatest runs a bare smbd for tests and benchmarks: on loopback (Start)
// or on one address inside a network namespace (StartOpts), its own state under a
// directory, two shares ("bench", and "benchenc", which requires encryption; by
// default of the same directory), and a local SMB user (root, or an unprivileged
// user that exists only in smbd's own mount namespace) with a password. It is the
// share a user would configure by hand, the reference Basin's SMB volumes are
// measured against (speed in test/bench, protocol semantics with smbtorture in
// test/e2e).
package sambatest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Server is a running smbd.
type Server struct {
	Addr string // the address smbd listens on
	Port int
	cmd  *exec.Cmd
	log  bytes.Buffer
	done chan struct{}
}

// Options say where smbd runs and what it shares.
type Options struct {
	StateDir string // smbd's state, configuration and logs
	ShareDir string // the "bench" share's directory
	// EncShareDir is the "benchenc" share's directory; default ShareDir.
	EncShareDir string
	Password    string // the SMB user root's
	Port        int
	// Addr is the one address smbd listens on; default 127.0.0.1.
	Addr string
	// Netns runs smbd inside this named network namespace (ip netns exec), where
	// Addr must be; default the caller's.
	Netns string
	// Dial checks that smbd listens (addr is Addr:Port); default net.DialTimeout
	// from the caller's namespace. Give one that dials inside Netns.
	Dial func(addr string) (net.Conn, error)
	// User is the SMB user's name; default root (whom smbd lets past every
	// permission check). Any other name is an unprivileged user, uid and gid
	// UserID, that exists only in the passwd and group files smbd (and
	// smbpasswd) see in a mount namespace of their own; the host's stay as they
	// are. Both share directories are then given to that user and bound
	// under StateDir/shares in that namespace, so they need not be reachable
	// by the user where they are; StateDir must be (every parent crossable by
	// others, as a directory made by os.MkdirTemp("", …) with mode 0755 is):
	// smbd acts as the user while it reads other smbds' lock files.
	User string
	// UserID is User's uid and gid; default 20000.
	UserID int
	// Global and Share are smb.conf parameters added to [global] and to both
	// shares (a key given in Share replaces the default's: "read only" …).
	Global, Share map[string]string
}

// Start runs smbd on 127.0.0.1:port serving shareDir, with its state in stateDir.
func Start(stateDir, shareDir string, port int, password string) (*Server, error) {
	return StartOpts(Options{StateDir: stateDir, ShareDir: shareDir, Port: port, Password: password})
}

// StartOpts runs smbd as o says and returns once it accepts connections.
func StartOpts(o Options) (*Server, error) {
	if o.StateDir == "" || o.ShareDir == "" || o.Port == 0 || o.Password == "" {
		return nil, errors.New("sambatest: StateDir, ShareDir, Port and Password are required")
	}
	if o.EncShareDir == "" {
		o.EncShareDir = o.ShareDir
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1"
	}
	if o.Dial == nil {
		o.Dial = func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }
	}
	if o.User == "" {
		o.User = "root"
	}
	if o.UserID == 0 {
		o.UserID = 20000
	}
	stateDir, port := o.StateDir, o.Port
	if _, err := exec.LookPath("smbd"); err != nil {
		return nil, fmt.Errorf("smbd not installed: run scripts/setup.sh --test")
	}
	// Samba's own layout: the lock, state and cache directories (and the
	// path to them) may be crossed by anyone, since smbd reads other smbds'
	// lock files while it acts as the connected user; only private/ is 0700.
	for _, sub := range []string{"private", "lock", "state", "cache", "run", "log"} {
		mode := os.FileMode(0o755)
		if sub == "private" {
			mode = 0o700
		}
		if err := os.MkdirAll(filepath.Join(stateDir, sub), mode); err != nil {
			return nil, err
		}
		if err := os.Chmod(filepath.Join(stateDir, sub), mode); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(stateDir, 0o755); err != nil {
		return nil, err
	}
	var wrap []string // runs smbpasswd and smbd where User exists
	shareDir, encShareDir := o.ShareDir, o.EncShareDir
	if o.User != "root" {
		w, err := userNamespace(o, stateDir)
		if err != nil {
			return nil, err
		}
		wrap = w
		shareDir, encShareDir = filepath.Join(stateDir, "shares", "bench"), filepath.Join(stateDir, "shares", "benchenc")
	}
	conf := filepath.Join(stateDir, "smb.conf")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`[global]
server role = standalone server
smb ports = %d
interfaces = %[4]s
bind interfaces only = yes
disable netbios = yes
server min protocol = SMB2_10
private dir = %[2]s/private
lock directory = %[2]s/lock
state directory = %[2]s/state
cache directory = %[2]s/cache
pid directory = %[2]s/run
ncalrpc dir = %[2]s/run/ncalrpc
log file = %[2]s/log/log.%%m
passdb backend = tdbsam:%[2]s/private/passdb.tdb
load printers = no
printcap name = /dev/null
disable spoolss = yes
[bench]
path = %[3]s
read only = no
[benchenc]
path = %[5]s
read only = no
smb encrypt = required
`, port, stateDir, shareDir, o.Addr, encShareDir)+extra(o.Global, o.Share)), 0o644)
	if err != nil {
		return nil, err
	}
	pw := append(slices.Clip(wrap), "smbpasswd", "-c", conf, "-a", "-s", o.User)
	add := exec.Command(pw[0], pw[1:]...)
	add.Stdin = strings.NewReader(o.Password + "\n" + o.Password + "\n")
	if out, err := add.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("smbpasswd: %v %s", err, out)
	}
	s := &Server{Addr: o.Addr, Port: port, done: make(chan struct{})}
	argv := append(slices.Clip(wrap), "smbd", "--foreground", "--no-process-group", "-s", conf, "--debug-stdout")
	if o.Netns != "" {
		// ip execs smbd in place: the process (and its group) stays smbd's.
		argv = append([]string{"ip", "netns", "exec", o.Netns}, argv...)
	}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	// smbd signals its whole process group when it exits: give it one of its own.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }() //nolint:errcheck // exit status is in the log
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := o.Dial(net.JoinHostPort(o.Addr, fmt.Sprint(port)))
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("smbd exited (%v) before it listened on %s port %d: %s", s.cmd.ProcessState, o.Addr, port, s.Log())
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("smbd did not listen on %s port %d: %v: %s", o.Addr, port, err, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log is what smbd printed.
func (s *Server) Log() string { return s.log.String() }

// Stop stops smbd and its children (SIGTERM, then SIGKILL after 10 s). The group
// is signalled only while smbd is not reaped: after that its pid, and so the
// group's id, may be another process's.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM) //nolint:errcheck // gone already is fine
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
		<-s.done
	}
}

// userNamespace writes passwd and group files naming o.User (uid and gid
// o.UserID) under stateDir/etc, gives the share directories to that user, and
// returns the argv prefix that runs a command in a mount namespace of its own
// with those files over /etc/passwd and /etc/group and the share directories
// bound on stateDir/shares/bench and benchenc (the host's files and mounts are
// never touched).
func userNamespace(o Options, stateDir string) ([]string, error) {
	if strings.ContainsAny(o.User, ":\n/ ") {
		return nil, fmt.Errorf("sambatest: bad user name %q", o.User)
	}
	etc := filepath.Join(stateDir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return nil, err
	}
	id := fmt.Sprint(o.UserID)
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\n" + o.User + ":x:" + id + ":" + id + "::/nonexistent:/usr/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group": "root:x:0:\n" + o.User + ":x:" + id + ":\nnogroup:x:65534:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{o.ShareDir, o.EncShareDir} {
		if err := os.Chown(d, o.UserID, o.UserID); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"bench", "benchenc"} {
		if err := os.MkdirAll(filepath.Join(stateDir, "shares", d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(filepath.Join(stateDir, "shares"), 0o755); err != nil {
		return nil, err
	}
	return []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$0/etc/passwd" /etc/passwd && mount --bind "$0/etc/group" /etc/group && ` +
			`mount --bind "$1" "$0/shares/bench" && mount --bind "$2" "$0/shares/benchenc" && shift 2 && exec "$@"`,
		stateDir, o.ShareDir, o.EncShareDir}, nil
}

// extra renders the global parameters (appended to [global] by a second
// [global] section, which Samba merges) and the share parameters appended to
// both shares.
func extra(global, share map[string]string) string {
	var b strings.Builder
	for _, sec := range []string{"global", "bench", "benchenc"} {
		params := share
		if sec == "global" {
			params = global
		}
		if len(params) == 0 {
			continue
		}
		fmt.Fprintf(&b, "[%s]\n", sec)
		for _, k := range slices.Sorted(maps.Keys(params)) {
			fmt.Fprintf(&b, "%s = %s\n", k, params[k])
		}
	}
	return b.String()
}
