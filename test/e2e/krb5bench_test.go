package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/bench"
)

// basin bench's NFSv4.1 engine against the real Ganesha of a Kerberos volume,
// from a client host, as the AD user alice with a ticket from the real DC: at
// krb5, krb5i and krb5p on the Kerberos volume and at sys on an AUTH_SYS one,
// a timed write job and a timed random-read job move bytes, and data written
// through the engine reads back the same. Its one connection goes through a
// relay that keeps what the client sent: the data's plain text is on the wire
// at sys, krb5 and krb5i, and not at krb5p.
func TestKerberosBench(t *testing.T) {
	l := newSMBLab(t, nil)
	ctx := context.Background()
	mutate(t, l.c, "POST", loc+"/volumes?volumeId=kb", map[string]any{"shareName": "kb", "storagePool": "smb", "capacityGib": 100,
		"protocols": []string{"NFSV4"}, "kerberosEnabled": true, "unixPermissions": "0777",
		"exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": l.s.subnet.String(), "accessType": "READ_WRITE",
			"nfsv4": true, "hasRootAccess": "false", "kerberos5ReadWrite": true, "kerberos5iReadWrite": true, "kerberos5pReadWrite": true}}}})
	mutate(t, l.c, "POST", loc+"/volumes?volumeId=sb", map[string]any{"shareName": "sb", "storagePool": "pool1", "capacityGib": 1,
		"protocols": []string{"NFSV4"}, "unixPermissions": "0777", "exportPolicy": map[string]any{"rules": []any{map[string]any{
			"allowedClients": l.s.subnet.String(), "accessType": "READ_WRITE", "nfsv4": true, "hasRootAccess": "false"}}}})
	spn := l.nfsPrincipal(ctx)
	conf := filepath.Join(t.TempDir(), "krb5.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("[libdefaults]\n default_realm = %[1]s\n dns_lookup_kdc = false\n"+
		"[realms]\n %[1]s = {\n  kdc = %[2]s:88\n }\n", l.dc.Realm, l.dc.Addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	alice := l.user("alice")
	for _, sec := range []string{"sys", "krb5", "krb5i", "krb5p"} {
		vol := "kb"
		if sec == "sys" {
			vol = "sb"
		}
		ep := endpoint(t, l.c, vol)
		marker := []byte("plain text on the wire? " + sec + " ")
		var sent int64
		var plain bool
		err := l.h.Within(func() error {
			relay, err := newRelay(net.JoinHostPort(ep.String(), "2049"), marker)
			if err != nil {
				return err
			}
			defer func() { sent, plain = relay.stop() }()
			e := &bench.NFS4{URL: "nfs://127.0.0.1/" + vol, Port: relay.port(), Sec: sec, UID: 1000, GID: 1000,
				Krb5: bench.Krb5{Conf: conf, User: alice.Name + "@" + l.dc.Realm, Password: alice.Password, Principal: spn}}
			defer e.Close()
			// 64 KiB writes four at a time, 4 KiB reads sixteen at a time
			// (as many as the session's slots).
			for _, rw := range []string{"write", "randread"} {
				bs, qd := int64(64<<10), 4
				if rw == "randread" {
					bs, qd = 4<<10, 16
				}
				res, err := bench.Run(ctx, e, bench.Job{Name: "kb-" + sec, RW: rw, BS: bs, IODepth: qd, NumJobs: 1, NrFiles: 1,
					Size: 4 << 20, Runtime: 2 * time.Second, TimeBased: true}, nil)
				if err != nil {
					return fmt.Errorf("%s job: %w", rw, err)
				}
				var out bytes.Buffer
				if err := res.WriteJSON(&out); err != nil {
					return err
				}
				var fio struct {
					Jobs []struct {
						Read, Write struct {
							IOBytes int64 `json:"io_bytes"`
						}
					} `json:"jobs"`
				}
				if err := json.Unmarshal(out.Bytes(), &fio); err != nil || len(fio.Jobs) != 1 {
					return fmt.Errorf("%s job's JSON: %v", rw, err)
				}
				moved := fio.Jobs[0].Write.IOBytes
				if rw == "randread" {
					moved = fio.Jobs[0].Read.IOBytes
				}
				t.Logf("%s %s: %d bytes in 2 s; calls sent again (unanswered for 5 s): %d", sec, rw, moved, e.Resent())
				if moved < 4<<20 {
					return fmt.Errorf("%s job moved %d bytes, want at least the file's 4 MiB", rw, moved)
				}
			}
			// Data through the engine reads back the same, at an offset that
			// is no multiple of anything.
			j := bench.Job{Name: "kb-verify-" + sec, RW: "write", NrFiles: 1, IODepth: 1, NumJobs: 1}
			files, err := e.Open(ctx, &j, 0)
			if err != nil {
				return err
			}
			want := bytes.Repeat(marker, (300<<10)/len(marker))
			if err := files[0].WriteAt(want, 12345); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			got := make([]byte, len(want))
			if err := files[0].ReadAt(got, 12345); err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("read back %d bytes other than written", len(got))
			}
			return files[0].Close()
		})
		if err != nil {
			t.Fatalf("sec=%s: %v", sec, err)
		}
		if plain != (sec != "krb5p") {
			t.Fatalf("sec=%s: the data's plain text on the wire: %v (%d bytes sent)", sec, plain, sent)
		}
		t.Logf("sec=%s: %d bytes sent to the server, plain text seen: %v", sec, sent, plain)
	}
}

// relay forwards one TCP connection from a local port to addr, dialed at
// once (from the calling thread's network namespace), and looks for marker in
// what the client sends.
type relay struct {
	ln     net.Listener
	up     net.Conn
	marker []byte
	mu     sync.Mutex
	tail   []byte // the end of what was sent, for a marker across two writes
	sent   int64
	seen   bool
	done   chan struct{}
}

func newRelay(addr string, marker []byte) (*relay, error) {
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		up.Close()
		return nil, err
	}
	r := &relay{ln: ln, up: up, marker: marker, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		go io.Copy(c, up)
		io.Copy(writerFunc(r.forward), c)
	}()
	return r, nil
}

func (r *relay) forward(p []byte) (int, error) {
	r.mu.Lock()
	r.sent += int64(len(p))
	buf := append(r.tail, p...)
	r.seen = r.seen || bytes.Contains(buf, r.marker)
	r.tail = append(r.tail[:0], buf[max(0, len(buf)-len(r.marker)):]...)
	r.mu.Unlock()
	return r.up.Write(p)
}

func (r *relay) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// stop ends the relay and returns how much the client sent and whether the
// marker was in it.
func (r *relay) stop() (sent int64, seen bool) {
	r.ln.Close()
	r.up.Close()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent, r.seen
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
