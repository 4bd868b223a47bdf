package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/basin-nas/basin/internal/model"
)

type doc struct {
	N int `json:"n"`
}

func open(t *testing.T, path string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDocumentsPersistAndList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "basin.db")
	s := open(t, path)
	ctx := context.Background()
	err := s.Update(ctx, func(tx Tx) error {
		for _, n := range []string{"p/b", "p/a", "q/c"} {
			parent := n[:1]
			if err := tx.Insert("k", n, parent, doc{N: len(n)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx Tx) error { return tx.Insert("k", "p/a", "p", doc{}) })
	if !errors.Is(err, model.ErrAlreadyExists) {
		t.Fatalf("duplicate insert: %v", err)
	}
	s.Close()
	s = open(t, path) // reopening runs migrations again, harmlessly
	defer s.Close()
	s.View(ctx, func(tx Tx) error {
		raws, _ := tx.List("k", "p")
		if len(raws) != 2 || string(raws[0]) != `{"n":3}` {
			t.Fatalf("list p: %s", raws)
		}
		all, _ := List[doc](tx, "k", "")
		if len(all) != 3 {
			t.Fatalf("list all: %v", all)
		}
		if err := tx.Get("k", "nope", &doc{}); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		return nil
	})
}

func TestFailedUpdateWritesNothing(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "db"))
	defer s.Close()
	ctx := context.Background()
	boom := errors.New("boom")
	err := s.Update(ctx, func(tx Tx) error {
		tx.Put("k", "a", "", doc{N: 1})
		tx.NextSeq("q")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	s.View(ctx, func(tx Tx) error {
		if err := tx.Get("k", "a", &doc{}); !errors.Is(err, model.ErrNotFound) {
			t.Fatal("rolled-back write is visible")
		}
		if n, _ := tx.Seq("q"); n != 0 {
			t.Fatalf("rolled-back sequence = %d", n)
		}
		return nil
	})
}

// Concurrent read-modify-write transactions are serialised: no lost updates.
func TestUpdatesAreSerialised(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "db"))
	defer s.Close()
	ctx := context.Background()
	s.Update(ctx, func(tx Tx) error { return tx.Put("k", "c", "", doc{}) })
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Update(ctx, func(tx Tx) error {
				d, err := Get[doc](tx, "k", "c")
				if err != nil {
					return err
				}
				d.N++
				if _, err := tx.NextSeq("s"); err != nil {
					return err
				}
				return tx.Put("k", "c", "", d)
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	s.View(ctx, func(tx Tx) error {
		d, _ := Get[doc](tx, "k", "c")
		n, _ := tx.Seq("s")
		if d.N != 20 || n != 20 {
			t.Fatalf("counter %d, sequence %d; want 20, 20", d.N, n)
		}
		return nil
	})
}
