package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/netapppb"
)

// The grpc section: what the v1 API over gRPC (--grpc-listen) costs against
// the same API over REST, as a client sees it, on one server serving both:
// a volume GET (p50 and p99) and a volume create → READY. Both transports
// carry the same access token (from the server's /token, as Google's
// libraries get one with a key file), and a create's operation is polled on
// the same schedule (the REST client's: 100 ms, doubling up to 2 s; with
// --sync-wait a create that finishes in time answers done at once, over
// both). REST is HTTP/1.1 over TCP with keep-alive and JSON bodies; gRPC is
// HTTP/2 over TLS (the listener speaks only TLS) with protobuf. Calls
// alternate between the two, which goes first alternating too, so machine
// noise hits both alike.
const (
	grpcBridge = "bgrpc0"
	grpcCIDR   = "10.99.239.0/24"
	grpcParent = "projects/bench/locations/local"
)

type grpcResult struct {
	Date    string `json:"date"`
	Rounds  int    `json:"rounds"`
	Gets    int    `json:"gets"`    // GETs per round and transport
	Creates int    `json:"creates"` // volume creates per round and transport
	// StaticWindows: the gRPC client's HTTP/2 windows were static
	// (-grpc-client-static-windows), not grpc-go's default dynamic ones,
	// whose bandwidth probe sends a PING after nearly every answer.
	StaticWindows bool `json:"staticWindows,omitempty"`
	// Per transport ("rest", "grpc"): each round's GET median and 99th
	// percentile and create→READY median, in ms.
	GetP50    map[string][]float64 `json:"getP50Ms"`
	GetP99    map[string][]float64 `json:"getP99Ms"`
	CreateP50 map[string][]float64 `json:"createP50Ms"`
	// Google's Python client (google-cloud-netapp) over its REST transport
	// and its default, gRPC (netapp_transports.py): GETs per round and
	// transport, and per transport each round's GET median and 99th
	// percentile in ms. Not measured (PythonGets 0) without the e2e venv.
	PythonGets   int                  `json:"pythonGets,omitempty"`
	PythonGetP50 map[string][]float64 `json:"pythonGetP50Ms,omitempty"`
	PythonGetP99 map[string][]float64 `json:"pythonGetP99Ms,omitempty"`
}

// transport is one way of calling the API: a volume's GET, a volume's
// create (its operation's name, and whether it was done when answered), and
// an operation's GET (whether it is done).
type transport interface {
	getVolume(ctx context.Context, id string) error
	createVolume(ctx context.Context, id string) (op string, done bool, err error)
	operationDone(ctx context.Context, op string) (bool, error)
}

func runGRPC(ctx context.Context, basin string, rounds, gets, creates, pythonGets int, staticWindows bool) grpcResult {
	dir, err := os.MkdirTemp("", "basin-bench-grpc-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(dir) })
	addr, gaddr := freeAddr(), freeAddr()
	c := serveBasin(basin, dir, addr, "--store-size", "8G", "--log-level", "warn", "--overcommit-ratio", "10000",
		"--thin-initial", "64M", "--qos=false", "--rate-limit", "0", "--network", "default="+grpcBridge+","+grpcCIDR,
		"--grpc-listen", gaddr)
	must(mutate(ctx, c, "POST", loc+"/storagePools?storagePoolId=pool", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 10000,
		"network": "projects/bench/global/networks/default"}))
	token := accessTokenOf(addr, filepath.Join(dir, "owner-key.json"))
	rest := &restTransport{base: "http://" + addr + "/v1/" + grpcParent, token: token, http: &http.Client{Timeout: time.Minute}}
	g := dialGRPC(gaddr, filepath.Join(dir, "grpc-ca.pem"), token, staticWindows)
	ts := map[string]transport{"rest": rest, "grpc": g}

	must(mutate(ctx, c, "POST", loc+"/volumes?volumeId=target", volBody("target")))
	// Warm both up: connections (the TLS handshake), the server's caches.
	for range 50 {
		for _, t := range ts {
			must(t.getVolume(ctx, "target"))
		}
	}
	res := grpcResult{Date: time.Now().UTC().Format(time.RFC3339), Rounds: rounds, Gets: gets, Creates: creates, StaticWindows: staticWindows,
		GetP50: map[string][]float64{}, GetP99: map[string][]float64{}, CreateP50: map[string][]float64{}}
	order := []string{"rest", "grpc"}
	seq := 0
	for r := range rounds {
		got := map[string][]float64{}
		for i := range gets {
			for _, name := range turn(order, i) {
				t := ts[name]
				got[name] = append(got[name], timed(func() error { return t.getVolume(ctx, "target") }))
			}
		}
		made := map[string][]float64{}
		var ids []string
		for i := range creates {
			for _, name := range turn(order, i) {
				seq++
				id := fmt.Sprintf("g%d", seq)
				ids = append(ids, id)
				t := ts[name]
				made[name] = append(made[name], timed(func() error { return createReady(ctx, t, id) }))
			}
		}
		for _, name := range order {
			res.GetP50[name] = append(res.GetP50[name], median(got[name]))
			res.GetP99[name] = append(res.GetP99[name], percentile(got[name], 0.99))
			res.CreateP50[name] = append(res.CreateP50[name], median(made[name]))
			log.Printf("grpc round %d, %s: GET p50 %.3f ms, p99 %.3f ms, create→READY p50 %.1f ms", r+1, name,
				median(got[name]), percentile(got[name], 0.99), median(made[name]))
		}
		// The next round starts from the same number of volumes.
		for _, id := range ids {
			must(mutate(ctx, c, "DELETE", loc+"/volumes/"+id, nil))
		}
	}
	if pythonGets > 0 {
		pythonTransports(ctx, &res, "http://"+addr, gaddr, dir, rounds, pythonGets)
	}
	return res
}

