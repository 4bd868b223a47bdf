package grpcapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/controller"
	dpfake "github.com/basin-nas/basin/internal/dataplane/fake"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/netapppb"
	"github.com/basin-nas/basin/internal/storage/fake"
	"github.com/basin-nas/basin/internal/store"
)

// env is one Basin API (real SQLite store, real controller, the fake storage
// backend, real authentication) served over REST (httptest) and gRPC (bufconn).
type env struct {
	t     *testing.T
	rest  *httptest.Server
	grpc  netapppb.NetAppClient
	ops   longrunningpb.OperationsClient
	locs  locationpb.LocationsClient
	owner string // an access token of the owner account
	st    store.Store
	hc    healthgrpc.HealthClient
	hs    *Health
	api   *api.Server
	conn  *grpc.ClientConn
}

// audits waits (REST audits after answering) until project p1's audit log
// has n entries that match, and returns those it has.
func (e *env) audits(n int, match func(*model.AuditEntry) bool) []*model.AuditEntry {
	e.t.Helper()
	var out []*model.AuditEntry
	for deadline := time.Now().Add(5 * time.Second); len(out) < n && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var all []*model.AuditEntry
		err := e.st.View(context.Background(), func(tx store.Tx) (err error) {
			all, err = store.List[model.AuditEntry](tx, store.KindAudit, "projects/p1")
			return err
		})
		if err != nil {
			e.t.Fatal(err)
		}
		out = slices.DeleteFunc(all, func(a *model.AuditEntry) bool { return !match(a) })
	}
	return out
}

func newEnv(t *testing.T, opts ...func(*api.Options)) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "basin.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctrl := controller.New(controller.Options{Store: st, Backend: fake.New(), DataPlane: controller.AdaptDataPlane(dpfake.New()), Resync: time.Hour})
	done := make(chan struct{})
	go func() { ctrl.Run(ctx); close(done) }()
	o := api.Options{Store: st, Operations: ctrl, Locations: []string{"us-east4", "us-west1"}, RateLimit: -1,
		Auth: iam.NewAuthenticator(iam.Options{Store: st})}
	for _, f := range opts {
		f(&o)
	}
	a := api.New(o)
	rest := httptest.NewServer(a)
	lis := bufconn.Listen(1 << 20)
	g, hs := New(a)
	go g.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		rest.Close()
		a.Close()
		cancel()
		<-done
		st.Close()
	})
	<-ctrl.Ready()
	e := &env{t: t, rest: rest, grpc: netapppb.NewNetAppClient(conn), st: st,
		ops: longrunningpb.NewOperationsClient(conn), locs: locationpb.NewLocationsClient(conn),
		hc: healthgrpc.NewHealthClient(conn), hs: hs, api: a, conn: conn}
	keyPath := filepath.Join(t.TempDir(), "owner.json")
	if _, err := iam.BootstrapOwner(ctx, st, keyPath, rest.URL+"/token", time.Now()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	e.owner = e.token(data)
	return e
}

