package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var snapshotFields = fieldRules{
	mutable:   []string{"description", "labels"},
	immutable: nil,
	output:    []string{"state", "stateDetails", "usedBytes", "createTime"},
}

func (s *Server) listSnapshots(rq *request, p parent, vol string) {
	out, err := s.listSnapshotsQ(rq.ctx, vol, rq.q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

// listSnapshotsQ lists the snapshots of volume vol (its full name) with the
// list query q (pageSize, pageToken, filter, orderBy).
func (s *Server) listSnapshotsQ(ctx context.Context, vol string, q url.Values) (apiv1.ListSnapshotsResponse, error) {
	lq, err := parseListQuery[apiv1.Snapshot](q, vol+"/snapshots", "name")
	if err != nil {
		return apiv1.ListSnapshotsResponse{}, err
	}
	var out []apiv1.Snapshot
	var next string
	err = s.st.View(ctx, func(tx store.Tx) error {
		if _, err := store.Get[model.Volume](tx, store.KindVolume, vol); err != nil {
			return err
		}
		if lq.byName() {
			names, err := tx.Names(store.KindSnapshot, vol)
			if err != nil {
				return err
			}
			out, next, err = pageByName(lq, names, func(name string) (apiv1.Snapshot, error) {
				sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
				if err != nil {
					return apiv1.Snapshot{}, err
				}
				return snapshotToWire(sn), nil
			})
			return err
		}
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, vol)
		if err != nil {
			return err
		}
		var items []apiv1.Snapshot
		for _, sn := range snaps {
			items = append(items, snapshotToWire(sn))
		}
		out, next, err = page(lq, items, func(x apiv1.Snapshot) string { return x.Name })
		return err
	})
	if err != nil {
		return apiv1.ListSnapshotsResponse{}, err
	}
	return apiv1.ListSnapshotsResponse{Snapshots: out, NextPageToken: next}, nil
}

func (s *Server) getSnapshot(rq *request, vol, id string) {
	w, err := s.getSnapshotW(rq.ctx, vol, id)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, w)
}

// getSnapshotW returns snapshot id of volume vol (its full name).
func (s *Server) getSnapshotW(ctx context.Context, vol, id string) (apiv1.Snapshot, error) {
	if err := checkPathID("Snapshot", id); err != nil {
		return apiv1.Snapshot{}, err
	}
	var sn *model.Snapshot
	err := s.st.View(ctx, func(tx store.Tx) (err error) {
		sn, err = store.Get[model.Snapshot](tx, store.KindSnapshot, vol+"/snapshots/"+id)
		return err
	})
	if err != nil {
		return apiv1.Snapshot{}, err
	}
	return snapshotToWire(sn), nil
}

func (s *Server) createSnapshot(rq *request, p parent, vol string) {
	id := rq.q.Get("snapshotId")
	if err := intent.CheckID("snapshotId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Snapshot
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.createSnapshotOp(rq.ctx, p, vol, id, w)
	s.answerOperation(rq, op, err)
}

// createSnapshotOp records the creation of snapshot id of volume vol (its
// full name) from the request's w.
func (s *Server) createSnapshotOp(ctx context.Context, p parent, vol, id string, w apiv1.Snapshot) (*model.Operation, error) {
	return s.intents().CreateSnapshot(ctx, s.st, intent.SnapshotCreate{Project: p.project, Location: p.location,
		Volume: lastSegment(vol), ID: id, Description: w.Description, Labels: w.Labels})
}

func (s *Server) updateSnapshot(rq *request, p parent, vol, id string) {
	if err := checkPathID("Snapshot", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Snapshot
	present, err := s.readBody(rq, &w)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	op, err := s.updateSnapshotOp(rq.ctx, p, vol, id, w, present, rq.q)
	s.answerOperation(rq, op, err)
}

// updateSnapshotOp records the update of snapshot id of volume vol (its full
// name): w's fields that q's updateMask names, or those present.
func (s *Server) updateSnapshotOp(ctx context.Context, p parent, vol, id string, w apiv1.Snapshot, present map[string]bool, q url.Values) (*model.Operation, error) {
	if err := checkBodyName(w.Name, vol+"/snapshots/"+id); err != nil {
		return nil, err
	}
	return s.intents().UpdateSnapshot(ctx, s.st, intent.SnapshotUpdate{Project: p.project, Location: p.location,
		Volume: lastSegment(vol), ID: id, Patch: func(sn *model.Snapshot) error {
			cur := snapshotToWire(sn)
			paths, err := updatePaths(q, snapshotFields, present, &w, &cur)
			if err != nil {
				return err
			}
			for _, f := range paths {
				switch f {
				case "description":
					sn.Desc = w.Description
				case "labels":
					sn.Labels = w.Labels
				}
			}
			return nil
		}})
}

func (s *Server) deleteSnapshot(rq *request, p parent, vol, id string) {
	op, err := s.deleteSnapshotOp(rq.ctx, p, vol, id)
	s.answerOperation(rq, op, err)
}

// deleteSnapshotOp records the deletion of snapshot id of volume vol (its
// full name).
func (s *Server) deleteSnapshotOp(ctx context.Context, p parent, vol, id string) (*model.Operation, error) {
	return s.intents().DeleteSnapshot(ctx, s.st, intent.SnapshotDelete{Project: p.project, Location: p.location,
		Volume: lastSegment(vol), ID: id})
}

// lastSegment is the ID at the end of a resource name.
func lastSegment(name string) string {
	return name[strings.LastIndex(name, "/")+1:]
}
