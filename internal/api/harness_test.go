package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/basin-nas/basin/internal/controller"
	dpfake "github.com/basin-nas/basin/internal/dataplane/fake"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

// env is a Basin API over a real SQLite store and the real controller, with the
// state-modelling fake storage backend.
type env struct {
	t     *testing.T
	srv   *httptest.Server
	st    store.Store
	be    *fake.Backend
	dp    *dpfake.DataPlane
	ctrl  *controller.Controller
	api   *Server
	db    string // the database file
	auth  Authenticator
	token string
	ua    string // the User-Agent do sends ("" = Go's)
}

type envOpt func(*Options)

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	db := filepath.Join(t.TempDir(), "basin.db")
	st, err := store.OpenSQLite(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	be, dp := fake.New(), dpfake.New()
	ctrl := controller.New(controller.Options{Store: st, Backend: be, DataPlane: controller.AdaptDataPlane(dp), Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	o := Options{Store: st, Operations: ctrl, Locations: []string{"us-east4", "us-west1"}, RateLimit: -1}
	for _, f := range opts {
		f(&o)
	}
	h := New(o)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	<-ctrl.Ready()
	return &env{t: t, srv: srv, st: st, be: be, dp: dp, ctrl: ctrl, api: h, db: db, auth: o.Auth}
}

const loc = "/v1/projects/p1/locations/us-east4"

type resp struct {
	status int
	body   map[string]any
	raw    string
	header http.Header
}

func (e *env) do(method, path string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	if e.ua != "" {
		req.Header.Set("User-Agent", e.ua)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, raw: string(raw), header: res.Header}
	json.Unmarshal(raw, &r.body)
	return r
}

// ok asserts a 200 and returns the body.
func (e *env) ok(method, path string, body any) map[string]any {
	e.t.Helper()
	r := e.do(method, path, body)
	if r.status != http.StatusOK {
		e.t.Fatalf("%s %s: status %d: %s", method, path, r.status, r.raw)
	}
	return r.body
}

// fails asserts an error status and canonical code name.
func (e *env) fails(method, path string, body any, status int, code string) resp {
	e.t.Helper()
	r := e.do(method, path, body)
	if r.status != status {
		e.t.Fatalf("%s %s: got status %d, want %d: %s", method, path, r.status, status, r.raw)
	}
	errObj, _ := r.body["error"].(map[string]any)
	if got, _ := errObj["status"].(string); got != code {
		e.t.Fatalf("%s %s: got code %q, want %q: %s", method, path, got, code, r.raw)
	}
	if got, _ := errObj["code"].(float64); int(got) != status {
		e.t.Fatalf("error.code %v != HTTP status %d", got, status)
	}
	return r
}

// wait polls an operation until done and returns it.
func (e *env) wait(op map[string]any) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if done, _ := op["done"].(bool); done {
			return op
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("operation did not finish: %v", op)
		}
		time.Sleep(10 * time.Millisecond)
		op = e.ok("GET", "/v1/"+op["name"].(string), nil)
	}
}

// run performs a mutating call, waits for its operation and asserts success.
func (e *env) run(method, path string, body any) map[string]any {
	e.t.Helper()
	op := e.wait(e.ok(method, path, body))
	if op["error"] != nil {
		e.t.Fatalf("%s %s: operation failed: %v", method, path, op["error"])
	}
	resp, _ := op["response"].(map[string]any)
	return resp
}

func (e *env) pool(id string, capGib int, extra map[string]any) map[string]any {
	e.t.Helper()
	body := map[string]any{"serviceLevel": "PREMIUM", "capacityGib": capGib, "network": "projects/p1/global/networks/default"}
	for k, v := range extra {
		body[k] = v
	}
	return e.run("POST", loc+"/storagePools?storagePoolId="+id, body)
}

func (e *env) volume(id, pool string, capGib int, extra map[string]any) map[string]any {
	e.t.Helper()
	body := map[string]any{"shareName": id, "storagePool": pool, "capacityGib": capGib, "protocols": []string{"NFSV3"}}
	for k, v := range extra {
		body[k] = v
	}
	return e.run("POST", loc+"/volumes?volumeId="+id, body)
}

func (e *env) volumeRecord(id string) *model.Volume {
	e.t.Helper()
	var v *model.Volume
	err := e.st.View(context.Background(), func(tx store.Tx) (err error) {
		v, err = store.Get[model.Volume](tx, store.KindVolume, "projects/p1/locations/us-east4/volumes/"+id)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

type storeTx = store.Tx

// setUsed records observed usage for a volume, as the controller's resync would.
func setUsed(tx store.Tx, id string, bytes int64) error {
	v, err := store.Get[model.Volume](tx, store.KindVolume, "projects/p1/locations/us-east4/volumes/"+id)
	if err != nil {
		return err
	}
	v.UsedBytes = bytes
	return store.PutVolume(tx, v)
}

// fakeCapacity is an in-memory Capacity: a store of a given size and free space, and
// per-volume usage (keyed by model.Volume.Key), as the storage backend would report.
type fakeCapacity struct {
	mu         sync.Mutex
	size, free int64
	used       map[string]int64
	err        error
	calls      int
}

func newFakeCapacity(sizeGib, freeGib int64) *fakeCapacity {
	return &fakeCapacity{size: sizeGib << 30, free: freeGib << 30, used: map[string]int64{}}
}

func (f *fakeCapacity) StoreSpace(context.Context) (int64, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.size, f.free, f.err
}

func (f *fakeCapacity) VolumeUsedBytes(_ context.Context, key string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.used[key], f.err
}

func (f *fakeCapacity) set(fn func(*fakeCapacity)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// probe calls a health endpoint as the daemon serves them, beside the API.
func (e *env) probe(path string) resp {
	e.t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/healthz", e.api.Healthz())
	mux.Handle("/readyz", e.api.Readyz())
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return resp{status: rec.Code, raw: rec.Body.String(), header: rec.Header()}
}
