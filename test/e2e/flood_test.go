package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/basin-nas/basin/internal/client"
)

// floodConns is how many silent connections the flood holds (acceptance criterion
// of issue 25).
const (
	floodConns = 600
	// floodPhase is how long each phase calls, one call every floodPace: long
	// enough for the server's header timeout (5 s) to cut silent connections
	// twice and for the flood to reopen them, and for 600 calls, whose 99th
	// percentile is their 6th slowest.
	floodPhase = 12 * time.Second
	floodPace  = 20 * time.Millisecond
	// floodP99 bounds the 99th percentile of an authenticated call during a flood.
	// Such a call takes about 2 ms on an idle machine (the test logs it); the
	// bound leaves room for a shared 2-core machine where the flood's own
	// goroutines compete for the CPU, while telling apart the failure it guards
	// against: calls waiting seconds for a connection slot.
	floodP99 = 200 * time.Millisecond
)

// TestAPIConnectionFlood: connections that never send a request, each opened again
// as soon as the server closes it, do not hold up an authenticated client —
// whether they come from one address, from many, or from the client's own.
func TestAPIConnectionFlood(t *testing.T) {
	s := newServer(t)
	// The calls (about 50 a second, for a minute) are not what is measured to be
	// limited.
	s.start("--rate-limit", "0")
	nfsPool(t, s.client())
	bearer := ownerJWT(t, s)
	url := "http://" + s.addr + loc + "/storagePools"
	call := func(hc *http.Client) (time.Duration, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+bearer)
		start := time.Now()
		res, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return 0, err
		}
		if res.StatusCode != 200 {
			return 0, fmt.Errorf("status %d: %s", res.StatusCode, body)
		}
		return time.Since(start), nil
	}
	// measure calls for dur, one call every floodPace, and checks the
	// calls' 99th percentile.
	measure := func(phase string, hc *http.Client, f *flood, dur time.Duration) {
		t.Helper()
		var took []time.Duration
		for end := time.Now().Add(dur); time.Now().Before(end); time.Sleep(floodPace) {
			d, err := call(hc)
			if err != nil {
				t.Errorf("%s: call %d failed: %v", phase, len(took)+1, err)
				return
			}
			took = append(took, d)
		}
		slices.Sort(took)
		p50, p99, most := took[len(took)/2], took[len(took)*99/100], took[len(took)-1]
		extra := ""
		if f != nil {
			extra = fmt.Sprintf("; flood: %d connections open, %d opened again after the server closed them", f.open.Load(), f.reopened.Load())
		}
		t.Logf("%s: %d calls, p50 %v, p99 %v, max %v%s", phase, len(took), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), most.Round(10*time.Microsecond), extra)
		if want := int(dur / (floodPace + 10*time.Millisecond)); len(took) < want {
			t.Errorf("%s: only %d calls in %v, want at least %d", phase, len(took), dur, want)
		}
		if p99 > floodP99 {
			t.Errorf("%s: p99 %v, want under %v", phase, p99, floodP99)
		}
	}
	fresh := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	measure("no flood, a new connection per call", fresh, nil, 3*time.Second) // the baseline, logged

	// A flood from one address (not the client's).
	f := startFlood(t, s.addr, []netip.Addr{netip.MustParseAddr("127.0.0.2")}, floodConns)
	measure("600 silent connections from 127.0.0.2, a new connection per call", fresh, f, floodPhase)
	f.stop()

	// A flood from 600 addresses: no per-address cap binds. Then from 1,200,
	// over the total cap (1,024): the longest silent ones make room.
	var many []netip.Addr
	for a, i := netip.MustParseAddr("127.1.0.1"), 0; i < 2*floodConns; a, i = a.Next(), i+1 {
		many = append(many, a)
	}
	f = startFlood(t, s.addr, many[:floodConns], floodConns)
	measure("600 silent connections from 600 addresses, a new connection per call", fresh, f, floodPhase)
	f.stop()
	f = startFlood(t, s.addr, many, 2*floodConns)
	measure("1,200 silent connections from 1,200 addresses, a new connection per call", fresh, f, floodPhase)
	f.stop()

	// A flood from the client's own address: its kept-alive connection is served.
	kept := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	if _, err := call(kept); err != nil {
		t.Fatal(err)
	}
	f = startFlood(t, s.addr, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, floodConns)
	measure("600 silent connections from the client's own address, one kept-alive connection", kept, f, floodPhase)
	f.stop()
}

// ownerJWT signs a JWT with the server's owner key, as the CLI does.
func ownerJWT(t *testing.T, s *server) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.dataDir, "owner-key.json"))
	if err != nil {
		t.Fatal(err)
	}
	var kf client.KeyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(kf.PrivateKey))
	if block == nil {
		t.Fatal("owner key is not PEM")
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: kf.ClientEmail, Subject: kf.ClientEmail,
		Audience: jwt.ClaimStrings{client.Audience}, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))})
	tok.Header["kid"] = kf.PrivateKeyID
	signed, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// flood holds n TCP connections to addr that never send a byte, spread over the
// source addresses given, and opens each again as soon as the server closes it.
type flood struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	open     atomic.Int64 // connections open now
	reopened atomic.Int64 // connections opened again after the server closed one
	mu       sync.Mutex
	conns    map[net.Conn]bool
}

func startFlood(t *testing.T, addr string, sources []netip.Addr, n int) *flood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{cancel: cancel, conns: map[net.Conn]bool{}}
	t.Cleanup(f.stop)
	var first sync.WaitGroup
	first.Add(n)
	for i := range n {
		src := sources[i%len(sources)]
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
			connected := false
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					select { // refused or out of ports: try again shortly
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if connected {
					f.reopened.Add(1)
				} else {
					connected = true
					first.Done()
				}
				f.mu.Lock()
				if ctx.Err() != nil { // stop has closed the others already
					f.mu.Unlock()
					c.Close()
					break
				}
				f.conns[c] = true
				f.mu.Unlock()
				f.open.Add(1)
				c.Read(make([]byte, 1)) // until the server (or stop) closes it
				f.open.Add(-1)
				f.mu.Lock()
				delete(f.conns, c)
				f.mu.Unlock()
				c.Close()
			}
			if !connected {
				first.Done()
			}
		}()
	}
	first.Wait()
	return f
}

// stop closes the flood's connections and waits for its goroutines.
func (f *flood) stop() {
	f.cancel()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
