package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// HeartbeatInterval is how often a node says in the store that it is alive;
// the API shows a node DOWN after three missed (api.NodeDownAfter).
const HeartbeatInterval = 10 * time.Second

// registerNode records this node in the store (KindNode) and keeps its
// heartbeat fresh until ctx ends.
func registerNode(ctx context.Context, st store.Store, node model.Node, log *slog.Logger) error {
	beat := func() error {
		node.HeartbeatTime = time.Now().UTC()
		return st.Update(ctx, func(tx store.Tx) error { return tx.Put(store.KindNode, node.ID, "", &node) })
	}
	node.StartTime = time.Now().UTC()
	if err := beat(); err != nil {
		return err
	}
	go every(ctx, HeartbeatInterval, func() {
		if err := beat(); err != nil && ctx.Err() == nil {
			log.Warn("node heartbeat", "err", err)
		}
	})
	return nil
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
