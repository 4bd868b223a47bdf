// Package clienthost gives tests "client machines": network namespaces joined to a
// Basin network's bridge by a veth pair, each with its own address in 10.99.0.0/16,
// that run real NFS I/O with libnfs's command-line tools (nfs-ls, nfs-cat, nfs-cp).
// libnfs speaks NFSv3 and NFSv4.0 (writes over ~3.9 KB fail on v4 with libnfs 4.0)
// and takes the AUTH_SYS uid/gid from the URL, so tests act as root or as a user.
//
// It needs root, iproute2, libnfs-utils, and gcc with libnfs-dev for its nfs-put helper. Used by test/e2e and later data-plane
// tests; it imports nothing of Basin's.
package clienthost

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

//go:embed csrc/*.c
var csrc embed.FS

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// helper compiles csrc/<name>.c once per process (gcc and libnfs-dev are installed
// by scripts/setup.sh --test) and returns the binary's path.
func helper(name string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[name]; ok {
		return bin, nil
	}
	src, err := csrc.ReadFile("csrc/" + name + ".c")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "clienthost-")
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, name+".c")
	if err := os.WriteFile(file, src, 0o600); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, file, "-lnfs").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s (needs gcc and libnfs-dev): %v: %s", name, err, out)
	}
	built[name] = bin
	return bin, nil
}

// Host is one client machine.
type Host struct {
	Addr netip.Addr
	ns   string
	veth string
}

// New creates a host with address addr (with the bridge's prefix length) on bridge,
// removed when the test ends.
func New(t testing.TB, bridge string, addr netip.Prefix) *Host {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	id := hex.EncodeToString(b)
	h := &Host{Addr: addr.Addr(), ns: "bct-" + id, veth: "bcv" + id}
	steps := [][]string{
		{"ip", "netns", "add", h.ns},
		{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"ip", "link", "set", h.veth, "master", bridge, "up"},
		{"ip", "-n", h.ns, "link", "set", "lo", "up"},
		{"ip", "-n", h.ns, "addr", "add", addr.String(), "dev", "eth0"},
		{"ip", "-n", h.ns, "link", "set", "eth0", "up"},
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "delete", h.ns).Run()
		exec.Command("ip", "link", "delete", h.veth).Run()
	})
	for _, argv := range steps {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("client host %s: %v: %v %s", addr, argv, err, out)
		}
	}
	return h
}

