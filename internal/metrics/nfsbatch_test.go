package metrics

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/nfs"
)

// batchGanesha is a fakeGanesha that also reads in batches, as
// dataplane.Manager does; it records the reads it is asked for. A network in
// failing fails its batched reads; an export in missing is left out of them.
type batchGanesha struct {
	*fakeGanesha
	batches map[string][][]uint64 // by network, the ids of each batched read
	single  []uint64              // export ids read one by one
	failing map[string]bool
	missing map[uint64]bool
}

func (b *batchGanesha) ExportIO(ctx context.Context, network string, id uint64) (nfs.ExportIO, error) {
	b.single = append(b.single, id)
	return b.fakeGanesha.ExportIO(ctx, network, id)
}

func (b *batchGanesha) ExportsIO(_ context.Context, network string, ids []uint64) (map[uint64]nfs.ExportIO, error) {
	b.batches[network] = append(b.batches[network], slices.Clone(ids))
	if b.failing[network] {
		return nil, errors.New("GetNFSIO: unknown method")
	}
	out := map[uint64]nfs.ExportIO{}
	for _, id := range ids {
		if !b.missing[id] {
			out[id] = *b.export(id)
		}
	}
	return out, nil
}

// A batched NFS source is read once per network and interval, with the export
// ids of that network's volumes, and gives the same metrics as reading export
// by export; a network whose batched read fails is read export by export; an
// export missing from a batch is unknown for the interval.
func TestNFSBatches(t *testing.T) {
	ep := netip.MustParseAddr("10.99.0.10")
	vols := &fakeVolumes{vols: []Volume{
		{Key: "a", Network: "n", Endpoint: ep, ExportID: 7},
		{Key: "b", Network: "n", Endpoint: ep, ExportID: 8},
		{Key: "c", Network: "m", Endpoint: ep, ExportID: 9},
		{Key: "d", Network: "m"}, // not exported: not asked about
	}}
	g := newFakeGanesha(t0.Add(-time.Hour))
	batch := &batchGanesha{fakeGanesha: g, batches: map[string][][]uint64{}, failing: map[string]bool{}, missing: map[uint64]bool{}}
	clk := &clock{t: t0}
	single := New(Options{Targets: vols, NFS: g, Now: clk.now})
	batched := New(Options{Targets: vols, NFS: batch, Now: clk.now})
	tick := func() {
		t.Helper()
		for i, id := range []uint64{7, 8, 9} {
			g.load(id, uint64(100*(i+1)), 10, 5, 4096, time.Millisecond, 2*time.Millisecond)
		}
		clk.advance(DefaultInterval)
		for _, s := range []*Sampler{single, batched} {
			if err := s.Sample(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	readIops := func(s *Sampler, key string) []float64 {
		t.Helper()
		series, err := s.Query(context.Background(), model.MetricsQuery{Series: key, Metrics: []string{"readIops"},
			Start: t0, End: clk.t, Step: DefaultInterval})
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, p := range series[0].Points {
			out = append(out, p.Value)
		}
		return out
	}

	for range 3 {
		tick()
	}
	want := map[string][][]uint64{"n": {{7, 8}, {7, 8}, {7, 8}}, "m": {{9}, {9}, {9}}}
	if len(batch.batches) != 2 || !slices.EqualFunc(batch.batches["n"], want["n"], slices.Equal) ||
		!slices.EqualFunc(batch.batches["m"], want["m"], slices.Equal) {
		t.Fatalf("batched reads %v, want %v", batch.batches, want)
	}
	if len(batch.single) != 0 {
		t.Fatalf("exports read one by one beside the batches: %v", batch.single)
	}
	for _, key := range []string{"a", "b", "c"} {
		a, b := readIops(single, key), readIops(batched, key)
		if len(b) != 2 || !slices.Equal(a, b) {
			t.Fatalf("volume %s: read IOPS %v batched, %v export by export", key, b, a)
		}
	}

	// Network m's batched read fails: its export is read on its own, and its
	// metrics go on.
	batch.failing["m"] = true
	tick()
	if !slices.Equal(batch.single, []uint64{9}) {
		t.Fatalf("after a failed batch, exports read one by one: %v, want [9]", batch.single)
	}
	if a, b := readIops(single, "c"), readIops(batched, "c"); len(b) != 3 || !slices.Equal(a, b) {
		t.Fatalf("volume c after the fallback: %v batched, %v export by export", b, a)
	}

	// Export 8 is missing from a batch (Ganesha no longer has it): unknown.
	batch.missing[8] = true
	tick()
	// (Its volume has no other source here, so the interval has no point.)
	if got := readIops(batched, "b"); len(got) != 3 || slices.ContainsFunc(got, math.IsNaN) {
		t.Fatalf("read IOPS of an export missing from the batch: %v, want no value for the last interval", got)
	}
	if got := readIops(batched, "a"); len(got) != 4 || got[3] != 10 {
		t.Fatalf("read IOPS of its neighbour: %v, want 10 last", got)
	}
}
