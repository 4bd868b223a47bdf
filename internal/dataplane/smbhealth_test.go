package dataplane

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A log past its bound is emptied, in place (a daemon appending to it goes on
// at its new end); others, directories and links are left alone.
func TestTruncateLogs(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write := func(p string, n int) {
		t.Helper()
		if err := os.WriteFile(p, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(a, "log.smbd"), 2000)
	write(filepath.Join(a, "log.winbindd"), 500)
	write(filepath.Join(b, "log.rpcd_lsad"), 1001)
	os.Mkdir(filepath.Join(a, "cores"), 0o700)
	outside := filepath.Join(t.TempDir(), "other")
	write(outside, 5000)
	os.Symlink(outside, filepath.Join(a, "link"))
	held, err := os.OpenFile(filepath.Join(a, "log.smbd"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	got := truncateLogs(1000, a, b, filepath.Join(a, "missing"))
	want := []string{filepath.Join(a, "log.smbd"), filepath.Join(b, "log.rpcd_lsad")}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("truncated %v, want %v", got, want)
	}
	for p, size := range map[string]int64{filepath.Join(a, "log.smbd"): 0, filepath.Join(b, "log.rpcd_lsad"): 0,
		filepath.Join(a, "log.winbindd"): 500, outside: 5000} {
		if fi, err := os.Stat(p); err != nil || fi.Size() != size {
			t.Errorf("%s: %v bytes (%v), want %d", p, fi.Size(), err, size)
		}
	}
	// The daemon's next line lands at the start, not after a hole.
	held.Write([]byte("next\n"))
	if b, _ := os.ReadFile(filepath.Join(a, "log.smbd")); string(b) != "next\n" {
		t.Errorf("after truncation the log holds %q", b)
	}
}

// Samba's directories keep Samba's modes: every directory an smbd acting as a
// user must cross or read is 0755; private/ and the logs are root's alone.
func TestInstanceDirModes(t *testing.T) {
	dir := "/data/sandboxes/n/smb/s1"
	modes := map[string]os.FileMode{}
	for _, dm := range instanceDirModes(dir) {
		modes[dm.path] = dm.mode
	}
	for rel, want := range map[string]os.FileMode{".": 0o755, "private": 0o700, "lock": 0o755, "state": 0o755, "cache": 0o755,
		"run": 0o755, "run/ncalrpc": 0o755, "log": 0o700, "var/log/samba": 0o700} {
		if got, ok := modes[filepath.Join(dir, rel)]; !ok || got != want {
			t.Errorf("%s: %v (listed %v), want %v", rel, got, ok, want)
		}
	}
}

// samba-dcerpcd is ready when it accepts on its pipe, not when the pipe
// exists: a listening socket nobody accepts on (Samba 4.17 when one rpcd_*
// server's setup failed last) takes connections into its backlog and never
// answers.
func TestPipeServed(t *testing.T) {
	dir := t.TempDir()
	listen := func(name string) (string, *net.UnixListener) {
		t.Helper()
		p := filepath.Join(dir, name)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return p, l
	}
	probe := func(p string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return pipeServed(p)(ctx)
	}

	stuck, _ := listen("stuck") // listening, never accepting
	if err := probe(stuck); err == nil || !strings.Contains(err.Error(), "nobody accepts") {
		t.Errorf("a pipe nobody accepts on: %v", err)
	}
	if err := probe(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing pipe is ready")
	}

	// Samba's answer to a zero-length auth request: it reads it and closes.
	served, l := listen("served")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var b [4]byte
			io.ReadFull(c, b[:]) //nolint:errcheck
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		if err := probe(served); err != nil {
			t.Fatalf("a served pipe: %v", err)
		}
	}
}
