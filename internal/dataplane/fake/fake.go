// Package fake is an in-memory data plane for controller and API tests: it records
// which exports are loaded where, as a real sandbox would hold them.
package fake

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"

	"github.com/basin-nas/basin/internal/dataplane"
	"github.com/basin-nas/basin/internal/nfs"
)

// Entry is one loaded export.
type Entry struct {
	Network string
	Addr    netip.Addr
	Export  nfs.Export
}

// DataPlane is the fake.
type DataPlane struct {
	// Mounted, if set, reports whether a path has a volume's storage mounted on
	// it (storage/fake's Backend.Mounted). Then, as a real sandbox, the fake
	// refuses to export a path that is not mounted, and an export whose path is
	// no longer mounted is not served (View and Exported leave it out). nil:
	// every path is mounted. Set it before the first call.
	Mounted func(path string) bool

	mu      sync.Mutex
	exports map[uint64]Entry
	// History lists "export N" / "unexport N" in call order.
	history []string
	views   int
}

// New returns an empty fake.
func New() *DataPlane { return &DataPlane{exports: map[uint64]Entry{}} }

// Export implements controller.DataPlane. Like Ganesha, it refuses an export it
// cannot load, an ID that another path holds ("already active"; an update
// cannot change the path), and a pseudo path another export holds on the network.
func (d *DataPlane) Export(_ context.Context, network string, addr netip.Addr, ex nfs.Export) error {
	if err := ex.Validate(); err != nil {
		return err
	}
	if d.Mounted != nil && !d.Mounted(ex.Path) {
		return fmt.Errorf("refusing to export %s: %s is not mounted", ex.Pseudo, ex.Path)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.exports[ex.ID]; ok && e.Export.Path != ex.Path {
		return fmt.Errorf("export %d is already active for %s; cannot load %s", ex.ID, e.Export.Path, ex.Path)
	}
	for id, e := range d.exports {
		if id != ex.ID && e.Network == network && e.Export.Pseudo == ex.Pseudo {
			return fmt.Errorf("pseudo path %s is already exported (export %d)", ex.Pseudo, id)
		}
	}
	d.exports[ex.ID] = Entry{Network: network, Addr: addr, Export: ex}
	d.history = append(d.history, "export "+ex.Pseudo)
	return nil
}

// Release implements controller.DataPlane: Unexport, as far as a fake sees.
func (d *DataPlane) Release(ctx context.Context, network string, addr netip.Addr, id uint64) error {
	return d.Unexport(ctx, network, addr, id)
}

// Unexport implements controller.DataPlane. Id 0 (an SMB-only volume's
// address alone) is recorded as "unaddr ADDR".
func (d *DataPlane) Unexport(_ context.Context, _ string, addr netip.Addr, id uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id == 0 && addr.IsValid() {
		d.history = append(d.history, "unaddr "+addr.String())
	}
	if e, ok := d.exports[id]; ok {
		d.history = append(d.history, "unexport "+e.Export.Pseudo)
	}
	delete(d.exports, id)
	return nil
}

// Exported reports whether ex is loaded as rendered on network, reachable on addr
// (the zero Addr: on any address).
func (d *DataPlane) Exported(_ context.Context, network string, addr netip.Addr, ex nfs.Export) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.exported(network, addr, ex), nil
}

func (d *DataPlane) exported(network string, addr netip.Addr, ex nfs.Export) bool {
	e, ok := d.exports[ex.ID]
	return ok && e.Network == network && (!addr.IsValid() || e.Addr == addr) && e.Export.Render() == ex.Render() && d.serves(e)
}

// serves reports whether e's path is still mounted.
func (d *DataPlane) serves(e Entry) bool { return d.Mounted == nil || d.Mounted(e.Export.Path) }

// Views returns how many views were taken.
func (d *DataPlane) Views() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.views
}

// View returns what the network serves, as dataplane.Manager.View does: every
// export loaded on the network, reachable on every address its exports were given.
func (d *DataPlane) View(_ context.Context, network string) (*dataplane.View, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.views++
	var addrs []netip.Addr
	var exports []nfs.Export
	for _, e := range d.exports {
		if e.Network != network || !d.serves(e) {
			continue
		}
		if e.Addr.IsValid() {
			addrs = append(addrs, e.Addr)
		}
		exports = append(exports, e.Export)
	}
	return dataplane.NewView(addrs, exports), nil
}

// Exports returns the loaded exports by id.
func (d *DataPlane) Exports() map[uint64]Entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.exports)
}

// History returns the export and unexport calls so far.
func (d *DataPlane) History() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.history...)
}
