package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

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
	// Time is when it happened; zero = now.
	Time time.Time
	// Details says more in words for the project's users (never host paths).
	Details string
}

// AuditSystemCall records c in the audit log (the store and the log file), like a
// mutating API call.
func (s *Server) AuditSystemCall(ctx context.Context, c SystemCall) {
	e := s.systemEntry(c)
	s.writeAudit(ctx, e)
}

// RecordSystemCall is AuditSystemCall for a caller that tries again later: it
// reports whether the store took the entry (the log file gets it each time).
func (s *Server) RecordSystemCall(ctx context.Context, c SystemCall) error {
	return s.storeAudit(ctx, s.systemEntry(c))
}

func (s *Server) systemEntry(c SystemCall) *model.AuditEntry {
	at := c.Time.UTC()
	if c.Time.IsZero() {
		at = s.now().UTC()
	}
	id := c.RequestID
	if id == "" {
		id = newID(8)
	}
	e := &model.AuditEntry{ID: fmt.Sprintf("%019d-%s", at.UnixNano(), id), Project: c.Project, Time: at, Principal: c.Principal,
		Method: c.Method, Resource: c.Resource, Status: http.StatusOK, Outcome: "OK", RequestID: id, Details: c.Details}
	if c.Err != nil {
		e.Status, e.Outcome, _ = statusOf(c.Err)
	}
	return e
}
