package grpcapi

import (
	"context"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/netapppb"
)

// The methods that write: each hands its request's message to REST's call as
// REST's JSON body (body) and answers the operation REST answers, which
// GetOperation polls. An update's FieldMask paths are REST's updateMask,
// accepted in the proto's snake_case and in REST's camelCase as Google's
// servers accept them; without paths the fields the message sets apply, as in
// a REST body without updateMask.

// update is an update's mask.
func update(fm *fieldmaskpb.FieldMask) api.Update { return api.Update{Mask: fm.GetPaths()} }

// operation answers a write's operation.
func operation(op any, err error) (*longrunningpb.Operation, error) {
	return reply(op, err, &longrunningpb.Operation{})
}

// CreateStoragePool implements netapppb.NetAppServer.
func (s *Server) CreateStoragePool(ctx context.Context, req *netapppb.CreateStoragePoolRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetStoragePool())
	if err != nil {
		return nil, err
	}
	return operation(s.api.CreateStoragePool(ctx, n.project, n.location, req.GetStoragePoolId(), b))
}

// UpdateStoragePool implements netapppb.NetAppServer.
func (s *Server) UpdateStoragePool(ctx context.Context, req *netapppb.UpdateStoragePoolRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetStoragePool())
	if err != nil {
		return nil, err
	}
	return operation(s.api.UpdateStoragePool(ctx, n.project, n.location, n.id, b, update(req.GetUpdateMask())))
}

// DeleteStoragePool implements netapppb.NetAppServer.
func (s *Server) DeleteStoragePool(ctx context.Context, _ *netapppb.DeleteStoragePoolRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	return operation(s.api.DeleteStoragePool(ctx, n.project, n.location, n.id))
}

// SwitchActiveReplicaZone implements netapppb.NetAppServer.
func (s *Server) SwitchActiveReplicaZone(ctx context.Context, _ *netapppb.SwitchActiveReplicaZoneRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	return operation(s.api.SwitchStoragePool(ctx, n.project, n.location, n.id))
}

// ValidateDirectoryService implements netapppb.NetAppServer.
func (s *Server) ValidateDirectoryService(ctx context.Context, req *netapppb.ValidateDirectoryServiceRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(&netapppb.ValidateDirectoryServiceRequest{DirectoryServiceType: req.GetDirectoryServiceType()})
	if err != nil {
		return nil, err
	}
	return operation(s.api.ValidateDirectoryService(ctx, n.project, n.location, n.id, b))
}

// CreateVolume implements netapppb.NetAppServer; restore_parameters'
// source_snapshot clones a snapshot.
func (s *Server) CreateVolume(ctx context.Context, req *netapppb.CreateVolumeRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetVolume())
	if err != nil {
		return nil, err
	}
	return operation(s.api.CreateVolume(ctx, n.project, n.location, req.GetVolumeId(), b))
}

// UpdateVolume implements netapppb.NetAppServer.
func (s *Server) UpdateVolume(ctx context.Context, req *netapppb.UpdateVolumeRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetVolume())
	if err != nil {
		return nil, err
	}
	return operation(s.api.UpdateVolume(ctx, n.project, n.location, n.id, b, update(req.GetUpdateMask())))
}

// DeleteVolume implements netapppb.NetAppServer: with force, its snapshots
// too.
func (s *Server) DeleteVolume(ctx context.Context, req *netapppb.DeleteVolumeRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	return operation(s.api.DeleteVolume(ctx, n.project, n.location, n.id, req.GetForce()))
}

// RevertVolume implements netapppb.NetAppServer.
func (s *Server) RevertVolume(ctx context.Context, req *netapppb.RevertVolumeRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	return operation(s.api.RevertVolume(ctx, n.project, n.location, n.id, req.GetSnapshotId()))
}

// CreateSnapshot implements netapppb.NetAppServer.
func (s *Server) CreateSnapshot(ctx context.Context, req *netapppb.CreateSnapshotRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetSnapshot())
	if err != nil {
		return nil, err
	}
	return operation(s.api.CreateSnapshot(ctx, n.project, n.location, n.volume, req.GetSnapshotId(), b))
}

// UpdateSnapshot implements netapppb.NetAppServer.
func (s *Server) UpdateSnapshot(ctx context.Context, req *netapppb.UpdateSnapshotRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetSnapshot())
	if err != nil {
		return nil, err
	}
	return operation(s.api.UpdateSnapshot(ctx, n.project, n.location, n.volume, n.id, b, update(req.GetUpdateMask())))
}

// DeleteSnapshot implements netapppb.NetAppServer.
func (s *Server) DeleteSnapshot(ctx context.Context, _ *netapppb.DeleteSnapshotRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	return operation(s.api.DeleteSnapshot(ctx, n.project, n.location, n.volume, n.id))
}

// CreateActiveDirectory implements netapppb.NetAppServer.
func (s *Server) CreateActiveDirectory(ctx context.Context, req *netapppb.CreateActiveDirectoryRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetActiveDirectory())
	if err != nil {
		return nil, err
	}
	return operation(s.api.CreateActiveDirectory(ctx, n.project, n.location, req.GetActiveDirectoryId(), b))
}

// UpdateActiveDirectory implements netapppb.NetAppServer.
func (s *Server) UpdateActiveDirectory(ctx context.Context, req *netapppb.UpdateActiveDirectoryRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	b, err := body(req.GetActiveDirectory())
	if err != nil {
		return nil, err
	}
	return operation(s.api.UpdateActiveDirectory(ctx, n.project, n.location, n.id, b, update(req.GetUpdateMask())))
}

// DeleteActiveDirectory implements netapppb.NetAppServer.
func (s *Server) DeleteActiveDirectory(ctx context.Context, _ *netapppb.DeleteActiveDirectoryRequest) (*longrunningpb.Operation, error) {
	n := nameOf(ctx)
	return operation(s.api.DeleteActiveDirectory(ctx, n.project, n.location, n.id))
}
