// Package fake is an in-memory qos.Driver for controller tests: it holds each link's
// live tree as the kernel would, and records every Apply's changes (computed with
// qos.Plan, as the real driver does), so a test can assert that a resize changed
// one class in place and deleted nothing.
package fake

import (
	"context"
	"sync"

	"github.com/basin-nas/basin/internal/qos"
)

// Driver is the fake.
type Driver struct {
	mu       sync.Mutex
	live     map[qos.Link]qos.Tree
	applies  []Applied
	errs     map[string]error // method → error it returns (FailOn)
	counters map[qos.Link]map[string]qos.Counters
}

// Applied is one successful Apply: its link and the changes it made.
type Applied struct {
	Link    qos.Link
	Changes []qos.Change
}

var _ qos.Driver = (*Driver)(nil)

// New returns an empty fake.
func New() *Driver {
	return &Driver{live: map[qos.Link]qos.Tree{}, errs: map[string]error{}, counters: map[qos.Link]map[string]qos.Counters{}}
}

// FailOn makes every later call of method ("Apply", "Read", "Counters" or "Remove")
// return err; a nil err clears it.
func (d *Driver) FailOn(method string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.errs, method)
		return
	}
	d.errs[method] = err
}

// Applies returns every successful Apply so far, in order.
func (d *Driver) Applies() []Applied {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Applied(nil), d.applies...)
}

// Links returns the links that hold a tree.
func (d *Driver) Links() []qos.Link {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []qos.Link
	for l := range d.live {
		out = append(out, l)
	}
	return out
}

// SetCounters sets what Counters returns for link.
func (d *Driver) SetCounters(l qos.Link, c map[string]qos.Counters) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counters[l] = c
}

func (d *Driver) Apply(ctx context.Context, l qos.Link, t qos.Tree) error {
	if err := t.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.errs["Apply"]; err != nil {
		return err
	}
	changes := qos.Plan(d.live[l], t)
	if len(t.Classes) == 0 {
		delete(d.live, l)
	} else {
		d.live[l] = t.Canonical()
	}
	d.applies = append(d.applies, Applied{Link: l, Changes: changes})
	return nil
}

func (d *Driver) Read(ctx context.Context, l qos.Link) (qos.Tree, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.errs["Read"]; err != nil {
		return qos.Tree{}, err
	}
	return d.live[l].Canonical(), nil
}

func (d *Driver) Counters(ctx context.Context, l qos.Link) (map[string]qos.Counters, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.errs["Counters"]; err != nil {
		return nil, err
	}
	out := map[string]qos.Counters{}
	if _, ok := d.live[l]; !ok {
		return out, nil
	}
	out[qos.DefaultKey] = d.counters[l][qos.DefaultKey]
	for _, c := range d.live[l].Classes {
		out[c.Key] = d.counters[l][c.Key]
	}
	return out, nil
}

func (d *Driver) Remove(ctx context.Context, l qos.Link) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.errs["Remove"]; err != nil {
		return err
	}
	delete(d.live, l)
	return nil
}
