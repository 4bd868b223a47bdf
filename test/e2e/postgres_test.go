package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/secret"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/store/pgtest"
)

// basin serve with its metadata in PostgreSQL (--store postgres://…, the form
// the issue names; --database is the same): pools, volumes, snapshots and
// operations live in the database, none in the data directory; they survive a
// restart; the operations carry the node's ID; a second process under the same
// node ID is refused while the first runs; and one with another secrets key is
// refused.
func TestPostgresStore(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.NewDatabase(t)
	keyFile := clusterKeyFile(t)
	pgArgs := []string{"--store", db, "--secrets-key-file", keyFile, "--node-id", "node-a"}
	s := newServer(t)
	s.start(pgArgs...)
	c := s.client()
	mutate(t, c, "POST", loc+"/storagePools?storagePoolId=pool1", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "10", "network": "projects/p1/global/networks/default"})
	mutate(t, c, "POST", loc+"/volumes?volumeId=vol1", map[string]any{"shareName": "vol1", "storagePool": "pool1", "capacityGib": "1", "protocols": []string{"NFSV3"}})
	mutate(t, c, "POST", loc+"/volumes/vol1/snapshots?snapshotId=s1", map[string]any{})
	mp := filepath.Join(s.dataDir, "mounts", onlyMount(t, s))
	if err := os.WriteFile(filepath.Join(mp, "hello"), []byte("world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "basin.db")); err == nil {
		t.Error("basin.db made in the data directory beside --store postgres://")
	}

	// What the database holds, read beside the running server.
	st, err := store.OpenPostgres(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.View(context.Background(), func(tx store.Tx) error {
		vols, err := store.List[model.Volume](tx, store.KindVolume, "")
		if err != nil || len(vols) != 1 || vols[0].State != model.StateReady {
			t.Errorf("volumes in the database: %v, %v", vols, err)
		}
		ops, err := store.List[model.Operation](tx, store.KindOperation, "")
		if err != nil || len(ops) != 3 {
			t.Errorf("operations in the database: %d, %v", len(ops), err)
		}
		for _, op := range ops {
			if !op.Done || op.Owner != "node-a" || op.Epoch != 1 {
				t.Errorf("operation %s: done %v, owner %q, epoch %d", op.ID, op.Done, op.Owner, op.Epoch)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The node registered itself: basin nodes list (the owner's key) shows it UP.
	out, err := exec.Command(basinBin, "nodes", "list", "--endpoint", "http://"+s.addr, "--key-file", filepath.Join(s.dataDir, "owner-key.json"),
		"-o", "json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"nodeId": "node-a"`) || !strings.Contains(string(out), `"state": "UP"`) {
		t.Errorf("basin nodes list: %v\n%s", err, out)
	}

	// A second process under the same node ID, on another data directory,
	// while the first runs: refused, naming the flag (a second node needs an
	// ID of its own: TestThreeNodes).
	other := newServer(t)
	other.cmd = exec.Command(basinBin, other.args("--database", db, "--secrets-key-file", keyFile, "--node-id", "node-a")...)
	if out, err := other.cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "is alive on another data directory") || !strings.Contains(string(out), "--node-id") {
		t.Errorf("a second node-a on the database: %v\n%s", err, out)
	}

	s.stop(syscall.SIGTERM)
	// Another key file: refused, naming the flag.
	otherKey := filepath.Join(t.TempDir(), "other.key")
	k2, _ := secret.NewKey()
	secret.WriteKeys(otherKey, [][]byte{k2})
	wrong := exec.Command(basinBin, "serve", "--data-dir", t.TempDir(), "--listen", freeAddr(t), "--database", db, "--secrets-key-file", otherKey)
	if out, err := wrong.CombinedOutput(); err == nil || !strings.Contains(string(out), "--secrets-key-file") {
		t.Errorf("a node with another key: %v\n%s", err, out)
	}

	s.start(pgArgs...)
	c = s.client()
	var v client.Object
	if err := c.Do(context.Background(), "GET", loc+"/volumes/vol1", nil, nil, &v); err != nil || v["state"] != "READY" {
		t.Fatalf("after a restart: %v %v", v, err)
	}
	var snaps struct {
		Snapshots []client.Object `json:"snapshots"`
	}
	if err := c.Do(context.Background(), "GET", loc+"/volumes/vol1/snapshots", nil, nil, &snaps); err != nil || len(snaps.Snapshots) != 1 {
		t.Fatalf("snapshots after a restart: %v %v", snaps, err)
	}
	if got, err := os.ReadFile(filepath.Join(mp, "hello")); err != nil || string(got) != "world" {
		t.Fatalf("file after a restart: %q %v", got, err)
	}
	mutate(t, c, "DELETE", loc+"/volumes/vol1/snapshots/s1", nil)
	mutate(t, c, "DELETE", loc+"/volumes/vol1", nil)
	mutate(t, c, "DELETE", loc+"/storagePools/pool1", nil)
	s.stop(syscall.SIGTERM)
}

// clusterKeyFile writes a key file of one new key (--secrets-key-file) and
// returns its path.
func clusterKeyFile(t *testing.T) string {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	key, err := secret.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := secret.WriteKeys(keyFile, [][]byte{key}); err != nil {
		t.Fatal(err)
	}
	return keyFile
}
