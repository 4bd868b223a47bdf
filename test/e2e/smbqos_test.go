package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/client"
)

// TestSMBServiceLevel: SMB volumes are held to their service level like NFS ones
// (the shaper classifies by endpoint address, whatever the protocol). Two SMB
// volumes of a Premium pool, 256 GiB (16 MiB/s) and 512 GiB (32 MiB/s), read and
// written over SMB 3 by a domain user with `basin bench --engine smb`: each alone
// and both at once get 0.93–1.01 of their limit (medians of 3), and the wire bytes
// of each volume's traffic-control class follow the load.
func TestSMBServiceLevel(t *testing.T) {
	l := newSMBLab(t, nil, qosFlags...)
	alice := l.user("alice")
	vol := func(id string, gib int, want float64) *qvol {
		t.Helper()
		sh := l.volume(id, map[string]any{"capacityGib": gib})
		var v client.Object
		if err := l.c.Do(context.Background(), "GET", loc+"/volumes/"+id, nil, nil, &v); err != nil {
			t.Fatal(err)
		}
		if got := v["throughputMibps"]; got != want {
			t.Fatalf("volume %s: throughputMibps %v, want %v", id, got, want)
		}
		q := &qvol{project: "p1", id: sh.Share, limit: want, ep: sh.Endpoint, dir: l.s.volumeDir("p1", id), smb: &alice, domain: l.dc.Domain}
		q.layOut(t)
		return q
	}
	slow, fast := vol("slow", 256, 16), vol("fast", 512, 32)

	for _, rw := range []string{"read", "write"} {
		for _, v := range []*qvol{slow, fast} {
			got := medianOf3(t, l.h, load{v: v, rw: rw, secs: 4})
			within(t, fmt.Sprintf("SMB %s alone on %s", rw, v.id), got[0], v.limit, 0.93, 1.01)
		}
	}
	got := medianOf3(t, l.h, load{v: slow, rw: "read", secs: 4}, load{v: fast, rw: "read", secs: 4})
	within(t, "SMB read on slow beside fast", got[0], slow.limit, 0.93, 1.01)
	within(t, "SMB read on fast beside slow", got[1], fast.limit, 0.93, 1.01)

	// The traffic is in the volume's own class: its wire rate during a read is the
	// payload plus headers, and the other volume's class stays idle.
	mSlow, stopSlow := l.s.meter(t, slow.ep)
	mFast, stopFast := l.s.meter(t, fast.ep)
	from := time.Now()
	payload := runLoads(t, l.h, load{v: slow, rw: "read", secs: 4})[0]
	to := time.Now()
	stopSlow()
	stopFast()
	wire, idle := mSlow.rate(from.Add(time.Second), to.Add(-time.Second)), mFast.rate(from, to)
	t.Logf("slow: payload %.2f MiB/s, its class %.2f MiB/s on the wire; fast's class %.3f MiB/s", payload, wire, idle)
	if r := wire / payload; r < 0.98 || r > 1.08 {
		t.Errorf("slow's class moved %.2f MiB/s for %.2f MiB/s of SMB payload (%.3f): the traffic is not in its class", wire, payload, r)
	}
	if idle > 0.1 {
		t.Errorf("fast's class moved %.3f MiB/s while only slow was read", idle)
	}
}
