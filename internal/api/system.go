package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
)

// Intents returns the intent layer the API records through, for callers without
// HTTP that must validate and record exactly as the API does (the snapshot
// scheduler).
func (s *Server) Intents() *intent.Service { return s.intents() }

// SystemCall is a change Basin makes on its own rather than at a caller's request
// (the snapshot scheduler taking or deleting a snapshot), for the audit log.
type SystemCall struct {
	// Principal names the part of Basin that acted, e.g. "basin:snapshot-scheduler".
	Principal string
	Project   string
	// Method is the permission a caller would need for the same call, e.g.
	// "basin.snapshots.create".
	Method   string
	Resource string
	// RequestID ties the entry to what it did, e.g. the operation's ID; "" = a
	// new one.
	RequestID string
	// Err is the call's outcome: nil for success; its kind gives the entry's
	// status and code as it would an API answer's.
	Err error
}

// AuditSystemCall records c in the audit log (the store and the log file), like a
// mutating API call.
func (s *Server) AuditSystemCall(ctx context.Context, c SystemCall) {
	now := s.now().UTC()
	id := c.RequestID
	if id == "" {
		id = newID(8)
	}
	e := &model.AuditEntry{ID: fmt.Sprintf("%019d-%s", now.UnixNano(), id), Project: c.Project, Time: now, Principal: c.Principal,
		Method: c.Method, Resource: c.Resource, Status: http.StatusOK, Outcome: "OK", RequestID: id}
	if c.Err != nil {
		e.Status, e.Outcome, _ = statusOf(c.Err)
	}
	s.writeAudit(ctx, e)
}
