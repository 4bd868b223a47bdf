package nfs

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

const testBusConf = `<busconfig><type>session</type><auth>EXTERNAL</auth>
  <listen>unix:path=%s</listen>
  <policy context="default"><allow user="*"/><allow own="*"/><allow send_type="method_call"/>
    <allow send_type="signal"/><allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/><allow receive_type="method_call"/>
    <allow receive_type="method_return"/><allow receive_type="error"/><allow receive_type="signal"/></policy>
</busconfig>
`

// testBus runs a private dbus-daemon; restart kills it and starts another on the
// same socket.
type testBus struct {
	t    *testing.T
	dir  string
	cmd  *exec.Cmd
	addr string
}

func startTestBus(t *testing.T) *testBus {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("no dbus-daemon")
	}
	dir := t.TempDir()
	b := &testBus{t: t, dir: dir, addr: "unix:path=" + filepath.Join(dir, "bus.sock")}
	if err := os.WriteFile(filepath.Join(dir, "bus.conf"), []byte(fmt.Sprintf(testBusConf, filepath.Join(dir, "bus.sock"))), 0o600); err != nil {
		t.Fatal(err)
	}
	b.start()
	t.Cleanup(b.kill)
	return b
}

func (b *testBus) start() {
	b.t.Helper()
	b.cmd = exec.Command("dbus-daemon", "--config-file="+filepath.Join(b.dir, "bus.conf"), "--nofork", "--nopidfile")
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	for range 200 {
		if c, err := net.Dial("unix", filepath.Join(b.dir, "bus.sock")); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.t.Fatal("dbus-daemon did not start")
}

func (b *testBus) kill() {
	if b.cmd != nil {
		b.cmd.Process.Kill()
		b.cmd.Wait()
		b.cmd = nil
	}
}

// fakeGanesha answers Ganesha's export manager calls over a bus, keeping exports
// by id and the bus names of its callers.
type fakeGanesha struct {
	mu      sync.Mutex
	exports map[uint16]string
	senders []string
	conn    *dbus.Conn
}

type showExportsRow struct {
	ID     uint16
	Path   string
	V3, V4 bool
	Time   struct{ Sec, Nsec uint64 }
}

func (g *fakeGanesha) note(s dbus.Sender) {
	g.mu.Lock()
	g.senders = append(g.senders, string(s))
	g.mu.Unlock()
}

func (g *fakeGanesha) ShowExports(s dbus.Sender) (struct{ Sec, Nsec uint64 }, []showExportsRow, *dbus.Error) {
	g.note(s)
	g.mu.Lock()
	defer g.mu.Unlock()
	rows := []showExportsRow{{ID: 0, Path: "/"}}
	for id, p := range g.exports {
		rows = append(rows, showExportsRow{ID: id, Path: p, V3: true, V4: true})
	}
	return struct{ Sec, Nsec uint64 }{1, 2}, rows, nil
}

func (g *fakeGanesha) AddExport(s dbus.Sender, file, sel string) (string, *dbus.Error) {
	g.note(s)
	var id uint16
	fmt.Sscanf(sel, "EXPORT(Export_Id=%d)", &id)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.exports[id]; ok {
		return "", dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"Selected entries in " + file + " already active!!!"})
	}
	g.exports[id] = filepath.Base(file)
	return "1 exports added", nil
}

func (g *fakeGanesha) UpdateExport(s dbus.Sender, file, sel string) (string, *dbus.Error) {
	g.note(s)
	return "1 exports updated", nil
}

func (g *fakeGanesha) RemoveExport(s dbus.Sender, id uint16) *dbus.Error {
	g.note(s)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.exports[id]; !ok {
		return dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"Export with id " + fmt.Sprint(id) + " not found"})
	}
	delete(g.exports, id)
	return nil
}

func (g *fakeGanesha) DisplayExport(s dbus.Sender, id uint16) (uint16, *dbus.Error) {
	g.note(s)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.exports[id]; !ok {
		return 0, dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"Export with id " + fmt.Sprint(id) + " not found"})
	}
	return id, nil
}

