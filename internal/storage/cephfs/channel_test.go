package cephfs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A batch's answer that is missing or null (a helper thread that died) is a
// failure, never a success: a fence taken as done when nothing was
// blocklisted would let another node serve beside a live one.
func TestAnswerErr(t *testing.T) {
	var got struct {
		Answers []*answer `json:"answers"`
	}
	if err := json.Unmarshal([]byte(`{"answers": [{"rc": 0, "out": "ok"}, null, {"out": "no rc"}, {"rc": -2, "err": "no such entry"}]}`), &got); err != nil {
		t.Fatal(err)
	}
	cmd := map[string]any{"prefix": "osd blocklist"}
	if err := got.Answers[0].err(cmd); err != nil {
		t.Errorf("rc 0: %v", err)
	}
	for i := 1; i <= 2; i++ {
		if errno(got.Answers[i].err(cmd)) != syscall.EIO {
			t.Errorf("answer %d (%+v): %v, want EIO", i, got.Answers[i], got.Answers[i].err(cmd))
		}
	}
	if errno(got.Answers[3].err(cmd)) != syscall.ENOENT {
		t.Errorf("rc -2: %v, want ENOENT", got.Answers[3].err(cmd))
	}
}

// fakeRados stands in for Ceph's Python bindings: a mon command's "addr"
// says how it goes.
const fakeRados = `
class Error(Exception):
    def __init__(self, msg, errno=None):
        super().__init__(msg)
        self.errno = errno

class Rados:
    def __init__(self, conffile=None, name=None, conf=None): pass
    def connect(self, timeout=0): pass
    def mon_command(self, cmd, inbuf, timeout=0):
        import json
        addr = json.loads(cmd).get("addr", "")
        if addr.startswith("boom"):
            raise TypeError("not a rados error")
        if addr.startswith("noerrno"):
            raise Error("refused, errno unknown")
        if addr.startswith("dup"):
            return -17, b"", "exists"
        return 0, addr.encode(), ""
`

// mgr.py's batch, through the channel: each command answered in its place,
// a command whose binding raised anything at all a failure (never a
// success), and the helper still serving after.
func TestChannelBatch(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skip("no " + python)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rados.py"), []byte(fakeRados), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &channel{conf: "/nonexistent/ceph.conf", id: "basin", keyring: "/nonexistent/keyring", wrap: []string{"/usr/bin/env", "PYTHONPATH=" + dir}}
	defer c.close()
	ctx := context.Background()
	cmds := []map[string]any{{"prefix": "osd blocklist", "addr": "10.0.0.1"}, {"prefix": "osd blocklist", "addr": "boom"},
		{"prefix": "osd blocklist", "addr": "dup"}, {"prefix": "osd blocklist", "addr": "noerrno"}}
	errs, err := c.callAll(ctx, "mon", cmds)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errno(errs[1]) != syscall.EIO || errno(errs[2]) != syscall.EEXIST || errno(errs[3]) != syscall.EIO {
		t.Fatalf("batch errors %v; want nil, EIO, EEXIST, EIO", errs)
	}
	if _, err := c.call(ctx, "mon", map[string]any{"prefix": "osd blocklist", "addr": "noerrno"}); errno(err) != syscall.EIO {
		t.Fatalf("a refusal without an errno: %v, want EIO", err)
	}
	if out, err := c.call(ctx, "mon", map[string]any{"prefix": "osd blocklist", "addr": "10.0.0.2"}); err != nil || string(out) != "10.0.0.2" {
		t.Fatalf("a call after them: %q, %v", out, err)
	}
}
