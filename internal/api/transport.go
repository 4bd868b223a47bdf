package api

import (
	"context"
	"net/url"
	"strconv"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
)

// The functions here serve the v1 API to transports other than REST (gRPC,
// internal/grpcapi): the same authentication, rate limits, authorization and
// reads REST's handlers run, returning values and errors instead of writing a
// response. ErrorStatus turns their errors into what a call answers.

// Admit authenticates a call carrying the Authorization value authorization
// ("Bearer TOKEN", the tokens REST accepts) from the address remote, and checks
// the rate limits REST checks: it returns the caller (nil with authentication
// off), or the UNAUTHENTICATED or RESOURCE_EXHAUSTED error REST answers.
func (s *Server) Admit(ctx context.Context, authorization, remote string) (*iam.Principal, error) {
	var p *iam.Principal
	if s.opts.Auth != nil {
		var err error
		if p, err = s.authenticateValue(ctx, authorization); err != nil {
			_, err = s.refuseAuth(err, remote)
			return nil, err
		}
	}
	if _, err := s.overRate(p, remote); err != nil {
		return nil, err
	}
	return p, nil
}

// Unimplemented is the error of a v1 method Basin does not implement; method
// names it ("GET /v1/…" for REST, the full gRPC method name for gRPC).
func Unimplemented(method string) error {
	return model.Errorf(model.ErrUnimplemented, "Method %s is not implemented by Basin", method)
}

// ListRequest is a list call's paging, filter and order, as REST's query
// parameters carry them (pageSize 0 = the default).
type ListRequest struct {
	PageSize                   int
	PageToken, Filter, OrderBy string
}

func (l ListRequest) values() url.Values {
	q := url.Values{}
	if l.PageSize != 0 {
		q.Set("pageSize", strconv.Itoa(l.PageSize))
	}
	for k, v := range map[string]string{"pageToken": l.PageToken, "filter": l.Filter, "orderBy": l.OrderBy} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// checkParent refuses a malformed project and a location Basin does not serve,
// as REST's scopes do ("-" only when listing).
func (s *Server) checkParent(project, location string, list bool) error {
	if err := checkProject(project); err != nil {
		return err
	}
	return s.checkLocation(project, location, list)
}

// GetStoragePool returns storage pool id of project and location.
func (s *Server) GetStoragePool(ctx context.Context, project, location, id string) (apiv1.StoragePool, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.StoragePool{}, err
	}
	return s.getPoolW(ctx, parent{project: project, location: location}, id)
}

// ListStoragePools lists the storage pools of project and location ("-" = all).
func (s *Server) ListStoragePools(ctx context.Context, project, location string, lr ListRequest) (apiv1.ListStoragePoolsResponse, error) {
	if err := s.checkParent(project, location, true); err != nil {
		return apiv1.ListStoragePoolsResponse{}, err
	}
	return s.listPoolsQ(ctx, parent{project: project, location: location}, lr.values())
}

// GetVolume returns volume id of project and location.
func (s *Server) GetVolume(ctx context.Context, project, location, id string) (apiv1.Volume, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.Volume{}, err
	}
	return s.getVolumeW(ctx, parent{project: project, location: location}, id)
}

// ListVolumes lists the volumes of project and location ("-" = all).
func (s *Server) ListVolumes(ctx context.Context, project, location string, lr ListRequest) (apiv1.ListVolumesResponse, error) {
	if err := s.checkParent(project, location, true); err != nil {
		return apiv1.ListVolumesResponse{}, err
	}
	return s.listVolumesQ(ctx, parent{project: project, location: location}, lr.values())
}