// token exchanges an assertion signed with a key file's key for an access token
// at /token, as Google's libraries do.
func (e *env) token(keyFile []byte) string {
	e.t.Helper()
	var kf iam.KeyFile
	if err := json.Unmarshal(keyFile, &kf); err != nil {
		e.t.Fatal(err)
	}
	assertion, err := kf.Assertion(iam.GoogleTokenURI, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := http.PostForm(e.rest.URL+"/token", url.Values{"grant_type": {iam.GrantTypeJWTBearer}, "assertion": {assertion}})
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || out.AccessToken == "" {
		e.t.Fatalf("token: %d %v", res.StatusCode, err)
	}
	return out.AccessToken
}

// do sends a REST request with token and returns the status and body.
func (e *env) do(token, method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.rest.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// ok sends a REST request as the owner, asserts a 200 and returns the body.
func (e *env) ok(method, path string, body any) map[string]any {
	e.t.Helper()
	code, raw := e.do(e.owner, method, path, body)
	if code != http.StatusOK {
		e.t.Fatalf("%s %s: %d %s", method, path, code, raw)
	}
	var out map[string]any
	json.Unmarshal(raw, &out)
	return out
}

// run makes a resource through REST and waits for its operation.
func (e *env) run(path string, body any) {
	e.t.Helper()
	op := e.ok("POST", path, body)
	for deadline := time.Now().Add(10 * time.Second); op["done"] != true; {
		if time.Now().After(deadline) {
			e.t.Fatalf("operation did not finish: %v", op)
		}
		time.Sleep(10 * time.Millisecond)
		op = e.ok("GET", "/v1/"+op["name"].(string), nil)
	}
	if op["error"] != nil {
		e.t.Fatalf("POST %s: %v", path, op["error"])
	}
}

func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

const loc = "projects/p1/locations/us-east4"

// sameAsREST asserts that a gRPC answer is REST's answer to the same call
// (GET path), read as proto3 JSON into the same message: every field REST
// sends must be the message's and hold the same value (timestamps compare as
// instants: protojson writes 3, 6 or 9 fractional digits, REST as few as needed).
func (e *env) sameAsREST(what string, m proto.Message, path string) {
	e.t.Helper()
	code, raw := e.do(e.owner, "GET", path, nil)
	if code != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", path, code, raw)
	}
	rest := m.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(raw, rest); err != nil {
		e.t.Fatalf("%s: REST's answer as %T: %v", what, m, err)
	}
	if !proto.Equal(m, rest) {
		e.t.Errorf("%s: gRPC answered\n %v\nREST\n %s", what, protojson.Format(m), raw)
	}
}

func TestReadsMatchREST(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"pa", "pb"} {
		e.run("/v1/"+loc+"/storagePools?storagePoolId="+id, map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100,
			"network": "projects/p1/global/networks/default", "labels": map[string]string{"team": id}})
	}
	for _, id := range []string{"va", "vb", "vc"} {
		e.run("/v1/"+loc+"/volumes?volumeId="+id, map[string]any{"shareName": id, "storagePool": "pa", "capacityGib": 10,
			"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{map[string]any{"allowedClients": "10.0.0.0/8", "accessType": "READ_WRITE", "nfsv3": true}}}})
	}
	ctx := as(e.owner)

	pool, err := e.grpc.GetStoragePool(ctx, &netapppb.GetStoragePoolRequest{Name: loc + "/storagePools/pa"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetStoragePool", pool, "/v1/"+loc+"/storagePools/pa")
	vol, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: loc + "/volumes/vb"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetVolume", vol, "/v1/"+loc+"/volumes/vb")
	if vol.GetCapacityGib() != 10 || vol.GetState() != netapppb.Volume_READY {
		t.Errorf("volume: capacity %d, state %v", vol.GetCapacityGib(), vol.GetState())
	}

	pools, err := e.grpc.ListStoragePools(ctx, &netapppb.ListStoragePoolsRequest{Parent: "projects/p1/locations/-", OrderBy: "name desc"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("ListStoragePools", pools, "/v1/projects/p1/locations/-/storagePools?orderBy=name+desc")
	if len(pools.GetStoragePools()) != 2 {
		t.Errorf("%d pools", len(pools.GetStoragePools()))
	}

	// Paging and a filter: the page tokens REST issues work over gRPC and back.
	var names []string
	req := &netapppb.ListVolumesRequest{Parent: loc, PageSize: 2, Filter: `shareName != "vc"`}
	for {
		page, err := e.grpc.ListVolumes(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		q := url.Values{"pageSize": {"2"}, "filter": {req.Filter}}
		if req.PageToken != "" {
			q.Set("pageToken", req.PageToken)
		}
		e.sameAsREST("ListVolumes", page, "/v1/"+loc+"/volumes?"+q.Encode())
		for _, v := range page.GetVolumes() {
			names = append(names, v.GetName())
		}
		if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if want := []string{loc + "/volumes/va", loc + "/volumes/vb"}; !reflect.DeepEqual(names, want) {
		t.Errorf("paged volumes %v, want %v", names, want)
	}
}

// Snapshots and Active Directory policies read over gRPC as over REST; an
// Active Directory policy's password is in neither answer.
func TestSnapshotsAndADsMatchREST(t *testing.T) {
	e := newEnv(t)
	e.poolAndVolume()
	for _, id := range []string{"s1", "s2", "s3"} {
		e.run("/v1/"+loc+"/volumes/va/snapshots?snapshotId="+id, map[string]any{"description": "snap " + id, "labels": map[string]string{"n": id}})
	}
	for _, id := range []string{"ad1", "ad2"} {
		e.run("/v1/"+loc+"/activeDirectories?activeDirectoryId="+id, map[string]any{"domain": id + ".example.com", "dns": "10.99.0.2",
			"netBiosPrefix": "nas", "username": "admin", "password": "secret-" + id})
	}
	ctx := as(e.owner)

	sn, err := e.grpc.GetSnapshot(ctx, &netapppb.GetSnapshotRequest{Name: loc + "/volumes/va/snapshots/s2"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetSnapshot", sn, "/v1/"+loc+"/volumes/va/snapshots/s2")
	if sn.GetDescription() != "snap s2" || sn.GetState() != netapppb.Snapshot_READY {
		t.Errorf("snapshot: %v", sn)
	}
	var names []string
	req := &netapppb.ListSnapshotsRequest{Parent: loc + "/volumes/va", PageSize: 2, OrderBy: "name desc"}
	for {
		page, err := e.grpc.ListSnapshots(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		q := url.Values{"pageSize": {"2"}, "orderBy": {req.OrderBy}}
		if req.PageToken != "" {
			q.Set("pageToken", req.PageToken)
		}
		e.sameAsREST("ListSnapshots", page, "/v1/"+loc+"/volumes/va/snapshots?"+q.Encode())
		for _, s := range page.GetSnapshots() {
			names = append(names, s.GetName())
		}
		if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	snaps := loc + "/volumes/va/snapshots/"
	if want := []string{snaps + "s3", snaps + "s2", snaps + "s1"}; !reflect.DeepEqual(names, want) {
		t.Errorf("paged snapshots %v, want %v", names, want)
	}

	ad, err := e.grpc.GetActiveDirectory(ctx, &netapppb.GetActiveDirectoryRequest{Name: loc + "/activeDirectories/ad1"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetActiveDirectory", ad, "/v1/"+loc+"/activeDirectories/ad1")
	if ad.GetDomain() != "ad1.example.com" || ad.GetUsername() != "admin" || ad.GetPassword() != "" {
		t.Errorf("active directory: domain %q, username %q, password %q", ad.GetDomain(), ad.GetUsername(), ad.GetPassword())
	}
	ads, err := e.grpc.ListActiveDirectories(ctx, &netapppb.ListActiveDirectoriesRequest{Parent: "projects/p1/locations/-", Filter: `domain = "ad2.example.com"`})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("ListActiveDirectories", ads, "/v1/projects/p1/locations/-/activeDirectories?"+
		url.Values{"filter": {`domain = "ad2.example.com"`}}.Encode())
	if got := ads.GetActiveDirectories(); len(got) != 1 || got[0].GetName() != loc+"/activeDirectories/ad2" || got[0].GetPassword() != "" {
		t.Errorf("listed %v", got)
	}
	for _, path := range []string{"/v1/" + loc + "/activeDirectories/ad1", "/v1/" + loc + "/activeDirectories"} {
		if _, raw := e.do(e.owner, "GET", path, nil); bytes.Contains(raw, []byte("password")) || bytes.Contains(raw, []byte("secret-")) {
			t.Errorf("REST GET %s shows the password: %s", path, raw)
		}
	}
	if b, _ := proto.Marshal(ads); bytes.Contains(b, []byte("secret-")) {
		t.Error("gRPC's list carries a password")
	}
}

// Operations read over gRPC as over REST, their metadata and response the
// messages REST's "@type" names; cancel and delete act as REST's. Locations
// read as REST's.
func TestOperationsAndLocationsMatchREST(t *testing.T) {
	e := newEnv(t)
	e.poolAndVolume()
	ctx := as(e.owner)

	list, err := e.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: loc})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("ListOperations", list, "/v1/"+loc+"/operations")
	var create *longrunningpb.Operation
	for _, op := range list.GetOperations() {
		var md netapppb.OperationMetadata
		if err := op.GetMetadata().UnmarshalTo(&md); err != nil {
			t.Fatalf("%s: metadata %v: %v", op.GetName(), op.GetMetadata().GetTypeUrl(), err)
		}
		if md.GetTarget() == loc+"/volumes/va" {
			create = op
		}
	}
	if create == nil || !create.GetDone() {
		t.Fatalf("no finished create of the volume in %v", list)
	}
	op, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: create.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetOperation", op, "/v1/"+create.GetName())
	var vol netapppb.Volume
	if err := op.GetResponse().UnmarshalTo(&vol); err != nil || vol.GetName() != loc+"/volumes/va" {
		t.Errorf("response %v as Volume: %v, %v", op.GetResponse().GetTypeUrl(), err, vol.GetName())
	}

	paged, err := e.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "projects/p1/locations/-", PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("ListOperations, paged", paged, "/v1/projects/p1/locations/-/operations?pageSize=1")
	if len(paged.GetOperations()) != 1 || paged.GetNextPageToken() == "" {
		t.Errorf("page of 1: %v", paged)
	}

	// Cancelling a finished operation changes nothing; deleting it forgets it.
	if _, err := e.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: create.GetName()}); err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetOperation after cancel", op, "/v1/"+create.GetName())
	if _, err := e.ops.DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: create.GetName()}); err != nil {
		t.Fatal(err)
	}
	if code, raw := e.do(e.owner, "GET", "/v1/"+create.GetName(), nil); code != http.StatusNotFound {
		t.Errorf("REST after gRPC's delete: %d %s", code, raw)
	}
	if _, err := e.ops.DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: create.GetName()}); status.Code(err) != codes.NotFound {
		t.Errorf("deleting it again: %v", err)
	}

	l, err := e.locs.GetLocation(ctx, &locationpb.GetLocationRequest{Name: "projects/p1/locations/us-west1"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetLocation", l, "/v1/projects/p1/locations/us-west1")
	var lm netapppb.LocationMetadata
	if err := l.GetMetadata().UnmarshalTo(&lm); err != nil || l.GetLocationId() != "us-west1" {
		t.Errorf("location %v: metadata %v", l, err)
	}
	ls, err := e.locs.ListLocations(ctx, &locationpb.ListLocationsRequest{Name: "projects/p1", PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("ListLocations", ls, "/v1/projects/p1/locations?pageSize=1")
	if len(ls.GetLocations()) != 1 || ls.GetNextPageToken() == "" {
		t.Errorf("page of 1: %v", ls)
	}
}

// A snapshot created over gRPC is REST's create: its operation polls with
// GetOperation to the end REST's does, the snapshot reads as REST's, the call
// is audited, and a bad ID answers as over REST.
func TestCreateSnapshotMatchesREST(t *testing.T) {
	e := newEnv(t)
	e.poolAndVolume()
	ctx := as(e.owner)
	vol := loc + "/volumes/va"

	op, err := e.grpc.CreateSnapshot(ctx, &netapppb.CreateSnapshotRequest{Parent: vol, SnapshotId: "s1",
		Snapshot: &netapppb.Snapshot{Description: "made over gRPC", Labels: map[string]string{"by": "grpc"}}})
	if err != nil {
		t.Fatal(err)
	}
	op = e.poll(op)
	var md netapppb.OperationMetadata
	var sn netapppb.Snapshot
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil || md.GetTarget() != vol+"/snapshots/s1" || md.GetVerb() != "create" {
		t.Errorf("metadata %v: %v", &md, err)
	}
	if err := op.GetResponse().UnmarshalTo(&sn); err != nil || sn.GetName() != vol+"/snapshots/s1" || sn.GetDescription() != "made over gRPC" {
		t.Errorf("response %v: %v", &sn, err)
	}
	got, err := e.grpc.GetSnapshot(ctx, &netapppb.GetSnapshotRequest{Name: vol + "/snapshots/s1"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetSnapshot", got, "/v1/"+vol+"/snapshots/s1")
	if got.GetState() != netapppb.Snapshot_READY || got.GetLabels()["by"] != "grpc" {
		t.Errorf("snapshot %v", got)
	}
	// REST's create of the same ends alike.
	e.run("/v1/"+vol+"/snapshots?snapshotId=s2", map[string]any{"description": "made over REST"})
	list, err := e.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: loc})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list.GetOperations() {
		var m netapppb.OperationMetadata
		o.GetMetadata().UnmarshalTo(&m)
		if m.GetTarget() == vol+"/snapshots/s2" && (!o.GetDone() || o.GetResponse().GetTypeUrl() != op.GetResponse().GetTypeUrl() || m.GetVerb() != md.GetVerb()) {
			t.Errorf("REST's create %v, gRPC's %v", o, op)
		}
	}
	if a := e.audits(1, func(a *model.AuditEntry) bool { return a.Resource == vol+"/snapshots/s1" }); len(a) != 1 || a[0].Outcome != "OK" {
		t.Errorf("audited %+v", a)
	}

	for _, c := range []struct{ name, id string }{{"bad id", "Bad_ID"}, {"taken id", "s1"}} {
		_, err := e.grpc.CreateSnapshot(ctx, &netapppb.CreateSnapshotRequest{Parent: vol, SnapshotId: c.id, Snapshot: &netapppb.Snapshot{}})
		st := status.Convert(err)
		_, msg, name, details := e.restErrorDo(e.owner, "POST", "/v1/"+vol+"/snapshots?snapshotId="+c.id, map[string]any{})
		if st.Code() == codes.OK || st.Code() != codeOf(name) || st.Message() != msg || jsonOf(restDetails(t, st)) != jsonOf(details) {
			t.Errorf("%s: gRPC %v %q %s, REST %s %q %s", c.name, st.Code(), st.Message(), jsonOf(restDetails(t, st)), name, msg, jsonOf(details))
		}
	}
}

// poll polls op with GetOperation until it is done, and asserts that it ends
// as REST shows it.
func (e *env) poll(op *longrunningpb.Operation) *longrunningpb.Operation {
	e.t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); !op.GetDone(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("operation did not finish: %v", op)
		}
		if op, err = e.ops.GetOperation(as(e.owner), &longrunningpb.GetOperationRequest{Name: op.GetName()}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.sameAsREST("GetOperation", op, "/v1/"+op.GetName())
	return op
}

// A volume deleted over gRPC is REST's delete: without force a volume with
// snapshots is refused as over REST; with force its operation polls to the
// end REST's does (Empty) and the volume is gone for both.
func TestDeleteVolumeMatchesREST(t *testing.T) {
	e := newEnv(t)
	e.poolAndVolume()
	vol := loc + "/volumes/va"
	e.run("/v1/"+vol+"/snapshots?snapshotId=s1", map[string]any{})
	ctx := as(e.owner)

	for _, c := range []struct{ name, id string }{{"snapshots, no force", "va"}, {"bad id", "Bad_ID"}} {
		_, err := e.grpc.DeleteVolume(ctx, &netapppb.DeleteVolumeRequest{Name: loc + "/volumes/" + c.id})
		st := status.Convert(err)
		_, msg, name, details := e.restErrorDo(e.owner, "DELETE", "/v1/"+loc+"/volumes/"+c.id, nil)
		if st.Code() == codes.OK || st.Code() != codeOf(name) || st.Message() != msg || jsonOf(restDetails(t, st)) != jsonOf(details) {
			t.Errorf("%s: gRPC %v %q %s, REST %s %q %s", c.name, st.Code(), st.Message(), jsonOf(restDetails(t, st)), name, msg, jsonOf(details))
		}
	}

	op, err := e.grpc.DeleteVolume(ctx, &netapppb.DeleteVolumeRequest{Name: vol, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	op = e.poll(op)
	var md netapppb.OperationMetadata
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil || md.GetTarget() != vol || md.GetVerb() != "delete" {
		t.Errorf("metadata %v: %v", &md, err)
	}
	if op.GetError() != nil || op.GetResponse().GetTypeUrl() != "type.googleapis.com/google.protobuf.Empty" {
		t.Errorf("ended %v", op)
	}
	if _, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: vol}); status.Code(err) != codes.NotFound {
		t.Errorf("GetVolume after delete: %v", err)
	}
	if code, raw := e.do(e.owner, "GET", "/v1/"+vol+"/snapshots/s1", nil); code != http.StatusNotFound {
		t.Errorf("REST's snapshot after a forced delete: %d %s", code, raw)
	}
}

// poolAndVolume makes storage pool pa and its volume va in loc through REST.
func (e *env) poolAndVolume() {
	e.t.Helper()
	e.run("/v1/"+loc+"/storagePools?storagePoolId=pa", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": 100,
		"network": "projects/p1/global/networks/default"})
	e.run("/v1/"+loc+"/volumes?volumeId=va", map[string]any{"shareName": "va", "storagePool": "pa", "capacityGib": 10,
		"protocols": []string{"NFSV3"}})
}

// restError is REST's error body for a GET.
func (e *env) restError(token, path string) (code int, message, statusName string, details []map[string]any) {
	e.t.Helper()
	return e.restErrorDo(token, "GET", path, nil)
}

// restErrorDo is REST's error body for a call.
func (e *env) restErrorDo(token, method, path string, in any) (code int, message, statusName string, details []map[string]any) {
	e.t.Helper()
	_, raw := e.do(token, method, path, in)
	var body struct {
		Error struct {
			Code    int
			Message string
			Status  string
			Details []map[string]any
		}
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		e.t.Fatalf("%s: %s", path, raw)
	}
	return body.Error.Code, body.Error.Message, body.Error.Status, body.Error.Details
}

// restDetails is a gRPC status's details as REST writes them.
func restDetails(t *testing.T, st *status.Status) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			out = append(out, map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": d.Reason, "domain": d.Domain})
		case *errdetails.BadRequest:
			var fvs []any
			for _, fv := range d.FieldViolations {
				fvs = append(fvs, map[string]any{"field": fv.Field, "description": fv.Description})
			}
			out = append(out, map[string]any{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": fvs})
		default:
			t.Fatalf("unexpected detail %T", d)
		}
	}
	return out
}

func TestErrorsMatchREST(t *testing.T) {
	e := newEnv(t)
	nobody, _ := e.nobody()

	for _, c := range []struct {
		name  string
		token string
		call  func(ctx context.Context) error
		rest  string // the same call's REST path
		code  codes.Code
	}{
		{"bad token", "garbage", func(ctx context.Context) error {
			_, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: loc + "/volumes/v1"})
			return err
		}, "/v1/" + loc + "/volumes/v1", codes.Unauthenticated},
		{"no permission", nobody, func(ctx context.Context) error {
			_, err := e.grpc.ListStoragePools(ctx, &netapppb.ListStoragePoolsRequest{Parent: loc})
			return err
		}, "/v1/" + loc + "/storagePools", codes.PermissionDenied},
		{"no permission, get", nobody, func(ctx context.Context) error {
			_, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: loc + "/volumes/v1"})
			return err
		}, "/v1/" + loc + "/volumes/v1", codes.PermissionDenied},
		{"missing volume", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: loc + "/volumes/v1"})
			return err
		}, "/v1/" + loc + "/volumes/v1", codes.NotFound},
		{"unserved location", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.GetStoragePool(ctx, &netapppb.GetStoragePoolRequest{Name: "projects/p1/locations/mars/storagePools/p"})
			return err
		}, "/v1/projects/p1/locations/mars/storagePools/p", codes.NotFound},
		{"bad page size", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.ListVolumes(ctx, &netapppb.ListVolumesRequest{Parent: loc, PageSize: -1})
			return err
		}, "/v1/" + loc + "/volumes?pageSize=-1", codes.InvalidArgument},
		{"bad filter", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.ListVolumes(ctx, &netapppb.ListVolumesRequest{Parent: loc, Filter: "state ="})
			return err
		}, "/v1/" + loc + "/volumes?filter=state+%3D", codes.InvalidArgument},
		{"missing snapshot", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.GetSnapshot(ctx, &netapppb.GetSnapshotRequest{Name: loc + "/volumes/v1/snapshots/s1"})
			return err
		}, "/v1/" + loc + "/volumes/v1/snapshots/s1", codes.NotFound},
		{"snapshots of a missing volume", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.ListSnapshots(ctx, &netapppb.ListSnapshotsRequest{Parent: loc + "/volumes/v1"})
			return err
		}, "/v1/" + loc + "/volumes/v1/snapshots", codes.NotFound},
		{"bad snapshot order", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.ListSnapshots(ctx, &netapppb.ListSnapshotsRequest{Parent: loc + "/volumes/v1", OrderBy: "nope"})
			return err
		}, "/v1/" + loc + "/volumes/v1/snapshots?orderBy=nope", codes.InvalidArgument},
		{"no permission, snapshots", nobody, func(ctx context.Context) error {
			_, err := e.grpc.ListSnapshots(ctx, &netapppb.ListSnapshotsRequest{Parent: loc + "/volumes/v1"})
			return err
		}, "/v1/" + loc + "/volumes/v1/snapshots", codes.PermissionDenied},
		{"missing active directory", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.GetActiveDirectory(ctx, &netapppb.GetActiveDirectoryRequest{Name: loc + "/activeDirectories/ad1"})
			return err
		}, "/v1/" + loc + "/activeDirectories/ad1", codes.NotFound},
		{"bad active directory page token", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.ListActiveDirectories(ctx, &netapppb.ListActiveDirectoriesRequest{Parent: loc, PageToken: "x"})
			return err
		}, "/v1/" + loc + "/activeDirectories?pageToken=x", codes.InvalidArgument},
		{"missing operation", e.owner, func(ctx context.Context) error {
			_, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: loc + "/operations/op1"})
			return err
		}, "/v1/" + loc + "/operations/op1", codes.NotFound},
		{"bad operations filter", e.owner, func(ctx context.Context) error {
			_, err := e.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: loc, Filter: "done ="})
			return err
		}, "/v1/" + loc + "/operations?filter=done+%3D", codes.InvalidArgument},
		{"no permission, operations", nobody, func(ctx context.Context) error {
			_, err := e.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: loc + "/operations/op1"})
			return err
		}, "/v1/" + loc + "/operations/op1", codes.PermissionDenied},
		{"unserved location, get", e.owner, func(ctx context.Context) error {
			_, err := e.locs.GetLocation(ctx, &locationpb.GetLocationRequest{Name: "projects/p1/locations/mars"})
			return err
		}, "/v1/projects/p1/locations/mars", codes.NotFound},
		{"bad locations page size", e.owner, func(ctx context.Context) error {
			_, err := e.locs.ListLocations(ctx, &locationpb.ListLocationsRequest{Name: "projects/p1", PageSize: -1})
			return err
		}, "/v1/projects/p1/locations?pageSize=-1", codes.InvalidArgument},
		{"no permission, locations", nobody, func(ctx context.Context) error {
			_, err := e.locs.ListLocations(ctx, &locationpb.ListLocationsRequest{Name: "projects/p1"})
			return err
		}, "/v1/projects/p1/locations", codes.PermissionDenied},
		{"no permission, active directories", nobody, func(ctx context.Context) error {
			_, err := e.grpc.ListActiveDirectories(ctx, &netapppb.ListActiveDirectoriesRequest{Parent: loc})
			return err
		}, "/v1/" + loc + "/activeDirectories", codes.PermissionDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call(as(c.token))
			st := status.Convert(err)
			if st.Code() != c.code {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, c.code)
			}
			httpCode, msg, name, details := e.restError(c.token, c.rest)
			if int32(st.Code()) != int32(codeOf(name)) || httpCode < 400 {
				t.Errorf("REST answered %d %s, gRPC %v", httpCode, name, st.Code())
			}
			if st.Message() != msg {
				t.Errorf("message %q, REST's %q", st.Message(), msg)
			}
			if got := restDetails(t, st); !reflect.DeepEqual(jsonOf(got), jsonOf(details)) {
				t.Errorf("details %v, REST's %v", jsonOf(got), jsonOf(details))
			}
		})
	}
}

