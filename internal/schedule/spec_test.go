package schedule

import (
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/model"
)

func f(v float64) *float64 { return &v }
func str(s string) *string { return &s }

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		t, err = time.Parse("2006-01-02 15:04:05", s)
	}
	if err != nil {
		panic(err)
	}
	return t
}

func TestSpecs(t *testing.T) {
	on, off := true, false
	p := &model.SnapshotPolicy{Enabled: &on,
		Hourly:  &model.Schedule{SnapshotsToKeep: f(3), Minute: f(15)},
		Daily:   &model.Schedule{SnapshotsToKeep: f(7), Hour: f(1), Minute: f(30)},
		Weekly:  &model.Schedule{SnapshotsToKeep: f(2), Day: str("thursday, Monday"), Hour: f(2), Minute: f(45)},
		Monthly: &model.Schedule{SnapshotsToKeep: f(0), DaysOfMonth: str("15")}}
	specs := Specs(p)
	if len(specs) != 3 {
		t.Fatalf("specs %v: want hourly, daily, weekly (monthly keeps none)", specs)
	}
	if w := specs[model.ScheduleWeekly]; w.Keep != 2 || w.Hour != 2 || w.Minute != 45 || len(w.Weekdays) != 2 || w.Weekdays[0] != time.Monday || w.Weekdays[1] != time.Thursday {
		t.Errorf("weekly %+v", w)
	}
	if h := specs[model.ScheduleHourly]; h.Hour != 0 || h.Minute != 15 || h.Keep != 3 {
		t.Errorf("hourly %+v", h)
	}
	p.Enabled = &off
	if len(Specs(p)) != 0 {
		t.Error("a disabled policy runs")
	}
	p.Enabled = nil
	if len(Specs(p)) != 0 || len(Specs(nil)) != 0 {
		t.Error("a policy without enabled runs (enabled defaults to false)")
	}
	// Defaults: minute and hour 0, weekly on Sunday, monthly on the 1st.
	d := Specs(&model.SnapshotPolicy{Enabled: &on, Weekly: &model.Schedule{SnapshotsToKeep: f(1)}, Monthly: &model.Schedule{SnapshotsToKeep: f(1)}})
	if w := d[model.ScheduleWeekly]; len(w.Weekdays) != 1 || w.Weekdays[0] != time.Sunday || w.Hour != 0 || w.Minute != 0 {
		t.Errorf("weekly defaults %+v", w)
	}
	if m := d[model.ScheduleMonthly]; len(m.Days) != 1 || m.Days[0] != 1 {
		t.Errorf("monthly defaults %+v", m)
	}
}

// Each kind's boundaries, the latest at or before a time and the first after it,
// in UTC.
func TestBoundaries(t *testing.T) {
	hourly := Spec{Kind: model.ScheduleHourly, Minute: 15}
	daily := Spec{Kind: model.ScheduleDaily, Hour: 1, Minute: 30}
	weekly := Spec{Kind: model.ScheduleWeekly, Hour: 2, Minute: 45, Weekdays: []time.Weekday{time.Monday, time.Thursday}}
	monthly := Spec{Kind: model.ScheduleMonthly, Hour: 3, Days: []int{15, 31}}
	for _, c := range []struct {
		name       string
		s          Spec
		t          string
		last, next string
	}{
		{"hourly before the minute", hourly, "2026-11-22 14:10", "2026-11-22 13:15", "2026-11-22 14:15"},
		{"hourly on the minute", hourly, "2026-11-22 14:15", "2026-11-22 14:15", "2026-11-22 15:15"},
		{"hourly across midnight", hourly, "2026-11-23 00:05", "2026-11-22 23:15", "2026-11-23 00:15"},
		{"daily before", daily, "2026-11-22 01:29", "2026-11-21 01:30", "2026-11-22 01:30"},
		{"daily on", daily, "2026-11-22 01:30", "2026-11-22 01:30", "2026-11-23 01:30"},
		{"daily across a year", daily, "2027-01-01 00:00", "2026-12-31 01:30", "2027-01-01 01:30"},
		// 2026-11-22 is a Sunday.
		{"weekly on a Sunday", weekly, "2026-11-22 12:00", "2026-11-19 02:45", "2026-11-23 02:45"},
		{"weekly on its Monday, later", weekly, "2026-11-23 03:00", "2026-11-23 02:45", "2026-11-26 02:45"},
		{"weekly on its Thursday, earlier", weekly, "2026-11-26 02:44", "2026-11-23 02:45", "2026-11-26 02:45"},
		{"monthly in a month with a 31st", monthly, "2026-12-20 00:00", "2026-12-15 03:00", "2026-12-31 03:00"},
		{"monthly skips a month's missing 31st", monthly, "2026-11-20 00:00", "2026-11-15 03:00", "2026-12-15 03:00"},
		{"monthly on the 31st, later", monthly, "2026-10-31 04:00", "2026-10-31 03:00", "2026-11-15 03:00"},
		{"monthly in February", monthly, "2027-03-01 00:00", "2027-02-15 03:00", "2027-03-15 03:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := at(c.t)
			if got := c.s.Last(now); !got.Equal(at(c.last)) {
				t.Errorf("Last(%s) = %s, want %s", c.t, got, c.last)
			}
			if got := c.s.Next(now); !got.Equal(at(c.next)) {
				t.Errorf("Next(%s) = %s, want %s", c.t, got, c.next)
			}
		})
	}
	// Other time zones are read in UTC.
	ny := time.FixedZone("UTC-5", -5*3600)
	if got := daily.Last(time.Date(2026, 11, 21, 21, 0, 0, 0, ny)); !got.Equal(at("2026-11-22 01:30")) {
		t.Errorf("Last of a UTC-5 time = %s", got)
	}
	// A monthly schedule on the 31st alone still finds its runs.
	only31 := Spec{Kind: model.ScheduleMonthly, Days: []int{31}}
	if got := only31.Next(at("2027-01-31 01:00")); !got.Equal(at("2027-03-31 00:00")) {
		t.Errorf("next 31st after January = %s", got)
	}
	if got := only31.Last(at("2027-03-30 00:00")); !got.Equal(at("2027-01-31 00:00")) {
		t.Errorf("last 31st before March's = %s", got)
	}
}

