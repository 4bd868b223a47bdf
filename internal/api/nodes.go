package api

import (
	"context"
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
}

// listNodes answers GET /v1/nodes: every node that registered, by ID.
func (s *Server) listNodes(rq *request) {
	var nodes []*model.Node
	if err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		nodes, err = store.List[model.Node](tx, store.KindNode, "")
		return err
	}); err != nil {
		s.writeError(rq, err)
		return
	}
	now := s.now()
	out := make([]nodeJSON, 0, len(nodes))
	for _, n := range nodes {
		state := "UP"
		if !n.Up(now) {
			state = "DOWN"
		}
		out = append(out, nodeJSON{Name: "nodes/" + n.ID, NodeID: n.ID, State: state, APIURL: n.APIURL,
			StartTime: apiv1.FormatTime(n.StartTime), HeartbeatTime: apiv1.FormatTime(n.HeartbeatTime)})
	}
	s.writeJSON(rq, http.StatusOK, struct {
		Nodes []nodeJSON `json:"nodes"`
	}{out})
}

// nodeCache holds the nodes' records, read every second by a loop of its own
// (a cluster's servers only): volumeToWire runs inside the store's
// transactions, where it cannot read again, and a volume list shows each
// volume's node UP or DOWN without a read per volume.
type nodeCache struct {
	mu    sync.Mutex
	nodes map[string]*model.Node
	stop  context.CancelFunc
	done  chan struct{}
}

// start reads the nodes now and then every second until close.
func (c *nodeCache) start(s *Server) {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done = cancel, make(chan struct{})
	read := func() {
		var nodes []*model.Node
		err := s.st.View(ctx, func(tx store.Tx) (err error) {
			nodes, err = store.List[model.Node](tx, store.KindNode, "")
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
		c.mu.Lock()
		c.nodes = m
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
