package intent

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// SettingsFields are the mutable fields of the project settings, as an update
// mask names them.
var SettingsFields = []string{"throughputCapMibps"}

// SettingsUpdate asks to change a project's settings in a location.
type SettingsUpdate struct {
	Project, Location string
	// Mask names the fields to change (SettingsFields); empty = all of them.
	Mask []string
	// ThroughputCapMibps: the project's throughput cap in MiB/s, 0 = the server
	// default (Options.DefaultThroughputCapMibps).
	ThroughputCapMibps float64
}

// Settings returns the project's settings in force in a location: the stored ones
// with every unset value replaced by the server default, or, if none were ever
// stored, the defaults (zero UpdateTime).
func (s *Service) Settings(ctx context.Context, st store.Store, project, location string) (*model.Settings, error) {
	if project == "" || location == "" {
		return nil, model.Invalid("name", "the settings' project and location are required")
	}
	var out *model.Settings
	err := st.View(ctx, func(tx store.Tx) (err error) {
		out, err = s.readSettings(tx, project, location)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.effective(out), nil
}

// readSettings reads the stored settings, or zero settings (no UpdateTime) if
// there are none.
func (s *Service) readSettings(tx store.Tx, project, location string) (*model.Settings, error) {
	cur, err := store.Get[model.Settings](tx, store.KindSettings, model.SettingsName(project, location))
	if errors.Is(err, model.ErrNotFound) {
		return &model.Settings{Project: project, Location: location}, nil
	}
	return cur, err
}

// effective fills the server defaults into a copy of set.
func (s *Service) effective(set *model.Settings) *model.Settings {
	out := *set
	out.ThroughputCapMibps = set.EffectiveThroughputCapMibps(s.opts.DefaultThroughputCapMibps)
	return &out
}

// UpdateSettings changes the fields of a project's settings that req.Mask names,
// at once (nothing slow happens: the controller applies the new cap itself), and
// returns the settings then in force. An update that changes nothing writes
// nothing, so the same update twice answers the same. After a change it calls
// Options.OnSettingsChanged.
func (s *Service) UpdateSettings(ctx context.Context, st store.Store, req SettingsUpdate) (*model.Settings, error) {
	if req.Project == "" || req.Location == "" {
		return nil, model.Invalid("name", "the settings' project and location are required")
	}
	mask := req.Mask
	if len(mask) == 0 {
		mask = SettingsFields
	}
	for _, f := range mask {
		if !slices.Contains(SettingsFields, f) {
			return nil, model.Invalid("updateMask", "unknown field %q (the settings' fields are %v)", f, SettingsFields)
		}
	}
	if c := req.ThroughputCapMibps; math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > model.MaxThroughputCapMibps {
		return nil, model.Invalid("throughputCapMibps", "must be a number from 0 (the server default) to %d MiB/s, got %g", model.MaxThroughputCapMibps, c)
	}
	var out *model.Settings
	changed := false
	err := st.Update(ctx, func(tx store.Tx) error {
		cur, err := s.readSettings(tx, req.Project, req.Location)
		if err != nil {
			return err
		}
		next := *cur
		if slices.Contains(mask, "throughputCapMibps") {
			next.ThroughputCapMibps = req.ThroughputCapMibps
		}
		out = &next
		if next == *cur && !cur.UpdateTime.IsZero() {
			return nil // as stored: nothing to write
		}
		next.UpdateTime = s.opts.Now().UTC()
		changed = true
		return store.PutSettings(tx, &next)
	})
	if err != nil {
		return nil, err
	}
	if changed {
		s.log.Info("project settings changed", "project", req.Project, "location", req.Location, "throughput_cap_mibps", out.ThroughputCapMibps)
		if s.opts.OnSettingsChanged != nil {
			s.opts.OnSettingsChanged(req.Project, req.Location)
		}
	}
	return s.effective(out), nil
}