func TestNameAndSig(t *testing.T) {
	s := Spec{Kind: model.ScheduleHourly, Minute: 0}
	if got := s.Name(time.Date(2026, 11, 22, 14, 0, 0, 0, time.UTC)); got != "hourly-20261122-1400" {
		t.Errorf("name %q", got)
	}
	if got := s.Name(time.Date(2026, 11, 22, 9, 0, 0, 0, time.FixedZone("UTC+1", 3600))); got != "hourly-20261122-0800" {
		t.Errorf("a name is in UTC: %q", got)
	}
	if Spec.Sig(Spec{Kind: "hourly", Minute: 5, Keep: 3}) != Spec.Sig(Spec{Kind: "hourly", Minute: 5, Keep: 9}) {
		t.Error("keeping more is an edit of the timing")
	}
	if Spec.Sig(Spec{Kind: "hourly", Minute: 5}) == Spec.Sig(Spec{Kind: "hourly", Minute: 6}) {
		t.Error("a new minute is not an edit")
	}
}

// Whatever a policy holds (its numbers and day lists are API input), the
// schedules it yields have boundaries in order around any time: Last ≤ t < Next,
// both on the schedule's minute, and nothing between them.
func FuzzSpecs(f *testing.F) {
	f.Add(int64(1795356000), 3.0, 15.0, 1.0, "Thursday, monday", "1,15,31")
	f.Add(int64(0), 1.0, 59.0, 23.0, "", "31")
	f.Fuzz(func(t *testing.T, unix int64, keep, minute, hour float64, day, days string) {
		on := true
		sc := &model.Schedule{SnapshotsToKeep: &keep, Minute: &minute, Hour: &hour, Day: &day, DaysOfMonth: &days}
		now := time.Unix(unix%(1<<36), 0).UTC()
		for kind, s := range Specs(&model.SnapshotPolicy{Enabled: &on, Hourly: sc, Daily: sc, Weekly: sc, Monthly: sc}) {
			last, next := s.Last(now), s.Next(now)
			if last.IsZero() || next.IsZero() || last.After(now) || !next.After(now) || last.Minute() != s.Minute || next.Minute() != s.Minute {
				t.Fatalf("%s %+v at %s: last %s, next %s", kind, s, now, last, next)
			}
			if after := s.Next(last); !after.Equal(next) {
				t.Fatalf("%s %+v: the boundary after %s is %s, not %s", kind, s, last, after, next)
			}
			if got := s.Last(next); !got.Equal(next) {
				t.Fatalf("%s %+v: Last(%s) = %s", kind, s, next, got)
			}
		}
	})
}
