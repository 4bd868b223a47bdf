package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/test/sambatest"
)

// bareSamba runs smbd on 127.0.0.1:port (see sambatest) and returns the shared
// directory.
func bareSamba(t *testing.T, port int, password string) (shareDir string) {
	t.Helper()
	d := t.TempDir()
	shareDir = filepath.Join(d, "share")
	if err := os.Mkdir(shareDir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := sambatest.Start(filepath.Join(d, "state"), shareDir, port, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			t.Logf("smbd log:\n%s", srv.Log())
		}
	})
	return shareDir
}

// runBenchJSON runs a `basin bench … --output-format json` command and returns the
// JSON it printed and its stderr; a run that succeeds without JSON fails the test.
func runBenchJSON(t *testing.T, cmd *exec.Cmd) (map[string]any, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, stderr.String(), err
	}
	var res map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("bench output is not JSON: %v\n%s", err, stdout.String())
	}
	return res, stderr.String(), nil
}

// benchIOBytes sums io_bytes of one direction ("read" or "write") over the jobs.
func benchIOBytes(res map[string]any, dir string) (total int64) {
	for _, j := range res["jobs"].([]any) {
		total += int64(j.(map[string]any)[dir].(map[string]any)["io_bytes"].(float64))
	}
	return total
}

// benchInFlight reads the engine's in-flight report (format has one %d) from stderr.
func benchInFlight(t *testing.T, stderr, format string) int {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var n int
		if _, err := fmt.Sscanf(line, format, &n); err == nil {
			return n
		}
	}
	t.Fatalf("no in-flight report in stderr:\n%s", stderr)
	return 0
}

// TestBenchSMB: `basin bench --engine smb` against a real Samba share. The bytes it
// reports are the bytes in the share's files, iodepth requests were on the wire at
// once, sessions sign or encrypt when asked, and an unencrypted session is refused
// when encryption was asked for.
func TestBenchSMB(t *testing.T) {
	_, portStr, _ := net.SplitHostPort(freeAddr(t))
	var port int
	fmt.Sscan(portStr, &port)
	const password = "bench-Pa55"
	dir := bareSamba(t, port, password)
	run := func(share string, args ...string) (map[string]any, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, basinBin, append([]string{"bench", "--engine", "smb", "--url", fmt.Sprintf("smb://127.0.0.1:%d/%s", port, share),
			"--user", "root", "--output-format", "json"}, args...)...)
		cmd.Env = append(os.Environ(), "BASIN_SMB_PASSWORD="+password)
		return runBenchJSON(t, cmd)
	}
	ioBytes := benchIOBytes
	inFlight := func(stderr string) int { return benchInFlight(t, stderr, "smb: at most %d requests in flight") }

	// Sequential writes bounded by size over 2 channels, signed.
	res, stderr, err := run("bench", "--name", "w", "--rw", "write", "--bs", "64k", "--iodepth", "8", "--numjobs", "2",
		"--nrfiles", "2", "--size", "8m", "--channels", "2", "--protection", "sign")
	if err != nil {
		t.Fatalf("signed write run: %v\n%s", err, stderr)
	}
	if got, want := ioBytes(res, "write"), int64(2*2*8<<20); got != want {
		t.Errorf("write io_bytes = %d, want %d", got, want)
	}
	if n := inFlight(stderr); n < 4 {
		t.Errorf("at most %d requests in flight at iodepth 8; want ≥ 4", n)
	}
	var onDisk int64
	for n := range 2 {
		for i := range 2 {
			fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("w.%d.%d", n, i)))
			if err != nil {
				t.Fatal(err)
			}
			onDisk += fi.Size()
		}
	}
	if onDisk != ioBytes(res, "write") {
		t.Errorf("the share's files hold %d bytes; basin bench reported %d written", onDisk, ioBytes(res, "write"))
	}

	// Random reads on an encrypted share: the file is laid out, then read at iodepth 16.
	res, stderr, err = run("benchenc", "--name", "r", "--rw", "randread", "--bs", "4k", "--iodepth", "16", "--size", "4m", "--protection", "encrypt")
	if err != nil {
		t.Fatalf("encrypted read run: %v\n%s", err, stderr)
	}
	if got, want := ioBytes(res, "read"), int64(4<<20); got != want {
		t.Errorf("randread io_bytes = %d, want %d", got, want)
	}
	if n := inFlight(stderr); n < 8 {
		t.Errorf("at most %d requests in flight at iodepth 16; want ≥ 8", n)
	}
	if fi, err := os.Stat(filepath.Join(dir, "r.0.0")); err != nil || fi.Size() != 4<<20 {
		t.Errorf("laid-out file: %v %v; want 4 MiB", fi, err)
	}

	// Encryption asked for on a share that does not require it: refused, not faked.
	_, stderr, err = run("bench", "--name", "e", "--rw", "write", "--size", "1m", "--protection", "encrypt")
	if err == nil || !strings.Contains(stderr, "did not encrypt") {
		t.Errorf("encrypt on a plain share: %v\n%s", err, stderr)
	}
	// A wrong password is a clear error.
	ctx := context.Background()
	out, err := exec.CommandContext(ctx, basinBin, "bench", "--engine", "smb", "--url", fmt.Sprintf("smb://127.0.0.1:%d/bench", port),
		"--user", "root", "--password", "wrong", "--rw", "write", "--size", "1m").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "session setup") {
		t.Errorf("wrong password: %v %s", err, out)
	}
}
