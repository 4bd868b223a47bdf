package goclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/oauth2/google"
	"google.golang.org/api/googleapi"
	netapp "google.golang.org/api/netapp/v1"
	"google.golang.org/api/option"
)

// env is what test/e2e's TestGoClient passes.
type env struct {
	endpoint, project, location, network, clients string
}

func getEnv(t *testing.T) env {
	e := env{os.Getenv("BASIN_ENDPOINT"), os.Getenv("BASIN_PROJECT"), os.Getenv("BASIN_LOCATION"),
		os.Getenv("BASIN_NETWORK"), os.Getenv("BASIN_CLIENTS")}
	if e.endpoint == "" {
		t.Skip("BASIN_ENDPOINT is not set: test/e2e TestGoClient runs this against a basin serve")
	}
	return e
}

func (e env) parent() string { return "projects/" + e.project + "/locations/" + e.location }

// newService is the client as its documentation shows it, pointed at Basin: default
// credentials (GOOGLE_APPLICATION_CREDENTIALS, a Basin key file), no audience
// override, so the library exchanges a signed assertion at the key's token_uri.
func newService(t *testing.T, e env, opts ...option.ClientOption) *netapp.Service {
	t.Helper()
	svc, err := netapp.NewService(context.Background(), append([]option.ClientOption{option.WithEndpoint(e.endpoint)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// wait polls a long-running operation until it is done and returns its response.
func wait(t *testing.T, svc *netapp.Service, op *netapp.Operation, err error) map[string]any {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for polls := 0; !op.Done; polls++ {
		if polls > 600 {
			t.Fatalf("operation %s not done after 60 s", op.Name)
		}
		time.Sleep(100 * time.Millisecond)
		if op, err = svc.Projects.Locations.Operations.Get(op.Name).Do(); err != nil {
			t.Fatal(err)
		}
	}
	if op.Error != nil {
		t.Fatalf("operation %s failed: %d %s", op.Name, op.Error.Code, op.Error.Message)
	}
	var resp map[string]any
	if len(op.Response) > 0 {
		if err := json.Unmarshal(op.Response, &resp); err != nil {
			t.Fatal(err)
		}
	}
	return resp
}

// Pools, volumes with export policies, update masks, paging, snapshots, revert and
// deletes, each create, update and delete polled to its end as a long-running
// operation (the server answers every mutation with a running operation).
func TestNetAppClient(t *testing.T) {
	e := getEnv(t)
	svc := newService(t, e)
	locs := svc.Projects.Locations
	ctx := context.Background()

	l, err := locs.Get(e.parent()).Do()
	if err != nil || l.LocationId != e.location {
		t.Fatalf("locations.get: %v %+v", err, l)
	}
	ll, err := locs.List("projects/" + e.project).Do()
	if err != nil || !slices.ContainsFunc(ll.Locations, func(x *netapp.Location) bool { return x.Name == e.parent() }) {
		t.Fatalf("locations.list: %v %+v", err, ll)
	}

	// Pools: two, listed one per page.
	for _, id := range []string{"go-pool-1", "go-pool-2"} {
		// The network by its bare name (docs/clients.md); answered in the long form.
		op, err := locs.StoragePools.Create(e.parent(), &netapp.StoragePool{ServiceLevel: "PREMIUM", CapacityGib: 2048,
			Network: e.network, Description: "from Go"}).StoragePoolId(id).Do()
		if resp := wait(t, svc, op, err); resp["state"] != "READY" || resp["network"] != "projects/"+e.project+"/global/networks/"+e.network {
			t.Fatalf("pool %s: %v", id, resp)
		}
	}
	var pages, pools int
	err = locs.StoragePools.List(e.parent()).PageSize(1).Pages(ctx, func(r *netapp.ListStoragePoolsResponse) error {
		pages++
		pools += len(r.StoragePools)
		return nil
	})
	if err != nil || pages != 2 || pools != 2 {
		t.Fatalf("storagePools.list by pages of 1: %v, %d pages, %d pools", err, pages, pools)
	}
	pool := e.parent() + "/storagePools/go-pool-1"
	op, err := locs.StoragePools.Patch(pool, &netapp.StoragePool{Description: "changed", CapacityGib: 4096}).UpdateMask("description,capacityGib").Do()
	wait(t, svc, op, err)
	p, err := locs.StoragePools.Get(pool).Do()
	if err != nil || p.Description != "changed" || p.CapacityGib != 4096 || p.ServiceLevel != "PREMIUM" {
		t.Fatalf("storagePools.get after patch: %v %+v", err, p)
	}

	// Volumes with an export policy.
	for _, id := range []string{"go-vol-1", "go-vol-2"} {
		op, err := locs.Volumes.Create(e.parent(), &netapp.Volume{ShareName: id, StoragePool: "go-pool-1", CapacityGib: 1, Protocols: []string{"NFSV3"},
			ExportPolicy: &netapp.ExportPolicy{Rules: []*netapp.SimpleExportPolicyRule{{AllowedClients: e.clients, AccessType: "READ_WRITE", HasRootAccess: "true", Nfsv3: true}}},
		}).VolumeId(id).Do()
		if resp := wait(t, svc, op, err); resp["state"] != "READY" {
			t.Fatalf("volume %s: %v", id, resp)
		}
	}
	pages = 0
	var vols []string
	err = locs.Volumes.List(e.parent()).PageSize(1).Pages(ctx, func(r *netapp.ListVolumesResponse) error {
		pages++
		for _, v := range r.Volumes {
			vols = append(vols, v.Name)
		}
		return nil
	})
	if err != nil || pages != 2 || len(vols) != 2 {
		t.Fatalf("volumes.list by pages of 1: %v, %d pages, %v", err, pages, vols)
	}
	vol := e.parent() + "/volumes/go-vol-1"
	v, err := locs.Volumes.Get(vol).Do()
	if err != nil || v.ExportPolicy == nil || len(v.ExportPolicy.Rules) != 1 || v.ExportPolicy.Rules[0].AllowedClients != e.clients ||
		len(v.MountOptions) == 0 || v.Network != "projects/"+e.project+"/global/networks/"+e.network {
		t.Fatalf("volumes.get: %v %+v", err, v)
	}
	op, err = locs.Volumes.Patch(vol, &netapp.Volume{Description: "changed", CapacityGib: 2}).UpdateMask("description,capacityGib").Do()
	wait(t, svc, op, err)
	if v, err = locs.Volumes.Get(vol).Do(); err != nil || v.Description != "changed" || v.CapacityGib != 2 || v.ShareName != "go-vol-1" {
		t.Fatalf("volumes.get after patch: %v %+v", err, v)
	}

	// Snapshots, and a revert to one.
	snaps := locs.Volumes.Snapshots
	op, err = snaps.Create(vol, &netapp.Snapshot{Description: "first"}).SnapshotId("go-snap-1").Do()
	wait(t, svc, op, err)
	snap := vol + "/snapshots/go-snap-1"
	sl, err := snaps.List(vol).Do()
	if err != nil || len(sl.Snapshots) != 1 || sl.Snapshots[0].Name != snap {
		t.Fatalf("snapshots.list: %v %+v", err, sl)
	}
	op, err = snaps.Patch(snap, &netapp.Snapshot{Description: "renamed"}).UpdateMask("description").Do()
	wait(t, svc, op, err)
	if s, err := snaps.Get(snap).Do(); err != nil || s.Description != "renamed" || s.State != "READY" {
		t.Fatalf("snapshots.get: %v %+v", err, s)
	}
	op, err = locs.Volumes.Revert(vol, &netapp.RevertVolumeRequest{SnapshotId: "go-snap-1"}).Do()
	wait(t, svc, op, err)
	op, err = snaps.Delete(snap).Do()
	wait(t, svc, op, err)
	if _, err := snaps.Get(snap).Do(); !isStatus(err, 404) {
		t.Fatalf("deleted snapshot: %v", err)
	}

	// Operations are listed and read back.
	ops, err := locs.Operations.List(e.parent()).Do()
	if err != nil || len(ops.Operations) < 10 {
		t.Fatalf("operations.list: %v, %d operations", err, len(ops.Operations))
	}
	if o, err := locs.Operations.Get(ops.Operations[0].Name).Do(); err != nil || !o.Done {
		t.Fatalf("operations.get: %v %+v", err, o)
	}

	// Deletes: a volume with a snapshot needs force; then the pools.
	op, err = snaps.Create(vol, &netapp.Snapshot{}).SnapshotId("go-snap-2").Do()
	wait(t, svc, op, err)
	if _, err := locs.Volumes.Delete(vol).Do(); !isStatus(err, 400) {
		t.Fatalf("deleting a volume with snapshots without force: %v", err)
	}
	op, err = locs.Volumes.Delete(vol).Force(true).Do()
	wait(t, svc, op, err)
	op, err = locs.Volumes.Delete(e.parent() + "/volumes/go-vol-2").Do()
	wait(t, svc, op, err)
	for _, id := range []string{"go-pool-1", "go-pool-2"} {
		op, err := locs.StoragePools.Delete(e.parent() + "/storagePools/" + id).Do()
		wait(t, svc, op, err)
	}
	if r, err := locs.StoragePools.List(e.parent()).Do(); err != nil || len(r.StoragePools) != 0 {
		t.Fatalf("pools left: %v %+v", err, r)
	}
}

func isStatus(err error, code int) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == code
}

// iamClient calls Basin's IAM methods with the default credentials, through the
// same token exchange.
type iamClient struct {
	t    *testing.T
	hc   *http.Client
	base string
}

func (c iamClient) do(method, path string, body any) map[string]any {
	c.t.Helper()
	var rd bytes.Buffer
	if body != nil {
		json.NewEncoder(&rd).Encode(body)
	}
	req, _ := http.NewRequest(method, c.base+path, &rd)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out)
	if res.StatusCode != 200 {
		c.t.Fatalf("%s %s: %d %v", method, path, res.StatusCode, out)
	}
	return out
}

// newKey makes a key for the account and returns its key file.
func (c iamClient) newKey(account string) []byte {
	c.t.Helper()
	k := c.do("POST", account+"/keys", map[string]any{})
	data, err := base64.StdEncoding.DecodeString(k["privateKeyData"].(string))
	if err != nil {
		c.t.Fatal(err)
	}
	return data
}

// A revoked key's access token, or a disabled account's, is refused on its next
// request, although the client still holds the token (Go's oauth2 refreshes only
// on expiry).
func TestRevocationIsImmediate(t *testing.T) {
	e := getEnv(t)
	ctx := context.Background()
	hc, err := google.DefaultClient(ctx, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		t.Fatal(err)
	}
	c := iamClient{t: t, hc: hc, base: e.endpoint + "v1/"}
	sa := c.do("POST", "projects/"+e.project+"/serviceAccounts", map[string]any{"accountId": "go-revoked"})
	account := "projects/" + e.project + "/serviceAccounts/" + sa["email"].(string)
	c.do("POST", "projects/"+e.project+":setIamPolicy", map[string]any{"policy": map[string]any{"bindings": []any{
		map[string]any{"role": "roles/netapp.viewer", "members": []string{"serviceAccount:" + sa["email"].(string)}}}}})

	list := func(svc *netapp.Service) error {
		_, err := svc.Projects.Locations.StoragePools.List(e.parent()).Do()
		return err
	}
	keyFile := c.newKey(account)
	svc := newService(t, e, option.WithAuthCredentialsJSON(option.ServiceAccount, keyFile))
	if err := list(svc); err != nil {
		t.Fatalf("new account's key: %v", err)
	}
	var kf struct {
		ID string `json:"private_key_id"`
	}
	json.Unmarshal(keyFile, &kf)
	c.do("DELETE", account+"/keys/"+kf.ID, nil)
	if err := list(svc); !isStatus(err, 401) {
		t.Fatalf("the access token of a deleted key: %v, want 401", err)
	}

	svc = newService(t, e, option.WithAuthCredentialsJSON(option.ServiceAccount, c.newKey(account)))
	if err := list(svc); err != nil {
		t.Fatalf("second key: %v", err)
	}
	c.do("POST", account+":disable", nil)
	if err := list(svc); !isStatus(err, 401) {
		t.Fatalf("the access token of a disabled account: %v, want 401", err)
	}
	c.do("POST", account+":enable", nil)
	if err := list(svc); !isStatus(err, 401) {
		t.Fatalf("a token issued before the account was disabled, after it was enabled again: %v, want 401", err)
	}
	c.do("DELETE", account, nil)
	fmt.Println("revocation checked: deleted key, disabled account")
}