// Run runs a command inside the host and returns its combined output.
func (h *Host) Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Attach plugs the host into bridge again (a bridge deleted and made anew, as a
// Basin that created it does across a clean restart, loses its ports).
func (h *Host) Attach(bridge string) error {
	if out, err := exec.Command("ip", "link", "set", h.veth, "master", bridge, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("attach %s to %s: %v: %s", h.veth, bridge, err, out)
	}
	return nil
}

// Master returns the bridge the host is plugged into ("" if none): a bridge
// deleted and made anew leaves its former ports unplugged.
func (h *Host) Master() string {
	target, err := os.Readlink(filepath.Join("/sys/class/net", h.veth, "master"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// Within runs fn on an OS thread that has entered the host's network namespace:
// sockets fn opens (an NFS client's connections) belong to the host and keep
// working after fn returns, whatever thread uses them then.
func (h *Host) Within(fn func() error) error { return InNetns(h.ns, fn) }

// InNetns runs fn on an OS thread that has entered the named network namespace
// (/run/netns/<ns>), as Within does for a host.
func InNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread goes back to the pool only once it is back in its own
		// namespace; if it cannot get back it ends with this goroutine. Ending a
		// thread is not free: a child another goroutine started from it with
		// Pdeathsig (the AD DC fixture's samba, a bare smbd) is killed with it,
		// so the thread is kept whenever it can be.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", ns, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Command returns a command that runs inside the host.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
}

// Client is an NFS identity on a host: a protocol version and AUTH_SYS ids.
type Client struct {
	h       *Host
	Version int // 3 or 4 (4.0)
	UID     int
	GID     int
	// Timeout bounds each call (a whole file's copy: five times it); 0 is
	// a minute. A check that a server no longer answers sets it short.
	Timeout time.Duration
}

// NFS returns a client speaking version as uid/gid.
func (h *Host) NFS(version, uid, gid int) *Client {
	return &Client{h: h, Version: version, UID: uid, GID: gid}
}

// URL builds a libnfs URL for path on server.
func (c *Client) URL(server netip.Addr, path string) string {
	return fmt.Sprintf("nfs://%s%s?version=%d&uid=%d&gid=%d", server, path, c.Version, c.UID, c.GID)
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return time.Minute
}

// Entry is one line of a directory listing.
type Entry struct {
	Name     string
	Mode     string
	UID, GID int
	Size     int64
}

// Ls lists a directory.
func (c *Client) Ls(server netip.Addr, path string) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout())
	defer cancel()
	out, err := c.h.Run(ctx, "nfs-ls", c.URL(server, path))
	if err != nil {
		return nil, fmt.Errorf("nfs-ls %s: %w: %s", c.URL(server, path), err, strings.TrimSpace(out))
	}
	var entries []Entry
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		uid, _ := strconv.Atoi(f[2])
		gid, _ := strconv.Atoi(f[3])
		size, _ := strconv.ParseInt(f[4], 10, 64)
		entries = append(entries, Entry{Mode: f[0], UID: uid, GID: gid, Size: size, Name: strings.Join(f[5:], " ")})
	}
	return entries, nil
}

// Stat returns the listing entry of path's last element.
func (c *Client) Stat(server netip.Addr, path string) (Entry, error) {
	dir, name := filepath.Split(path)
	entries, err := c.Ls(server, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return Entry{}, err
	}
	for _, e := range entries {
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("%s not found", path)
}

// Read returns a file's contents.
func (c *Client) Read(server netip.Addr, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", c.h.ns, "nfs-cat", c.URL(server, path))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nfs-cat %s: %w: %s", c.URL(server, path), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Write creates or truncates path (mode 0644) and writes data to it.
func (c *Client) Write(server netip.Addr, path string, data []byte) error {
	f, err := os.CreateTemp("", "clienthost-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	f.Close()
	return c.WriteFile(server, path, f.Name())
}

// WriteFile copies a local file to path. Errors carry the server's NFS status
// (NFS3ERR_DQUOT, NFS4ERR_ROFS, …).
func (c *Client) WriteFile(server netip.Addr, path, local string) error {
	bin, err := helper("nfsput")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*c.timeout())
	defer cancel()
	out, err := c.h.Run(ctx, bin, local, c.URL(server, path))
	if err != nil {
		return fmt.Errorf("nfs-put to %s: %w: %s", c.URL(server, path), err, strings.TrimSpace(out))
	}
	return nil
}

// Held is a file a client has open: it can be read again through the same handle.
type Held struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	// First is what the first read returned: "data: …" or "error: …".
	First string
}

// Hold opens path and reads it, keeping the file handle for Again.
func (c *Client) Hold(server netip.Addr, path string) (*Held, error) {
	bin, err := helper("nfshold")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", c.h.ns, bin, c.URL(server, path))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &Held{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := h.out.ReadString('\n')
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("nfs-hold %s: %w", path, err)
	}
	h.First = strings.TrimSpace(line)
	return h, nil
}

// Again reads the file once more through the handle opened by Hold.
func (h *Held) Again() (string, error) {
	if _, err := io.WriteString(h.stdin, "again\n"); err != nil {
		return "", err
	}
	line, err := h.out.ReadString('\n')
	return strings.TrimSpace(line), err
}

// Close ends the client.
func (h *Held) Close() {
	h.stdin.Close()
	h.cmd.Process.Kill()
	h.cmd.Wait()
}

// Name is the host's network namespace.
func (h *Host) Name() string { return h.ns }
