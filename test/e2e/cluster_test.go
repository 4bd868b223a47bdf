package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/internal/store/pgtest"
	"github.com/basin-nas/basin/test/clienthost"
)

// clusterVolumes is how many volumes TestThreeNodes creates (the 300).
const clusterVolumes = 300

// cluster is three basin serve processes on this host, each with its own data
// directory, node ID, bridge and subnet (network "default" on each: a segment of
// its own), one PostgreSQL database and one cluster key; --public-url names the
// first, whose /token issues the tokens every node accepts.
type cluster struct {
	nodes   []*server
	ids     []string
	clients []*client.Client
}

func startCluster(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	db := pgtest.Start(t).NewDatabase(t)
	keyFile := clusterKeyFile(t)
	cl := &cluster{}
	for i := range n {
		cl.nodes = append(cl.nodes, newServer(t))
		cl.ids = append(cl.ids, fmt.Sprintf("node%d", i+1))
	}
	public := "http://" + cl.nodes[0].addr + "/"
	for i, s := range cl.nodes {
		s.start(append([]string{"--store", db, "--secrets-key-file", keyFile, "--node-id", cl.ids[i], "--public-url", public,
			"--rate-limit", "0"}, extra...)...)
	}
	// The owner's key file is written once, by the node that made the account;
	// its tokens (from the first node's /token) are good on every node.
	for _, s := range cl.nodes {
		c, err := client.New("http://"+s.addr, cl.nodes[0].ownerKey())
		if err != nil {
			t.Fatal(err)
		}
		cl.clients = append(cl.clients, c)
	}
	return cl
}

// Three nodes, one store: 300 volumes created through the three APIs spread
// over the nodes; each is served by its node (an NFS client on that node's
// segment mounts it at its endpoint, in that node's subnet), every API answers
// for every volume the same (its zone is its node), and a volume is deleted
// through another node's API than its own.
func TestThreeNodes(t *testing.T) {
	cl := startCluster(t, 3, "--store-size", "10G", "--thin-initial", "64M")
	ctx := context.Background()
	mutate(t, cl.clients[1], "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "400",
		"network": "projects/p1/global/networks/default"})

	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	work := make(chan int)
	for w := range 12 {
		c := cl.clients[w%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprintf("v%03d", i)
				var op client.Object
				err := c.Do(ctx, "POST", loc+"/volumes?volumeId="+id, nil, map[string]any{"shareName": id, "storagePool": "pool1", "capacityGib": "1",
					"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{rule("10.99.0.0/16", "READ_WRITE", true, false, "true")}}}, &op)
				if err == nil {
					_, err = c.Wait(ctx, op)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("create %s: %w", id, err))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range clusterVolumes {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d creates failed; first: %v", len(errs), clusterVolumes, errs[0])
	}
	t.Logf("%d volumes created through three APIs in %v", clusterVolumes, time.Since(start).Round(time.Millisecond))

	// Every API answers the same for every volume.
	type placed struct {
		zone     string
		endpoint netip.Addr
	}
	vols := map[string]placed{}
	for i, c := range cl.clients {
		var list struct {
			Volumes       []client.Object `json:"volumes"`
			NextPageToken string          `json:"nextPageToken"`
		}
		seen := 0
		for page := ""; ; page = list.NextPageToken {
			list.Volumes, list.NextPageToken = nil, ""
			if err := c.Do(ctx, "GET", loc+"/volumes?pageSize=100&pageToken="+page, nil, nil, &list); err != nil {
				t.Fatal(err)
			}
			for _, v := range list.Volumes {
				seen++
				name, _ := v["name"].(string)
				zone, _ := v["zone"].(string)
				if v["state"] != "READY" {
					t.Errorf("node%d's API: %s is %v (%v)", i+1, name, v["state"], v["stateDetails"])
				}
				mo, _ := v["mountOptions"].([]any)
				if len(mo) == 0 {
					t.Fatalf("node%d's API: %s has no mountOptions", i+1, name)
				}
				ep := netip.MustParseAddr(mo[0].(map[string]any)["ipAddress"].(string))
				p := placed{zone, ep}
				if i == 0 {
					vols[name] = p
				} else if vols[name] != p {
					t.Errorf("node%d's API: %s in zone %q at %s; node1's says %q at %s", i+1, name, zone, ep, vols[name].zone, vols[name].endpoint)
				}
			}
			if list.NextPageToken == "" {
				break
			}
		}
		if seen != clusterVolumes {
			t.Fatalf("node%d's API lists %d volumes, want %d", i+1, seen, clusterVolumes)
		}
	}
	per := map[string]int{}
	for name, p := range vols {
		per[p.zone]++
		n := -1
		for i, id := range cl.ids {
			if id == p.zone {
				n = i
			}
		}
		if n < 0 || !cl.nodes[n].subnet.Contains(p.endpoint) {
			t.Errorf("%s: zone %q, endpoint %s: not a node's, or outside its subnet", name, p.zone, p.endpoint)
		}
	}
	t.Logf("volumes per node: %v", per)
	for _, id := range cl.ids {
		if per[id] < clusterVolumes/3-10 || per[id] > clusterVolumes/3+10 {
			t.Errorf("%s holds %d volumes; want about %d (spread: %v)", id, per[id], clusterVolumes/3, per)
		}
	}

	// Each is served by its node: a client on that node's segment mounts it.
	hosts := make([]*clienthost.Host, len(cl.nodes))
	for i, s := range cl.nodes {
		hosts[i] = s.host(200)
	}
	mounted := 0
	for name, p := range vols {
		n := map[string]int{"node1": 0, "node2": 1, "node3": 2}[p.zone]
		share := filepath.Base(name)
		if err := hosts[n].Within(func() error {
			mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			c, err := nfs3.Mount(mctx, p.endpoint.String(), "/"+share, nfs3.Options{})
			if err != nil {
				return err
			}
			return c.Close()
		}); err != nil {
			t.Errorf("mount %s:/%s from %s's segment: %v", p.endpoint, share, p.zone, err)
			continue
		}
		mounted++
	}
	if mounted != clusterVolumes {
		t.Fatalf("%d of %d volumes mounted from their nodes' segments", mounted, clusterVolumes)
	}

	// A delete through another node's API is carried out by the volume's node.
	deleted := 0
	for name, p := range vols {
		if deleted == 6 {
			break
		}
		n := map[string]int{"node1": 0, "node2": 1, "node3": 2}[p.zone]
		other := cl.clients[(n+1)%3]
		mutate(t, other, "DELETE", "/v1/"+name, nil)
		var v client.Object
		if err := cl.clients[n].Do(ctx, "GET", "/v1/"+name, nil, nil, &v); err == nil {
			t.Errorf("%s still there after its delete through another node", name)
		}
		deleted++
	}
}
