package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/basin-nas/basin/internal/mountinfo"
	"github.com/basin-nas/basin/internal/nfs"
)

// View is one observation of a network's sandbox, for a reconcile pass over all of
// its volumes: the endpoint addresses on the sandbox's interface and the exports
// that are served as Basin loaded them. It is taken at once — one address listing
// (netlink, no process), one read of the mount table, one export listing from Ganesha —
// whatever the number of exports, and does not change afterwards.
type View struct {
	addrs   map[netip.Addr]bool
	exports map[uint64]string // id → the rendering of an export that is served
}

// NewView returns a View in which exactly exports are served, on every address of
// addrs (a sandbox serves every export on every address). For fakes of the data
// plane; Manager.View observes a real sandbox.
func NewView(addrs []netip.Addr, exports []nfs.Export) *View {
	v := &View{addrs: map[netip.Addr]bool{}, exports: map[uint64]string{}}
	for _, a := range addrs {
		v.addrs[a] = true
	}
	for _, ex := range exports {
		v.exports[ex.ID] = ex.Render()
	}
	return v
}

// Exported reports whether ex was served when the View was taken: loaded in
// Ganesha exactly as rendered, under its pseudo path, onto the mount that is now on
// its path (the device it was mounted from when it was loaded), and reachable on
// addr. A zero addr is not checked (a volume's snapshot exports share its address).
func (v *View) Exported(addr netip.Addr, ex nfs.Export) bool {
	if v == nil {
		return false
	}
	r, ok := v.exports[ex.ID]
	return ok && r == ex.Render() && (!addr.IsValid() || v.addrs[addr])
}

// HasAddr reports whether addr was an endpoint address of the sandbox.
func (v *View) HasAddr(addr netip.Addr) bool {
	return v != nil && v.addrs[addr]
}

// View observes a network's sandbox. A network with no running sandbox (or none
// configured) yields a View in which nothing is served.
func (m *Manager) View(ctx context.Context, network string) (*View, error) {
	m.mu.Lock()
	sb := m.sandboxes[network]
	m.mu.Unlock()
	if sb == nil || !sb.alive() {
		return NewView(nil, nil), nil
	}
	return sb.view(ctx)
}

// Exported reports whether ex is loaded as rendered, onto the volume now mounted on
// its path, and reachable on addr (not checked when zero). It observes the whole
// sandbox: to check many exports, take one View.
func (m *Manager) Exported(ctx context.Context, network string, addr netip.Addr, ex nfs.Export) (bool, error) {
	v, err := m.View(ctx, network)
	if err != nil {
		return false, err
	}
	return v.Exported(addr, ex), nil
}

func (sb *sandbox) view(ctx context.Context) (*View, error) {
	v := &View{addrs: map[netip.Addr]bool{}, exports: map[uint64]string{}}
	addrs, err := sb.addrs(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s addresses: %w", sb.net.Name, err)
	}
	for _, a := range addrs {
		v.addrs[a] = true
	}
	// Ganesha's list first, Basin's record second: an export loaded or unloaded in
	// between is seen as not served, which makes the controller load it again.
	var listed []nfs.ExportInfo
	var last error
	if err := waitFor(ctx, sb.timeout, func() bool {
		listed, last = sb.bus.ShowExports(ctx)
		return last == nil
	}); err != nil {
		return nil, fmt.Errorf("ganesha in sandbox %s is not answering: %v", sb.net.Name, last)
	}
	pseudo := make(map[uint64]string, len(listed))
	for _, e := range listed {
		pseudo[e.ID] = e.Path
	}
	mounts, err := mountinfo.MountPoints()
	if err != nil {
		return nil, err
	}
	sb.exportMu.Lock()
	defer sb.exportMu.Unlock()
	for id, le := range sb.loaded {
		if p, ok := pseudo[id]; !ok || p != le.ex.Pseudo {
			continue
		}
		// An export of a CephFS stands on no local mount to check.
		if le.ex.Ceph == nil {
			var st syscall.Stat_t
			if !mounts[le.ex.Path] || syscall.Stat(le.ex.Path, &st) != nil || st.Dev != le.dev {
				continue
			}
		}
		v.exports[id] = le.rendered
	}
	return v, nil
}

// addrs lists the endpoint addresses on the sandbox's interface (those of the
// network's prefix length).
func (sb *sandbox) addrs(ctx context.Context) ([]netip.Addr, error) {
	ps, err := sb.addrT.List()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, p := range ps {
		if p.Bits() == sb.net.Prefix.Bits() {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

// addAddr puts addr on the sandbox's interface; already there is success.
func (sb *sandbox) addAddr(ctx context.Context, addr netip.Addr) error {
	if !sb.net.Prefix.Contains(addr) {
		return fmt.Errorf("endpoint %s is outside network %s (%s)", addr, sb.net.Name, sb.net.Prefix)
	}
	return sb.addrT.Add(netip.PrefixFrom(addr, sb.net.Prefix.Bits()))
}

// delAddr takes addr off the sandbox's interface; already gone is success.
func (sb *sandbox) delAddr(ctx context.Context, addr netip.Addr) error {
	return sb.addrT.Del(netip.PrefixFrom(addr, sb.net.Prefix.Bits()))
}

// cutAddr takes addr off the sandbox's interface, resetting its clients'
// connections (netlinkAddrs.Cut); already gone is success. A cut that failed
// is logged: the address is off all the same.
func (sb *sandbox) cutAddr(ctx context.Context, addr netip.Addr) error {
	err := sb.addrT.Cut(netip.PrefixFrom(addr, sb.net.Prefix.Bits()))
	var cut *cutError
	if errors.As(err, &cut) {
		sb.log.Warn("endpoint address taken off; its clients' connections end when they next send", "addr", addr, "err", err)
		return nil
	}
	return err
}
