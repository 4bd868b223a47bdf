package metrics

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkSample is one sampling pass over n volumes with in-memory sources
// (NFS, traffic control, space, clients): the sampler's own cost (deriving, the
// ring, rollups in progress), without the DBus calls, netlink dumps and backend
// reads the real sources make.
func BenchmarkSample(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
			clk := &clock{t: t0}
			g := newFakeGanesha(t0)
			vols := &fakeVolumes{}
			capa := fakeCapacity{}
			conns := fakeClients{}
			tc := &fakeQoS{}
			for i := range n {
				key := fmt.Sprintf("k%d", i)
				ep := netip.AddrFrom4([4]byte{10, 99, byte(i >> 8), byte(i)})
				vols.vols = append(vols.vols, Volume{Key: key, Name: key, Network: "n", Endpoint: ep, ExportID: uint64(i + 1), LimitBytesPerSec: mib})
				capa[key] = [2]int64{1 << 30, 1 << 20}
				conns[ep] = 2
			}
			s := New(Options{Targets: vols, NFS: g, Capacity: capa, Clients: conns, QoS: tc, Now: clk.now})
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
		})
	}
}
