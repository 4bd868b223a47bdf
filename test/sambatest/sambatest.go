// Package sambatest runs a bare smbd for tests and benchmarks: on loopback (Start)
// or on one address inside a network namespace (StartOpts), its own state under a
// directory, two shares ("bench", and "benchenc", which requires encryption; by
// default of the same directory), and a local SMB user root with a password. It is
// the share a user would configure by hand, the reference Basin's SMB volumes are
// measured against.
package sambatest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Server is a running smbd.
type Server struct {
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
	stateDir, port := o.StateDir, o.Port
	if _, err := exec.LookPath("smbd"); err != nil {
		return nil, fmt.Errorf("smbd not installed: run scripts/setup.sh --test")
	}
	for _, sub := range []string{"private", "lock", "state", "cache", "run", "log"} {
		if err := os.MkdirAll(filepath.Join(stateDir, sub), 0o700); err != nil {
			return nil, err
		}
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
`, port, stateDir, o.ShareDir, o.Addr, o.EncShareDir)), 0o600)
	if err != nil {
		return nil, err
	}
	add := exec.Command("smbpasswd", "-c", conf, "-a", "-s", "root")
	add.Stdin = strings.NewReader(o.Password + "\n" + o.Password + "\n")
	if out, err := add.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("smbpasswd: %v %s", err, out)
	}
	s := &Server{Port: port, done: make(chan struct{})}
	argv := []string{"smbd", "--foreground", "--no-process-group", "-s", conf, "--debug-stdout"}
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
