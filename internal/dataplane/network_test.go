package dataplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The patch set Basin requires is the one scripts/ganesha/build.sh applies and
// records.
func TestGaneshaPatchSetMatchesTheBuild(t *testing.T) {
	script, err := os.ReadFile("../../scripts/ganesha/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "\nPATCHSET="+GaneshaPatchSet+"\n") {
		t.Fatalf("scripts/ganesha/build.sh does not build patch set %s", GaneshaPatchSet)
	}
}

// A Ganesha without Basin's patch set is refused, with the way to get it.
func TestGaneshaCheck(t *testing.T) {
	dir := t.TempDir()
	g := Ganesha{Prefix: dir}
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "scripts/setup.sh") {
		t.Fatalf("no build: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(g.Binary(), []byte("#!/bin/true\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "BASIN-PATCHES"), []byte("basin-ganesha-4.3-0\n"), 0o644)
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "basin-ganesha-4.3-0") {
		t.Fatalf("an older patch set: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "BASIN-PATCHES"), []byte(GaneshaPatchSet+"\n"), 0o644)
	if err := g.Check(); err != nil {
		t.Fatalf("the current patch set: %v", err)
	}
}
