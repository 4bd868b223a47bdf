package smb

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package a driver: no Basin package but runner, and of the
// outside world only miekg/dns (docs/architecture.md, "Import rules": drivers never
// import model, store or api).
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			switch {
			case !strings.Contains(strings.Split(p, "/")[0], "."): // standard library
			case p == "github.com/miekg/dns":
			case p == "github.com/basin-nas/basin/internal/runner":
			default:
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
