package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/nfs3"
	"github.com/basin-nas/basin/test/addc"
	"github.com/basin-nas/basin/test/clienthost"
	"github.com/basin-nas/basin/test/nfsraw"
)

// smb2Holder is test/e2e/python/smb2_holder.py, an SMB2 client (impacket)
// that asks for oplocks, waits for their breaks and takes byte-range locks,
// running in the lab's client host as user u until t ends.
type smb2Holder struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func (l *smbLab) holder(t *testing.T, sh smbShare, u addc.User) *smb2Holder {
	t.Helper()
	// Its own context: it ends when stdin does (the test's end), not killed
	// by the caller's.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	python, err := filepath.Abs("../../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("no %s (scripts/setup.sh --test makes it): %v", python, err)
	}
	script, _ := filepath.Abs("python/smb2_holder.py")
	cmd := l.h.Command(ctx, python, script, sh.Server, sh.Endpoint.String(), sh.Share, l.dc.Domain, u.Name)
	cmd.Env = append(os.Environ(), "BASIN_SMB_PASSWORD="+u.Password)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		in.Close()
		if err := cmd.Wait(); err != nil && !t.Failed() {
			t.Logf("smb2_holder: %v\n%s", err, stderr.String())
		}
		if t.Failed() {
			t.Logf("smb2_holder's stderr:\n%s", stderr.String())
		}
	})
	return &smb2Holder{t: t, in: in, out: bufio.NewScanner(out)}
}

// do sends one command and returns its answer's fields.
func (h *smb2Holder) do(cmd string) []string {
	h.t.Helper()
	if _, err := io.WriteString(h.in, cmd+"\n"); err != nil {
		h.t.Fatalf("smb2_holder %s: %v", cmd, err)
	}
	return h.answer(cmd)
}

func (h *smb2Holder) answer(cmd string) []string {
	h.t.Helper()
	if !h.out.Scan() {
		h.t.Fatalf("smb2_holder %s: no answer (%v)", cmd, h.out.Err())
	}
	return strings.Fields(h.out.Text())
}

// NTSTATUS values the SMB side expects.
const (
	statusLockNotGranted   = "c0000055"
	statusFileLockConflict = "c0000054"
	oplockBatch            = 9
	oplockNone             = 0
)

