package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

func (s *Server) listOperations(rq *request, p parent) {
	out, err := s.listOperationsQ(rq.ctx, p, rq.q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

// listOperationsQ lists the operations of p with the list query q (pageSize,
// pageToken, filter, orderBy).
func (s *Server) listOperationsQ(ctx context.Context, p parent, q url.Values) (apiv1.ListOperationsResponse, error) {
	lq, err := parseListQuery[apiv1.Operation](q, p.name()+"/operations", "metadata.createTime desc")
	if err != nil {
		return apiv1.ListOperationsResponse{}, err
	}
	var ops []*model.Operation
	err = s.st.View(ctx, func(tx store.Tx) error {
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
		return apiv1.ListOperationsResponse{}, err
	}
	items := make([]apiv1.Operation, 0, len(ops))
	for _, o := range ops {
		w, err := s.operationToWire(ctx, o)
		if err != nil {
			return apiv1.ListOperationsResponse{}, err
		}
		items = append(items, w)
	}
	out, next, err := page(lq, items, func(x apiv1.Operation) string { return x.Name })
	if err != nil {
		return apiv1.ListOperationsResponse{}, err
	}
	return apiv1.ListOperationsResponse{Operations: out, NextPageToken: next}, nil
}

func (s *Server) getOperation(rq *request, p parent, id string) {
	w, err := s.getOperationW(rq.ctx, p, id)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// getOperationW returns operation id of p.
func (s *Server) getOperationW(ctx context.Context, p parent, id string) (apiv1.Operation, error) {
	var op *model.Operation
	err := s.st.View(ctx, func(tx store.Tx) (err error) {
		op, err = store.Get[model.Operation](tx, store.KindOperation, p.name()+"/operations/"+id)
		return err
	})
	if err != nil {
		return apiv1.Operation{}, err
	}
	return s.operationToWire(ctx, op)
}

// deleteOperation forgets a finished operation's record; it never touches the
// resource. Deleting a running operation is refused.
func (s *Server) deleteOperation(rq *request, p parent, id string) {
	if err := s.deleteOperationW(rq.ctx, p, id); err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}

func (s *Server) deleteOperationW(ctx context.Context, p parent, id string) error {
	name := p.name() + "/operations/" + id
	return s.st.Update(ctx, func(tx store.Tx) error {
		op, err := store.Get[model.Operation](tx, store.KindOperation, name)
		if err != nil {
			return err
		}
		if !op.Done {
			return model.Errorf(model.ErrFailedPrecondition, "operation %s is still running; cancel it or wait", id)
		}
		return tx.Delete(store.KindOperation, name)
	})
}

// cancelOperation records the request; the controller honours it where it can (see
// controller.cancelled). Cancelling a finished operation is a no-op.
func (s *Server) cancelOperation(rq *request, p parent, id string) {
	if err := s.cancelOperationW(rq.ctx, p, id); err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, struct{}{})
}

func (s *Server) cancelOperationW(ctx context.Context, p parent, id string) error {
	name := p.name() + "/operations/" + id
	err := s.st.Update(ctx, func(tx store.Tx) error {
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
		return err
	}
	if s.opts.Operations != nil {
		s.opts.Operations.Wake()
	}
	return nil
}