// nobody makes an account without a role (authenticated, denied everything)
// and returns an access token of it and its email.
func (e *env) nobody() (string, string) {
	e.t.Helper()
	sa := e.ok("POST", "/v1/projects/p1/serviceAccounts", map[string]any{"accountId": "nobody", "serviceAccount": map[string]any{}})
	key := e.ok("POST", "/v1/projects/p1/serviceAccounts/"+sa["email"].(string)+"/keys", map[string]any{})
	kf, err := base64.StdEncoding.DecodeString(key["privateKeyData"].(string))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.token(kf), sa["email"].(string)
}

// A denied call is audited over gRPC as over REST; a call that could change
// something is audited whatever its answer; a read that succeeds is not.
func TestAudit(t *testing.T) {
	e := newEnv(t)
	nobody, email := e.nobody()
	_, err := e.grpc.GetVolume(as(nobody), &netapppb.GetVolumeRequest{Name: loc + "/volumes/v1"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatal(err)
	}
	byNobody := func(a *model.AuditEntry) bool { return a.Principal == email && a.Resource == loc+"/volumes/v1" } // not its /token call
	if got := e.audits(1, byNobody); len(got) != 1 {
		t.Fatalf("gRPC audited %v", got)
	}
	e.do(nobody, "GET", "/v1/"+loc+"/volumes/v1", nil)
	got := e.audits(2, byNobody)
	if len(got) != 2 {
		t.Fatalf("gRPC and REST audited %v", got)
	}
	g, w := got[0], got[1]
	if g.Project != w.Project || g.Method != w.Method || g.Resource != w.Resource || g.Status != w.Status || g.Outcome != w.Outcome {
		t.Errorf("gRPC audited %+v, REST %+v", g, w)
	}
	if _, err := e.grpc.ListVolumes(as(e.owner), &netapppb.ListVolumesRequest{Parent: loc}); err != nil {
		t.Fatal(err)
	}
	e.grpc.CreateBackupVault(as(e.owner), &netapppb.CreateBackupVaultRequest{Parent: loc, BackupVaultId: "bv"})
	got = e.audits(1, func(a *model.AuditEntry) bool {
		return a.Method == netapppb.NetApp_CreateBackupVault_FullMethodName || a.Method == iam.NetappPermission("volumes", "list")
	})
	if len(got) != 1 || got[0].Method != netapppb.NetApp_CreateBackupVault_FullMethodName || got[0].Outcome != "UNIMPLEMENTED" || got[0].Status != 501 {
		t.Errorf("audited %+v, want the one CreateBackupVault, UNIMPLEMENTED", got)
	}
}

// gRPC and REST calls of a principal draw on one rate limit.
func TestRateLimit(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.RateLimit = 3 })
	var err error
	for i := 0; i < 4 && status.Code(err) != codes.ResourceExhausted; i++ {
		_, err = e.grpc.GetStoragePool(as(e.owner), &netapppb.GetStoragePoolRequest{Name: loc + "/storagePools/p"})
	}
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), "Quota exceeded: ") {
		t.Fatalf("after 4 calls: %v", err)
	}
	if code, raw := e.do(e.owner, "GET", "/v1/"+loc+"/storagePools/p", nil); code != http.StatusTooManyRequests {
		t.Errorf("REST after gRPC's limit: %d %s", code, raw)
	}
}