// TestCrossProtocolOplocks (issue 33, criterion 2): an SMB client holds a
// file open under a batch oplock, sharing read access only; an NFS client
// that opens it to write is answered NFS4ERR_DELAY (NFSv4.1 OPEN) or
// NFS3ERR_JUKEBOX (NFSv3 WRITE) — never made to wait in the server — while
// the SMB client receives an oplock break to none; once the SMB client has
// closed, the NFS call goes through and its data reads back over SMB. An SMB
// client that never lets go holds NFS off only until smbd's break timeout.
// The reverse: an NFSv4 byte-range lock makes an SMB lock on the range fail
// with LOCK_NOT_GRANTED and an SMB read of it with FILE_LOCK_CONFLICT.
func TestCrossProtocolOplocks(t *testing.T) {
	metricsAddr := freeAddr(t)
	l := newSMBLab(t, nil, "--metrics-listen", metricsAddr, "--nfs-stuck-after", "5s")
	alice := l.user("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vol := func(id, proto string, v3, v4 bool) smbShare {
		return l.volume(id, map[string]any{"protocols": []string{"SMB", proto}, "unixPermissions": "0777",
			"exportPolicy": map[string]any{"rules": []any{rule(l.s.addrN(150), "READ_WRITE", v3, v4, "true")}}})
	}

	t.Run("NFSv4.1 OPEN against a batch oplock", func(t *testing.T) {
		sh := vol("xpv4", "NFSV4", false, true)
		h := l.holder(t, sh, alice)
		if a := h.do(fmt.Sprintf("open held.txt 1 %d", oplockBatch)); a[0] != "granted" || a[1] != strconv.Itoa(oplockBatch) {
			t.Fatalf("SMB open with a batch oplock: %v", a)
		}
		cli, root := dial41As(ctx, t, l.h, sh, nfsraw.Auth{Machine: "xp-v4"})
		owner := []byte("xp-v4/open")
		_, _, err := cli.OpenFile(ctx, root, "held.txt", nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, owner, false)
		if !isNFS4Status(err, nfsraw.ErrDelay) {
			t.Fatalf("NFSv4.1 OPEN for write of a file under a batch oplock: %v, want NFS4ERR_DELAY", err)
		}
		if a := h.do("waitbreak 10"); a[0] != "break" || a[1] != strconv.Itoa(oplockNone) {
			t.Fatalf("the SMB client's oplock break: %v, want a break to none", a)
		} else {
			t.Logf("SMB client told %s s after its wait began", a[2])
		}
		if a := h.do("close"); a[0] != "closed" {
			t.Fatalf("SMB close: %v", a)
		}
		fh, st := openRetrying(ctx, t, cli, root, "held.txt", owner)
		w := &nfsraw.Write{StateID: st, Data: []byte("written over NFS\n")} // FILE_SYNC
		if err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, w); err != nil || w.Count != 17 {
			t.Fatalf("NFS write after the SMB close: %d bytes, %v", w.Count, err)
		}
		if b, err := l.mount(ctx, sh, alice, sh.Share).ReadFile("held.txt"); err != nil || !strings.HasPrefix(string(b), "written over NFS") {
			t.Fatalf("read back over SMB: %q, %v", b, err)
		}
	})

	t.Run("NFSv3 WRITE against a batch oplock, and a holder that never lets go", func(t *testing.T) {
		sh := vol("xpv3", "NFSV3", true, false)
		var c *nfs3.Client
		if err := l.h.Within(func() (err error) {
			c, err = nfs3.Mount(ctx, sh.Endpoint.String(), "/"+sh.Share, nfs3.Options{Auth: nfs3.Auth{Machine: "xp-v3"}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The SMB client makes the file (alice owns it) and holds it.
		h := l.holder(t, sh, alice)
		if a := h.do(fmt.Sprintf("open held.txt 1 %d", oplockBatch)); a[0] != "granted" || a[1] != strconv.Itoa(oplockBatch) {
			t.Fatalf("SMB open with a batch oplock: %v", a)
		}
		fh, _, err := c.Lookup(ctx, c.Root, "held.txt")
		if err != nil {
			t.Fatalf("NFSv3 LOOKUP of the held file: %v", err)
		}
		if _, err := c.Write(ctx, fh, []byte("v3\n"), 0, nfs3.FileSync); !isNFS3Status(err, nfs3.ErrJukebox) {
			t.Fatalf("NFSv3 WRITE of a file under a batch oplock: %v, want NFS3ERR_JUKEBOX", err)
		}
		if a := h.do("waitbreak 10"); a[0] != "break" || a[1] != strconv.Itoa(oplockNone) {
			t.Fatalf("the SMB client's oplock break: %v, want a break to none", a)
		}
		h.do("close")
		writeRetrying(ctx, t, c, fh, 30*time.Second)

		// A holder that never acknowledges: smbd gives the lease up at its
		// break timeout (35 s); meanwhile every NFS call is answered at once.
		h2 := l.holder(t, sh, alice)
		if a := h2.do(fmt.Sprintf("open hostile.txt 1 %d", oplockBatch)); a[0] != "granted" || a[1] != strconv.Itoa(oplockBatch) {
			t.Fatalf("SMB open with a batch oplock: %v", a)
		}
		fh2, _, err := c.Lookup(ctx, c.Root, "hostile.txt")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(h2.in, "hold\n"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		writeRetrying(ctx, t, c, fh2, 90*time.Second)
		held := time.Since(start)
		t.Logf("NFS write through after %v against a holder that never let go", held.Round(100*time.Millisecond))
		// smbd's break timeout (35 s) let it through, not an oplock never
		// taken.
		if held < 25*time.Second {
			t.Errorf("NFS held off %v by a holder that never lets go; want about smbd's 35 s break timeout", held)
		}
		// No NFS call waited in Ganesha meanwhile (the watchdog counts any
		// older than 5 s).
		if v, ok := scrapeMetric(t, metricsAddr, "basin_nfs_stuck_requests_total"); !ok || v != 0 {
			t.Errorf("basin_nfs_stuck_requests_total %v (%v) after the hostile holder, want 0", v, ok)
		}
	})

	t.Run("an NFSv4 lock against SMB", func(t *testing.T) {
		sh := vol("xplk", "NFSV4", false, true)
		// The SMB client makes the file, without an oplock and sharing
		// everything: the NFS client may then open it.
		h := l.holder(t, sh, alice)
		if a := h.do(fmt.Sprintf("open locked.txt 7 %d", oplockNone)); a[0] != "granted" {
			t.Fatalf("SMB open: %v", a)
		}
		cli, root := dial41As(ctx, t, l.h, sh, nfsraw.Auth{Machine: "xp-lk"})
		fh, open, err := cli.OpenFile(ctx, root, "locked.txt", nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, []byte("xp-lk/open"), false)
		if err != nil {
			t.Fatalf("NFSv4.1 OPEN of the file the SMB client has open: %v", err)
		}
		w := &nfsraw.Write{StateID: open, Data: make([]byte, 4096)}
		if err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, w); err != nil {
			t.Fatal(err)
		}
		lk := &nfsraw.Lock{Type: nfsraw.WriteLock, Offset: 0, Length: 100, NewOwner: true, OpenStateID: open,
			Owner: nfsraw.LockOwner{ClientID: cli.ClientID(), Owner: []byte("xp-lk/lock")}}
		if err := cli.Run(ctx, &nfsraw.PutFH{FH: fh}, lk); err != nil {
			t.Fatalf("NFSv4 LOCK: %v", err)
		}
		if a := h.do("lock 50 10"); a[1] != statusLockNotGranted {
			t.Errorf("SMB lock inside the NFS lock's range: %v, want %s (LOCK_NOT_GRANTED)", a, statusLockNotGranted)
		}
		if a := h.do("read 0 64"); a[1] != statusFileLockConflict {
			t.Errorf("SMB read inside the NFS lock's range: %v, want %s (FILE_LOCK_CONFLICT)", a, statusFileLockConflict)
		}
		// Controls: outside the range both are fine.
		if a := h.do("lock 1000 10"); a[1] != "00000000" {
			t.Errorf("SMB lock outside the NFS lock's range: %v", a)
		}
		if a := h.do("read 2000 64"); a[1] != "00000000" {
			t.Errorf("SMB read outside the NFS lock's range: %v", a)
		}
	})
}

// dial41As is an NFSv4.1 client of sh from host h as a (closed at t's end),
// and the handle of sh's root.
func dial41As(ctx context.Context, t *testing.T, h *clienthost.Host, sh smbShare, a nfsraw.Auth) (*nfsraw.Client, []byte) {
	t.Helper()
	var cli *nfsraw.Client
	if err := h.Within(func() (err error) {
		cli, err = nfsraw.Dial41(ctx, sh.Endpoint.String(), 2049, a)
		return err
	}); err != nil {
		t.Fatalf("NFSv4.1 to %s: %v", sh.Share, err)
	}
	t.Cleanup(func() { cli.Close() })
	root, err := cli.LookupPath(ctx, sh.Share)
	if err != nil {
		t.Fatalf("NFSv4.1 lookup of %s: %v", sh.Share, err)
	}
	return cli, root
}

// openRetrying opens name for read and write as owner, again while the
// server answers NFS4ERR_DELAY (a client's retry), for up to 30 s.
func openRetrying(ctx context.Context, t *testing.T, cli *nfsraw.Client, dir []byte, name string, owner []byte) ([]byte, nfsraw.StateID) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		fh, st, err := cli.OpenFile(ctx, dir, name, nfsraw.ShareAccessBoth, nfsraw.ShareDenyNone, owner, false)
		if err == nil {
			return fh, st
		}
		if !isNFS4Status(err, nfsraw.ErrDelay) || time.Now().After(end) {
			t.Fatalf("NFSv4.1 OPEN of %s: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeRetrying writes fh again while the server answers NFS3ERR_JUKEBOX, up
// to bound.
func writeRetrying(ctx context.Context, t *testing.T, c *nfs3.Client, fh []byte, bound time.Duration) {
	t.Helper()
	end := time.Now().Add(bound)
	for {
		_, err := c.Write(ctx, fh, []byte("v3\n"), 0, nfs3.FileSync)
		if err == nil {
			return
		}
		if !isNFS3Status(err, nfs3.ErrJukebox) || time.Now().After(end) {
			t.Fatalf("NFSv3 WRITE: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func isNFS3Status(err error, want nfs3.Status) bool {
	st, ok := nfs3.StatusOf(err)
	return ok && st == want
}
