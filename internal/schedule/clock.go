package schedule

import "time"

// Clock is the scheduler's time: the real one, a dilated one for end-to-end
// tests, a fake one for unit tests.
type Clock interface {
	Now() time.Time
	// Timer returns a channel that receives once d has passed, and a function
	// that stops the timer early.
	Timer(d time.Duration) (<-chan time.Time, func() bool)
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// Timer implements Clock.
func (RealClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Dilated is a clock that runs Speed times as fast as the wall clock from Start
// on: with Speed 360 an hour passes in 10 s. It lets a test watch hourly and
// daily schedules run against real storage; nothing else uses it.
type Dilated struct {
	Start time.Time
	Speed float64
}

// Now implements Clock.
func (d Dilated) Now() time.Time {
	return d.Start.Add(time.Duration(float64(time.Since(d.Start)) * d.Speed))
}

// Timer implements Clock: d of the dilated clock's time, d/Speed of the wall
// clock's.
func (d Dilated) Timer(dur time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(time.Duration(float64(dur) / d.Speed))
	return t.C, t.Stop
}
