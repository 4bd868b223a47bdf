package ganeshatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/basin-nas/basin/internal/nfs"
	"github.com/basin-nas/basin/test/nfsraw"
)

// NFSv4 state across a restart of Ganesha (for an upgrade, or after it died),
// on Basin's own configuration (internal/nfs RenderConfig) and Basin's build:
// today's (no grace, exports added over DBus once Ganesha is up) loses every
// open and lock, and a client that comes back before its export is loaded
// meets NFS4ERR_STALE; with grace on and the exports of mounted volumes
// included in ganesha.conf, a client reclaims its open and its lock, nobody
// else takes them meanwhile, and its data reads back.

// Client hosts of the grace tests (the lab's export lets 127.0.0.0/8 in).
const (
	graceA = "127.0.0.2" // holds an open and a lock, reclaims them
	graceB = "127.0.0.4" // comes after the restart and wants the same file
	graceC = "127.0.0.5" // holds state and does not come back in time
)

// lockLen is the byte range client A locks (from 0) and writes.
const lockLen = 4096

// graceLab is one btrfs volume mounted as Basin mounts one, exported as
// export 1 at /vol from an export file Export.Render wrote, and a Ganesha
// with Basin's configuration (opts) and a private DBus.
type graceLab struct {
	srv  *Server
	vol  string
	file string // the export file
	bus  *nfs.DBus
	raw  string // the bus address
}

func newGraceLab(t *testing.T, opts nfs.ConfigOptions, include bool) *graceLab {
	Need(t)
	if *ganeshaBin == DebianBin {
		t.Skip("the grace tests run Basin's build of Ganesha (no NLM, so grace can end early)")
	}
	root := Scratch(t, "grace")
	fs1 := NewBtrfs(t, filepath.Join(root, "fs.img"), 300<<20)
	top := filepath.Join(root, "top")
	fs1.Mount(top, "")
	Run(t, "btrfs", "-q", "subvolume", "create", filepath.Join(top, "live"))
	Unmount(top)
	l := &graceLab{vol: filepath.Join(root, "mnt", "vol")}
	fs1.Mount(l.vol, "subvol=live")
	fs1.Settle()

	l.srv = NewServer(t, *ganeshaBin)
	l.raw = StartBus(t, l.srv.Dir)
	l.srv.Env = []string{"DBUS_SYSTEM_BUS_ADDRESS=" + l.raw}
	l.bus = &nfs.DBus{Address: l.raw}
	t.Cleanup(func() { l.bus.Close() })

	ex := nfs.Export{ID: 1, Path: l.vol, Pseudo: "/vol", Protocols: []int{3, 4}, Clients: []nfs.Client{
		{Clients: []string{"127.0.0.0/8"}, Access: nfs.AccessRW, Squash: nfs.NoRootSquash, Protocols: []int{3, 4}}}}
	if err := ex.Validate(); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(l.srv.Dir, "exports"), 0o700)
	l.file = filepath.Join(l.srv.Dir, "exports", "1.conf")
	if err := os.WriteFile(l.file, []byte(ex.Render()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.StateDir = l.srv.Dir
	if include {
		opts.Includes = []string{"exports/1.conf"} // relative: from ganesha.conf's directory
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.srv.ConfPath(), []byte(nfs.RenderConfig(opts)), 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// start launches Ganesha and waits until it answers on the bus; without the
// include it then adds the export over DBus, as Basin does today.
func (l *graceLab) start(t *testing.T, ctx context.Context, addExport bool) {
	t.Helper()
	l.srv.Launch(t)
	l.waitBus(t, ctx)
	if addExport {
		if err := l.bus.AddExport(ctx, l.file, 1); err != nil {
			t.Fatalf("add export: %v\n%s", err, l.srv.Log())
		}
	}
}

func (l *graceLab) waitBus(t *testing.T, ctx context.Context) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := l.bus.Ping(pctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ganesha not on the bus: %v\n%s", err, l.srv.Log())
		}
	}
}

// holder is a client with an open (share access both, deny write) of file
// "data" and a write lock on its first lockLen bytes, which it wrote.
type holder struct {
	c                  *nfsraw.Client
	root, fh           []byte
	openOwner, lkOwner []byte
	open, lock         nfsraw.StateID
	data               []byte
}

func dialHolder(t *testing.T, ctx context.Context, l *graceLab, ip, owner, file string) *holder {
	t.Helper()
	var verf [8]byte
	rand.Read(verf[:])
	c, err := nfsraw.Dial41With(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: ip, Machine: owner},
		nfsraw.Options41{Owner: owner, Verifier: verf})
	if err != nil {
		t.Fatalf("%s: dial: %v", owner, err)
	}
	t.Cleanup(func() { c.Close() })
	h := &holder{c: c, openOwner: []byte(owner + "/open"), lkOwner: []byte(owner + "/lock"),
		data: bytes.Repeat([]byte(fmt.Sprintf("%s wrote this before the restart. ", owner)), lockLen)[:lockLen]}
	if h.root, err = c.LookupPath(ctx, "vol"); err != nil {
		t.Fatalf("%s: lookup /vol: %v", owner, err)
	}
	if h.fh, h.open, err = c.OpenFile(ctx, h.root, file, nfsraw.ShareAccessBoth, nfsraw.ShareDenyWrite, h.openOwner, true); err != nil {
		t.Fatalf("%s: open: %v", owner, err)
	}
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Length: lockLen, NewOwner: true, OpenStateID: h.open,
		Owner: nfsraw.LockOwner{ClientID: c.ClientID(), Owner: h.lkOwner}}
	if err := c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, lk); err != nil {
		t.Fatalf("%s: lock: %v", owner, err)
	}
	h.lock = lk.StateID
	w := &nfsraw.Write{StateID: h.lock, Data: h.data}
	if err := c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, w); err != nil || w.Count != lockLen {
		t.Fatalf("%s: write under the lock: %v (%d bytes)", owner, err, w.Count)
	}
	return h
}

