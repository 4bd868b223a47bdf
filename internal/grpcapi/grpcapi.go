// Package grpcapi serves the v1 API over gRPC: google.cloud.netapp.v1.NetApp
// (internal/netapppb), google.longrunning.Operations and
// google.cloud.location.Locations (operations.go) on the functions the REST API (internal/api) serves its
// calls with, so both answer alike. Every call is authenticated from its
// "authorization" metadata, rate-limited and authorized with the permission
// REST's route needs (api.Server.Begin), audited and logged as REST's calls
// are (api.Call.End), and its error answered as a google.rpc.Status with the
// details REST's error body carries (api.ErrorStatus). Messages are converted
// through REST's JSON (convert.go). The methods not served here answer
// UNIMPLEMENTED with the message REST's 501 gives.
package grpcapi

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/netapppb"
)

// method is a served method: the name its request carries (a resource of
// collection, or with list the collection's parent, which lists and creates
// name; a collection under a volume, such as snapshots, names its volume too)
// and the permission
// REST's route needs (netapp.{collection}.{verb}). A method whose request
// names its resource or collection's parent otherwise (Operations, Locations)
// says so in form: the form of its request's name.
type method struct {
	collection, verb string
	list             bool
	form             string
}

// underVolume are the collections whose parent is a volume.
var underVolume = map[string]bool{"snapshots": true}

// served are the methods Server implements; the others answer UNIMPLEMENTED
// once the caller is admitted, as REST's 501 routes do.
var served = map[string]method{
	netapppb.NetApp_GetStoragePool_FullMethodName:   {"storagePools", "get", false, ""},
	netapppb.NetApp_ListStoragePools_FullMethodName: {"storagePools", "list", true, ""},
	netapppb.NetApp_GetVolume_FullMethodName:        {"volumes", "get", false, ""},
	netapppb.NetApp_ListVolumes_FullMethodName:      {"volumes", "list", true, ""},
	netapppb.NetApp_DeleteVolume_FullMethodName:     {"volumes", "delete", false, ""},
	netapppb.NetApp_GetSnapshot_FullMethodName:      {"snapshots", "get", false, ""},
	netapppb.NetApp_ListSnapshots_FullMethodName:    {"snapshots", "list", true, ""},
	netapppb.NetApp_CreateSnapshot_FullMethodName:   {"snapshots", "create", true, ""},

	netapppb.NetApp_GetActiveDirectory_FullMethodName:    {"activeDirectories", "get", false, ""},
	netapppb.NetApp_ListActiveDirectories_FullMethodName: {"activeDirectories", "list", true, ""},

	longrunningpb.Operations_GetOperation_FullMethodName:    {"operations", "get", false, ""},
	longrunningpb.Operations_ListOperations_FullMethodName:  {"operations", "list", true, locationForm},
	longrunningpb.Operations_CancelOperation_FullMethodName: {"operations", "cancel", false, ""},
	longrunningpb.Operations_DeleteOperation_FullMethodName: {"operations", "delete", false, ""},

	locationsGet:  {"locations", "get", false, locationForm},
	locationsList: {"locations", "list", true, "projects/{project}"},
}

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
// services on a. opts are passed
// on to grpc.NewServer.
func New(a *api.Server, opts ...grpc.ServerOption) *grpc.Server {
	s := &Server{api: a}
	g := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(s.intercept))...)
	netapppb.RegisterNetAppServer(g, s)
	longrunningpb.RegisterOperationsServer(g, &operations{api: a})
	locationpb.RegisterLocationsServer(g, &locations{api: a})
	return g
}

type nameKey struct{}

// nameOf is the parsed name of the call's request (intercept).
func nameOf(ctx context.Context) name {
	n, _ := ctx.Value(nameKey{}).(name)
	return n
}

// intercept runs every call as REST runs a request: it parses the request's
// name, admits the call (authentication from the "authorization" metadata,
// rate limits, the permission), runs the method (the methods not served
// answer UNIMPLEMENTED), and ends the call (audit, log), answering its error
// as a google.rpc.Status.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
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
		if n, nameErr = parseName(req, m); nameErr == nil {
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

// parseName reads a request's name (a resource of m's collection) or parent
// (the parent m lists): projects/{project}/locations/{location}[/volumes/{volume}][/{collection}/{id}],
// or its name of m's form.
func parseName(req any, m method) (name, error) {
	form, field, s := m.form, "name", ""
	if form == "" {
		form = locationForm
		if underVolume[m.collection] {
			form += "/volumes/{volume}"
		}
		if m.list {
			field = "parent"
		} else {
			form += "/" + m.collection + "/{id}"
		}
	}
	if field == "parent" {
		if r, ok := req.(interface{ GetParent() string }); ok {
			s = r.GetParent()
		}
	} else if r, ok := req.(interface{ GetName() string }); ok {
		s = r.GetName()
	}
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
	if m.list {
		n.resource += "/" + m.collection
	}
	// A create names the resource it makes, as REST's create routes do.
	if r, ok := req.(interface{ GetSnapshotId() string }); ok && r.GetSnapshotId() != "" {
		n.resource += "/" + r.GetSnapshotId()
	}
	return n, nil
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

// DeleteVolume implements netapppb.NetAppServer: REST's delete (with force,
// its snapshots too), answering the operation, which GetOperation polls.
func (s *Server) DeleteVolume(ctx context.Context, req *netapppb.DeleteVolumeRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	op, err := s.api.DeleteVolume(ctx, n.project, n.location, n.id, req.GetForce())
	return reply(op, err, &longrunningpb.Operation{})
}

// CreateSnapshot implements netapppb.NetAppServer: REST's create, answering
// the operation, which GetOperation polls.
func (s *Server) CreateSnapshot(ctx context.Context, req *netapppb.CreateSnapshotRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	var w apiv1.Snapshot
	if req.GetSnapshot() != nil {
		if err := fromProto(req.GetSnapshot(), &w); err != nil {
			return nil, model.Invalid("snapshot", "%v", err)
		}
	}
	op, err := s.api.CreateSnapshot(ctx, n.project, n.location, n.volume, req.GetSnapshotId(), w)
	return reply(op, err, &longrunningpb.Operation{})
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
