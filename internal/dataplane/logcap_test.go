package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A capped log never holds more than its bound in each of its two files, keeps
// the newest lines whole, and never fails a write.
func TestCappedLogBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ganesha.log")
	const bound = 4096
	// What an earlier run left, already past the bound.
	if err := os.WriteFile(path, bytes.Repeat([]byte("old\n"), 2*bound), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := openCappedLog(path, bound)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for i := range 10_000 {
		last = fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i%200))
		if n, err := l.Write([]byte(last)); n != len(last) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
		for _, p := range []string{path, path + ".1"} {
			if st, err := os.Stat(p); err == nil && st.Size() > bound {
				t.Fatalf("after write %d, %s holds %d bytes, over %d", i, filepath.Base(p), st.Size(), bound)
			}
		}
	}
	cur, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(cur), last) || strings.Contains(string(cur), "old") {
		t.Fatalf("the log does not end with the last line: %q", cur[max(0, len(cur)-100):])
	}
	// One write larger than the bound keeps its end.
	big := bytes.Repeat([]byte("y"), 3*bound)
	big[len(big)-1] = 'z'
	if n, err := l.Write(big); n != len(big) || err != nil {
		t.Fatalf("big write: %d, %v", n, err)
	}
	if cur, _ := os.ReadFile(path); int64(len(cur)) != bound || cur[len(cur)-1] != 'z' {
		t.Fatalf("after a big write the log holds %d bytes ending %q", len(cur), cur[len(cur)-1:])
	}
	// Its directory gone (a sandbox removed under a running daemon): writes are
	// dropped, not failed.
	l.Close()
	l, err = openCappedLog(path, bound)
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	for range 3 {
		if n, err := l.Write([]byte("after\n")); n != 6 || err != nil {
			t.Fatalf("write into a removed directory: %d, %v", n, err)
		}
	}
	l.Close()
}

// A detached daemon's log, which the daemon writes itself, is rotated from
// outside once it passes its bound: its last bytes become <file>.1 and the file
// starts again empty, while the daemon's appends go on at its new end.
func TestRotateLogs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ganesha.log")
	daemon, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	const limit = 1000
	old := bytes.Repeat([]byte("a"), 900)
	daemon.Write(old)
	daemon.Write(bytes.Repeat([]byte("b"), 300)) // 1,200 bytes: over
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var warned []string
	go func() {
		defer close(done)
		rotateLogs(ctx, time.Millisecond, limit, func() []string { return []string{path, filepath.Join(dir, "absent.out")} },
			func(msg string, args ...any) { warned = append(warned, msg) })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the log was not rotated")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	rotated, err := os.ReadFile(path + ".1")
	if err != nil || len(rotated) != limit || !bytes.HasSuffix(rotated, bytes.Repeat([]byte("b"), 300)) {
		t.Fatalf("%s.1: %d bytes (%v), want the last %d", path, len(rotated), err, limit)
	}
	daemon.Write([]byte("after"))
	if got, _ := os.ReadFile(path); string(got) != "after" {
		t.Fatalf("the daemon's next write: file holds %q, want it at the start", got)
	}
	if len(warned) > 0 {
		t.Fatalf("warnings: %v", warned)
	}
}