// reestablish is what a client does when its server went away: it tries its
// session until the server answers again, with a new client ID (the server
// restarted, so it did not know it).
func (h *holder) reestablish(t *testing.T, ctx context.Context) {
	t.Helper()
	err := h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, &nfsraw.Read{StateID: h.lock, Count: 16})
	if !nfsraw.NeedsReestablish(err) {
		t.Fatalf("after the restart the old session answered %v", err)
	}
	for {
		re, err := h.c.Reestablish(ctx)
		if err == nil {
			if re.Confirmed {
				t.Fatal("the restarted server still knew the client ID")
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("reestablish: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reclaim reclaims the open and the lock (OPEN CLAIM_PREVIOUS, LOCK reclaim).
func (h *holder) reclaim(ctx context.Context) error {
	open, err := h.c.ReclaimOpen(ctx, h.fh, nfsraw.ShareAccessBoth, nfsraw.ShareDenyWrite, h.openOwner)
	if err != nil {
		return fmt.Errorf("reclaim open: %w", err)
	}
	h.open = open
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Reclaim: true, Length: lockLen, NewOwner: true, OpenStateID: open,
		Owner: nfsraw.LockOwner{ClientID: h.c.ClientID(), Owner: h.lkOwner}}
	if err := h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, lk); err != nil {
		return fmt.Errorf("reclaim lock: %w", err)
	}
	h.lock = lk.StateID
	return nil
}

// readBack reads the locked range under the lock stateid and checks it.
func (h *holder) readBack(t *testing.T, ctx context.Context) {
	t.Helper()
	rd := &nfsraw.Read{StateID: h.lock, Count: lockLen}
	if err := h.c.Run(ctx, &nfsraw.PutFH{FH: h.fh}, rd); err != nil {
		t.Fatalf("read under the reclaimed lock: %v", err)
	}
	if !bytes.Equal(rd.Data, h.data) {
		t.Fatalf("read back %d bytes, not what was written before the restart: %q…", len(rd.Data), rd.Data[:min(len(rd.Data), 40)])
	}
}

// timeline logs phases of a restart, from the kill.
type timeline struct {
	t    *testing.T
	kill time.Time
	at   map[string]time.Duration
}

func (tl *timeline) mark(what string) time.Duration {
	d := time.Since(tl.kill)
	if tl.at == nil {
		tl.at = map[string]time.Duration{}
	}
	tl.at[what] = d
	tl.t.Logf("%-44s %7.3f s after the kill", what, d.Seconds())
	return d
}

// recoveryRecords lists the client records under the recovery root, relative to it.
func recoveryRecords(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestGracelessRestartLosesState shows the hole in today's configuration
// (Graceless, no export in ganesha.conf: Basin adds each over DBus once
// Ganesha answers there): after a restart, a client that reconnects before its
// export is back gets NFS4ERR_STALE for the file it holds open; once the
// export is added its reclaims are refused (NFS4ERR_NO_GRACE), and another
// client takes the lock it held and opens the file for writing against its
// deny mode.
func TestGracelessRestartLosesState(t *testing.T) {
	l := newGraceLab(t, nfs.ConfigOptions{}, false)
	ctx := Context(t, 3*time.Minute)
	l.start(t, ctx, true)
	a := dialHolder(t, ctx, l, graceA, "gr26-client-a", "data")

	tl := &timeline{t: t, kill: time.Now()}
	l.srv.Kill(syscall.SIGKILL)
	tl.mark("ganesha gone (SIGKILL)")
	l.srv.Launch(t)
	tl.mark("listening again, no export")
	a.reestablish(t, ctx)
	tl.mark("client A has a new session")
	if err := a.reclaim(ctx); !isStatus4(err, nfsraw.ErrStale) {
		t.Fatalf("reclaim before the export is back: %v, want NFS4ERR_STALE", err)
	} else {
		t.Logf("reclaim before the export is back: %v", err)
	}
	l.waitBus(t, ctx)
	if err := l.bus.AddExport(ctx, l.file, 1); err != nil {
		t.Fatal(err)
	}
	tl.mark("export added over DBus")
	if err := a.reclaim(ctx); !isStatus4(err, nfsraw.ErrNoGrace) {
		t.Fatalf("reclaim without grace: %v, want NFS4ERR_NO_GRACE", err)
	} else {
		t.Logf("reclaim once the export is back: %v", err)
	}

	b, err := nfsraw.Dial41(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: graceB})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, bOpen, err := b.OpenFile(ctx, a.root, "data", nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte("b/open"), false)
	if err != nil {
		t.Fatalf("client B opens for writing what A held with deny write: %v", err)
	}
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Offset: 100, Length: 10, NewOwner: true, OpenStateID: bOpen,
		Owner: nfsraw.LockOwner{ClientID: b.ClientID(), Owner: []byte("b/lock")}}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: a.fh}, lk); err != nil {
		t.Fatalf("client B locks inside A's range: %v", err)
	}
	t.Logf("client B opened the file for writing and locked bytes 100-109: client A's open and lock are gone")
}

