package api

import (
	"context"
	"net/http"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// intents returns the intent layer the handlers record through, configured from
// the server's options (made on first use).
func (s *Server) intents() *intent.Service {
	s.intentOnce.Do(func() {
		var capacity intent.Capacity
		if s.opts.Capacity != nil {
			capacity = s.opts.Capacity
		}
		s.intent = intent.New(intent.Options{
			Networks: s.opts.Networks, Limits: s.opts.Limits, Capacity: capacity,
			NodeID: s.opts.NodeID, Cluster: s.opts.Cluster,
			OvercommitRatio: s.opts.OvercommitRatio,
			Secrets:         s.opts.Secrets, Now: s.now, Logger: s.log,
			DefaultThroughputCapMibps: s.opts.DefaultThroughputCapMibps, OnSettingsChanged: s.opts.OnSettingsChanged,
		})
	})
	return s.intent
}

// answerOperation answers a call that recorded op (or failed with err): it wakes
// the controller, waits up to SyncWait, and answers with the operation as it then is.
func (s *Server) answerOperation(rq *request, op *model.Operation, err error) {
	w, err := s.operationAnswer(rq.ctx, op, err)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// operationAnswer is what a call that recorded op (or failed with err)
// answers, for any transport: it wakes the controller, waits up to SyncWait,
// and returns the operation as it then is.
func (s *Server) operationAnswer(ctx context.Context, op *model.Operation, err error) (apiv1.Operation, error) {
	if err != nil {
		return apiv1.Operation{}, err
	}
	if s.opts.Operations != nil {
		s.opts.Operations.Wake()
		if s.opts.SyncWait > 0 {
			wctx, cancel := context.WithTimeout(ctx, s.opts.SyncWait)
			s.opts.Operations.WaitDone(wctx, op.Name())
			cancel()
		}
	}
	var cur model.Operation
	if err := s.st.View(ctx, func(tx store.Tx) error { return tx.Get(store.KindOperation, op.Name(), &cur) }); err != nil {
		return apiv1.Operation{}, err
	}
	return s.operationToWire(ctx, &cur)
}
