// Package pgtest starts a private PostgreSQL server for tests: a cluster of its
// own in a temporary directory, listening on a Unix socket in a directory only its
// owner can enter (no TCP port), with durability off (fsync, synchronous commit)
// since a test's data dies with it. Nothing of a PostgreSQL the host runs is used.
//
// Run as root, the server runs as the "postgres" user Debian's package creates
// (PostgreSQL refuses to run as root); otherwise as the calling user. The binaries
// are the newest under /usr/lib/postgresql (Debian's layout), or those of
// $BASIN_PG_BIN. Without them the tests skip, unless $BASIN_REQUIRE_POSTGRES is
// set (make test sets it, after scripts/setup.sh --test installed postgresql-15).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a running private PostgreSQL.
type Server struct {
	dir     string // holds data/ and sock/
	sockDir string
	cmd     *exec.Cmd
	exited  chan struct{}
	n       atomic.Int64
}

// BinDir returns the directory of initdb and postgres, or an error saying what
// to install.
func BinDir() (string, error) {
	if d := os.Getenv("BASIN_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server under /usr/lib/postgresql (Debian package postgresql-15; scripts/setup.sh --test installs it)")
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start starts a server for the test and stops it (deleting its files) when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		if os.Getenv("BASIN_REQUIRE_POSTGRES") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts a server outside a test (the benchmarks); the caller stops
// it.
func StartServer() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	return start(bin)
}

func start(bin string) (_ *Server, err error) {
	cred, uid, gid, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "basin-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, sockDir: filepath.Join(dir, "sock"), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	// The top directory must let the server's user through; data/ and sock/ are
	// its own, mode 0700 (the socket's directory is the access control: trust
	// authentication, for whoever can reach the socket: its owner, and root).
	if err := os.Chmod(dir, 0o711); err != nil {
		return s, err
	}
	data := filepath.Join(dir, "data")
	for _, d := range []string{data, s.sockDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return s, err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return s, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "basin", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return s, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", s.sockDir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=32MB")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	s.cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return s, err
	}
	defer logf.Close()
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			c.Close(ctx)
			return s, nil
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return s, fmt.Errorf("postgres exited: %s", log)
		case <-ctx.Done():
			return s, fmt.Errorf("postgres not ready: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runAs returns the credential to run the server with: the postgres user's when
// running as root, nil (the caller's) otherwise.
func runAs() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, os.Geteuid(), os.Getegid(), nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

// URL returns a connection URL for database db.
func (s *Server) URL(db string) string {
	return "postgres://basin@/" + db + "?host=" + s.sockDir
}

// NewDatabase creates an empty database and returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	url, err := s.CreateDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// CreateDatabase creates an empty database and returns its URL.
func (s *Server) CreateDatabase() (string, error) {
	name := fmt.Sprintf("t%d", s.n.Add(1))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return strings.TrimSpace(string(b))
}

// Stop stops the server (fast shutdown: open connections are cut) and deletes its
// files.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-s.exited:
			case <-time.After(30 * time.Second):
				syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
				<-s.exited
			}
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
