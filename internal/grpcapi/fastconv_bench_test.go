package grpcapi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/netapppb"
)

// A volume as a GetVolume answers it: the fast path against the JSON way.
func BenchmarkToProtoVolume(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "api", "testdata", "golden", "volume.json"))
	if err != nil {
		b.Fatal(err)
	}
	var v apiv1.Volume
	if _, err := apiv1.Decode(data, &v); err != nil {
		b.Fatal(err)
	}
	for name, conv := range map[string]func(any, *netapppb.Volume) error{
		"fast": func(w any, m *netapppb.Volume) error { return toProto(w, m) },
		"json": func(w any, m *netapppb.Volume) error { return toProtoJSON(w, m) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := conv(v, &netapppb.Volume{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
