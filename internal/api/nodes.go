package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
	"github.com/basin-nas/basin/internal/tick"
)

// nodeJSON is a node on the wire (GET /v1/nodes, Basin-only).
type nodeJSON struct {
	Name          string `json:"name"`
	NodeID        string `json:"nodeId"`
	State         string `json:"state"` // UP, or DOWN once its heartbeat is older than model.NodeDownAfter
	APIURL        string `json:"apiUrl"`
	StartTime     string `json:"startTime"`
	HeartbeatTime string `json:"heartbeatTime"`
	// SharedStorage names the storage other nodes reach too (failover), "" =
	// the node's own disk.
	SharedStorage string `json:"sharedStorage,omitempty"`
	// Drained: basin nodes drain; its volumes are served by other nodes.
	Drained bool `json:"drained,omitempty"`
	// Serving lists the other nodes' volumes this node serves, as
	// NETWORK@NODE, Served the networks whose volumes of this node another
	// node serves, as NETWORK@HOST, and Moving the groups moving to or from
	// this node, waiting for the node they leave to let go, as
	// NETWORK@HOME (failover). A drain is over when nothing is moving.
	Serving []string `json:"serving,omitempty"`
	Served  []string `json:"served,omitempty"`
	Moving  []string `json:"moving,omitempty"`
}

// nodesView is what the nodes' answers are made of, read in one transaction.
type nodesView struct {
	nodes    []*model.Node
	drained  map[string]bool
	hostings []*model.Hosting
}

func readNodes(tx store.Tx) (nodesView, error) {
	var v nodesView
	var err error
	if v.nodes, err = store.List[model.Node](tx, store.KindNode, ""); err != nil {
		return v, err
	}
	drains, err := store.List[model.Drain](tx, store.KindDrain, "")
	if err != nil {
		return v, err
	}
	v.drained = map[string]bool{}
	for _, d := range drains {
		v.drained[d.Node] = true
	}
	v.hostings, err = store.List[model.Hosting](tx, store.KindHosting, "")
	return v, err
}

// toWire renders node n as of now.
func (v nodesView) toWire(n *model.Node, now time.Time) nodeJSON {
	state := "UP"
	if !n.Up(now) {
		state = "DOWN"
	}
	w := nodeJSON{Name: "nodes/" + n.ID, NodeID: n.ID, State: state, APIURL: n.APIURL,
		StartTime: apiv1.FormatTime(n.StartTime), HeartbeatTime: apiv1.FormatTime(n.HeartbeatTime),
		SharedStorage: n.SharedStorage, Drained: v.drained[n.ID]}
	for _, h := range v.hostings {
		switch {
		case !h.ServesFor(h.Host):
			if h.Host == n.ID || h.From == n.ID {
				w.Moving = append(w.Moving, model.HostingName(h.Network, h.Home))
			}
		case h.Home == h.Host:
		case h.Host == n.ID:
			w.Serving = append(w.Serving, model.HostingName(h.Network, h.Home))
		case h.Home == n.ID:
			w.Served = append(w.Served, model.HostingName(h.Network, h.Host))
		}
	}
	return w
}

// listNodes answers GET /v1/nodes: every node that registered, by ID.
func (s *Server) listNodes(rq *request) {
	var v nodesView
	if err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		v, err = readNodes(tx)
		return err
	}); err != nil {
		s.writeError(rq, err)
		return
	}
	now := s.now()
	out := make([]nodeJSON, 0, len(v.nodes))
	for _, n := range v.nodes {
		out = append(out, v.toWire(n, now))
	}
	s.writeJSON(rq, http.StatusOK, struct {
		Nodes []nodeJSON `json:"nodes"`
	}{out})
}

// drainNode answers POST /v1/nodes/{node}:drain and :undrain: it marks the
// node drained (its volumes move to other nodes that reach the same storage;
// none move to it) or no longer (they come back), and answers the node. Both
// are idempotent; the moves themselves are the controller's (failover.go).
func (s *Server) drainNode(rq *request, id string, drain bool) {
	var v nodesView
	var node *model.Node
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		n, err := store.Get[model.Node](tx, store.KindNode, id)
		if errors.Is(err, model.ErrNotFound) {
			return model.Errorf(model.ErrNotFound, "node %q not found", id)
		}
		if err != nil {
			return err
		}
		if drain && n.SharedStorage == "" {
			return model.Errorf(model.ErrFailedPrecondition,
				"node %s cannot be drained: its volumes are on its own disk or it runs without --failover, so no other node can serve them", id)
		}
		node = n
		var d model.Drain
		switch err := tx.Get(store.KindDrain, id, &d); {
		case err == nil && !drain:
			if err := tx.Delete(store.KindDrain, id); err != nil {
				return err
			}
		case errors.Is(err, model.ErrNotFound) && drain:
			if err := tx.Put(store.KindDrain, id, "", &model.Drain{Node: id, Since: s.now()}); err != nil {
				return err
			}
		case err != nil && !errors.Is(err, model.ErrNotFound):
			return err
		}
		v, err = readNodes(tx)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	verb := "undrained"
	if drain {
		verb = "drained"
	}
	by := "(authentication off)"
	if rq.principal != nil {
		by = rq.principal.Email
	}
	if s.opts.Operations != nil {
		s.opts.Operations.MoveVolumes()
	}
	s.log.Info("node "+verb, "node", id, "by", by, "request_id", rq.id)
	s.writeJSON(rq, http.StatusOK, v.toWire(node, s.now()))
}

