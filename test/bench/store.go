package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/secret"
	"github.com/basin-nas/basin/internal/store/pgtest"
)

// The store section: what keeping the metadata in PostgreSQL costs against the
// embedded SQLite database, as a client sees it: volume create → READY, and a
// volume GET (authentication, one read transaction, rendering). A server on
// SQLite, one on PostgreSQL and a cluster of three on another PostgreSQL
// database run side by side, each node on a network of its own; the rounds
// rotate which goes first, so that machine noise hits all alike. The cluster's
// calls go to its three APIs in turn, and a volume may be placed on another
// node than the one called: its create is carried out there, the caller woken
// across nodes (LISTEN/NOTIFY).
const (
	storeBridgeSQLite = "bstore0"
	storeCIDRSQLite   = "10.99.233.0/24"
	storeBridgePG     = "bstore1"
	storeCIDRPG       = "10.99.234.0/24"
)

// storeClusterNodes is how many nodes the cluster column runs, node i on
// bridge bstore<2+i> and 10.99.<235+i>.0/24.
const storeClusterNodes = 3

// storeConfigs are the section's columns, in the markdown's order.
var storeConfigs = []string{"sqlite", "postgres", "postgres3"}

type storeResult struct {
	Date    string `json:"date"`
	Rounds  int    `json:"rounds"`
	Creates int    `json:"creates"` // volume creates per round and store
	Gets    int    `json:"gets"`    // GETs per round and store
	// Per store ("sqlite", "postgres", "postgres3": three nodes): each round's create→READY median and
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
	tempDir := func() string {
		dir, err := os.MkdirTemp("", "basin-bench-store-")
		if err != nil {
			fatalf("%v", err)
		}
		atExit(func() { os.RemoveAll(dir) })
		return dir
	}
	servers := map[string][]*client.Client{}
	for name, extra := range map[string][]string{
		"sqlite":   {"--network", "default=" + storeBridgeSQLite + "," + storeCIDRSQLite},
		"postgres": {"--network", "default=" + storeBridgePG + "," + storeCIDRPG, "--database", db},
	} {
		servers[name] = []*client.Client{serveBasin(basin, tempDir(), freeAddr(), append(slices.Clone(common), extra...)...)}
	}
	// The cluster: node 1 first (it makes the owner account, whose key every
	// node's client uses; --public-url names node 1, whose /token issues it).
	db3, err := pg.CreateDatabase()
	if err != nil {
		fatalf("store section: %v", err)
	}
	keyFile := filepath.Join(tempDir(), "cluster.key")
	key, err := secret.NewKey()
	if err != nil {
		fatalf("%v", err)
	}
	must(secret.WriteKeys(keyFile, [][]byte{key}))
	var first, ownerKey string
	for i := range storeClusterNodes {
		dir, addr := tempDir(), freeAddr()
		if i == 0 {
			first, ownerKey = "http://"+addr+"/", filepath.Join(dir, "owner-key.json")
		}
		startBasin(basin, dir, addr, append(slices.Clone(common), "--database", db3, "--secrets-key-file", keyFile, "--public-url", first,
			"--node-id", fmt.Sprintf("bench%d", i+1), "--network", fmt.Sprintf("default=bstore%d,10.99.%d.0/24", 2+i, 235+i))...)
		c, err := client.New("http://"+addr, ownerKey)
		if err != nil {
			fatalf("%v", err)
		}
		servers["postgres3"] = append(servers["postgres3"], c)
	}
	for _, cs := range servers {
		must(mutate(ctx, cs[0], "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 10000,
			"network": "projects/bench/global/networks/default"}))
	}
	res := storeResult{Date: time.Now().UTC().Format(time.RFC3339), Rounds: rounds, Creates: creates, Gets: gets,
		CreateP50: map[string][]float64{}, GetP50: map[string][]float64{}, GetP99: map[string][]float64{}}
	order := slices.Clone(storeConfigs)
	seq, turn := 0, 0
	for r := range rounds {
		for _, name := range order {
			cs := servers[name]
			next := func() *client.Client { turn++; return cs[turn%len(cs)] }
			var made []float64
			for range creates {
				seq++
				id := fmt.Sprintf("s%d", seq)
				c := next()
				made = append(made, timed(func() error { return mutate(ctx, c, "POST", loc+"/volumes?volumeId="+id, volBody(id)) }))
			}
			id := fmt.Sprintf("s%d", seq)
			var got []float64
			for range gets {
				var v client.Object
				c := next()
				got = append(got, timed(func() error { return c.Do(ctx, "GET", loc+"/volumes/"+id, nil, nil, &v) }))
			}
			res.CreateP50[name] = append(res.CreateP50[name], median(made))
			res.GetP50[name] = append(res.GetP50[name], median(got))
			res.GetP99[name] = append(res.GetP99[name], percentile(got, 0.99))
			log.Printf("store round %d, %s: create→READY p50 %.1f ms, GET p50 %.2f ms, p99 %.2f ms", r+1, name, median(made), median(got), percentile(got, 0.99))
		}
		order = append(order[1:], order[0])
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
	fmt.Fprintf(&b, "Measured %s on the same machine: a server on SQLite, one on PostgreSQL and three nodes on another PostgreSQL database, side by side, "+
		"%d rounds rotating which goes first; per round and column %d volume creates (4 GiB, NFSv3) and %d GETs of a volume, one at a time "+
		"(to the three nodes' APIs in turn). Medians of the rounds' values.\n\n", r.Date, r.Rounds, r.Creates, r.Gets)
	b.WriteString("| what | SQLite (embedded) | PostgreSQL 15, 1 node | PostgreSQL 15, 3 nodes | PostgreSQL 1 node / SQLite | 3 nodes / 1 node |\n|---|---|---|---|---|---|\n")
	row := func(what string, m map[string][]float64, unit string) {
		s, p, p3 := median(m["sqlite"]), median(m["postgres"]), median(m["postgres3"])
		fmt.Fprintf(&b, "| %s | %.2f %s | %.2f %s | %.2f %s | %.2f | %.2f |\n", what, s, unit, p, unit, p3, unit, p/s, p3/p)
	}
	row("volume create → READY, p50", r.CreateP50, "ms")
	row("volume GET, p50", r.GetP50, "ms")
	row("volume GET, p99", r.GetP99, "ms")
	return b.String()
}
