package schedule

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

// Spec is one schedule of a snapshot policy, with the API's defaults applied (minute
// and hour 0, weekly on Sunday, monthly on the 1st): when it takes a snapshot, in
// UTC, and how many it keeps.
type Spec struct {
	Kind         string // model.ScheduleHourly…
	Keep         int
	Minute, Hour int
	Weekdays     []time.Weekday // weekly: default Sunday
	Days         []int          // monthly: days of the month, default the 1st
}

// Kinds are the schedule kinds, in the order a pass handles them.
var Kinds = []string{model.ScheduleHourly, model.ScheduleDaily, model.ScheduleWeekly, model.ScheduleMonthly}

// Specs returns the schedules a policy runs: none unless it is enabled, and none
// that keeps no snapshot (a schedule with snapshotsToKeep 0 or unset takes none).
// The policy was validated by the intent layer; a value out of range is ignored.
func Specs(p *model.SnapshotPolicy) map[string]Spec {
	out := map[string]Spec{}
	if p == nil || p.Enabled == nil || !*p.Enabled {
		return out
	}
	for kind, sc := range map[string]*model.Schedule{model.ScheduleHourly: p.Hourly, model.ScheduleDaily: p.Daily,
		model.ScheduleWeekly: p.Weekly, model.ScheduleMonthly: p.Monthly} {
		if sc == nil {
			continue
		}
		s := Spec{Kind: kind, Keep: num(sc.SnapshotsToKeep, 0, 0, math.MaxInt32)}
		if s.Keep == 0 {
			continue
		}
		s.Minute = num(sc.Minute, 0, 0, 59)
		if kind != model.ScheduleHourly {
			s.Hour = num(sc.Hour, 0, 0, 23)
		}
		switch kind {
		case model.ScheduleWeekly:
			s.Weekdays = weekdays(sc.Day)
		case model.ScheduleMonthly:
			s.Days = monthDays(sc.DaysOfMonth)
		}
		out[kind] = s
	}
	return out
}

// num reads an optional API double as an integer in [lo, hi]; def if unset or out
// of range.
func num(v *float64, def, lo, hi int) int {
	if v == nil || *v != math.Trunc(*v) || *v < float64(lo) || *v > float64(hi) {
		return def
	}
	return int(*v)
}

var dayNames = map[string]time.Weekday{"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday,
	"wednesday": time.Wednesday, "thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday}

func weekdays(s *string) []time.Weekday {
	var out []time.Weekday
	if s != nil {
		for _, d := range strings.Split(*s, ",") {
			if w, ok := dayNames[strings.ToLower(strings.TrimSpace(d))]; ok && !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	if len(out) == 0 {
		out = []time.Weekday{time.Sunday}
	}
	slices.Sort(out)
	return out
}

func monthDays(s *string) []int {
	var out []int
	if s != nil {
		for _, d := range strings.Split(*s, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(d)); err == nil && n >= 1 && n <= 31 && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		out = []int{1}
	}
	slices.Sort(out)
	return out
}

// Sig identifies the schedule's timing (not what it keeps): a change of it is an
// edit, which takes effect at the next boundary.
func (s Spec) Sig() string {
	return fmt.Sprintf("%s m%d h%d w%v d%v", s.Kind, s.Minute, s.Hour, s.Weekdays, s.Days)
}

// on reports whether day d (midnight UTC) is one the schedule runs on.
func (s Spec) on(d time.Time) bool {
	switch s.Kind {
	case model.ScheduleWeekly:
		return slices.Contains(s.Weekdays, d.Weekday())
	case model.ScheduleMonthly:
		// A day the month does not have (the 31st of April) is skipped, as cron does.
		return slices.Contains(s.Days, d.Day())
	}
	return true
}

// searchDays bounds the days Last and Next look through: the longest gap
// between two runs is a monthly schedule on the 31st alone (62 days).
const searchDays = 64

// Last returns the schedule's latest boundary at or before t (UTC).
func (s Spec) Last(t time.Time) time.Time {
	t = t.UTC()
	if s.Kind == model.ScheduleHourly {
		b := t.Truncate(time.Hour).Add(time.Duration(s.Minute) * time.Minute)
		if b.After(t) {
			b = b.Add(-time.Hour)
		}
		return b
	}
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for range searchDays {
		b := day.Add(time.Duration(s.Hour)*time.Hour + time.Duration(s.Minute)*time.Minute)
		if s.on(day) && !b.After(t) {
			return b
		}
		day = day.AddDate(0, 0, -1)
	}
	return time.Time{}
}

// Next returns the schedule's first boundary after t (UTC).
func (s Spec) Next(t time.Time) time.Time {
	t = t.UTC()
	if s.Kind == model.ScheduleHourly {
		return s.Last(t).Add(time.Hour)
	}
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	for range searchDays {
		b := day.Add(time.Duration(s.Hour)*time.Hour + time.Duration(s.Minute)*time.Minute)
		if s.on(day) && b.After(t) {
			return b
		}
		day = day.AddDate(0, 0, 1)
	}
	return time.Time{}
}

// Name is the name of the snapshot the schedule takes for boundary b, e.g.
// "hourly-20261122-1400" (UTC).
func (s Spec) Name(b time.Time) string {
	return s.Kind + "-" + b.UTC().Format("20060102-1504")
}
