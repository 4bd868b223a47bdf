package api

import (
	"net/http"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

func (s *Server) listOperations(rq *request, p parent) {
	lq, err := parseListQuery[apiv1.Operation](rq.q, p.name()+"/operations", "metadata.createTime desc")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var ops []*model.Operation
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
		for _, lp := range s.locationsOf(p) {
			o, err := store.List[model.Operation](tx, store.KindOperation, lp.name())
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
		return nil
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	items := make([]apiv1.Operation, 0, len(ops))
	for _, o := range ops {
		w, err := s.operationToWire(rq.ctx, o)
		if err != nil {
			s.writeError(rq, err)
			return
		}
		items = append(items, w)
	}
	out, next, err := page(lq, items, func(x apiv1.Operation) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListOperationsResponse{Operations: out, NextPageToken: next})
}

func (s *Server) loadOperation(rq *request, p parent, id string) (*model.Operation, error) {
	var op *model.Operation
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		op, err = store.Get[model.Operation](tx, store.KindOperation, p.name()+"/operations/"+id)
		return err
	})
	return op, err
}

func (s *Server) getOperation(rq *request, p parent, id string) {
	op, err := s.loadOperation(rq, p, id)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	w, err := s.operationToWire(rq.ctx, op)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// deleteOperation forgets a finished operation's record; it never touches the
// resource. Deleting a running operation is refused.
func (s *Server) deleteOperation(rq *request, p parent, id string) {
	name := p.name() + "/operations/" + id
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		op, err := store.Get[model.Operation](tx, store.KindOperation, name)
		if err != nil {
			return err
		}
		if !op.Done {
			return model.Errorf(model.ErrFailedPrecondition, "operation %s is still running; cancel it or wait", id)
		}
		return tx.Delete(store.KindOperation, name)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}

// cancelOperation records the request; the controller honours it where it can (see
// controller.cancelled). Cancelling a finished operation is a no-op.
func (s *Server) cancelOperation(rq *request, p parent, id string) {
	name := p.name() + "/operations/" + id
	err := s.st.Update(rq.ctx, func(tx store.Tx) error {
		op, err := store.Get[model.Operation](tx, store.KindOperation, name)
		if err != nil {
			return err
		}
		if op.Done {
			return nil
		}
		op.RequestedCancellation = true
		return store.PutOperation(tx, op)
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	if s.opts.Operations != nil {
		s.opts.Operations.Wake()
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}