// pythonTransports has Google's Python client GET the volume "target" over
// REST and over gRPC (netapp_transports.py, in the e2e venv that
// scripts/setup.sh --test makes), rounds rounds of gets GETs per transport,
// and records each round's median and 99th percentile in res. Without the
// venv it says so and measures nothing.
func pythonTransports(ctx context.Context, res *grpcResult, restURL, grpcAddr, dataDir string, rounds, gets int) {
	python, err := filepath.Abs(".venv/bin/python")
	if err == nil {
		_, err = os.Stat(python)
	}
	if err != nil {
		log.Printf("grpc: Google's Python client not measured: no e2e venv (scripts/setup.sh --test makes it): %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "test/bench/netapp_transports.py", restURL, grpcAddr,
		filepath.Join(dataDir, "grpc-ca.pem"), filepath.Join(dataDir, "owner-key.json"), grpcParent+"/volumes/target",
		strconv.Itoa(rounds), strconv.Itoa(gets))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		fatalf("grpc: netapp_transports.py: %v\n%s", err, stderr.String())
	}
	res.PythonGets, res.PythonGetP50, res.PythonGetP99 = gets, map[string][]float64{}, map[string][]float64{}
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var round map[string]struct{ P50, P99 float64 }
		if err := json.Unmarshal([]byte(line), &round); err != nil || len(round) != 2 {
			fatalf("grpc: netapp_transports.py printed %q: %v", line, err)
		}
		for name, v := range round {
			res.PythonGetP50[name] = append(res.PythonGetP50[name], v.P50)
			res.PythonGetP99[name] = append(res.PythonGetP99[name], v.P99)
		}
		log.Printf("grpc round %d, Google's Python client: GET p50 REST %.3f ms, gRPC %.3f ms", i+1, round["rest"].P50, round["grpc"].P50)
	}
	if n := len(res.PythonGetP50["rest"]); n != rounds {
		fatalf("grpc: netapp_transports.py gave %d rounds, want %d", n, rounds)
	}
}

// turn is order as the i-th call takes it: which transport goes first
// alternates.
func turn(order []string, i int) []string {
	if i%2 == 0 {
		return order
	}
	return []string{order[1], order[0]}
}

// createReady creates a volume and polls its operation until it is done, on
// the REST client's schedule (internal/client's Wait).
func createReady(ctx context.Context, t transport, id string) error {
	op, done, err := t.createVolume(ctx, id)
	delay := 100 * time.Millisecond
	for err == nil && !done {
		time.Sleep(delay)
		delay = min(delay*2, 2*time.Second)
		done, err = t.operationDone(ctx, op)
	}
	return err
}

// accessTokenOf exchanges an assertion signed with the key file for an access
// token at the server's /token.
func accessTokenOf(addr, keyFile string) string {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		fatalf("%v", err)
	}
	var kf iam.KeyFile
	must(json.Unmarshal(data, &kf))
	assertion, err := kf.Assertion(iam.GoogleTokenURI, time.Now())
	must(err)
	resp, err := http.PostForm("http://"+addr+"/token", url.Values{"grant_type": {iam.GrantTypeJWTBearer}, "assertion": {assertion}})
	must(err)
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.AccessToken == "" {
		fatalf("token: %s %v", resp.Status, err)
	}
	return out.AccessToken
}

// restTransport is the REST API with JSON bodies, decoded as a client does.
type restTransport struct {
	base, token string
	http        *http.Client
}

func (r *restTransport) do(ctx context.Context, method, path string, body []byte) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s %s", method, path, resp.Status, data)
	}
	var out map[string]any
	return out, json.Unmarshal(data, &out)
}

func (r *restTransport) getVolume(ctx context.Context, id string) error {
	_, err := r.do(ctx, http.MethodGet, "/volumes/"+id, nil)
	return err
}

