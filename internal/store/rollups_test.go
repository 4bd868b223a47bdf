package store

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

// Rollups are kept per series and start, replaced in place, read by range,
// expired by start, and survive reopening the database.
func TestRollups(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "basin.db")
	st, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	put := []Rollup{{"a", 300, []byte("a300")}, {"a", 600, []byte("a600")}, {"a", 900, []byte("a900")}, {"b", 600, []byte("b600")}}
	if err := st.PutRollups(ctx, put); err != nil {
		t.Fatal(err)
	}
	if err := st.PutRollups(ctx, []Rollup{{"a", 600, []byte("a600'")}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err = OpenSQLite(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Rollups(ctx, "a", 600, 900)
	if err != nil || len(got) != 1 || got[0].Start != 600 || !bytes.Equal(got[0].Data, []byte("a600'")) {
		t.Fatalf("a in [600, 900): %v, %v", got, err)
	}
	n, err := st.ExpireRollups(ctx, 900)
	if err != nil || n != 3 {
		t.Fatalf("expired %d, %v; want 3", n, err)
	}
	for series, want := range map[string]int{"a": 1, "b": 0} {
		if got, _ := st.Rollups(ctx, series, 0, 1<<40); len(got) != want {
			t.Errorf("%s after expiry: %v, want %d", series, got, want)
		}
	}
	// Rollups are not resources.
	if err := st.View(ctx, func(tx Tx) error {
		names, err := tx.Names("metric_rollups", "")
		if len(names) != 0 {
			t.Errorf("rollups listed as resources: %v", names)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
