// Package grpcapi serves the v1 API over gRPC: google.cloud.netapp.v1.NetApp
// (internal/netapppb), google.longrunning.Operations and
// google.cloud.location.Locations (operations.go) on the functions the REST API (internal/api) serves its
// calls with, so both answer alike. Every call is authenticated from its
// "authorization" metadata, rate-limited and authorized with the permission
// REST's route needs (api.Server.Begin), audited and logged as REST's calls
// are (api.Call.End), and its error answered as a google.rpc.Status with the
// details REST's error body carries (api.ErrorStatus). Messages are converted
// through REST's JSON (convert.go). The methods not served here answer
// UNIMPLEMENTED with the message REST's 501 gives. grpc.health.v1.Health
// (health.go) answers, without authentication, what REST's /readyz does.
package grpcapi

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/netapppb"
)

// method is a served method: the name its request carries (a resource of
// collection; with parent, the collection's parent, which lists and creates
// name; a collection under a volume, such as snapshots, names its volume
// too) and the permission REST's route needs (netapp.{collection}.{verb}). A
// method whose request names its resource or collection's parent otherwise
// (Operations, Locations) says so in form: the form of its request's name.
// An update's request names its resource in the message it carries
// (nameField: volume.name, …); a create's names the new resource's ID in
// createID (volume_id, …).
type method struct {
	collection, verb    string
	parent              bool
	form                string
	nameField, createID string
}

// underVolume are the collections whose parent is a volume.
var underVolume = map[string]bool{"snapshots": true}

// served are the methods Server implements; the others answer UNIMPLEMENTED
// once the caller is admitted, as REST's 501 routes do.
var served = map[string]method{
	netapppb.NetApp_GetStoragePool_FullMethodName:           {collection: "storagePools", verb: "get"},
	netapppb.NetApp_ListStoragePools_FullMethodName:         {collection: "storagePools", verb: "list", parent: true},
	netapppb.NetApp_CreateStoragePool_FullMethodName:        {collection: "storagePools", verb: "create", parent: true, createID: "storage_pool_id"},
	netapppb.NetApp_UpdateStoragePool_FullMethodName:        {collection: "storagePools", verb: "update", nameField: "storage_pool.name"},
	netapppb.NetApp_DeleteStoragePool_FullMethodName:        {collection: "storagePools", verb: "delete"},
	netapppb.NetApp_SwitchActiveReplicaZone_FullMethodName:  {collection: "storagePools", verb: "switch"},
	netapppb.NetApp_ValidateDirectoryService_FullMethodName: {collection: "storagePools", verb: "validateDirectoryService"},

	netapppb.NetApp_GetVolume_FullMethodName:    {collection: "volumes", verb: "get"},
	netapppb.NetApp_ListVolumes_FullMethodName:  {collection: "volumes", verb: "list", parent: true},
	netapppb.NetApp_CreateVolume_FullMethodName: {collection: "volumes", verb: "create", parent: true, createID: "volume_id"},
	netapppb.NetApp_UpdateVolume_FullMethodName: {collection: "volumes", verb: "update", nameField: "volume.name"},
	netapppb.NetApp_DeleteVolume_FullMethodName: {collection: "volumes", verb: "delete"},
	netapppb.NetApp_RevertVolume_FullMethodName: {collection: "volumes", verb: "revert"},

	netapppb.NetApp_GetSnapshot_FullMethodName:    {collection: "snapshots", verb: "get"},
	netapppb.NetApp_ListSnapshots_FullMethodName:  {collection: "snapshots", verb: "list", parent: true},
	netapppb.NetApp_CreateSnapshot_FullMethodName: {collection: "snapshots", verb: "create", parent: true, createID: "snapshot_id"},
	netapppb.NetApp_UpdateSnapshot_FullMethodName: {collection: "snapshots", verb: "update", nameField: "snapshot.name"},
	netapppb.NetApp_DeleteSnapshot_FullMethodName: {collection: "snapshots", verb: "delete"},

	netapppb.NetApp_GetActiveDirectory_FullMethodName:    {collection: "activeDirectories", verb: "get"},
	netapppb.NetApp_ListActiveDirectories_FullMethodName: {collection: "activeDirectories", verb: "list", parent: true},
	netapppb.NetApp_CreateActiveDirectory_FullMethodName: {collection: "activeDirectories", verb: "create", parent: true, createID: "active_directory_id"},
	netapppb.NetApp_UpdateActiveDirectory_FullMethodName: {collection: "activeDirectories", verb: "update", nameField: "active_directory.name"},
	netapppb.NetApp_DeleteActiveDirectory_FullMethodName: {collection: "activeDirectories", verb: "delete"},

	longrunningpb.Operations_GetOperation_FullMethodName:    {collection: "operations", verb: "get"},
	longrunningpb.Operations_ListOperations_FullMethodName:  {collection: "operations", verb: "list", parent: true, form: locationForm},
	longrunningpb.Operations_CancelOperation_FullMethodName: {collection: "operations", verb: "cancel"},
	longrunningpb.Operations_DeleteOperation_FullMethodName: {collection: "operations", verb: "delete"},

	locationsGet:  {collection: "locations", verb: "get", form: locationForm},
	locationsList: {collection: "locations", verb: "list", parent: true, form: "projects/{project}"},
}

