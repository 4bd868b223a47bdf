package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/tick"
)

// HeartbeatInterval is how often a node says in the store that it is alive;
// the API shows a node DOWN after three missed (model.NodeDownAfter).
const HeartbeatInterval = 10 * time.Second

// ErrNodeInUse: another process, on another data directory, is alive under
// this node ID.
var ErrNodeInUse = errors.New("node ID in use")

// ErrFenced: this node fenced itself (failover): it could not renew its
// serving lease in time, so it took its data plane down and stopped, since
// another node may serve its volumes now.
var ErrFenced = errors.New("fenced")

// sharedStorage names the storage be is on when other nodes reach it too
// (model.Node.SharedStorage): a CephFS's cluster, file system and subvolume
// group. Failover needs one.
func sharedStorage(ctx context.Context, be nodeStorage) (string, error) {
	type shared interface {
		SharedStorage(ctx context.Context) (string, error)
	}
	s, ok := be.(shared)
	if !ok {
		return "", errors.New("the storage is this node's own: no other node can serve its volumes")
	}
	return s.SharedStorage(ctx)
}

// nodeTokenFile holds the data directory's own random ID: the node record
// carries it (model.Node.Instance), so a node restarted on its data directory
// is told from a second process started under the same node ID elsewhere.
const nodeTokenFile = "node.token"

// nodeToken returns the data directory's token, made on first use.
func nodeToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, nodeTokenFile)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	buf := make([]byte, 16)
	rand.Read(buf)
	tok := hex.EncodeToString(buf)
	// A write cut short leaves an empty file (made again) or a shorter token
	// (as good): no rename needed.
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}

// claimNodeID records node in the store as alive now (its heartbeat, its
// data directory's token), refusing with ErrNodeInUse if a process on another
// data directory is alive under its ID. basin serve claims its ID first thing
// after opening the store, before it touches the host.
func claimNodeID(ctx context.Context, st store.Store, node model.Node) error {
	now := time.Now().UTC()
	return st.Update(ctx, func(tx store.Tx) error {
		prev, err := store.Get[model.Node](tx, store.KindNode, node.ID)
		if err == nil && prev.Instance != "" && prev.Instance != node.Instance && prev.Up(now) {
			return fmt.Errorf("%w: node %q is alive on another data directory (its last heartbeat %s ago, API %s); give each node its own --node-id, or stop that one and wait %s",
				ErrNodeInUse, node.ID, now.Sub(prev.HeartbeatTime).Round(time.Second), prev.APIURL, model.NodeDownAfter)
		}
		if err != nil && !errors.Is(err, model.ErrNotFound) {
			return err
		}
		if err == nil {
			node.StoreBytes, node.FreeBytes = prev.StoreBytes, prev.FreeBytes
		}
		node.HeartbeatTime = now
		return tx.Put(store.KindNode, node.ID, "", &node)
	})
}

// noOtherNodeAlive refuses, naming them, while nodes on other data
// directories than dataDir say they are alive.
func noOtherNodeAlive(ctx context.Context, st store.Store, dataDir string) error {
	token, err := nodeToken(dataDir)
	if err != nil {
		return err
	}
	var alive []string
	now := time.Now()
	err = st.View(ctx, func(tx store.Tx) error {
		nodes, err := store.List[model.Node](tx, store.KindNode, "")
		for _, n := range nodes {
			if n.Instance != token && n.Up(now) {
				alive = append(alive, n.ID)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if len(alive) > 0 {
		return fmt.Errorf("nodes %s are running on this database; stop every node first (a node is taken as stopped %s after its last heartbeat)",
			strings.Join(alive, ", "), model.NodeDownAfter)
	}
	return nil
}

// registerNode claims node's ID (claimNodeID) and keeps its record fresh
// (heartbeat, and its store's space, read by space) until ctx ends.
func registerNode(ctx context.Context, st store.Store, node model.Node, space func(context.Context) (int64, int64, error), log *slog.Logger) error {
	node.StartTime = time.Now().UTC()
	read := func() {
		if space == nil {
			return
		}
		if size, free, err := space(ctx); err == nil {
			node.StoreBytes, node.FreeBytes = size, free
		} else if ctx.Err() == nil {
			log.Warn("read the store's space for the node's record", "err", err)
		}
	}
	read()
	if err := claimNodeID(ctx, st, node); err != nil {
		return err
	}
	go tick.Every(ctx, HeartbeatInterval, func() {
		read()
		node.HeartbeatTime = time.Now().UTC()
		if err := st.Update(ctx, func(tx store.Tx) error { return tx.Put(store.KindNode, node.ID, "", &node) }); err != nil && ctx.Err() == nil {
			log.Warn("node heartbeat", "err", err)
		}
	})
	return nil
}
