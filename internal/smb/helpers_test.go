package smb

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// wantField asserts err is a *FieldError naming field (and wraps ErrInvalid).
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a *FieldError naming %s", err, field)
	}
	if fe.Field != field {
		t.Fatalf("err names %q (%v), want %q", fe.Field, err, field)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v does not wrap ErrInvalid", err)
	}
	if !strings.HasPrefix(err.Error(), field+": ") {
		t.Fatalf("message %q does not start with the field", err)
	}
}