// healthPrefix begins the full names of the health service's methods.
var healthPrefix = "/" + healthgrpc.Health_ServiceDesc.ServiceName + "/"

const (
	locationForm = "projects/{project}/locations/{location}"
	// The Locations service's methods (its genproto stubs name no constants).
	locationsGet  = "/google.cloud.location.Locations/GetLocation"
	locationsList = "/google.cloud.location.Locations/ListLocations"
)

// Server implements netapppb.NetAppServer on an api.Server.
type Server struct {
	netapppb.UnimplementedNetAppServer
	api *api.Server
}

// New returns a gRPC server serving the NetApp, Operations and Locations
// services on a, and grpc.health.v1.Health on a's readiness (its Shutdown is
// for the caller to call before stopping the server). opts are passed on to
// grpc.NewServer.
func New(a *api.Server, opts ...grpc.ServerOption) (*grpc.Server, *Health) {
	s := &Server{api: a}
	g := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(s.intercept), grpc.ForceServerCodecV2(newRequestCodec()))...)
	netapppb.RegisterNetAppServer(g, s)
	longrunningpb.RegisterOperationsServer(g, &operations{api: a})
	locationpb.RegisterLocationsServer(g, &locations{api: a})
	h := newHealth(a.NotReady)
	healthgrpc.RegisterHealthServer(g, h)
	return g, h
}

type nameKey struct{}

// nameOf is the parsed name of the call's request (intercept).
func nameOf(ctx context.Context) name {
	n, _ := ctx.Value(nameKey{}).(name)
	return n
}

// intercept runs every call as REST runs a request: it parses the request's
// name (a request that did not decode, requestCodec, is INVALID_ARGUMENT
// once the caller is admitted), admits the call (authentication from the "authorization" metadata,
// rate limits, the permission), runs the method (the methods not served
// answer UNIMPLEMENTED), and ends the call (audit, log), answering its error
// as a google.rpc.Status.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, healthPrefix) { // anonymous, as REST's /readyz (health.go)
		if why, bad := undecodable(req); bad {
			return nil, status.Error(codes.InvalidArgument, "request is not a valid protobuf message: "+why)
		}
		return h(ctx, req)
	}
	short := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	ci := api.CallInfo{Method: info.FullMethod, Read: strings.HasPrefix(short, "Get") || strings.HasPrefix(short, "List")}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			ci.Authorization = v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		ci.Remote = p.Addr.String()
	}
	m, isServed := served[info.FullMethod]
	var n name
	var nameErr error
	if isServed {
		if why, bad := undecodable(req); bad {
			// Nothing of it is known: the caller is authenticated, and told.
			nameErr = model.Invalid("request", "is not a valid protobuf message: %s", why)
		} else if n, nameErr = parseName(req, m); nameErr == nil {
			ci.Project, ci.Perm, ci.Resource = n.project, iam.NetappPermission(m.collection, m.verb), n.resource
		}
	} else {
		ci.Project, ci.Resource = projectOf(req)
	}
	call, err := s.api.Begin(ctx, ci)
	var out any
	switch {
	case err != nil:
	case !isServed:
		err = api.Unimplemented(info.FullMethod)
	case nameErr != nil:
		err = nameErr
	default:
		out, err = h(context.WithValue(ctx, nameKey{}, n), req)
	}
	if st := call.End(err); err != nil {
		return nil, grpcStatus(st)
	}
	return out, nil
}