// codeOf is the gRPC code of a canonical code name.
func codeOf(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.EqualFold(strings.ReplaceAll(name, "_", ""), c.String()) {
			return c
		}
	}
	return codes.Unknown
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A method gRPC does not serve yet answers UNIMPLEMENTED with REST's 501
// message and ErrorInfo, once the caller is authenticated.
func TestUnserved(t *testing.T) {
	e := newEnv(t)
	_, err := e.grpc.CreateBackupVault(as(e.owner), &netapppb.CreateBackupVaultRequest{Parent: loc, BackupVaultId: "bv"})
	st := status.Convert(err)
	want := "Method " + netapppb.NetApp_CreateBackupVault_FullMethodName + " is not implemented by Basin"
	if st.Code() != codes.Unimplemented || st.Message() != want {
		t.Fatalf("%v %q, want UNIMPLEMENTED %q", st.Code(), st.Message(), want)
	}
	if got := jsonOf(restDetails(t, st)); got != `[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"netapp.googleapis.com","reason":"METHOD_NOT_IMPLEMENTED"}]` {
		t.Errorf("details %s", got)
	}
	_, err = e.grpc.ListBackups(as("garbage"), &netapppb.ListBackupsRequest{Parent: loc + "/backupVaults/b"})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("unserved method, bad token: %v", err)
	}
}

