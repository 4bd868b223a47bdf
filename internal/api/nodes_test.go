package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// GET /v1/nodes lists the registered nodes, UP while their heartbeat is fresh
// and DOWN once it is older than NodeDownAfter; it is the service
// administrator's alone: a project's roles/owner does not grant it.
func TestListNodes(t *testing.T) {
	ie := newIAMEnv(t)
	now := time.Now().UTC()
	if err := ie.st.Update(context.Background(), func(tx store.Tx) error {
		for _, n := range []model.Node{
			{ID: "node-b", APIURL: "http://10.0.0.2:8780/", StartTime: now.Add(-time.Hour), HeartbeatTime: now.Add(-2 * NodeDownAfter)},
			{ID: "node-a", APIURL: "http://10.0.0.1:8780/", StartTime: now.Add(-time.Hour), HeartbeatTime: now.Add(-time.Second)},
		} {
			if err := tx.Put(store.KindNode, n.ID, "", &n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := ie.call(ie.owner, "GET", "/v1/nodes", nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := got["nodes"].([]any)
	if len(nodes) != 2 {
		t.Fatalf("nodes: %v", got)
	}
	for i, want := range [][3]string{{"nodes/node-a", "UP", "http://10.0.0.1:8780/"}, {"nodes/node-b", "DOWN", "http://10.0.0.2:8780/"}} {
		n := nodes[i].(map[string]any)
		if n["name"] != want[0] || n["state"] != want[1] || n["apiUrl"] != want[2] {
			t.Errorf("node %d: %v, want %v", i, n, want)
		}
	}
	projectOwner, email := ie.account("projowner")
	ie.bind(map[string][]string{iam.RoleOwner: {iam.Member(email)}})
	_, err = ie.call(projectOwner, "GET", "/v1/nodes", nil)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusForbidden || !strings.Contains(ae.Message, "administrator") {
		t.Fatalf("a project's roles/owner: %v, want 403", err)
	}
}