// grpcStatus is an api.Status as a google.rpc.Status error.
func grpcStatus(st api.Status) error {
	var detail protoadapt.MessageV1
	if st.Violations != nil {
		br := &errdetails.BadRequest{}
		for _, v := range st.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
		}
		detail = br
	} else if st.Reason != "" {
		detail = &errdetails.ErrorInfo{Reason: st.Reason, Domain: st.Domain}
	}
	gs := status.New(codes.Code(st.Code), st.Message)
	if detail != nil {
		if d, err := gs.WithDetails(detail); err == nil {
			gs = d
		}
	}
	return gs.Err()
}

// name is a request's resource or collection name split into its parts
// (volume: the volume a collection under a volume is of); resource is what
// REST's route names (the collection, for a list).
type name struct{ project, location, volume, id, resource string }

// parseName reads a request's name (a resource of m's collection, in the
// request or, for an update, in its message) or parent (the parent m lists or
// creates in): projects/{project}/locations/{location}[/volumes/{volume}][/{collection}/{id}],
// or its name of m's form.
func parseName(req any, m method) (name, error) {
	form, field := m.form, "name"
	if form == "" {
		form = locationForm
		if underVolume[m.collection] {
			form += "/volumes/{volume}"
		}
		if m.parent {
			field = "parent"
		} else {
			form += "/" + m.collection + "/{id}"
		}
	}
	if m.nameField != "" {
		field = m.nameField
	}
	msg, _ := req.(proto.Message)
	s := stringField(msg, field)
	parts, want := strings.Split(s, "/"), strings.Split(form, "/")
	ok := len(parts) == len(want) && !slices.Contains(parts, "")
	vars := map[string]string{}
	for i := 0; ok && i < len(want); i++ {
		if strings.HasPrefix(want[i], "{") {
			vars[strings.Trim(want[i], "{}")] = parts[i]
		} else {
			ok = parts[i] == want[i]
		}
	}
	if !ok {
		return name{}, model.Invalid(field, "%q is not of the form %s", s, form)
	}
	n := name{project: vars["project"], location: vars["location"], volume: vars["volume"], id: vars["id"], resource: s}
	if m.parent {
		n.resource += "/" + m.collection
	}
	// A create names the resource it makes, as REST's create routes do.
	if id := stringField(msg, m.createID); id != "" {
		n.resource += "/" + id
	}
	return n, nil
}

// stringField is the string at path (proto field names, dotted) in m; "" if
// m, a message on the way or the field is missing.
func stringField(m proto.Message, path string) string {
	if m == nil || path == "" {
		return ""
	}
	r := m.ProtoReflect()
	names := strings.Split(path, ".")
	for i, n := range names {
		f := r.Descriptor().Fields().ByName(protoreflect.Name(n))
		switch {
		case f == nil:
			return ""
		case i == len(names)-1:
			if f.Kind() != protoreflect.StringKind {
				return ""
			}
			return r.Get(f).String()
		case f.Message() == nil || !r.Has(f):
			return ""
		}
		r = r.Get(f).Message()
	}
	return ""
}

// projectOf returns the project and resource an unserved request names (its
// name or parent, projects/{project}/…), for the audit log; "" if none.
func projectOf(req any) (project, resource string) {
	if r, ok := req.(interface{ GetName() string }); ok {
		resource = r.GetName()
	} else if r, ok := req.(interface{ GetParent() string }); ok {
		resource = r.GetParent()
	}
	parts := strings.SplitN(resource, "/", 3)
	if len(parts) < 2 || parts[0] != "projects" {
		return "", ""
	}
	return parts[1], resource
}