// A request whose name is not of its method's form answers INVALID_ARGUMENT,
// naming the field and the form.
func TestMalformedNames(t *testing.T) {
	e := newEnv(t)
	ctx := as(e.owner)
	for _, c := range []struct {
		call        func() error
		field, form string
	}{
		{func() error {
			_, err := e.grpc.GetSnapshot(ctx, &netapppb.GetSnapshotRequest{Name: loc + "/volumes/v1"})
			return err
		}, "name", "projects/{project}/locations/{location}/volumes/{volume}/snapshots/{id}"},
		{func() error {
			_, err := e.grpc.ListSnapshots(ctx, &netapppb.ListSnapshotsRequest{Parent: loc + "/pools/v1"})
			return err
		}, "parent", "projects/{project}/locations/{location}/volumes/{volume}"},
		{func() error {
			_, err := e.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: loc + "/operations"})
			return err
		}, "name", "projects/{project}/locations/{location}"},
		{func() error {
			_, err := e.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: loc + "/volumes/op1"})
			return err
		}, "name", "projects/{project}/locations/{location}/operations/{id}"},
		{func() error {
			_, err := e.locs.ListLocations(ctx, &locationpb.ListLocationsRequest{Name: "projects/"})
			return err
		}, "name", "projects/{project}"},
		{func() error {
			_, err := e.grpc.UpdateStoragePool(ctx, &netapppb.UpdateStoragePoolRequest{UpdateMask: mask("description")})
			return err
		}, "storage_pool.name", "projects/{project}/locations/{location}/storagePools/{id}"},
		{func() error {
			_, err := e.grpc.UpdateSnapshot(ctx, &netapppb.UpdateSnapshotRequest{Snapshot: &netapppb.Snapshot{Name: loc + "/volumes/v1"}})
			return err
		}, "snapshot.name", "projects/{project}/locations/{location}/volumes/{volume}/snapshots/{id}"},
		{func() error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc + "/volumes", VolumeId: "v1"})
			return err
		}, "parent", "projects/{project}/locations/{location}"},
	} {
		st := status.Convert(c.call())
		var br *errdetails.BadRequest
		for _, d := range st.Details() {
			if d, ok := d.(*errdetails.BadRequest); ok {
				br = d
			}
		}
		if st.Code() != codes.InvalidArgument || br == nil || len(br.FieldViolations) != 1 || br.FieldViolations[0].Field != c.field ||
			!strings.HasSuffix(st.Message(), "is not of the form "+c.form) {
			t.Errorf("%v %q %v, want INVALID_ARGUMENT on %s, form %s", st.Code(), st.Message(), br, c.field, c.form)
		}
	}
}

