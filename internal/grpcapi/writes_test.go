package grpcapi

import (
	"context"
	"net/http"
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/netapppb"
)

// done polls op (the answer of a write, or its error) to its end, as
// REST shows it, and fails the test if the call or the operation failed.
func (e *env) done(op *longrunningpb.Operation, err error) *longrunningpb.Operation {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	op = e.poll(op)
	if op.GetError() != nil {
		e.t.Fatalf("operation %s failed: %v", op.GetName(), op.GetError())
	}
	return op
}

func mask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// Trident's flow, and every other write REST serves, over gRPC alone: pools,
// volumes (a clone of a snapshot, updates with proto and REST mask paths,
// revert, delete with force), snapshots and Active Directory policies. Every
// operation ends as REST shows it, and every resource reads as REST's.
func TestWritesOverGRPC(t *testing.T) {
	e := newEnv(t)
	ctx := as(e.owner)
	pool, vol, clone := loc+"/storagePools/pa", loc+"/volumes/va", loc+"/volumes/vclone"

	e.done(e.grpc.CreateStoragePool(ctx, &netapppb.CreateStoragePoolRequest{Parent: loc, StoragePoolId: "pa",
		StoragePool: &netapppb.StoragePool{ServiceLevel: netapppb.ServiceLevel_PREMIUM, CapacityGib: 100,
			Network: "projects/p1/global/networks/default", Labels: map[string]string{"by": "grpc"}}}))
	e.done(e.grpc.UpdateStoragePool(ctx, &netapppb.UpdateStoragePoolRequest{UpdateMask: mask("capacity_gib", "description"),
		StoragePool: &netapppb.StoragePool{Name: pool, CapacityGib: 200, Description: "bigger"}}))
	p, err := e.grpc.GetStoragePool(ctx, &netapppb.GetStoragePoolRequest{Name: pool})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetStoragePool", p, "/v1/"+pool)
	if p.GetCapacityGib() != 200 || p.GetDescription() != "bigger" || p.GetLabels()["by"] != "grpc" {
		t.Errorf("pool %v", p)
	}

	rw := netapppb.AccessType_READ_WRITE
	op := e.done(e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "va",
		Volume: &netapppb.Volume{ShareName: "va", StoragePool: "pa", CapacityGib: 10, Protocols: []netapppb.Protocols{netapppb.Protocols_NFSV3},
			ExportPolicy: &netapppb.ExportPolicy{Rules: []*netapppb.SimpleExportPolicyRule{{AllowedClients: proto.String("10.0.0.0/8"),
				AccessType: &rw, Nfsv3: proto.Bool(true)}}}}}))
	var v netapppb.Volume
	if err := op.GetResponse().UnmarshalTo(&v); err != nil || v.GetName() != vol || v.GetState() != netapppb.Volume_READY {
		t.Errorf("CreateVolume's response %v: %v", &v, err)
	}
	e.done(e.grpc.CreateSnapshot(ctx, &netapppb.CreateSnapshotRequest{Parent: vol, SnapshotId: "s1", Snapshot: &netapppb.Snapshot{}}))
	e.done(e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "vclone",
		Volume: &netapppb.Volume{ShareName: "vclone", StoragePool: "pa", CapacityGib: 10, Protocols: []netapppb.Protocols{netapppb.Protocols_NFSV3},
			RestoreParameters: &netapppb.RestoreParameters{Source: &netapppb.RestoreParameters_SourceSnapshot{SourceSnapshot: vol + "/snapshots/s1"}}}}))
	c, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: clone})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetVolume, the clone", c, "/v1/"+clone)
	if c.GetState() != netapppb.Volume_READY {
		t.Errorf("clone %v", c)
	}

	// Trident's update masks, in the proto's names as the Go SDK sends them,
	// then in REST's camelCase, which Google's servers take too.
	ro := netapppb.AccessType_READ_ONLY
	e.done(e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{
		UpdateMask: mask("capacity_gib", "labels", "unix_permissions", "snapshot_directory", "export_policy", "description"),
		Volume: &netapppb.Volume{Name: vol, CapacityGib: 12, Labels: map[string]string{"pvc": "data"}, UnixPermissions: "0755",
			SnapshotDirectory: true, Description: "resized",
			ExportPolicy: &netapppb.ExportPolicy{Rules: []*netapppb.SimpleExportPolicyRule{{AllowedClients: proto.String("10.1.0.0/16"),
				AccessType: &ro, Nfsv3: proto.Bool(true)}}}}}))
	got, err := e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: vol})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetVolume, updated", got, "/v1/"+vol)
	if got.GetCapacityGib() != 12 || got.GetLabels()["pvc"] != "data" || got.GetUnixPermissions() != "0755" || !got.GetSnapshotDirectory() ||
		got.GetDescription() != "resized" || got.GetExportPolicy().GetRules()[0].GetAllowedClients() != "10.1.0.0/16" {
		t.Errorf("updated volume %v", got)
	}
	e.done(e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("capacityGib", "snapshotDirectory"),
		Volume: &netapppb.Volume{Name: vol, CapacityGib: 14, Description: "not in the mask"}}))
	if got, err = e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: vol}); err != nil {
		t.Fatal(err)
	}
	if got.GetCapacityGib() != 14 || got.GetSnapshotDirectory() || got.GetDescription() != "resized" {
		t.Errorf("after a camelCase mask: capacity %d, snapshotDirectory %v, description %q", got.GetCapacityGib(), got.GetSnapshotDirectory(), got.GetDescription())
	}
	// Without a mask, the fields the message sets apply, as a REST body's.
	e.done(e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{Volume: &netapppb.Volume{Name: vol, Description: "no mask"}}))
	if got, err = e.grpc.GetVolume(ctx, &netapppb.GetVolumeRequest{Name: vol}); err != nil || got.GetDescription() != "no mask" || got.GetCapacityGib() != 14 {
		t.Errorf("after no mask: %v %v", got, err)
	}

	e.done(e.grpc.RevertVolume(ctx, &netapppb.RevertVolumeRequest{Name: vol, SnapshotId: "s1"}))
	e.done(e.grpc.UpdateSnapshot(ctx, &netapppb.UpdateSnapshotRequest{UpdateMask: mask("description", "labels"),
		Snapshot: &netapppb.Snapshot{Name: vol + "/snapshots/s1", Description: "kept", Labels: map[string]string{"k": "v"}}}))
	sn, err := e.grpc.GetSnapshot(ctx, &netapppb.GetSnapshotRequest{Name: vol + "/snapshots/s1"})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetSnapshot, updated", sn, "/v1/"+vol+"/snapshots/s1")
	if sn.GetDescription() != "kept" || sn.GetLabels()["k"] != "v" {
		t.Errorf("snapshot %v", sn)
	}

	ad := loc + "/activeDirectories/ad1"
	e.done(e.grpc.CreateActiveDirectory(ctx, &netapppb.CreateActiveDirectoryRequest{Parent: loc, ActiveDirectoryId: "ad1",
		ActiveDirectory: &netapppb.ActiveDirectory{Domain: "ad1.example.com", Dns: "10.99.0.2", NetBiosPrefix: "nas", Username: "admin", Password: "secret"}}))
	e.done(e.grpc.UpdateActiveDirectory(ctx, &netapppb.UpdateActiveDirectoryRequest{UpdateMask: mask("site", "password"),
		ActiveDirectory: &netapppb.ActiveDirectory{Name: ad, Site: "Branch", Password: "new-secret"}}))
	a, err := e.grpc.GetActiveDirectory(ctx, &netapppb.GetActiveDirectoryRequest{Name: ad})
	if err != nil {
		t.Fatal(err)
	}
	e.sameAsREST("GetActiveDirectory, updated", a, "/v1/"+ad)
	if a.GetSite() != "Branch" || a.GetPassword() != "" {
		t.Errorf("active directory %v", a)
	}
	e.done(e.grpc.DeleteActiveDirectory(ctx, &netapppb.DeleteActiveDirectoryRequest{Name: ad}))

	e.done(e.grpc.DeleteSnapshot(ctx, &netapppb.DeleteSnapshotRequest{Name: vol + "/snapshots/s1"}))
	e.done(e.grpc.DeleteVolume(ctx, &netapppb.DeleteVolumeRequest{Name: clone}))
	e.done(e.grpc.DeleteVolume(ctx, &netapppb.DeleteVolumeRequest{Name: vol, Force: true}))
	e.done(e.grpc.DeleteStoragePool(ctx, &netapppb.DeleteStoragePoolRequest{Name: pool}))
	for _, name := range []string{pool, vol, clone, ad} {
		if code, raw := e.do(e.owner, "GET", "/v1/"+name, nil); code != http.StatusNotFound {
			t.Errorf("REST GET %s after gRPC's delete: %d %s", name, code, raw)
		}
	}
	// Every write was audited as the method's permission, as REST's are.
	if got := e.audits(1, func(a *model.AuditEntry) bool { return a.Resource == clone && a.Method == "netapp.volumes.create" }); len(got) != 1 {
		t.Errorf("audited %+v", got)
	}
}