// reply converts a read's result into out.
func reply[M proto.Message](w any, err error, out M) (M, error) {
	if err == nil {
		err = toProto(w, out)
	}
	if err != nil {
		var zero M
		return zero, err
	}
	return out, nil
}

// GetStoragePool implements netapppb.NetAppServer.
func (s *Server) GetStoragePool(ctx context.Context, _ *netapppb.GetStoragePoolRequest) (*netapppb.StoragePool, error) {
	n := nameOf(ctx)
	w, err := s.api.GetStoragePool(ctx, n.project, n.location, n.id)
	return reply(w, err, &netapppb.StoragePool{})
}

// ListStoragePools implements netapppb.NetAppServer.
func (s *Server) ListStoragePools(ctx context.Context, req *netapppb.ListStoragePoolsRequest) (*netapppb.ListStoragePoolsResponse, error) {
	n := nameOf(ctx)
	w, err := s.api.ListStoragePools(ctx, n.project, n.location, listRequest(req))
	return reply(w, err, &netapppb.ListStoragePoolsResponse{})
}

// GetVolume implements netapppb.NetAppServer.
func (s *Server) GetVolume(ctx context.Context, _ *netapppb.GetVolumeRequest) (*netapppb.Volume, error) {
	n := nameOf(ctx)
	w, err := s.api.GetVolume(ctx, n.project, n.location, n.id)
	return reply(w, err, &netapppb.Volume{})
}

// ListVolumes implements netapppb.NetAppServer.
func (s *Server) ListVolumes(ctx context.Context, req *netapppb.ListVolumesRequest) (*netapppb.ListVolumesResponse, error) {
	n := nameOf(ctx)
	w, err := s.api.ListVolumes(ctx, n.project, n.location, listRequest(req))
	return reply(w, err, &netapppb.ListVolumesResponse{})
}

// GetSnapshot implements netapppb.NetAppServer.
func (s *Server) GetSnapshot(ctx context.Context, _ *netapppb.GetSnapshotRequest) (*netapppb.Snapshot, error) {
	n := nameOf(ctx)
	w, err := s.api.GetSnapshot(ctx, n.project, n.location, n.volume, n.id)
	return reply(w, err, &netapppb.Snapshot{})
}

// ListSnapshots implements netapppb.NetAppServer.
func (s *Server) ListSnapshots(ctx context.Context, req *netapppb.ListSnapshotsRequest) (*netapppb.ListSnapshotsResponse, error) {
	n := nameOf(ctx)
	w, err := s.api.ListSnapshots(ctx, n.project, n.location, n.volume, listRequest(req))
	return reply(w, err, &netapppb.ListSnapshotsResponse{})
}

// GetActiveDirectory implements netapppb.NetAppServer. The password is left
// out (empty), as REST leaves it out (api.Server.GetActiveDirectory).
func (s *Server) GetActiveDirectory(ctx context.Context, _ *netapppb.GetActiveDirectoryRequest) (*netapppb.ActiveDirectory, error) {
	n := nameOf(ctx)
	w, err := s.api.GetActiveDirectory(ctx, n.project, n.location, n.id)
	return reply(w, err, &netapppb.ActiveDirectory{})
}

// ListActiveDirectories implements netapppb.NetAppServer.
func (s *Server) ListActiveDirectories(ctx context.Context, req *netapppb.ListActiveDirectoriesRequest) (*netapppb.ListActiveDirectoriesResponse, error) {
	n := nameOf(ctx)
	w, err := s.api.ListActiveDirectories(ctx, n.project, n.location, listRequest(req))
	return reply(w, err, &netapppb.ListActiveDirectoriesResponse{})
}

// listRequest is a list request's paging, filter and order.
func listRequest(req interface {
	GetPageSize() int32
	GetPageToken() string
	GetFilter() string
	GetOrderBy() string
}) api.ListRequest {
	return api.ListRequest{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Filter: req.GetFilter(), OrderBy: req.GetOrderBy()}
}
