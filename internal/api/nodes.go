package api

import (
	"net/http"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// NodeDownAfter is how long after its last heartbeat a node is shown DOWN
// (three heartbeats missed; daemon.HeartbeatInterval).
const NodeDownAfter = 30 * time.Second

// nodeJSON is a node on the wire (GET /v1/nodes, Basin-only).
type nodeJSON struct {
	Name          string `json:"name"`
	NodeID        string `json:"nodeId"`
	State         string `json:"state"` // UP, or DOWN once its heartbeat is older than NodeDownAfter
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
		if now.Sub(n.HeartbeatTime) > NodeDownAfter {
			state = "DOWN"
		}
		out = append(out, nodeJSON{Name: "nodes/" + n.ID, NodeID: n.ID, State: state, APIURL: n.APIURL,
			StartTime: apiv1.FormatTime(n.StartTime), HeartbeatTime: apiv1.FormatTime(n.HeartbeatTime)})
	}
	s.writeJSON(rq, http.StatusOK, struct {
		Nodes []nodeJSON `json:"nodes"`
	}{out})
}