// The same bad writes over gRPC and REST answer the same code, message and
// details (BadRequest's field violations, ErrorInfo's reason and domain).
func TestWriteErrorsMatchREST(t *testing.T) {
	e := newEnv(t)
	e.poolAndVolume()
	nobody, _ := e.nobody()
	vol, pool := loc+"/volumes/va", loc+"/storagePools/pa"
	e.run("/v1/"+vol+"/snapshots?snapshotId=s1", map[string]any{})
	e.run("/v1/"+loc+"/activeDirectories?activeDirectoryId=ad1", map[string]any{"domain": "ad1.example.com", "dns": "10.99.0.2",
		"netBiosPrefix": "nas", "username": "admin", "password": "secret"})
	nfs := []netapppb.Protocols{netapppb.Protocols_NFSV3}
	for _, c := range []struct {
		name               string
		token              string
		call               func(ctx context.Context) error
		method, path, body string // the same call over REST
	}{
		{"volume: bad id", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "Bad_ID", Volume: &netapppb.Volume{}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=Bad_ID", `{}`},
		{"volume: taken id", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "va",
				Volume: &netapppb.Volume{ShareName: "va2", StoragePool: "pa", CapacityGib: 10, Protocols: nfs}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=va", `{"shareName":"va2","storagePool":"pa","capacityGib":"10","protocols":["NFSV3"]}`},
		{"volume: missing pool", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "vb",
				Volume: &netapppb.Volume{ShareName: "vb", StoragePool: "nope", CapacityGib: 10, Protocols: nfs}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=vb", `{"shareName":"vb","storagePool":"nope","capacityGib":"10","protocols":["NFSV3"]}`},
		{"volume: too small", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "vb",
				Volume: &netapppb.Volume{ShareName: "vb", StoragePool: "pa", CapacityGib: 0, Protocols: nfs}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=vb", `{"shareName":"vb","storagePool":"pa","protocols":["NFSV3"]}`},
		{"volume: large capacity", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "vb",
				Volume: &netapppb.Volume{ShareName: "vb", StoragePool: "pa", CapacityGib: 10, Protocols: nfs, LargeCapacity: true}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=vb", `{"shareName":"vb","storagePool":"pa","capacityGib":"10","protocols":["NFSV3"],"largeCapacity":true}`},
		{"volume: clone of a missing snapshot", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "vb",
				Volume: &netapppb.Volume{ShareName: "vb", StoragePool: "pa", CapacityGib: 10, Protocols: nfs,
					RestoreParameters: &netapppb.RestoreParameters{Source: &netapppb.RestoreParameters_SourceSnapshot{SourceSnapshot: vol + "/snapshots/nope"}}}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=vb", `{"shareName":"vb","storagePool":"pa","capacityGib":"10","protocols":["NFSV3"],"restoreParameters":{"sourceSnapshot":"` + vol + `/snapshots/nope"}}`},
		{"volume: no permission", nobody, func(ctx context.Context) error {
			_, err := e.grpc.CreateVolume(ctx, &netapppb.CreateVolumeRequest{Parent: loc, VolumeId: "vb", Volume: &netapppb.Volume{}})
			return err
		}, "POST", "/v1/" + loc + "/volumes?volumeId=vb", `{}`},
		{"update volume: immutable path", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("share_name"), Volume: &netapppb.Volume{Name: vol, ShareName: "x"}})
			return err
		}, "PATCH", "/v1/" + vol + "?updateMask=share_name", `{"shareName":"x"}`},
		{"update volume: unknown path", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("colour"), Volume: &netapppb.Volume{Name: vol}})
			return err
		}, "PATCH", "/v1/" + vol + "?updateMask=colour", `{}`},
		{"update volume: output-only path", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("state"), Volume: &netapppb.Volume{Name: vol}})
			return err
		}, "PATCH", "/v1/" + vol + "?updateMask=state", `{}`},
		{"update volume: shrink below nothing", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("capacity_gib"), Volume: &netapppb.Volume{Name: vol, CapacityGib: 0}})
			return err
		}, "PATCH", "/v1/" + vol + "?updateMask=capacityGib", `{}`},
		{"update volume: missing", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("description"), Volume: &netapppb.Volume{Name: loc + "/volumes/nope"}})
			return err
		}, "PATCH", "/v1/" + loc + "/volumes/nope?updateMask=description", `{}`},
		{"update volume: no permission", nobody, func(ctx context.Context) error {
			_, err := e.grpc.UpdateVolume(ctx, &netapppb.UpdateVolumeRequest{UpdateMask: mask("description"), Volume: &netapppb.Volume{Name: vol}})
			return err
		}, "PATCH", "/v1/" + vol + "?updateMask=description", `{}`},
		{"revert: missing snapshot", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.RevertVolume(ctx, &netapppb.RevertVolumeRequest{Name: vol, SnapshotId: "nope"})
			return err
		}, "POST", "/v1/" + vol + ":revert", `{"snapshotId":"nope"}`},
		{"revert: no snapshot named", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.RevertVolume(ctx, &netapppb.RevertVolumeRequest{Name: vol})
			return err
		}, "POST", "/v1/" + vol + ":revert", `{}`},
		{"update snapshot: output-only path", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateSnapshot(ctx, &netapppb.UpdateSnapshotRequest{UpdateMask: mask("used_bytes"), Snapshot: &netapppb.Snapshot{Name: vol + "/snapshots/s1"}})
			return err
		}, "PATCH", "/v1/" + vol + "/snapshots/s1?updateMask=used_bytes", `{}`},
		{"delete snapshot: missing", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.DeleteSnapshot(ctx, &netapppb.DeleteSnapshotRequest{Name: vol + "/snapshots/nope"})
			return err
		}, "DELETE", "/v1/" + vol + "/snapshots/nope", ``},
		{"delete snapshot: bad volume id", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.DeleteSnapshot(ctx, &netapppb.DeleteSnapshotRequest{Name: loc + "/volumes/Bad_V/snapshots/s1"})
			return err
		}, "DELETE", "/v1/" + loc + "/volumes/Bad_V/snapshots/s1", ``},
		{"pool: unknown service level", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateStoragePool(ctx, &netapppb.CreateStoragePoolRequest{Parent: loc, StoragePoolId: "pb",
				StoragePool: &netapppb.StoragePool{ServiceLevel: 99, CapacityGib: 100, Network: "default"}})
			return err
		}, "POST", "/v1/" + loc + "/storagePools?storagePoolId=pb", `{"serviceLevel":99,"capacityGib":"100","network":"default"}`},
		{"pool: no network", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateStoragePool(ctx, &netapppb.CreateStoragePoolRequest{Parent: loc, StoragePoolId: "pb",
				StoragePool: &netapppb.StoragePool{ServiceLevel: netapppb.ServiceLevel_PREMIUM, CapacityGib: 100}})
			return err
		}, "POST", "/v1/" + loc + "/storagePools?storagePoolId=pb", `{"serviceLevel":"PREMIUM","capacityGib":"100"}`},
		{"pool: unserved location", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateStoragePool(ctx, &netapppb.CreateStoragePoolRequest{Parent: "projects/p1/locations/mars", StoragePoolId: "pb"})
			return err
		}, "POST", "/v1/projects/p1/locations/mars/storagePools?storagePoolId=pb", `{}`},
		{"update pool: missing", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateStoragePool(ctx, &netapppb.UpdateStoragePoolRequest{UpdateMask: mask("description"),
				StoragePool: &netapppb.StoragePool{Name: loc + "/storagePools/pb"}})
			return err
		}, "PATCH", "/v1/" + loc + "/storagePools/pb?updateMask=description", `{}`},
		{"update pool: shrink below its volumes", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateStoragePool(ctx, &netapppb.UpdateStoragePoolRequest{UpdateMask: mask("capacity_gib"),
				StoragePool: &netapppb.StoragePool{Name: pool, CapacityGib: 5}})
			return err
		}, "PATCH", "/v1/" + pool + "?updateMask=capacityGib", `{"capacityGib":"5"}`},
		{"delete pool: has volumes", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.DeleteStoragePool(ctx, &netapppb.DeleteStoragePoolRequest{Name: pool})
			return err
		}, "DELETE", "/v1/" + pool, ``},
		{"switch: no replica zone", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.SwitchActiveReplicaZone(ctx, &netapppb.SwitchActiveReplicaZoneRequest{Name: pool})
			return err
		}, "POST", "/v1/" + pool + ":switch", `{}`},
		{"validate: not Active Directory", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.ValidateDirectoryService(ctx, &netapppb.ValidateDirectoryServiceRequest{Name: pool, DirectoryServiceType: 7})
			return err
		}, "POST", "/v1/" + pool + ":validateDirectoryService", `{"directoryServiceType":7}`},
		{"active directory: no domain", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.CreateActiveDirectory(ctx, &netapppb.CreateActiveDirectoryRequest{Parent: loc, ActiveDirectoryId: "ad2",
				ActiveDirectory: &netapppb.ActiveDirectory{Dns: "10.99.0.2", NetBiosPrefix: "nas", Username: "admin", Password: "x"}})
			return err
		}, "POST", "/v1/" + loc + "/activeDirectories?activeDirectoryId=ad2", `{"dns":"10.99.0.2","netBiosPrefix":"nas","username":"admin","password":"x"}`},
		{"update active directory: unknown path", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.UpdateActiveDirectory(ctx, &netapppb.UpdateActiveDirectoryRequest{UpdateMask: mask("forest"),
				ActiveDirectory: &netapppb.ActiveDirectory{Name: loc + "/activeDirectories/ad1"}})
			return err
		}, "PATCH", "/v1/" + loc + "/activeDirectories/ad1?updateMask=forest", `{}`},
		{"delete active directory: missing", e.owner, func(ctx context.Context) error {
			_, err := e.grpc.DeleteActiveDirectory(ctx, &netapppb.DeleteActiveDirectoryRequest{Name: loc + "/activeDirectories/nope"})
			return err
		}, "DELETE", "/v1/" + loc + "/activeDirectories/nope", ``},
		{"delete active directory: no permission", nobody, func(ctx context.Context) error {
			_, err := e.grpc.DeleteActiveDirectory(ctx, &netapppb.DeleteActiveDirectoryRequest{Name: loc + "/activeDirectories/ad1"})
			return err
		}, "DELETE", "/v1/" + loc + "/activeDirectories/ad1", ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := status.Convert(c.call(as(c.token)))
			var body any
			if c.body != "" {
				body = rawJSON(c.body)
			}
			httpCode, msg, name, details := e.restErrorDo(c.token, c.method, c.path, body)
			if httpCode < 400 || st.Code() != codeOf(name) {
				t.Fatalf("gRPC %v %q, REST %d %s %q", st.Code(), st.Message(), httpCode, name, msg)
			}
			if st.Message() != msg {
				t.Errorf("message %q, REST's %q", st.Message(), msg)
			}
			if got := jsonOf(restDetails(t, st)); got != jsonOf(details) {
				t.Errorf("details %s, REST's %s", got, jsonOf(details))
			}
		})
	}
}

// rawJSON is a REST body sent as it is written.
type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }
