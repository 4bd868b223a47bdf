package fake

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/storage"
	"github.com/basin-nas/basin/internal/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend { return New() })
}

// The same suite with clones copied in the background, as CephFS's are.
func TestConformanceAsyncClone(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		b := New()
		b.CloneCalls = 3
		return b
	})
}

// Gate holds a mutating call inside the backend, and MaxConcurrent sees a second
// call on the same volume overlap it.
func TestGateAndConcurrency(t *testing.T) {
	b := New()
	ctx := context.Background()
	if err := b.EnsureVolume(ctx, "v1", 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureVolume(ctx, "v2", 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.MaxConcurrent("v1"); got != 1 {
		t.Fatalf("MaxConcurrent after serial calls = %d", got)
	}
	entered := make(chan string, 4)
	release := make(chan struct{})
	b.Gate = func(op, key string) {
		if op == "Mount" {
			entered <- key
			<-release
		}
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := b.Mount(ctx, "v1"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() { b.Mount(ctx, "v2") })
	for range 3 {
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("calls did not reach the gate")
		}
	}
	if st := b.State(); st.Volumes["v1"] {
		t.Fatal("a gated Mount took effect before it was released")
	}
	close(release)
	wg.Wait()
	if got := b.MaxConcurrent("v1"); got != 2 {
		t.Fatalf("MaxConcurrent(v1) = %d, want 2", got)
	}
	if got := b.MaxConcurrent("v2"); got != 1 {
		t.Fatalf("MaxConcurrent(v2) = %d, want 1", got)
	}
	if st := b.State(); !st.Volumes["v1"] || !st.Volumes["v2"] {
		t.Fatalf("after release: %+v", st)
	}
}
