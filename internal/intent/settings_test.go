package intent

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// clock is a settable time source.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func TestSettings(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	var woken []string
	s := New(Options{DefaultThroughputCapMibps: 300, Now: clk.Now,
		OnSettingsChanged: func(p, l string) { woken = append(woken, p+"/"+l) }})

	// Never set: the server default, no update time.
	got, err := s.Settings(ctx, st, "p1", "east")
	if err != nil {
		t.Fatal(err)
	}
	if got.ThroughputCapMibps != 300 || !got.UpdateTime.IsZero() || got.Name() != "projects/p1/locations/east/settings" {
		t.Fatalf("defaults: %+v", got)
	}

	// Set: stored, stamped, the hook called once.
	got, err = s.UpdateSettings(ctx, st, SettingsUpdate{Project: "p1", Location: "east", Mask: []string{"throughputCapMibps"}, ThroughputCapMibps: 150})
	if err != nil {
		t.Fatal(err)
	}
	if got.ThroughputCapMibps != 150 || !got.UpdateTime.Equal(clk.now) || len(woken) != 1 || woken[0] != "p1/east" {
		t.Fatalf("update: %+v, woken %v", got, woken)
	}
	first := got.UpdateTime

	// The same update again: the same answer, nothing written, no wake.
	clk.now = clk.now.Add(time.Minute)
	again, err := s.UpdateSettings(ctx, st, SettingsUpdate{Project: "p1", Location: "east", ThroughputCapMibps: 150})
	if err != nil {
		t.Fatal(err)
	}
	if *again != *got || len(woken) != 1 {
		t.Fatalf("repeated update: %+v (was %+v), woken %v", again, got, woken)
	}
	if read, _ := s.Settings(ctx, st, "p1", "east"); read.ThroughputCapMibps != 150 || !read.UpdateTime.Equal(first) {
		t.Fatalf("read back: %+v", read)
	}
	// Another location and project keep the default.
	if other, _ := s.Settings(ctx, st, "p1", "west"); other.ThroughputCapMibps != 300 {
		t.Fatalf("other location: %+v", other)
	}

	// 0 goes back to the server default; the stored document holds 0.
	got, err = s.UpdateSettings(ctx, st, SettingsUpdate{Project: "p1", Location: "east", ThroughputCapMibps: 0})
	if err != nil {
		t.Fatal(err)
	}
	if got.ThroughputCapMibps != 300 || !got.UpdateTime.Equal(clk.now) || len(woken) != 2 {
		t.Fatalf("reset: %+v, woken %v", got, woken)
	}
	st.View(ctx, func(tx store.Tx) error {
		doc, err := store.Get[model.Settings](tx, store.KindSettings, "projects/p1/locations/east/settings")
		if err != nil || doc.ThroughputCapMibps != 0 {
			t.Errorf("stored: %+v %v", doc, err)
		}
		return nil
	})

	// Without a server default, 0 is no cap.
	none := New(Options{})
	if got, _ := none.Settings(ctx, st, "p1", "east"); got.ThroughputCapMibps != 0 {
		t.Fatalf("no default: %+v", got)
	}
}

func TestSettingsRefusals(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	woken := 0
	s := New(Options{OnSettingsChanged: func(string, string) { woken++ }})
	for _, tc := range []struct {
		name  string
		req   SettingsUpdate
		field string
	}{
		{"negative", SettingsUpdate{ThroughputCapMibps: -1}, "throughputCapMibps"},
		{"too large", SettingsUpdate{ThroughputCapMibps: model.MaxThroughputCapMibps + 1}, "throughputCapMibps"},
		{"NaN", SettingsUpdate{ThroughputCapMibps: math.NaN()}, "throughputCapMibps"},
		{"infinite", SettingsUpdate{ThroughputCapMibps: math.Inf(1)}, "throughputCapMibps"},
		{"unknown mask field", SettingsUpdate{Mask: []string{"throughputCapMibps", "iopsCap"}, ThroughputCapMibps: 5}, "updateMask"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Project, tc.req.Location = "p1", "east"
			_, err := s.UpdateSettings(ctx, st, tc.req)
			var fe *model.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %v, want an invalid %s", err, tc.field)
			}
			if tc.field == "updateMask" && !strings.Contains(err.Error(), "iopsCap") {
				t.Errorf("%v does not name the unknown field", err)
			}
		})
	}
	if _, err := s.UpdateSettings(ctx, st, SettingsUpdate{Project: "p1", Location: "east", ThroughputCapMibps: model.MaxThroughputCapMibps}); err != nil {
		t.Fatalf("the largest cap: %v", err)
	}
	if woken != 1 {
		t.Fatalf("woken %d times, want 1 (refusals write nothing)", woken)
	}
	st.View(ctx, func(tx store.Tx) error {
		docs, _ := store.List[model.Settings](tx, store.KindSettings, "projects/p1/locations/east")
		if len(docs) != 1 || docs[0].ThroughputCapMibps != model.MaxThroughputCapMibps {
			t.Errorf("stored: %v", docs)
		}
		return nil
	})
}
