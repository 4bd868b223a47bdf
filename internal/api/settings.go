package api

import (
	"net/http"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
)

// The project settings (Basin-only): one resource per project and location,
// read and changed synchronously (no operation).
var settingsFields = fieldRules{
	mutable: intent.SettingsFields,
	output:  []string{"updateTime"},
}

func settingsToWire(st *model.Settings) apiv1.Settings {
	return apiv1.Settings{Name: st.Name(), ThroughputCapMibps: apiv1.Double(st.ThroughputCapMibps), UpdateTime: apiv1.FormatTime(st.UpdateTime)}
}

// checkSettingsLocation refuses the "-" wildcard: settings belong to one location.
func checkSettingsLocation(p parent) error {
	if p.location == "-" {
		return model.Invalid("name", "location \"-\" is only valid when listing; settings belong to one location")
	}
	return nil
}

func (s *Server) getSettings(rq *request, p parent) {
	if err := checkSettingsLocation(p); err != nil {
		s.writeError(rq, err)
		return
	}
	set, err := s.intents().Settings(rq.ctx, s.st, p.project, p.location)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, settingsToWire(set))
}

// updateSettings applies the fields updateMask names (camelCase or snake_case);
// without an updateMask, every mutable field: one absent from the body goes back
// to its default.
func (s *Server) updateSettings(rq *request, p parent) {
	if err := checkSettingsLocation(p); err != nil {
		s.writeError(rq, err)
		return
	}
	var w apiv1.Settings
	if _, err := s.readBody(rq, &w); err != nil {
		s.writeError(rq, err)
		return
	}
	if err := checkBodyName(w.Name, model.SettingsName(p.project, p.location)); err != nil {
		s.writeError(rq, err)
		return
	}
	var mask []string
	if _, ok := rq.q["updateMask"]; ok || rq.q.Has("update_mask") {
		var err error
		if mask, err = updatePaths(rq.q, settingsFields, nil, nil, nil); err != nil {
			s.writeError(rq, err)
			return
		}
	}
	set, err := s.intents().UpdateSettings(rq.ctx, s.st, intent.SettingsUpdate{Project: p.project, Location: p.location,
		Mask: mask, ThroughputCapMibps: float64(w.ThroughputCapMibps)})
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, settingsToWire(set))
}