// TestGraceReclaimAfterRestart restarts Ganesha under a client that holds an
// open (deny write) and a write lock, on Basin's configuration with grace and
// the export included in ganesha.conf: the client reclaims both within grace
// and reads back what it wrote; another client's new OPEN and LOCKT get
// NFS4ERR_GRACE meanwhile, and once grace ends early (after the one client
// Ganesha had sent RECLAIM_COMPLETE) its conflicting (read) LOCK is denied
// with the reclaimed write lock and its OPEN for writing meets the reclaimed
// deny mode. The
// export, loaded from the configuration, refuses a second DBus AddExport
// ("already active"), so Basin's AddExport updates it instead, and the state
// survives that. Pauses are logged; SIGTERM and SIGKILL alike.
func TestGraceReclaimAfterRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL"}[sig]
		t.Run(name, func(t *testing.T) { graceReclaim(t, sig, name) })
	}
}

func graceReclaim(t *testing.T, sig syscall.Signal, name string) {
	l := newGraceLab(t, nfs.ConfigOptions{Grace: true}, true)
	ctx := Context(t, 3*time.Minute)
	t0 := time.Now()
	l.start(t, ctx, false)
	t.Logf("first start: listening and on the bus in %.3f s", time.Since(t0).Seconds())
	a := dialHolder(t, ctx, l, graceA, "gr26-client-a", "data")
	t.Logf("recovery records: %q", recoveryRecords(t, filepath.Join(l.srv.Dir, "recov")))

	tl := &timeline{t: t, kill: time.Now()}
	l.srv.Kill(sig)
	tl.mark("ganesha gone (" + name + ")")
	t.Logf("recovery records after the kill: %q", recoveryRecords(t, filepath.Join(l.srv.Dir, "recov")))
	l.srv.Launch(t)
	tl.mark("listening again, export loaded")
	a.reestablish(t, ctx)
	tl.mark("client A has a new session")

	// Before A reclaims, a newcomer is held off by grace.
	b, err := nfsraw.Dial41(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: graceB, Machine: "gr26-client-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bOwner := nfsraw.LockOwner{ClientID: b.ClientID(), Owner: []byte("b/lock")}
	if _, _, err := b.OpenFile(ctx, a.root, "data", nfsraw.ShareAccessRead, nfsraw.ShareDenyNone, []byte("b/open"), false); !isStatus4(err, nfsraw.ErrGrace) {
		t.Fatalf("client B's OPEN in grace: %v, want NFS4ERR_GRACE", err)
	}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: a.fh}, &nfsraw.LockT{Type: nfsraw.WriteLock, Offset: 100, Length: 10, Owner: bOwner}); !isStatus4(err, nfsraw.ErrGrace) {
		t.Fatalf("client B's LOCKT in grace: %v, want NFS4ERR_GRACE", err)
	}

	if err := a.reclaim(ctx); err != nil {
		t.Fatalf("%v\n%s", err, l.srv.Log())
	}
	tl.mark("client A reclaimed its open and lock")
	// A new lock of A's own waits for grace too, reclaim or not.
	newLock := &nfsraw.Lock{Type: nfsraw.ReadLock, Offset: 2 * lockLen, Length: 10, LockStateID: a.lock}
	if err := a.c.Run(ctx, &nfsraw.PutFH{FH: a.fh}, newLock); !isStatus4(err, nfsraw.ErrGrace) {
		t.Errorf("client A's new LOCK in grace: %v, want NFS4ERR_GRACE", err)
	}
	if err := a.c.Run(ctx, &nfsraw.ReclaimComplete{}); err != nil {
		t.Fatal(err)
	}
	rc := tl.mark("client A sent RECLAIM_COMPLETE")
	a.readBack(t, ctx)
	w := &nfsraw.Write{StateID: a.lock, Offset: 0, Data: []byte("after")}
	if err := a.c.Run(ctx, &nfsraw.PutFH{FH: a.fh}, w); err != nil {
		t.Fatalf("write under the reclaimed lock: %v", err)
	}
	copy(a.data, "after")
	io := tl.mark("client A's first I/O after the restart")

	// The export came from ganesha.conf: adding it over DBus again is refused
	// as already active, which Basin's AddExport answers with UpdateExport.
	conn, err := dbus.Dial(l.raw)
	if err == nil {
		defer conn.Close()
		if err = conn.Auth(nil); err == nil {
			err = conn.Hello()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	call := conn.Object("org.ganesha.nfsd", "/org/ganesha/nfsd/ExportMgr").CallWithContext(ctx,
		"org.ganesha.nfsd.exportmgr.AddExport", 0, l.file, "EXPORT(Export_Id=1)")
	if call.Err == nil || !strings.Contains(call.Err.Error(), "already active") {
		t.Errorf("DBus AddExport of the included export: %v, want an 'already active' error", call.Err)
	} else {
		t.Logf("DBus AddExport of the included export: %v", call.Err)
	}
	if err := l.bus.AddExport(ctx, l.file, 1); err != nil {
		t.Errorf("Basin's AddExport (update) of the included export: %v", err)
	}
	a.readBack(t, ctx)

	// Grace ends at Ganesha's next reaper pass, B's OPEN then succeeds.
	var bOpen nfsraw.StateID
	for {
		_, bOpen, err = b.OpenFile(ctx, a.root, "data", nfsraw.ShareAccessRead, nfsraw.ShareDenyNone, []byte("b/open"), false)
		if !isStatus4(err, nfsraw.ErrGrace) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("client B's OPEN after grace: %v", err)
	}
	lifted := tl.mark("grace over: client B's OPEN succeeds")
	t.Logf("pause: %.3f s from the kill to client A's first I/O; grace ended %.3f s after A's RECLAIM_COMPLETE",
		io.Seconds(), (lifted - rc).Seconds())
	if lifted-rc > 15*time.Second {
		t.Errorf("grace ended %v after the only client's RECLAIM_COMPLETE; Ganesha checks every 10 s", lifted-rc)
	}
	if !strings.Contains(l.srv.Log(), "NFS Server Now NOT IN GRACE") {
		t.Errorf("ganesha did not log the end of grace:\n%s", l.srv.Log())
	}

	// A's reclaimed lock and deny mode hold against B (which may only read:
	// A denies writers, so B's lock is a read lock).
	lk := &nfsraw.Lock{Type: nfsraw.ReadLock, Offset: 100, Length: 10, NewOwner: true, OpenStateID: bOpen, Owner: bOwner}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: a.fh}, lk); !isStatus4(err, nfsraw.ErrDenied) {
		t.Fatalf("client B's conflicting LOCK: %v, want NFS4ERR_DENIED", err)
	}
	if d := lk.Denied; d == nil || d.Type != nfsraw.WriteLock || d.Offset > 100 || d.Offset+d.Length < 110 {
		t.Errorf("denied by %+v, want client A's write lock on 0-%d", d, lockLen-1)
	} else {
		t.Logf("client B's LOCK of 100-109 denied by a write lock on %d-%d owned by %q", d.Offset, d.Offset+d.Length-1, d.Owner.Owner)
	}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: a.fh}, &nfsraw.LockT{Type: nfsraw.ReadLock, Offset: 0, Length: 1,
		Owner: nfsraw.LockOwner{ClientID: b.ClientID(), Owner: []byte("b/lock2")}}); !isStatus4(err, nfsraw.ErrDenied) {
		t.Errorf("client B's LOCKT: %v, want NFS4ERR_DENIED", err)
	}
	if _, _, err := b.OpenFile(ctx, a.root, "data", nfsraw.ShareAccessWrite, nfsraw.ShareDenyNone, []byte("b/open-w"), false); !isStatus4(err, nfsraw.ErrShareDenied) {
		t.Errorf("client B's OPEN for writing: %v, want NFS4ERR_SHARE_DENIED (A's deny write)", err)
	}

	// A lets go; B gets the range.
	if err := a.c.Run(ctx, &nfsraw.PutFH{FH: a.fh}, &nfsraw.LockU{Type: nfsraw.WriteLock, StateID: a.lock, Length: lockLen}); err != nil {
		t.Fatalf("client A's LOCKU: %v", err)
	}
	lk = &nfsraw.Lock{Type: nfsraw.ReadLock, Offset: 100, Length: 10, NewOwner: true, OpenStateID: bOpen,
		Owner: nfsraw.LockOwner{ClientID: b.ClientID(), Owner: []byte("b/lock3")}}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: a.fh}, lk); err != nil {
		t.Fatalf("client B's LOCK after A's LOCKU: %v", err)
	}
}

