package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

const loc = "projects/p/locations/l"

func vol(id, share, pool string, gib int64, endpoint string) *model.Volume {
	return &model.Volume{Meta: model.Meta{Project: "p", Location: "l", ID: id, State: model.StateReady},
		ShareName: share, StoragePool: pool, CapacityGib: gib, Network: "default", Endpoint: endpoint}
}

func op(id string, created time.Time, done bool) *model.Operation {
	return &model.Operation{Project: "p", Location: "l", ID: id, CreateTime: created, Done: done}
}

// A database made before the index existed gets its stored documents indexed by
// the migration.
func TestMigrationIndexesExistingRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "basin.db")
	db, err := sql.Open("sqlite", "file:"+path+"?"+url.Values{"_pragma": {"journal_mode(WAL)"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	init, err := migrations.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	mustExec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)`)
	mustExec(string(init))
	mustExec(`INSERT INTO schema_migrations(version) VALUES (1)`)
	v, _ := json.Marshal(vol("a", "a", "p1", 100, "10.99.0.10"))
	mustExec(`INSERT INTO resources(kind, name, parent, data) VALUES (?, ?, ?, ?)`, KindVolume, loc+"/volumes/a", loc, v)
	o, _ := json.Marshal(op("x", time.Unix(1, 0), false))
	mustExec(`INSERT INTO resources(kind, name, parent, data) VALUES (?, ?, ?, ?)`, KindOperation, loc+"/operations/x", loc, o)
	done := op("y", time.Unix(1, 0), true)
	done.EndTime = time.Unix(2, 0)
	o, _ = json.Marshal(done)
	mustExec(`INSERT INTO resources(kind, name, parent, data) VALUES (?, ?, ?, ?)`, KindOperation, loc+"/operations/y", loc, o)
	a, _ := json.Marshal(&model.AuditEntry{ID: "a1", Project: "p", Time: time.Unix(3, 0)})
	mustExec(`INSERT INTO resources(kind, name, parent, data) VALUES (?, ?, ?, ?)`, KindAudit, "projects/p/auditLogs/a1", "projects/p", a)
	db.Close()

	s := open(t, path)
	defer s.Close()
	err = s.View(context.Background(), func(tx Tx) error {
		u, err := UsageOfPool(tx, loc+"/storagePools/p1")
		if err != nil || u.CapacityGib != 100 || u.Volumes != 1 {
			t.Errorf("UsageOfPool after migration = %+v, %v", u, err)
		}
		ops, err := PendingOperations(tx)
		if err != nil || len(ops) != 1 || ops[0].ID != "x" {
			t.Errorf("PendingOperations after migration = %v, %v", ops, err)
		}
		if got, err := ExpiredOperations(tx, time.Unix(100, 0), 10); err != nil || !slices.Equal(got, []string{loc + "/operations/y"}) {
			t.Errorf("ExpiredOperations after migration = %q, %v", got, err)
		}
		if got, err := ExpiredAudit(tx, time.Unix(100, 0), 10); err != nil || !slices.Equal(got, []string{"projects/p/auditLogs/a1"}) {
			t.Errorf("ExpiredAudit after migration = %q, %v", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// NFS share names are indexed by network, across projects; SMB-only volumes are
// not in that index. A database from before the index gets its volumes indexed by
// migration 0004.
func TestNFSShareNamesByNetwork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "basin.db")
	s := open(t, path)
	ctx := context.Background()
	mk := func(project, id, share string, protos ...model.Protocol) *model.Volume {
		v := vol(id, share, "p1", 1, "")
		v.Project, v.Protocols = project, protos
		return v
	}
	err := s.Update(ctx, func(tx Tx) error {
		for _, v := range []*model.Volume{mk("p", "a", "Data", model.ProtocolNFSv3), mk("q", "b", "data", model.ProtocolNFSv4, model.ProtocolSMB),
			mk("r", "c", "data", model.ProtocolSMB), mk("r", "d", "other", model.ProtocolNFSv3)} {
			if err := PutVolume(tx, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"projects/p/locations/l/volumes/a", "projects/q/locations/l/volumes/b"}
	check := func(when string) {
		t.Helper()
		s.View(ctx, func(tx Tx) error {
			got, err := NFSVolumesWithShareName(tx, "default", "DATA")
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("%s: NFSVolumesWithShareName = %q, %v; want %q", when, got, err, want)
			}
			if got, _ := NFSVolumesWithShareName(tx, "elsewhere", "data"); len(got) != 0 {
				t.Errorf("%s: another network: %q", when, got)
			}
			return nil
		})
	}
	check("after Put")
	if _, err := s.db.Exec(`DELETE FROM index_entries WHERE idx = ?`, IdxNFSShareName); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`DELETE FROM schema_migrations WHERE version = 4`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	check("after migration 0004")
}
