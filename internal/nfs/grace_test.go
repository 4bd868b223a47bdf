package nfs

import (
	"context"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
)

// graceAdmin is Ganesha's admin object as far as get_grace goes.
type graceAdmin struct {
	mu    sync.Mutex
	grace bool
}

func (a *graceAdmin) getGrace() (bool, bool, string, *dbus.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.grace, true, "get grace success", nil
}

func (a *graceAdmin) set(in bool) {
	a.mu.Lock()
	a.grace = in
	a.mu.Unlock()
}

// InGrace asks Ganesha's admin object on the bus and reads its answer, both
// ways.
func TestInGrace(t *testing.T) {
	ctx := context.Background()
	bus := startTestBus(t)
	g := &fakeGanesha{exports: map[uint16]string{}}
	g.serve(t, bus.addr)
	a := &graceAdmin{grace: true}
	if err := g.conn.ExportMethodTable(map[string]any{"get_grace": a.getGrace}, adminPath, adminIface); err != nil {
		t.Fatal(err)
	}
	d := &DBus{Address: bus.addr}
	t.Cleanup(func() { d.Close() })
	if in, err := d.InGrace(ctx); err != nil || !in {
		t.Fatalf("InGrace = %v, %v; want true", in, err)
	}
	a.set(false)
	if in, err := d.InGrace(ctx); err != nil || in {
		t.Fatalf("InGrace = %v, %v; want false", in, err)
	}
}

func TestParseGrace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     []any
		want, ok bool
	}{
		{"in grace", []any{true, true, "get grace success"}, true, true},
		{"out of grace", []any{false, true, "get grace success"}, false, true},
		{"refused", []any{false, "Get grace takes no arguments."}, false, false},
		{"failed status", []any{true, false, "no"}, false, false},
		{"not a bool", []any{"yes", true, "x"}, false, false},
		{"short", []any{true}, false, false},
	} {
		got, err := parseGrace(tc.body)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("%s: parseGrace = %v, %v; want %v (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
	}
}