// Every call is observed once for the metrics (api.Options.ObserveCall) with
// its full method name and the canonical code answered, refusals and
// unserved methods included.
func TestObserveCall(t *testing.T) {
	type obs struct{ method, code string }
	seen := make(chan obs, 16)
	e := newEnv(t, func(o *api.Options) {
		o.ObserveCall = func(method, code string, d time.Duration) {
			if d <= 0 {
				t.Errorf("%s: duration %v", method, d)
			}
			seen <- obs{method, code}
		}
	})
	for _, c := range []struct {
		call func() error
		want obs
	}{
		{func() error {
			_, err := e.grpc.ListStoragePools(as(e.owner), &netapppb.ListStoragePoolsRequest{Parent: loc})
			return err
		}, obs{netapppb.NetApp_ListStoragePools_FullMethodName, "OK"}},
		{func() error {
			_, err := e.grpc.GetVolume(as(e.owner), &netapppb.GetVolumeRequest{Name: loc + "/volumes/v1"})
			return err
		}, obs{netapppb.NetApp_GetVolume_FullMethodName, "NOT_FOUND"}},
		{func() error {
			_, err := e.grpc.GetVolume(as("garbage"), &netapppb.GetVolumeRequest{Name: loc + "/volumes/v1"})
			return err
		}, obs{netapppb.NetApp_GetVolume_FullMethodName, "UNAUTHENTICATED"}},
		{func() error {
			_, err := e.grpc.CreateBackupVault(as(e.owner), &netapppb.CreateBackupVaultRequest{Parent: loc, BackupVaultId: "bv"})
			return err
		}, obs{netapppb.NetApp_CreateBackupVault_FullMethodName, "UNIMPLEMENTED"}},
		{func() error {
			_, err := e.ops.GetOperation(as(e.owner), &longrunningpb.GetOperationRequest{Name: loc})
			return err
		}, obs{longrunningpb.Operations_GetOperation_FullMethodName, "INVALID_ARGUMENT"}},
	} {
		c.call()
		select {
		case got := <-seen:
			if got != c.want {
				t.Errorf("observed %+v, want %+v", got, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%+v not observed", c.want)
		}
	}
	select {
	case got := <-seen:
		t.Errorf("observed %+v more", got)
	default:
	}
}

// Every served method needs a permission: iam.NetappPermission answers ""
// for a collection or verb it does not know, which Authorize would take as
// "no permission needed" (REST's route table refuses such a route).
func TestServedMethodsNeedAPermission(t *testing.T) {
	for full, m := range served {
		if iam.NetappPermission(m.collection, m.verb) == "" {
			t.Errorf("%s (%s.%s) needs no permission", full, m.collection, m.verb)
		}
	}
}
