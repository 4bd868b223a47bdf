package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/netapppb"
)

// grpcDaemon is the state, API and listeners basin serve builds, with
// --grpc-listen: REST on a local port (for /token) and gRPC as serveGRPC
// serves it.
type grpcDaemon struct {
	dataDir, restURL string
	grpc             *grpcServer
	owner            string // an access token of the owner, from REST's /token
}

func startGRPC(t *testing.T, dataDir string) *grpcDaemon {
	t.Helper()
	cfg := testConfig()
	cfg.DataDir, cfg.GRPCListen, cfg.Locations = dataDir, "127.0.0.1:0", []string{"local"}
	log := slog.New(slog.DiscardHandler)
	st, err := openState(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Options{Store: st.store, Locations: cfg.Locations, RateLimit: -1, Logger: log,
		Auth: iam.NewAuthenticator(iam.Options{Store: st.store, Audiences: audiences(cfg), TokenKey: st.tokenKey})})
	_, addr := serve(t, cfg, newMux(a))
	g, err := serveGRPC(cfg, a, log, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Stop(context.Background())
		a.Close()
		st.Close()
	})
	d := &grpcDaemon{dataDir: dataDir, restURL: "http://" + addr, grpc: g}
	d.owner = accessToken(t, d.restURL, filepath.Join(dataDir, OwnerKeyFile))
	return d
}

