package store

import (
	"context"
	"testing"
)

// open opens the SQLite database at path (the tests of what is SQLite's own:
// its migrations; what every store does is in storetest).
func open(t *testing.T, path string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
