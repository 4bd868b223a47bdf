package fake

import (
	"context"
	"net/netip"
	"testing"

	"github.com/basin-nas/basin/internal/nfs"
)

// View serves what Export loaded on that network, and nothing after Unexport.
func TestView(t *testing.T) {
	ctx := context.Background()
	d := New()
	a := netip.MustParseAddr("10.99.0.10")
	ex := nfs.Export{ID: 1, Path: "/m/v1", Pseudo: "/v1", Protocols: []int{3}}
	if err := d.Export(ctx, "n1", a, ex); err != nil {
		t.Fatal(err)
	}
	v, _ := d.View(ctx, "n1")
	if !v.Exported(a, ex) || !v.HasAddr(a) || !v.Exported(netip.Addr{}, ex) {
		t.Fatal("loaded export not served")
	}
	if other, _ := d.View(ctx, "n2"); other.Exported(netip.Addr{}, ex) || other.HasAddr(a) {
		t.Fatal("served on another network")
	}
	d.Unexport(ctx, "n1", a, 1)
	if v, _ := d.View(ctx, "n1"); v.Exported(netip.Addr{}, ex) || v.HasAddr(a) {
		t.Fatal("served after Unexport")
	}
}
