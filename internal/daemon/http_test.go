package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/config"
)

// serve runs the API's HTTP server, as Run builds it, on a free local port.
func serve(t *testing.T, cfg config.Config, h http.Handler, prepare ...func(*http.Server)) (*http.Server, string) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	ln, err := listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(cfg, h, ln)
	for _, f := range prepare {
		f(srv)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

func testConfig() config.Config {
	cfg := config.Default()
	cfg.HTTP.ReadHeaderTimeout = time.Second
	cfg.HTTP.ReadTimeout = time.Second
	return cfg
}

// A client that trickles its body one byte per second is cut off once the read
// timeout is up, not served for as long as it likes.
func TestTrickledBodyIsCutOff(t *testing.T) {
	readErr := make(chan error, 1)
	_, addr := serve(t, testConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, "could not read the request body", http.StatusBadRequest)
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/x HTTP/1.1\r\nHost: basin\r\nContent-Length: 100\r\n\r\n")
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	defer close(stop)
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the handler read the whole trickled body")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body was still being read after 5 s (read timeout 1 s)")
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	io.Copy(io.Discard, c) // the server closes the connection
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("connection held for %v with a 1 s read timeout", d)
	}
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

// Silent connections up to the cap do not make a request wait: the oldest is
// closed to make room, long before the header timeout would cut it
// (internal/connlimit has the policy's own tests).
func TestConnectionCap(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.MaxConns, cfg.HTTP.MaxConnsPerSource = 2, 2
	cfg.HTTP.ReadHeaderTimeout = time.Minute
	_, addr := serve(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := cl.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a request beside two silent connections at the cap: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("answer %q", b)
	}
	silent[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(silent[0]).ReadByte(); err != io.EOF {
		t.Fatalf("the oldest silent connection: %v, want it closed", err)
	}
}

func TestHTTPServerLimits(t *testing.T) {
	cfg := config.Default()
	srv := newHTTPServer(cfg, http.NotFoundHandler(), nil)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("unbounded server: %+v", srv)
	}
	// A handler may wait --sync-wait for its operation after reading the body: the
	// write timeout leaves room for both.
	if srv.WriteTimeout < srv.ReadTimeout+cfg.SyncWait+10*time.Second {
		t.Fatalf("write timeout %v too short for read timeout %v + sync wait %v", srv.WriteTimeout, srv.ReadTimeout, cfg.SyncWait)
	}
	cfg.SyncWait = time.Minute
	if s := newHTTPServer(cfg, http.NotFoundHandler(), nil); s.WriteTimeout < time.Minute+s.ReadTimeout {
		t.Fatalf("write timeout %v does not follow --sync-wait", s.WriteTimeout)
	}
	// Oversized headers are refused.
	_, addr := serve(t, testConfig(), http.NotFoundHandler())
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 200<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("200 KiB header: status %d, want 431", res.StatusCode)
	}
}
