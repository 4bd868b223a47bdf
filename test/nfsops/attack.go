package nfsops

import (
	"context"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/nfsraw"
)

// Attacker is a client with write access (root kept) to an export of its own.
type Attacker struct {
	// V3 is the export mounted over NFSv3; Flood the same with several
	// connections, for floods.
	V3, Flood *nfs3.Client
	// Root4 is the NFSv4 handle of the export's root.
	Root4 []byte
	// Dial opens NFSv4 connections as the attacker: "NFSv4.0" and "NFSv4.1".
	Dial map[string]Dial4
	// OnDisk says whether name exists in the export's root, looked at on the
	// server's disk.
	OnDisk func(name string) bool
}

// FloodFor is how long each flood of AttackSpecialFiles goes on: 300 calls at
// once, again as soon as they are answered.
const FloodFor = 2 * time.Second

// Versions4 are the NFSv4 minor versions the attacks use.
var Versions4 = []string{"NFSv4.0", "NFSv4.1"}

// V4Handle is the NFSv4 handle of an object whose NFSv3 handle is fh (Ganesha
// pads NFSv3 handles to whole words).
func V4Handle(t testing.TB, fh []byte) []byte {
	t.Helper()
	h, err := nfsraw.ParseHandle(fh, true)
	if err != nil {
		t.Fatal(err)
	}
	h.V3, h.Pad = false, nil
	return h.Encode()
}

// AttackSpecialFiles runs the special-file attacks as a, while victim reads
// another tenant's file: no device can be made over NFSv3 or NFSv4; a FIFO and
// a socket can, and every NFSv3 procedure and NFSv4.0/4.1 operation that takes
// a handle, aimed at them (COMMIT included), comes back within Timeout, those
// that would touch their data refused — one at a time, then 300 at once, again
// and again for FloodFor (300 COMMITs on a fresh FIFO, then 300 calls of every
// kind). victim's reads must go on, each under ReadBound, throughout; the
// caller checks them afterwards too.
func AttackSpecialFiles(t *testing.T, ctx context.Context, a Attacker, victim *Reader) {
	special := map[string][]byte{}
	for name, typ := range map[string]nfs3.FileType{"fifo": nfs3.TypeFIFO, "sock": nfs3.TypeSock} {
		fh, err := a.V3.Mknod(ctx, a.V3.Root, name, typ, 0o666, 0, 0)
		if err != nil {
			t.Fatalf("MKNOD %s: %v (FIFOs and sockets may be made)", name, err)
		}
		special[name] = fh
	}

	t.Run("devices cannot be made", func(t *testing.T) {
		var names []string
		for i, chr := range []bool{true, false} {
			kind := []string{"chr", "blk"}[i]
			call := V3Device(a.V3.Root, kind+"3", chr)
			names = append(names, kind+"3")
			st, err := call.Run(ctx, a.V3)
			if err != nil || st != nfs3.ErrBadType {
				t.Errorf("NFSv3 %s: status %v, err %v; want NFS3ERR_BADTYPE", call.Name, st, err)
			}
			for _, version := range Versions4 {
				c, err := a.Dial[version](ctx)
				if err != nil {
					t.Fatal(err)
				}
				name := kind + "4" + version[len(version)-1:]
				names = append(names, name)
				call := V4Device(a.Root4, name, chr)
				st, _, err := c.Compound(ctx, call.Ops...)
				c.Close()
				if err != nil || st != nfsraw.ErrBadType {
					t.Errorf("%s %s: status %v, err %v; want NFS4ERR_BADTYPE", version, call.Name, st, err)
				}
			}
		}
		for _, name := range names {
			if a.OnDisk(name) {
				t.Errorf("device %s exists in the export", name)
			}
		}
	})

	for name, fh := range special {
		t.Run("NFSv3 on a "+name, func(t *testing.T) {
			CheckV3(t, ctx, a.V3, "a "+name, V3(Target{Dir: a.V3.Root, Name: name, FH: fh}))
		})
		for _, version := range Versions4 {
			t.Run(version+" on a "+name, func(t *testing.T) {
				target := Target{Dir: a.Root4, Name: name, FH: V4Handle(t, fh)}
				CheckV4(t, ctx, a.Dial[version], "a "+name, func(id uint64) []V4Call { return V4(target, id) })
			})
		}
	}
	victim.Check(t, "while each call was sent")

	t.Run("300 concurrent calls", func(t *testing.T) {
		// Special files of its own, fresh, as an attacker would make them.
		fresh := map[string][]byte{}
		for name, typ := range map[string]nfs3.FileType{"fifo-flood": nfs3.TypeFIFO, "sock-flood": nfs3.TypeSock} {
			fh, err := a.Flood.Mknod(ctx, a.Flood.Root, name, typ, 0o666, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			fresh[name] = fh
		}
		var commits, every []FloodCall
		for _, call := range V3(Target{Dir: a.Flood.Root, Name: "fifo-flood", FH: fresh["fifo-flood"]}) {
			if call.Name == "COMMIT" {
				commits = append(commits, V3Flood(a.Flood, call))
			}
		}
		for name, fh := range fresh {
			for _, call := range V3(Target{Dir: a.Flood.Root, Name: name, FH: fh}) {
				every = append(every, V3Flood(a.Flood, call))
			}
			for _, version := range Versions4 {
				for _, call := range V4(Target{Dir: a.Root4, Name: name, FH: V4Handle(t, fh)}, 0) {
					every = append(every, V4Flood(a.Dial[version], call))
				}
			}
		}
		// Each round sends 300 calls at once, again and again for FloodFor,
		// while the victim reads.
		for _, round := range []struct {
			what  string
			calls []FloodCall
		}{{"NFSv3 COMMITs on a FIFO", commits}, {"calls of every kind on a FIFO and a socket", every}} {
			reads, t0 := victim.Reads(), time.Now()
			all := map[string]int{}
			var firstErr error
			floods := 0
			for ; floods == 0 || time.Since(t0) < FloodFor; floods++ {
				outcomes, err := Flood(ctx, 300, round.calls)
				for k, v := range outcomes {
					all[k] += v
				}
				if firstErr == nil {
					firstErr = err
				}
				if outcomes["HUNG"] > 0 || ctx.Err() != nil {
					break
				}
			}
			t.Logf("%d × 300 %s in %v: %v", floods, round.what, time.Since(t0), all)
			if all["HUNG"] > 0 {
				t.Errorf("300 %s: %d got no answer within %v", round.what, all["HUNG"], 2*Timeout)
			}
			if firstErr != nil {
				t.Errorf("300 %s: %v", round.what, firstErr)
			}
			victim.Check(t, "during 300 "+round.what)
			if n := victim.Reads() - reads; n < 10 {
				t.Errorf("another tenant read %d times during 300 %s (%v); want 10 or more", n, round.what, time.Since(t0))
			}
		}
	})
}