// serve puts the fake on the bus as org.ganesha.nfsd.
func (g *fakeGanesha) serve(t *testing.T, addr string) {
	t.Helper()
	conn, err := dbus.Dial(addr)
	if err == nil {
		err = conn.Auth(nil)
	}
	if err == nil {
		err = conn.Hello()
	}
	if err == nil {
		err = conn.Export(g, exportMgr, exportIface)
	}
	if err == nil {
		_, err = conn.RequestName(ganeshaName, dbus.NameFlagDoNotQueue)
	}
	if err != nil {
		t.Fatal(err)
	}
	g.conn = conn
	t.Cleanup(func() { conn.Close() })
}

func (g *fakeGanesha) callers() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Compact(slices.Clone(g.senders))
}

// DBus makes all its calls on one connection, lists exports in one call, and
// after the bus daemon restarts it dials again without failing a call.
func TestDBusKeepsOneConnection(t *testing.T) {
	ctx := context.Background()
	bus := startTestBus(t)
	g := &fakeGanesha{exports: map[uint16]string{}}
	g.serve(t, bus.addr)
	d := &DBus{Address: bus.addr}
	t.Cleanup(func() { d.Close() })

	for id := uint64(1); id <= 20; id++ {
		if err := d.AddExport(ctx, fmt.Sprintf("/state/exports/%d.conf", id), id); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.AddExport(ctx, "/state/exports/3.conf", 3); err != nil {
		t.Fatalf("adding a loaded export updates it: %v", err)
	}
	if err := d.RemoveExport(ctx, 20); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveExport(ctx, 20); err != nil {
		t.Fatalf("removing an absent export: %v", err)
	}
	if ok, err := d.HasExport(ctx, 7); err != nil || !ok {
		t.Fatalf("HasExport(7) = %v, %v", ok, err)
	}
	if ok, err := d.HasExport(ctx, 20); err != nil || ok {
		t.Fatalf("HasExport(20) = %v, %v", ok, err)
	}
	list, err := d.ShowExports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 19 || !slices.Contains(list, ExportInfo{ID: 7, Path: "7.conf"}) {
		t.Fatalf("ShowExports = %v", list)
	}
	if c := g.callers(); len(c) != 1 {
		t.Fatalf("calls came from %d connections %v, want 1", len(c), c)
	}

	// The bus daemon restarts (and Ganesha with it): the old connection is dead.
	bus.kill()
	bus.start()
	g = &fakeGanesha{exports: map[uint16]string{7: "7.conf"}}
	g.serve(t, bus.addr)
	if err := d.Ping(ctx); err != nil {
		t.Fatalf("first call after a bus restart: %v", err)
	}
	if ok, err := d.HasExport(ctx, 7); err != nil || !ok {
		t.Fatalf("HasExport(7) after a bus restart = %v, %v", ok, err)
	}
	if c := g.callers(); len(c) != 1 {
		t.Fatalf("calls after the restart came from %v, want one connection", c)
	}

	// Nobody answers: an error, not a hang, and the next call works again.
	bus.kill()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := d.Ping(cctx); err == nil {
		t.Fatal("ping without a bus succeeded")
	}
}

func TestParseShowExports(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []any
		want []ExportInfo
		bad  bool
	}{
		{"empty", []any{[]any{uint64(1), uint64(2)}, [][]any{}}, []ExportInfo{}, false},
		{"rows", []any{nil, [][]any{{uint16(0), "/"}, {uint16(7), "/v7", true}}}, []ExportInfo{{7, "/v7"}}, false},
		{"any rows", []any{nil, []any{[]any{uint16(9), "/v9"}}}, []ExportInfo{{9, "/v9"}}, false},
		{"short", []any{nil}, nil, true},
		{"wrong id type", []any{nil, [][]any{{uint32(7), "/v7"}}}, nil, true},
		{"short row", []any{nil, [][]any{{uint16(7)}}}, nil, true},
		{"not a list", []any{nil, "x"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseShowExports(tc.body)
			if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v (error %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}
