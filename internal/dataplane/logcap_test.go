package dataplane

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
