package e2e

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// TestSMBHeldHandles: an SMB client holds a file open on one
// volume while another SMB volume of the same AD connection is created and
// then deleted (each with an endpoint address of its own, which the
// instance's smbd must start and stop listening on); the client's session and
// its open handle go on working throughout, and both volumes are served.
func TestSMBHeldHandles(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first := l.volume("held", map[string]any{"unixPermissions": "0777"})
	alice := l.user("alice")
	fs := l.mount(ctx, first, alice, first.Share)
	f, err := fs.OpenFile("held.txt", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []byte("before;")
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		more := []byte(when + ";")
		if _, err := f.WriteAt(more, int64(len(want))); err != nil {
			t.Fatalf("%s: the handle held on %s no longer writes: %v", when, first.Share, err)
		}
		want = append(want, more...)
		got := make([]byte, len(want)+16)
		n, err := f.ReadAt(got, 0)
		if err != nil && err != io.EOF {
			t.Fatalf("%s: the handle held on %s no longer reads: %v", when, first.Share, err)
		}
		if string(got[:n]) != string(want) {
			t.Fatalf("%s: read %q through the held handle, want %q", when, got[:n], want)
		}
	}
	served := func(sh smbShare) {
		t.Helper()
		if o, err := l.smbclient(ctx, sh, alice, "-m", "SMB3", "-c", "ls"); err != nil {
			t.Fatalf("%s not served: %v\n%s", sh.Share, err, o)
		}
	}

	second := l.volume("other", map[string]any{"unixPermissions": "0777"})
	if second.Endpoint == first.Endpoint {
		t.Fatalf("both volumes at %s: the test needs a second address", first.Endpoint)
	}
	served(second)
	check("after another volume was created")
	mutate(t, l.c, "DELETE", loc+"/volumes/other", nil)
	check("after the other volume was deleted")
	served(first)
}
