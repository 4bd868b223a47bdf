package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// benchServer is an API over a store holding one pool and n READY volumes, with no
// controller (operations stay pending).
func benchServer(b *testing.B, n int) *Server {
	b.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "basin.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	nets := []model.Network{{Name: "default", Prefix: netip.MustParsePrefix("10.99.0.0/16")}}
	s := New(Options{Store: st, Locations: []string{"us-east4"}, Networks: nets, RateLimit: -1, SyncWait: -1})
	first, _ := model.DefaultEndpoints(nets[0].Prefix)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err = st.Update(context.Background(), func(tx store.Tx) error {
		pl := &model.Pool{Meta: model.Meta{Project: "p1", Location: "us-east4", ID: "pool1", CreateTime: now, State: model.StateReady},
			ServiceLevel: model.LevelPremium, CapacityGib: 1 << 20, Network: "projects/p1/global/networks/default", QosType: model.QosAuto}
		if err := store.PutPool(tx, pl); err != nil {
			return err
		}
		ep := first
		for i := range n {
			v := &model.Volume{Meta: model.Meta{Project: "p1", Location: "us-east4", ID: fmt.Sprintf("vol%05d", i), CreateTime: now, State: model.StateReady},
				ShareName: fmt.Sprintf("share%05d", i), StoragePool: "pool1", CapacityGib: 100, Protocols: []model.Protocol{model.ProtocolNFSv3},
				UnixPermissions: "0770", Network: "default", Endpoint: ep.String(), Key: fmt.Sprintf("k%05d", i)}
			ep = ep.Next()
			if err := store.PutVolume(tx, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func serve(b *testing.B, s *Server, method, path, body string) []byte {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		b.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// BenchmarkListVolumes lists every volume, page by page (the default page size):
// the cost per page does not grow with the number of volumes.
func BenchmarkListVolumes(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
			s := benchServer(b, n)
			b.ResetTimer()
			for b.Loop() {
				tok, got := "", 0
				for {
					var page struct {
						Volumes       []json.RawMessage `json:"volumes"`
						NextPageToken string            `json:"nextPageToken"`
					}
					json.Unmarshal(serve(b, s, "GET", loc+"/volumes?pageToken="+tok, ""), &page)
					got += len(page.Volumes)
					if tok = page.NextPageToken; tok == "" {
						break
					}
				}
				if got != n {
					b.Fatalf("listed %d volumes, want %d", got, n)
				}
			}
		})
	}
}

// BenchmarkCreateVolume records volume creates among n volumes of the same pool and
// network: the checks (shareName, pool capacity, free endpoint) read indexes.
func BenchmarkCreateVolume(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
			s := benchServer(b, n)
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				body := fmt.Sprintf(`{"shareName":"new%d","storagePool":"pool1","capacityGib":"10","protocols":["NFSV3"]}`, i)
				serve(b, s, "POST", fmt.Sprintf("%s/volumes?volumeId=new%d", loc, i), body)
			}
		})
	}
}
