// Package grpcapi serves the v1 API over gRPC: google.cloud.netapp.v1.NetApp
// (internal/netapppb) on the functions the REST API (internal/api) serves its
// calls with, so both answer alike. Every call is authenticated from its
// "authorization" metadata and rate-limited as REST's are (api.Server.Admit),
// authorized with the permission REST's route needs (api.Server.Authorize), and
// its error answered as a google.rpc.Status with the details REST's error body
// carries (api.ErrorStatus). Messages are converted through REST's JSON
// (convert.go). The methods not served here answer UNIMPLEMENTED with the
// message REST's 501 gives.
package grpcapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
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

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/netapppb"
)

// served are the methods Server implements; the others answer UNIMPLEMENTED
// once the caller is admitted, as REST's 501 routes do.
var served = map[string]bool{
	netapppb.NetApp_GetStoragePool_FullMethodName:   true,
	netapppb.NetApp_ListStoragePools_FullMethodName: true,
	netapppb.NetApp_GetVolume_FullMethodName:        true,
	netapppb.NetApp_ListVolumes_FullMethodName:      true,
}

// Server implements netapppb.NetAppServer on an api.Server.
type Server struct {
	netapppb.UnimplementedNetAppServer
	api *api.Server
	log *slog.Logger
}

// New returns a gRPC server serving the NetApp service on a; log (nil = none)
// receives internal errors. opts are passed on to grpc.NewServer.
func New(a *api.Server, log *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{api: a, log: log}
	g := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(s.admit))...)
	netapppb.RegisterNetAppServer(g, s)
	return g
}

type callKey struct{}

// call is what admit learnt of a call: its caller and ID.
type call struct {
	principal *iam.Principal
	id        string
}

func callOf(ctx context.Context) call {
	c, _ := ctx.Value(callKey{}).(call)
	return c
}

// admit authenticates and rate-limits every call before its method runs, and
// answers the methods not served UNIMPLEMENTED.
func (s *Server) admit(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c := call{id: newID()}
	var authorization string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authorization = v[0]
		}
	}
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	p, err := s.api.Admit(ctx, authorization, remote)
	if err != nil {
		return nil, s.status(c.id, info.FullMethod, err)
	}
	c.principal = p
	if !served[info.FullMethod] {
		return nil, s.status(c.id, info.FullMethod, api.Unimplemented(info.FullMethod))
	}
	return h(context.WithValue(ctx, callKey{}, c), req)
}

// status is the gRPC error of err: api.ErrorStatus as a google.rpc.Status.
func (s *Server) status(id, method string, err error) error {
	st := api.ErrorStatus(err, id)
	if st.Name == "INTERNAL" {
		s.log.Error("internal error", "err", err, "request_id", id, "method", method)
	}
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

// name is a resource or collection name split into its parts.
type name struct{ project, location, id string }

// parseName splits projects/{project}/locations/{location}/{collection}[/{id}]
// (with the id unless list).
func parseName(field, s, collection string, list bool) (name, error) {
	parts := strings.Split(s, "/")
	want := 6
	if list {
		want = 4
	}
	if len(parts) != want || parts[0] != "projects" || parts[2] != "locations" || (!list && parts[4] != collection) ||
		slices.Contains(parts, "") {
		form := "projects/{project}/locations/{location}"
		if !list {
			form += "/" + collection + "/{id}"
		}
		return name{}, model.Invalid(field, "%q is not of the form %s", s, form)
	}
	n := name{project: parts[1], location: parts[3]}
	if !list {
		n.id = parts[5]
	}
	return n, nil
}

// serve runs a read: it parses the request's name (field, a resource of
// collection, or its parent if list), authorizes the permission REST's route
// needs (netapp.{collection}.{verb}) on the resource REST names in a denial,
// reads with read and converts the result into out.
func serve[M proto.Message](ctx context.Context, s *Server, method, field, reqName, collection, verb string, list bool,
	read func(n name) (any, error), out M) (M, error) {
	c := callOf(ctx)
	n, err := parseName(field, reqName, collection, list)
	if err == nil {
		resource := reqName
		if list {
			resource += "/" + collection
		}
		err = s.api.Authorize(ctx, c.principal, n.project, iam.NetappPermission(collection, verb), resource)
	}
	var w any
	if err == nil {
		w, err = read(n)
	}
	if err == nil {
		err = toProto(w, out)
	}
	if err != nil {
		var zero M
		return zero, s.status(c.id, method, err)
	}
	return out, nil
}

// GetStoragePool implements netapppb.NetAppServer.
func (s *Server) GetStoragePool(ctx context.Context, req *netapppb.GetStoragePoolRequest) (*netapppb.StoragePool, error) {
	return serve(ctx, s, netapppb.NetApp_GetStoragePool_FullMethodName, "name", req.GetName(), "storagePools", "get", false,
		func(n name) (any, error) { return s.api.GetStoragePool(ctx, n.project, n.location, n.id) }, &netapppb.StoragePool{})
}

// ListStoragePools implements netapppb.NetAppServer.
func (s *Server) ListStoragePools(ctx context.Context, req *netapppb.ListStoragePoolsRequest) (*netapppb.ListStoragePoolsResponse, error) {
	lr := api.ListRequest{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Filter: req.GetFilter(), OrderBy: req.GetOrderBy()}
	return serve(ctx, s, netapppb.NetApp_ListStoragePools_FullMethodName, "parent", req.GetParent(), "storagePools", "list", true,
		func(n name) (any, error) { return s.api.ListStoragePools(ctx, n.project, n.location, lr) }, &netapppb.ListStoragePoolsResponse{})
}

// GetVolume implements netapppb.NetAppServer.
func (s *Server) GetVolume(ctx context.Context, req *netapppb.GetVolumeRequest) (*netapppb.Volume, error) {
	return serve(ctx, s, netapppb.NetApp_GetVolume_FullMethodName, "name", req.GetName(), "volumes", "get", false,
		func(n name) (any, error) { return s.api.GetVolume(ctx, n.project, n.location, n.id) }, &netapppb.Volume{})
}

// ListVolumes implements netapppb.NetAppServer.
func (s *Server) ListVolumes(ctx context.Context, req *netapppb.ListVolumesRequest) (*netapppb.ListVolumesResponse, error) {
	lr := api.ListRequest{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Filter: req.GetFilter(), OrderBy: req.GetOrderBy()}
	return serve(ctx, s, netapppb.NetApp_ListVolumes_FullMethodName, "parent", req.GetParent(), "volumes", "list", true,
		func(n name) (any, error) { return s.api.ListVolumes(ctx, n.project, n.location, lr) }, &netapppb.ListVolumesResponse{})
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