// TestGraceWaitsForAbsentClient: Ganesha ends grace early only when every
// client it had sent RECLAIM_COMPLETE. One that does not come back holds
// grace to its end (here a 12 s grace, 6 s lease), new OPENs wait that long,
// and when it comes back after grace its reclaims are refused and its lock is
// another client's to take.
func TestGraceWaitsForAbsentClient(t *testing.T) {
	const lease, grace = 6 * time.Second, 12 * time.Second
	l := newGraceLab(t, nfs.ConfigOptions{Grace: true, LeaseLifetime: lease, GracePeriod: grace}, true)
	ctx := Context(t, 3*time.Minute)
	l.start(t, ctx, false)
	a := dialHolder(t, ctx, l, graceA, "gr26-client-a", "data")
	c := dialHolder(t, ctx, l, graceC, "gr26-client-c", "data-c")

	tl := &timeline{t: t, kill: time.Now()}
	l.srv.Kill(syscall.SIGKILL)
	l.srv.Launch(t)
	listening := tl.mark("listening again (SIGKILL)")
	a.reestablish(t, ctx)
	if err := a.reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.c.Run(ctx, &nfsraw.ReclaimComplete{}); err != nil {
		t.Fatal(err)
	}
	tl.mark("client A reclaimed, RECLAIM_COMPLETE")
	a.readBack(t, ctx)

	b, err := nfsraw.Dial41(ctx, l.srv.Host, l.srv.NFSPort, nfsraw.Auth{LocalIP: graceB})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var bOpen nfsraw.StateID
	for {
		// A renews its lease meanwhile (a SEQUENCE alone), as an active client does.
		if err := a.c.Run(ctx); err != nil {
			t.Fatalf("client A's renewal: %v", err)
		}
		_, bOpen, err = b.OpenFile(ctx, c.root, "data-c", nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte("b/open"), false)
		if !isStatus4(err, nfsraw.ErrGrace) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("client B's OPEN after grace: %v", err)
	}
	lifted := tl.mark("grace over: client B's OPEN succeeds")
	// Ganesha's grace clock starts before it reads its exports and listens.
	if held := lifted - listening; held < grace-3*time.Second || held > grace+lease/2+5*time.Second {
		t.Errorf("grace held %v after Ganesha listened, want about the grace period %v", held, grace)
	}
	t.Logf("with client C absent, new OPENs waited %.3f s after Ganesha listened (grace %v)", (lifted - listening).Seconds(), grace)

	// C comes back too late: no grace, its lock is free.
	c.reestablish(t, ctx)
	if err := c.reclaim(ctx); !isStatus4(err, nfsraw.ErrNoGrace) {
		t.Fatalf("client C's reclaim after grace: %v, want NFS4ERR_NO_GRACE", err)
	}
	lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Offset: 0, Length: lockLen, NewOwner: true, OpenStateID: bOpen,
		Owner: nfsraw.LockOwner{ClientID: b.ClientID(), Owner: []byte("b/lock")}}
	if err := b.Run(ctx, &nfsraw.PutFH{FH: c.fh}, lk); err != nil {
		t.Fatalf("client B locks what C held: %v", err)
	}
}
