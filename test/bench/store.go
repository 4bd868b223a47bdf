package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/store/pgtest"
)

// The store section: what keeping the metadata in PostgreSQL costs against the
// embedded SQLite database, as a client sees it: volume create → READY, and a
// volume GET (authentication, one read transaction, rendering). Two servers
// run side by side, one per store, each on a network of its own; the rounds
// alternate which goes first, so that machine noise hits both alike.
const (
	storeBridgeSQLite = "bstore0"
	storeCIDRSQLite   = "10.99.233.0/24"
	storeBridgePG     = "bstore1"
	storeCIDRPG       = "10.99.234.0/24"
)

type storeResult struct {
	Date    string `json:"date"`
	Rounds  int    `json:"rounds"`
	Creates int    `json:"creates"` // volume creates per round and store
	Gets    int    `json:"gets"`    // GETs per round and store
	// Per store ("sqlite", "postgres"): each round's create→READY median and
	// GET median and 99th percentile, in ms.
	CreateP50 map[string][]float64 `json:"createP50Ms"`
	GetP50    map[string][]float64 `json:"getP50Ms"`
	GetP99    map[string][]float64 `json:"getP99Ms"`
}

func runStore(ctx context.Context, basin string, rounds, creates, gets int) storeResult {
	pg, err := pgtest.StartServer()
	if err != nil {
		fatalf("store section: %v", err)
	}
	atExit(pg.Stop)
	db, err := pg.CreateDatabase()
	if err != nil {
		fatalf("store section: %v", err)
	}
	common := []string{"--store-size", "8G", "--log-level", "warn", "--overcommit-ratio", "10000", "--thin-initial", "64M", "--qos=false", "--rate-limit", "0"}
	servers := map[string]*client.Client{}
	for name, extra := range map[string][]string{
		"sqlite":   {"--network", "default=" + storeBridgeSQLite + "," + storeCIDRSQLite},
		"postgres": {"--network", "default=" + storeBridgePG + "," + storeCIDRPG, "--database", db},
	} {
		dir, err := os.MkdirTemp("", "basin-bench-store-")
		if err != nil {
			fatalf("%v", err)
		}
		atExit(func() { os.RemoveAll(dir) })
		c := serveBasin(basin, dir, freeAddr(), append(slices.Clone(common), extra...)...)
		must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 10000,
			"network": "projects/bench/global/networks/default"}))
		servers[name] = c
	}
	res := storeResult{Date: time.Now().UTC().Format(time.RFC3339), Rounds: rounds, Creates: creates, Gets: gets,
		CreateP50: map[string][]float64{}, GetP50: map[string][]float64{}, GetP99: map[string][]float64{}}
	order := []string{"sqlite", "postgres"}
	seq := 0
	for r := range rounds {
		for _, name := range order {
			c := servers[name]
			var made []float64
			for range creates {
				seq++
				id := fmt.Sprintf("s%d", seq)
				made = append(made, timed(func() error { return mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, volBody(id)) }))
			}
			id := fmt.Sprintf("s%d", seq)
			var got []float64
			for range gets {
				var v client.Object
				got = append(got, timed(func() error { return c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v) }))
			}
			res.CreateP50[name] = append(res.CreateP50[name], median(made))
			res.GetP50[name] = append(res.GetP50[name], median(got))
			res.GetP99[name] = append(res.GetP99[name], percentile(got, 0.99))
			log.Printf("store round %d, %s: create→READY p50 %.1f ms, GET p50 %.2f ms, p99 %.2f ms", r+1, name, median(made), median(got), percentile(got, 0.99))
		}
		slices.Reverse(order)
	}
	return res
}

// percentile returns the q-quantile of v (nearest rank).
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func (r storeResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine: two servers side by side, one per store, %d rounds alternating which goes first; "+
		"per round and store %d volume creates (4 GiB, NFSv3) and %d GETs of a volume, one at a time. Medians of the rounds' values.\n\n",
		r.Date, r.Rounds, r.Creates, r.Gets)
	b.WriteString("| what | SQLite (embedded) | PostgreSQL 15 (same host, Unix socket) | PostgreSQL / SQLite |\n|---|---|---|---|\n")
	row := func(what string, m map[string][]float64, unit string) {
		s, p := median(m["sqlite"]), median(m["postgres"])
		fmt.Fprintf(&b, "| %s | %.2f %s | %.2f %s | %.2f |\n", what, s, unit, p, unit, p/s)
	}
	row("volume create → READY, p50", r.CreateP50, "ms")
	row("volume GET, p50", r.GetP50, "ms")
	row("volume GET, p99", r.GetP99, "ms")
	return b.String()
}
