package api

import (
	"encoding/json"
	"net/http"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var snapshotFields = fieldRules{
	mutable:   []string{"description", "labels"},
	immutable: nil,
	output:    []string{"state", "stateDetails", "usedBytes", "createTime"},
}

func (s *Server) listSnapshots(rq *request, p parent, vol string) {
	lq, err := parseListQuery[apiv1.Snapshot](rq.q, vol+"/snapshots", "name")
	if err != nil {
		s.writeError(rq, err)
		return
	}
	var items []apiv1.Snapshot
	err = s.st.View(rq.ctx, func(tx store.Tx) error {
		if _, err := store.Get[model.Volume](tx, store.KindVolume, vol); err != nil {
			return err
		}
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, vol)
		for _, sn := range snaps {
			items = append(items, snapshotToWire(sn))
		}
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	out, next, err := page(lq, items, func(x apiv1.Snapshot) string { return x.Name })
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, apiv1.ListSnapshotsResponse{Snapshots: out, NextPageToken: next})
}

func (s *Server) getSnapshot(rq *request, vol, id string) {
	if err := checkPathID("Snapshot", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var sn *model.Snapshot
	err := s.st.View(rq.ctx, func(tx store.Tx) (err error) {
		sn, err = store.Get[model.Snapshot](tx, store.KindSnapshot, vol+"/snapshots/"+id)
		return err
	})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, snapshotToWire(sn))
}

func (s *Server) createSnapshot(rq *request, p parent, vol string) {
	id := rq.q.Get("snapshotId")
	if err := checkID("snapshotId", id); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Snapshot
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	sn := &model.Snapshot{Meta: model.Meta{Project: p.project, Location: p.location, ID: id, CreateTime: s.now().UTC(),
		State: model.StateCreating, Labels: w.Labels, Desc: w.Description}}
	if err := checkMeta(&sn.Meta); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpSnapshotCreate, vol+"/snapshots/"+id)
	s.startOperation(rq, op, func(tx store.Tx) error {
		v, err := store.Get[model.Volume](tx, store.KindVolume, vol)
		if err != nil {
			return err
		}
		sn.Volume = v.ID
		if v.State != model.StateReady {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s, not READY", v.ID, v.State)
		}
		if _, err := store.Get[model.Snapshot](tx, store.KindSnapshot, sn.Name()); err == nil {
			return model.Errorf(model.ErrAlreadyExists, "Snapshot '%s' already exists", sn.Name())
		}
		snaps, err := store.List[model.Snapshot](tx, store.KindSnapshot, vol)
		if err != nil {
			return err
		}
		if len(snaps) >= s.opts.Limits.MaxSnapshotsPerVol {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s already has %d snapshots, the most a volume may have", v.ID, len(snaps))
		}
		if err := s.checkStoreReserve(rq.ctx); err != nil {
			return err
		}
		return tx.Insert(store.KindSnapshot, sn.Name(), vol, sn)
	})
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
	name := vol + "/snapshots/" + id
	if err := checkBodyName(w.Name, name); err != nil {
		s.writeError(rq, err)
		return
	}
	op := s.newOperation(p, model.OpSnapshotUpdate, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
		if err != nil {
			return err
		}
		if sn.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "snapshot %s is %s; wait for its operation to finish", id, sn.State)
		}
		cur := snapshotToWire(sn)
		paths, err := updatePaths(rq.q, snapshotFields, present, &w, &cur)
		if err != nil {
			return err
		}
		op.Prev, _ = json.Marshal(sn)
		for _, f := range paths {
			switch f {
			case "description":
				sn.Desc = w.Description
			case "labels":
				sn.Labels = w.Labels
			}
		}
		if err := checkMeta(&sn.Meta); err != nil {
			return err
		}
		sn.State = model.StateUpdating
		return store.PutSnapshot(tx, sn)
	})
}

func (s *Server) deleteSnapshot(rq *request, p parent, vol, id string) {
	if err := checkPathID("Snapshot", id); err != nil {
		s.writeError(rq, err)
		return
	}
	name := vol + "/snapshots/" + id
	op := s.newOperation(p, model.OpSnapshotDelete, name)
	s.startOperation(rq, op, func(tx store.Tx) error {
		sn, err := store.Get[model.Snapshot](tx, store.KindSnapshot, name)
		if err != nil {
			return err
		}
		if sn.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "snapshot %s is %s; wait for its operation to finish", id, sn.State)
		}
		v, err := store.Get[model.Volume](tx, store.KindVolume, vol)
		if err != nil {
			return err
		}
		if v.State == model.StateRestoring || v.State == model.StateDeleting {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s", v.ID, v.State)
		}
		if err := s.refuseIfCloning(tx, p, sn); err != nil {
			return err
		}
		sn.State = model.StateDeleting
		return store.PutSnapshot(tx, sn)
	})
}