// nodeCache holds the nodes' records, read every second by a loop of its own
// (a cluster's servers only): volumeToWire runs inside the store's
// transactions, where it cannot read again, and a volume list shows each
// volume's node UP or DOWN without a read per volume.
type nodeCache struct {
	mu       sync.Mutex
	nodes    map[string]*model.Node
	hostings map[string]*model.Hosting // by model.HostingName
	stop     context.CancelFunc
	done     chan struct{}
}

// start reads the nodes now and then every second until close.
func (c *nodeCache) start(s *Server) {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done = cancel, make(chan struct{})
	read := func() {
		var nodes []*model.Node
		var hostings []*model.Hosting
		err := s.st.View(ctx, func(tx store.Tx) (err error) {
			if nodes, err = store.List[model.Node](tx, store.KindNode, ""); err != nil {
				return err
			}
			hostings, err = store.List[model.Hosting](tx, store.KindHosting, "")
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read the nodes' records", "err", err)
			}
			return
		}
		m := make(map[string]*model.Node, len(nodes))
		for _, n := range nodes {
			m[n.ID] = n
		}
		hm := make(map[string]*model.Hosting, len(hostings))
		for _, h := range hostings {
			hm[model.HostingName(h.Network, h.Home)] = h
		}
		c.mu.Lock()
		c.nodes, c.hostings = m, hm
		c.mu.Unlock()
	}
	read()
	go func() {
		defer close(c.done)
		tick.Every(ctx, time.Second, read)
	}()
}

func (c *nodeCache) close() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

// hosting returns the hosting of home's volumes on network as last read (nil
// if none: home serves them).
func (c *nodeCache) hosting(network, home string) *model.Hosting {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hostings[model.HostingName(network, home)]
}

// get returns node id's record as last read (nil if it has none).
func (c *nodeCache) get(id string) *model.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// forwardedHeader marks a call one node forwarded to another (forwardToNode):
// the receiving node answers it itself, never forwarding it again.
const forwardedHeader = "X-Basin-Forwarded-By"

// forwardClient carries forwarded calls; a node that does not answer in time
// is reported unavailable.
var forwardClient = &http.Client{Timeout: 15 * time.Second}

// maxForwardedBody bounds the answer a forwarded call may bring back.
const maxForwardedBody = 32 << 20

// forwardToNode answers rq by asking node, where the volume it is about lives,
// when that is another node of a cluster: what only that node keeps (a
// volume's last hour of metrics, sampled there) is answered from there, with
// the caller's own credentials, and the answer passed back as it came. It
// reports whether it answered.
func (s *Server) forwardToNode(rq *request, node string) bool {
	if !s.opts.Cluster || node == "" || node == s.opts.NodeID || rq.r.Header.Get(forwardedHeader) != "" {
		return false
	}
	n := s.nodes.get(node)
	if n == nil || !n.Up(s.now()) || n.APIURL == "" {
		s.writeError(rq, model.Errorf(model.ErrUnavailable, "node %s, which samples this volume's metrics, is down; try again when it is back", node))
		return true
	}
	url := strings.TrimSuffix(n.APIURL, "/") + rq.r.URL.RequestURI()
	req, err := http.NewRequestWithContext(rq.ctx, rq.r.Method, url, nil)
	if err != nil {
		s.writeError(rq, fmt.Errorf("forward to node %s: %w", node, err))
		return true
	}
	req.Header.Set("Authorization", rq.r.Header.Get("Authorization"))
	req.Header.Set(forwardedHeader, s.opts.NodeID)
	res, err := forwardClient.Do(req)
	if err != nil {
		s.log.Warn("forward a call to the volume's node", "node", node, "err", err, "request_id", rq.id)
		s.writeError(rq, model.Errorf(model.ErrUnavailable, "node %s, which samples this volume's metrics, did not answer; try again", node))
		return true
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxForwardedBody))
	if err != nil {
		s.writeError(rq, model.Errorf(model.ErrUnavailable, "node %s, which samples this volume's metrics, did not answer in full; try again", node))
		return true
	}
	rq.status = res.StatusCode
	rq.w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
	rq.w.WriteHeader(res.StatusCode)
	rq.w.Write(body)
	return true
}
