// Package sambatest runs a bare smbd for tests and benchmarks: loopback only, its
// own state under a directory, two shares of one directory ("bench" and
// "benchenc", which requires encryption), and an SMB user root with a password.
// Basin has no SMB data plane yet; this is the share a user would configure by hand.
package sambatest

import (
	"bytes"
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

// Start runs smbd on 127.0.0.1:port serving shareDir, with its state in stateDir.
func Start(stateDir, shareDir string, port int, password string) (*Server, error) {
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
interfaces = 127.0.0.1
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
path = %[3]s
read only = no
smb encrypt = required
`, port, stateDir, shareDir)), 0o600)
	if err != nil {
		return nil, err
	}
	add := exec.Command("smbpasswd", "-c", conf, "-a", "-s", "root")
	add.Stdin = strings.NewReader(password + "\n" + password + "\n")
	if out, err := add.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("smbpasswd: %v %s", err, out)
	}
	s := &Server{Port: port, done: make(chan struct{})}
	s.cmd = exec.Command("smbd", "--foreground", "--no-process-group", "-s", conf, "--debug-stdout")
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	// smbd signals its whole process group when it exits: give it one of its own.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }() //nolint:errcheck // exit status is in the log
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("smbd did not listen on %d: %s", port, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log is what smbd printed.
func (s *Server) Log() string { return s.log.String() }

// Stop stops smbd and its children (SIGTERM, then SIGKILL after 10 s).
func (s *Server) Stop() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM) //nolint:errcheck // gone already is fine
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
		<-s.done
	}
}
