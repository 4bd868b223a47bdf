package grpcapi

import (
	"context"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	locationpb "google.golang.org/genproto/googleapis/cloud/location"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/basin-nas/basin/internal/api"
)

// operations implements google.longrunning.Operations on REST's operations:
// an Operation's metadata and response are the Any messages REST's JSON
// names with "@type" (netapppb's OperationMetadata, Volume, …; Empty).
type operations struct {
	longrunningpb.UnimplementedOperationsServer
	api *api.Server
}

// GetOperation implements longrunningpb.OperationsServer.
func (o *operations) GetOperation(ctx context.Context, _ *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	w, err := o.api.GetOperation(ctx, n.project, n.location, n.id)
	return reply(w, err, &longrunningpb.Operation{})
}

// ListOperations implements longrunningpb.OperationsServer.
func (o *operations) ListOperations(ctx context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	n := nameOf(ctx)
	w, err := o.api.ListOperations(ctx, n.project, n.location,
		api.ListRequest{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Filter: req.GetFilter()})
	return reply(w, err, &longrunningpb.ListOperationsResponse{})
}

// CancelOperation implements longrunningpb.OperationsServer.
func (o *operations) CancelOperation(ctx context.Context, _ *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	n := nameOf(ctx)
	if err := o.api.CancelOperation(ctx, n.project, n.location, n.id); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// DeleteOperation implements longrunningpb.OperationsServer.
func (o *operations) DeleteOperation(ctx context.Context, _ *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	n := nameOf(ctx)
	if err := o.api.DeleteOperation(ctx, n.project, n.location, n.id); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// locations implements google.cloud.location.Locations on the locations Basin
// serves, their metadata netapppb's LocationMetadata as REST's.
type locations struct {
	locationpb.UnimplementedLocationsServer
	api *api.Server
}

// GetLocation implements locationpb.LocationsServer.
func (l *locations) GetLocation(ctx context.Context, _ *locationpb.GetLocationRequest) (*locationpb.Location, error) {
	n := nameOf(ctx)
	w, err := l.api.GetLocation(n.project, n.location)
	return reply(w, err, &locationpb.Location{})
}

// ListLocations implements locationpb.LocationsServer.
func (l *locations) ListLocations(ctx context.Context, req *locationpb.ListLocationsRequest) (*locationpb.ListLocationsResponse, error) {
	n := nameOf(ctx)
	w, err := l.api.ListLocations(n.project,
		api.ListRequest{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Filter: req.GetFilter()})
	return reply(w, err, &locationpb.ListLocationsResponse{})
}