// accessToken exchanges an assertion signed with the key file at path for an
// access token at restURL's /token, as Google's libraries do.
func accessToken(t *testing.T, restURL, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kf iam.KeyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		t.Fatal(err)
	}
	assertion, err := kf.Assertion(iam.GoogleTokenURI, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.PostForm(restURL+"/token", url.Values{"grant_type": {iam.GrantTypeJWTBearer}, "assertion": {assertion}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || out.AccessToken == "" {
		t.Fatalf("token: %d %v", res.StatusCode, err)
	}
	return out.AccessToken
}

// dial connects to the gRPC listener over TLS, trusting only the CA file in
// the data directory, as the docs tell clients to.
func (d *grpcDaemon) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	creds, err := credentials.NewClientTLSFromFile(filepath.Join(d.dataDir, GRPCCAFile), "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(d.grpc.Addr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dialTLS opens a TLS connection to the gRPC listener offering h2 by ALPN,
// trusting only the CA file in the data directory.
func (d *grpcDaemon) dialTLS(t *testing.T) *tls.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(d.dataDir, GRPCCAFile))
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA file: %v", err)
	}
	tc, err := tls.Dial("tcp", d.grpc.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// basin serve --grpc-listen serves the NetApp, Operations and Locations
// services over TLS (ALPN h2) with a certificate of Basin's own CA, which a
// client trusting grpc-ca.pem accepts; calls authenticate with /token's access
// tokens; the keys are private; a restart keeps the CA; shutdown is graceful.
func TestGRPCListener(t *testing.T) {
	dir := t.TempDir()
	d := startGRPC(t, dir)
	conn := d.dial(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+d.owner)

	locs, err := locationpb.NewLocationsClient(conn).ListLocations(ctx, &locationpb.ListLocationsRequest{Name: "projects/p1"})
	if err != nil {
		t.Fatal(err)
	}
	if l := locs.GetLocations(); len(l) != 1 || l[0].GetLocationId() != "local" {
		t.Errorf("locations %v", l)
	}
	if _, err := longrunningpb.NewOperationsClient(conn).ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "projects/p1/locations/local"}); err != nil {
		t.Errorf("ListOperations: %v", err)
	}
	na := netapppb.NewNetAppClient(conn)
	if _, err := na.ListStoragePools(ctx, &netapppb.ListStoragePoolsRequest{Parent: "projects/p1/locations/local"}); err != nil {
		t.Errorf("ListStoragePools: %v", err)
	}
	_, err = na.ListStoragePools(context.Background(), &netapppb.ListStoragePoolsRequest{Parent: "projects/p1/locations/local"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v", err)
	}
	// A request larger than REST's largest body is refused before anything
	// reads it as a request (an anonymous client could otherwise have the
	// server hold 4 MiB per call).
	big := &netapppb.ListStoragePoolsRequest{Parent: "projects/p1/locations/local", Filter: strings.Repeat("x", grpcMaxRequest)}
	if _, err := na.ListStoragePools(context.Background(), big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a %d-byte request: %v, want RESOURCE_EXHAUSTED", grpcMaxRequest, err)
	}

	// TLS with ALPN h2, the certificate chaining to the CA file.
	tc := d.dialTLS(t)
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN %q, want h2", p)
	}
	tc.Close()
	for _, f := range []string{grpcKeyFile, grpcCAKeyFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
	}

	// Graceful stop: the listener closes, a new call fails.
	d.grpc.Stop(context.Background())
	_, err = na.ListStoragePools(ctx, &netapppb.ListStoragePoolsRequest{Parent: "projects/p1/locations/local"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("after Stop: %v", err)
	}
}

// A restart keeps Basin's CA, so clients go on trusting it, and the
// listener's certificate while it fits; a certificate that no longer names
// the listener's host is issued again by the same CA.
func TestGRPCCertificateKept(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir, cfg.GRPCListen = t.TempDir(), "127.0.0.1:0"
	log := slog.New(slog.DiscardHandler)
	now := time.Now()
	first, err := grpcCertificate(cfg, log, now)
	if err != nil {
		t.Fatal(err)
	}
	again, err := grpcCertificate(cfg, log, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Leaf.Equal(first.Leaf) || string(again.Certificate[1]) != string(first.Certificate[1]) {
		t.Error("a restart issued a new certificate or CA")
	}
	cfg.GRPCListen = "10.99.7.1:8790"
	moved, err := grpcCertificate(cfg, log, now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if moved.Leaf.Equal(first.Leaf) || moved.Leaf.VerifyHostname("10.99.7.1") != nil || string(moved.Certificate[1]) != string(first.Certificate[1]) {
		t.Error("a new listen address: want a new certificate naming it, from the same CA")
	}
	late, err := grpcCertificate(cfg, log, moved.Leaf.NotAfter.Add(-grpcRenewBefore+time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if late.Leaf.Equal(moved.Leaf) {
		t.Error("a certificate about to expire was kept")
	}
	// The CA's key unreadable (moved away, a bad backup): refused, not
	// replaced by a CA no client trusts.
	before, err := os.ReadFile(filepath.Join(cfg.DataDir, GRPCCAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cfg.DataDir, grpcCAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := grpcCertificate(cfg, log, now.Add(3*time.Hour)); err == nil || !strings.Contains(err.Error(), "cannot be used") {
		t.Errorf("CA without its key: %v, want a refusal", err)
	}
	if after, err := os.ReadFile(filepath.Join(cfg.DataDir, GRPCCAFile)); err != nil || string(after) != string(before) {
		t.Errorf("the CA file was replaced: %v", err)
	}
}

// The gRPC listener's HTTP/2 windows are static: a call costs the client no
// PING to answer and no window growth. Read frame by frame with a raw HTTP/2
// client: with grpc-go's dynamic windows the server sent a PING (its bandwidth
// estimate) on nearly every call that carried data, and grew its windows up to
// 16 MiB of a client's data in flight.
func TestGRPCNoPingPerCall(t *testing.T) {
	dir := t.TempDir()
	d := startGRPC(t, dir)
	tc := d.dialTLS(t)
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck // the reads fail past it
	if _, err := tc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(&locationpb.ListLocationsRequest{Name: "projects/p1"})
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	var pings, windowUpdates int
	var streamWindow uint32
	const calls = 10
	for i := range calls {
		id := uint32(2*i + 1)
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", "/google.cloud.location.Locations/ListLocations"},
			{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"authorization", "Bearer " + d.owner}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // into a buffer
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
		// Read up to the call's trailers, answering what asks for an answer.
		for done := false; !done; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
						streamWindow = v
					}
					fr.WriteSettingsAck() //nolint:errcheck // the next read fails
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					pings++
					fr.WritePing(true, f.Data) //nolint:errcheck // the next read fails
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID != 0 || i > 0 { // the first: the connection window's growth to its size
					windowUpdates++
				}
			case *http2.HeadersFrame:
				done = f.StreamID == id && f.StreamEnded()
			case *http2.GoAwayFrame:
				t.Fatalf("call %d: GOAWAY %v", i, f.ErrCode)
			}
		}
	}
	if pings != 0 {
		t.Errorf("the server sent %d PINGs in %d calls, want none", pings, calls)
	}
	if windowUpdates > calls/2 {
		t.Errorf("the server sent %d WINDOW_UPDATEs in %d calls of %d bytes", windowUpdates, calls, len(body))
	}
	if streamWindow != grpcStreamWindow {
		t.Errorf("stream window %d, want %d", streamWindow, grpcStreamWindow)
	}
}

// The listener answers gRPC health checks over TLS without a token, as
// grpc_health_probe makes them; Watch is UNIMPLEMENTED (internal/grpcapi's
// Health says why); once Stop has begun, the health service answers
// NOT_SERVING.
func TestGRPCHealth(t *testing.T) {
	d := startGRPC(t, t.TempDir())
	hc := healthgrpc.NewHealthClient(d.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, svc := range []string{"", "google.cloud.netapp.v1.NetApp"} {
		if r, err := hc.Check(ctx, &healthgrpc.HealthCheckRequest{Service: svc}); err != nil ||
			r.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q): %v %v, want SERVING", svc, r, err)
		}
	}
	w, err := hc.Watch(ctx, &healthgrpc.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch: %v, want UNIMPLEMENTED", err)
	}
	d.grpc.Stop(ctx)
	if r, err := d.grpc.health.Check(ctx, &healthgrpc.HealthCheckRequest{}); r.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check once stopping: %v %v, want NOT_SERVING", r, err)
	}
}
