package metrics

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSample is one sampling pass over n volumes with in-memory sources
// (NFS, traffic control, space, clients): the sampler's own cost (deriving, the
// ring, rollups in progress), without the DBus calls, netlink dumps and backend
// reads the real sources make. With state, each pass also saves the state file
// and appends to the ring's journal (in a temporary directory, on the disk
// TMPDIR names), reported as state-bytes and journal-bytes per pass.
func BenchmarkSample(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, state := range []bool{false, true} {
			name := fmt.Sprintf("volumes=%d", n)
			if state {
				name += "/state"
			}
			b.Run(name, func(b *testing.B) { benchmarkSample(b, n, state) })
		}
	}
}

func benchmarkSample(b *testing.B, n int, state bool) {
	clk := &clock{t: t0}
	g := newFakeGanesha(t0)
	vols := &fakeVolumes{}
	capa := fakeCapacity{}
	conns := fakeClients{}
	tc := &fakeQoS{}
	for i := range n {
		key := fmt.Sprintf("v%016x", i) // as long as a volume's storage key
		ep := netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})
		vols.vols = append(vols.vols, Volume{Key: key, Name: key, Network: "n", Endpoint: ep, ExportID: uint64(i + 1), LimitBytesPerSec: mib})
		capa[key] = [2]int64{1 << 30, 1 << 20}
		conns[ep] = 2
	}
	var dir string
	if state {
		dir = b.TempDir()
	}
	s := New(Options{Targets: vols, NFS: g, Capacity: capa, Clients: conns, QoS: tc, StateDir: dir, Now: clk.now})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i := range n {
			g.load(uint64(i+1), 100, 50, 10, 4096, time.Millisecond, time.Millisecond)
			tc.add(vols.vols[i].Name, 1<<20, 1<<19, 0, 3, 2*mib)
		}
		clk.advance(DefaultInterval)
		if err := s.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if state {
		st, err := os.Stat(filepath.Join(dir, stateFile))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size()), "state-bytes")
		b.ReportMetric(float64(len(s.ringBuf)), "journal-bytes/op")
	}
}
