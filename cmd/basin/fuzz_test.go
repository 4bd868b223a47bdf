package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryFuzzTargetRuns: each FuzzXxx in the tree is run by `make fuzz` (and so
// by `make test` and CI), in its own package: a Target:./package line of the
// Makefile's FUZZ_TARGETS.
func TestEveryFuzzTargetRuns(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	fuzzRE := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := 0
	err = filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != "../.." {
			return filepath.SkipDir // .git, .venv
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(p, "../../")))
		for _, m := range fuzzRE.FindAllStringSubmatch(string(src), -1) {
			found++
			want := m[1] + ":" + pkg
			if !regexp.MustCompile(`(?m)^\t` + regexp.QuoteMeta(want) + `( \\)?$`).Match(makefile) {
				t.Errorf("%s (%s) is not run by make fuzz: want a line %q in FUZZ_TARGETS", m[1], p, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no fuzz targets found")
	}
}
