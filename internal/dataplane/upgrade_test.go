package dataplane

import (
	"os"
	"path/filepath"
	"testing"
)

// A Ganesha build is known by what its files hold, not by the files: the same
// build written again (a package upgrade reinstalls it) keeps its BuildID, a
// change in its program, library or VFS module gives another.
func TestGaneshaBuildID(t *testing.T) {
	write := func(prefix string, files map[string]string) Ganesha {
		for name, content := range files {
			p := filepath.Join(prefix, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return Ganesha{Prefix: prefix}
	}
	build := map[string]string{"bin/ganesha.nfsd": "program", "lib/libganesha_nfsd.so": "library", "lib/ganesha/libfsalvfs.so": "vfs"}
	a, err := write(t.TempDir(), build).BuildID()
	if err != nil {
		t.Fatal(err)
	}
	b, err := write(t.TempDir(), build).BuildID()
	if err != nil || a != b {
		t.Fatalf("the same build in two places: %s, %s (%v)", a, b, err)
	}
	for name := range build {
		changed := map[string]string{}
		for k, v := range build {
			changed[k] = v
		}
		changed[name] += "!"
		if c, err := write(t.TempDir(), changed).BuildID(); err != nil || c == a {
			t.Errorf("%s changed, BuildID the same (%v)", name, err)
		}
	}
	if _, err := (Ganesha{Prefix: t.TempDir()}).BuildID(); err == nil {
		t.Error("a prefix without a program has a BuildID")
	}
}
