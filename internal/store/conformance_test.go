package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/store/pgtest"
	"github.com/basin-nas/basin/internal/store/storetest"
)

func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Open {
		path := filepath.Join(t.TempDir(), "basin.db")
		return func() (store.Backend, error) { return store.OpenSQLite(context.Background(), path) }
	})
}

// The PostgreSQL store, on a private server this test starts (pgtest).
func TestPostgresConformance(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Open {
		url := srv.NewDatabase(t)
		return func() (store.Backend, error) { return store.OpenPostgres(context.Background(), url) }
	})
}