func (r *restTransport) createVolume(ctx context.Context, id string) (string, bool, error) {
	body, _ := json.Marshal(volBody(id))
	op, err := r.do(ctx, http.MethodPost, "/volumes?volumeId="+id, body)
	if err != nil {
		return "", false, err
	}
	return restOp(op)
}

func (r *restTransport) operationDone(ctx context.Context, op string) (bool, error) {
	o, err := r.do(ctx, http.MethodGet, strings.TrimPrefix(op, grpcParent), nil)
	if err != nil {
		return false, err
	}
	_, done, err := restOp(o)
	return done, err
}

func restOp(op map[string]any) (string, bool, error) {
	name, _ := op["name"].(string)
	done, _ := op["done"].(bool)
	if e, ok := op["error"]; ok {
		return name, done, fmt.Errorf("operation %s: %v", name, e)
	}
	return name, done, nil
}

// grpcTransport is the gRPC API with Basin's generated stubs, over one TLS
// connection trusting the server's CA. The client is grpc-go's default, as
// Google's Go SDK dials it, unless staticWindows: then its HTTP/2 windows are
// fixed (1 MiB a stream, 16 MiB the connection), which turns off its
// bandwidth-delay probe (a PING, and a WINDOW_UPDATE, after nearly every
// answer, each for the server to read and the PING to acknowledge); a Go SDK
// user gets the same with option.WithGRPCDialOption.
type grpcTransport struct {
	nc    netapppb.NetAppClient
	ops   longrunningpb.OperationsClient
	token string
}

func dialGRPC(addr, caFile, token string, staticWindows bool) *grpcTransport {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fatalf("%v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fatalf("%s: no certificate", caFile)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots}))}
	if staticWindows {
		opts = append(opts, grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(16<<20))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { conn.Close() })
	return &grpcTransport{nc: netapppb.NewNetAppClient(conn), ops: longrunningpb.NewOperationsClient(conn), token: token}
}

func (g *grpcTransport) ctx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.token)
}

func (g *grpcTransport) getVolume(ctx context.Context, id string) error {
	_, err := g.nc.GetVolume(g.ctx(ctx), &netapppb.GetVolumeRequest{Name: grpcParent + "/volumes/" + id})
	return err
}

func (g *grpcTransport) createVolume(ctx context.Context, id string) (string, bool, error) {
	op, err := g.nc.CreateVolume(g.ctx(ctx), &netapppb.CreateVolumeRequest{Parent: grpcParent, VolumeId: id, Volume: &netapppb.Volume{
		ShareName: id, StoragePool: "pool", CapacityGib: 4, Protocols: []netapppb.Protocols{netapppb.Protocols_NFSV3}}})
	if err != nil {
		return "", false, err
	}
	return grpcOp(op)
}

func (g *grpcTransport) operationDone(ctx context.Context, op string) (bool, error) {
	o, err := g.ops.GetOperation(g.ctx(ctx), &longrunningpb.GetOperationRequest{Name: op})
	if err != nil {
		return false, err
	}
	_, done, err := grpcOp(o)
	return done, err
}

func grpcOp(op *longrunningpb.Operation) (string, bool, error) {
	if e := op.GetError(); e != nil {
		return op.GetName(), op.GetDone(), fmt.Errorf("operation %s: %s", op.GetName(), e.GetMessage())
	}
	return op.GetName(), op.GetDone(), nil
}

func (r grpcResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine: one server serving REST and gRPC, %d rounds; per round and transport %d GETs of a volume "+
		"and %d volume creates (4 GiB, NFSv3) to READY, one at a time, alternating between the transports. Medians of the rounds' values.\n\n",
		r.Date, r.Rounds, r.Gets, r.Creates)
	if r.StaticWindows {
		b.WriteString("The gRPC client's HTTP/2 windows were static (`-grpc-client-static-windows`), not grpc-go's default dynamic ones.\n\n")
	}
	b.WriteString("| what | REST (HTTP/1.1, JSON) | gRPC (HTTP/2 + TLS, protobuf) | gRPC / REST |\n|---|---|---|---|\n")
	row := func(what string, m map[string][]float64) {
		rest, g := median(m["rest"]), median(m["grpc"])
		fmt.Fprintf(&b, "| %s | %.3f ms | %.3f ms | %.2f |\n", what, rest, g, g/rest)
	}
	row("volume GET, p50", r.GetP50)
	row("volume GET, p99", r.GetP99)
	row("volume create → READY, p50", r.CreateP50)
	if r.PythonGets > 0 {
		fmt.Fprintf(&b, "\nGoogle's Python client (`google-cloud-netapp`), its REST transport against its default, gRPC: %d GETs of the volume per round "+
			"and transport, on the same server, alternating.\n\n", r.PythonGets)
		b.WriteString("| what | Python client, REST | Python client, gRPC | gRPC / REST |\n|---|---|---|---|\n")
		row("volume GET, p50", r.PythonGetP50)
		row("volume GET, p99", r.PythonGetP99)
	}
	return b.String()
}
