package tick

import (
	"context"
	"testing"
	"time"
)

// Paced runs its function when kicked without waiting for its beat, and its
// beat is what next returns after each pass.
func TestPaced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kick := make(chan struct{})
	ran := make(chan struct{}, 10)
	beat := make(chan time.Duration, 10)
	beat <- time.Hour
	next := func() time.Duration {
		select {
		case d := <-beat:
			return d
		default:
			return time.Hour
		}
	}
	done := make(chan struct{})
	go func() { Paced(ctx, next, kick, func() { ran <- struct{}{} }); close(done) }()
	select {
	case <-ran:
		t.Fatal("ran before its beat or a kick")
	case <-time.After(50 * time.Millisecond):
	}
	beat <- time.Millisecond // the beat after the kicked pass
	kick <- struct{}{}
	for i := 0; i < 2; i++ { // the kicked pass, then the one a millisecond later
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("pass %d did not run", i+1)
		}
	}
	cancel()
	<-done
}
