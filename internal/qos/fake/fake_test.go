package fake

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/basin-nas/basin/internal/qos"
)

func TestFakeRecordsInPlaceChange(t *testing.T) {
	ctx := context.Background()
	d := New()
	l := qos.Link{Netns: "basin-br0", Dev: "eth0"}
	tree := qos.Tree{Classes: []qos.Class{
		{Key: "project/p", Rate: 100, Ceil: 100},
		{Key: "volume/v", Parent: "project/p", Rate: 50, Ceil: 100, Addrs: []netip.Addr{netip.MustParseAddr("10.99.0.5")}},
	}}
	if err := d.Apply(ctx, l, tree); err != nil {
		t.Fatal(err)
	}
	tree.Classes[1].Ceil = 80
	if err := d.Apply(ctx, l, tree); err != nil {
		t.Fatal(err)
	}
	ap := d.Applies()
	if len(ap) != 2 || len(ap[0].Changes) != 3 {
		t.Fatalf("applies = %+v", ap)
	}
	if c := ap[1].Changes; len(c) != 1 || c[0].Op != qos.OpChangeClass || c[0].Key != "volume/v" {
		t.Fatalf("resize changes = %v, want one in-place change", c)
	}
	if got, _ := d.Read(ctx, l); !got.Equal(tree) {
		t.Fatalf("Read = %+v", got)
	}
	if cn, _ := d.Counters(ctx, l); len(cn) != 3 {
		t.Errorf("Counters = %v, want the default class and two classes", cn)
	}
	boom := errors.New("boom")
	d.FailOn("Apply", boom)
	if err := d.Apply(ctx, l, qos.Tree{}); !errors.Is(err, boom) {
		t.Fatalf("Apply with injected error = %v", err)
	}
	d.FailOn("Apply", nil)
	if err := d.Apply(ctx, l, qos.Tree{Classes: []qos.Class{{Key: "x", Rate: 2, Ceil: 1}}}); !errors.Is(err, qos.ErrInvalid) {
		t.Fatalf("invalid tree accepted: %v", err)
	}
	if err := d.Remove(ctx, l); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.Read(ctx, l); len(got.Classes) != 0 || len(d.Links()) != 0 {
		t.Fatalf("after Remove: %+v, links %v", got, d.Links())
	}
}
