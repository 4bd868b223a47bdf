package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/intent"
	"github.com/basin-nas/basin/internal/model"
)

// The functions here serve the v1 API to transports other than REST (gRPC,
// internal/grpcapi): the same authentication, rate limits, authorization, audit
// and reads REST's handlers run, returning values and errors instead of writing
// a response. ErrorStatus turns their errors into what a call answers.

// Call is one call of a transport other than REST, admitted, authorized and
// audited as REST's calls are: Begin it, End it with its answer.
type Call struct {
	s     *Server
	rq    *request
	start time.Time
}

// CallInfo describes a call to Begin.
type CallInfo struct {
	// Method is the transport's name of the call (gRPC: its full method
	// name), audited where the call needs no permission.
	Method string
	// Read: the call changes nothing (only its refusals are audited).
	Read bool
	// Project, Perm and Resource say what the call is, as REST's route would:
	// the project it is on, the permission it needs ("" = none) and the
	// resource (or collection) named in a denial and the audit log.
	Project, Perm, Resource string
	// Authorization is the credentials' value ("Bearer TOKEN", the tokens
	// REST accepts); Remote the caller's address.
	Authorization, Remote string
}

// Begin admits a call as REST admits its requests: it authenticates the
// caller, checks the rate limits and the permission. The error is what the
// call answers (UNAUTHENTICATED, RESOURCE_EXHAUSTED, PERMISSION_DENIED); the
// Call is to be ended either way.
func (s *Server) Begin(ctx context.Context, ci CallInfo) (*Call, error) {
	rq := &request{ctx: ctx, id: newID(8), project: ci.Project, perm: ci.Perm, resource: ci.Resource,
		rpc: &rpcCall{method: ci.Method, remote: ci.Remote, read: ci.Read}}
	c := &Call{s: s, rq: rq, start: time.Now()}
	if s.opts.Auth != nil {
		p, err := s.authenticateValue(ctx, ci.Authorization)
		if err != nil {
			noteAuthRefusal(rq, err)
			_, err = s.refuseAuth(err, ci.Remote)
			return c, err
		}
		rq.principal = p
	}
	if _, err := s.overRate(rq.principal, ci.Remote); err != nil {
		rq.aggregate = true
		return c, err
	}
	return c, s.Authorize(ctx, rq.principal, ci.Project, ci.Perm, ci.Resource)
}

// ID is the call's request ID (ErrorStatus names it in an internal error).
func (c *Call) ID() string { return c.rq.id }

// End records the call's answer (err nil = success) in the audit log and the
// log, and returns its Status (zero on success). Internal errors are logged
// with their detail.
func (c *Call) End(err error) Status {
	s, rq := c.s, c.rq
	var st Status
	rq.status = http.StatusOK
	if err != nil {
		st = ErrorStatus(err, rq.id)
		rq.status, rq.err = st.HTTP, err
		if st.Name == "INTERNAL" {
			s.log.Error("internal error", "err", err, "request_id", rq.id, "method", rq.rpc.method)
		}
	}
	s.audit(rq)
	principal := rq.refusedAs
	if rq.principal != nil {
		principal = rq.principal.Email
	}
	level := slog.LevelInfo
	if rq.aggregate {
		level = slog.LevelDebug
	}
	took := time.Since(c.start)
	s.log.Log(rq.ctx, level, "call", "method", rq.rpc.method, "resource", rq.resource, "status", rq.status,
		"principal", principal, "request_id", rq.id, "remote", rq.rpc.remote, "duration", took.Round(time.Microsecond))
	if s.opts.ObserveCall != nil {
		code := "OK"
		if err != nil {
			code = st.Name
		}
		s.opts.ObserveCall(rq.rpc.method, code, took)
	}
	return st
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

// GetSnapshot returns snapshot id of volume of project and location.
func (s *Server) GetSnapshot(ctx context.Context, project, location, volume, id string) (apiv1.Snapshot, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.Snapshot{}, err
	}
	if err := checkPathID("Volume", volume); err != nil {
		return apiv1.Snapshot{}, err
	}
	return s.getSnapshotW(ctx, model.LocationName(project, location)+"/volumes/"+volume, id)
}

// ListSnapshots lists the snapshots of volume of project and location.
func (s *Server) ListSnapshots(ctx context.Context, project, location, volume string, lr ListRequest) (apiv1.ListSnapshotsResponse, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.ListSnapshotsResponse{}, err
	}
	if err := checkPathID("Volume", volume); err != nil {
		return apiv1.ListSnapshotsResponse{}, err
	}
	return s.listSnapshotsQ(ctx, model.LocationName(project, location)+"/volumes/"+volume, lr.values())
}

// GetActiveDirectory returns Active Directory policy id of project and
// location, without its password, as REST answers it.
func (s *Server) GetActiveDirectory(ctx context.Context, project, location, id string) (apiv1.ActiveDirectory, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.ActiveDirectory{}, err
	}
	return s.getADW(ctx, parent{project: project, location: location}, id)
}

// ListActiveDirectories lists the Active Directory policies of project and
// location ("-" = all), without their passwords, as REST answers them.
func (s *Server) ListActiveDirectories(ctx context.Context, project, location string, lr ListRequest) (apiv1.ListActiveDirectoriesResponse, error) {
	if err := s.checkParent(project, location, true); err != nil {
		return apiv1.ListActiveDirectoriesResponse{}, err
	}
	return s.listADsQ(ctx, parent{project: project, location: location}, lr.values())
}

// GetLocation returns location of project, if Basin serves it.
func (s *Server) GetLocation(project, location string) (apiv1.Location, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.Location{}, err
	}
	return s.location(parent{project: project, location: location}), nil
}

// ListLocations lists the locations Basin serves to project.
func (s *Server) ListLocations(project string, lr ListRequest) (apiv1.ListLocationsResponse, error) {
	if err := checkProject(project); err != nil {
		return apiv1.ListLocationsResponse{}, err
	}
	return s.listLocationsQ(project, lr.values())
}

// GetOperation returns operation id of project and location.
func (s *Server) GetOperation(ctx context.Context, project, location, id string) (apiv1.Operation, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.Operation{}, err
	}
	return s.getOperationW(ctx, parent{project: project, location: location}, id)
}

// ListOperations lists the operations of project and location ("-" = all).
func (s *Server) ListOperations(ctx context.Context, project, location string, lr ListRequest) (apiv1.ListOperationsResponse, error) {
	if err := s.checkParent(project, location, true); err != nil {
		return apiv1.ListOperationsResponse{}, err
	}
	return s.listOperationsQ(ctx, parent{project: project, location: location}, lr.values())
}

// CancelOperation asks for operation id of project and location to be
// cancelled; a finished one is left as it is.
func (s *Server) CancelOperation(ctx context.Context, project, location, id string) error {
	if err := s.checkParent(project, location, false); err != nil {
		return err
	}
	return s.cancelOperationW(ctx, parent{project: project, location: location}, id)
}

// DeleteOperation forgets finished operation id of project and location.
func (s *Server) DeleteOperation(ctx context.Context, project, location, id string) error {
	if err := s.checkParent(project, location, false); err != nil {
		return err
	}
	return s.deleteOperationW(ctx, parent{project: project, location: location}, id)
}

// Update is an update call's field mask.
type Update struct {
	// Mask is the update mask's paths, in the proto's snake_case or REST's
	// camelCase, as REST's updateMask takes them; none = the fields the
	// message sets apply, as a REST body without updateMask.
	Mask []string
}

// values are REST's query parameters carrying u.
func (u Update) values() url.Values {
	if len(u.Mask) == 0 {
		return url.Values{}
	}
	return url.Values{"updateMask": {strings.Join(u.Mask, ",")}}
}

// write runs a call that records an operation, with REST's scope checks
// first (project, served location, and the volume's ID when a snapshot's
// call names one), and answers the operation as REST's call answers it.
func (s *Server) write(ctx context.Context, project, location, volume string, record func(p parent) (*model.Operation, error)) (apiv1.Operation, error) {
	if err := s.checkParent(project, location, false); err != nil {
		return apiv1.Operation{}, err
	}
	if volume != "" {
		if err := checkPathID("Volume", volume); err != nil {
			return apiv1.Operation{}, err
		}
	}
	op, err := record(parent{project: project, location: location})
	return s.operationAnswer(ctx, op, err)
}

// The writes below take their request's message as REST's JSON body (a gRPC
// message as protojson writes it), decoded as REST decodes its bodies: the
// same validation, the same fields present.

// CreateSnapshot records the creation of snapshot id of volume of project
// and location from body (a Snapshot: its description and labels) and
// returns the operation, as REST's create answers it.
func (s *Server) CreateSnapshot(ctx context.Context, project, location, volume, id string, body []byte) (apiv1.Operation, error) {
	return s.write(ctx, project, location, volume, func(p parent) (*model.Operation, error) {
		if err := intent.CheckID("snapshotId", id); err != nil {
			return nil, err
		}
		var w apiv1.Snapshot
		if _, err := decodeBody(body, &w); err != nil {
			return nil, err
		}
		return s.createSnapshotOp(ctx, p, p.name()+"/volumes/"+volume, id, w)
	})
}

// UpdateSnapshot records the update of snapshot id of volume of project and
// location from body (a Snapshot) and u, as REST's PATCH.
func (s *Server) UpdateSnapshot(ctx context.Context, project, location, volume, id string, body []byte, u Update) (apiv1.Operation, error) {
	return s.write(ctx, project, location, volume, func(p parent) (*model.Operation, error) {
		if err := checkPathID("Snapshot", id); err != nil {
			return nil, err
		}
		var w apiv1.Snapshot
		present, err := decodeBody(body, &w)
		if err != nil {
			return nil, err
		}
		return s.updateSnapshotOp(ctx, p, p.name()+"/volumes/"+volume, id, w, present, u.values())
	})
}

// DeleteSnapshot records the deletion of snapshot id of volume of project
// and location, as REST's DELETE.
func (s *Server) DeleteSnapshot(ctx context.Context, project, location, volume, id string) (apiv1.Operation, error) {
	return s.write(ctx, project, location, volume, func(p parent) (*model.Operation, error) {
		return s.deleteSnapshotOp(ctx, p, p.name()+"/volumes/"+volume, id)
	})
}

// CreateVolume records the creation of volume id of project and location
// from body (a Volume; restoreParameters.sourceSnapshot clones a snapshot),
// as REST's POST.
func (s *Server) CreateVolume(ctx context.Context, project, location, id string, body []byte) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := intent.CheckID("volumeId", id); err != nil {
			return nil, err
		}
		var w apiv1.Volume
		if _, err := decodeBody(body, &w); err != nil {
			return nil, err
		}
		return s.createVolumeOp(ctx, p, id, w)
	})
}

// UpdateVolume records the update of volume id of project and location from
// body (a Volume) and u, as REST's PATCH.
func (s *Server) UpdateVolume(ctx context.Context, project, location, id string, body []byte, u Update) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := checkPathID("Volume", id); err != nil {
			return nil, err
		}
		var w apiv1.Volume
		present, err := decodeBody(body, &w)
		if err != nil {
			return nil, err
		}
		return s.updateVolumeOp(ctx, p, id, w, present, u.values())
	})
}

// RevertVolume records the revert of volume id of project and location to
// its snapshot snapshotID, as REST's :revert.
func (s *Server) RevertVolume(ctx context.Context, project, location, id, snapshotID string) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := checkPathID("Volume", id); err != nil {
			return nil, err
		}
		return s.revertVolumeOp(ctx, p, id, snapshotID)
	})
}

// DeleteVolume records the deletion of volume id of project and location
// (force: with its snapshots) and returns the operation, as REST's delete
// answers it.
func (s *Server) DeleteVolume(ctx context.Context, project, location, id string, force bool) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := checkPathID("Volume", id); err != nil {
			return nil, err
		}
		return s.deleteVolumeOp(ctx, p, id, force)
	})
}

// CreateStoragePool records the creation of storage pool id of project and
// location from body (a StoragePool), as REST's POST.
func (s *Server) CreateStoragePool(ctx context.Context, project, location, id string, body []byte) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := intent.CheckID("storagePoolId", id); err != nil {
			return nil, err
		}
		var w apiv1.StoragePool
		if _, err := decodeBody(body, &w); err != nil {
			return nil, err
		}
		return s.createPoolOp(ctx, p, id, w)
	})
}

// UpdateStoragePool records the update of storage pool id of project and
// location from body (a StoragePool) and u, as REST's PATCH.
func (s *Server) UpdateStoragePool(ctx context.Context, project, location, id string, body []byte, u Update) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := checkPathID("Storage pool", id); err != nil {
			return nil, err
		}
		var w apiv1.StoragePool
		present, err := decodeBody(body, &w)
		if err != nil {
			return nil, err
		}
		return s.updatePoolOp(ctx, p, id, w, present, u.values())
	})
}

// DeleteStoragePool records the deletion of storage pool id of project and
// location, as REST's DELETE.
func (s *Server) DeleteStoragePool(ctx context.Context, project, location, id string) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		return s.deletePoolOp(ctx, p, id)
	})
}

// SwitchStoragePool records the switch of storage pool id of project and
// location's zone and replica zone, as REST's :switch.
func (s *Server) SwitchStoragePool(ctx context.Context, project, location, id string) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		return s.switchPoolOp(ctx, p, id)
	})
}

// ValidateDirectoryService records the check of storage pool id of project
// and location's Active Directory policy, from body (a
// ValidateDirectoryServiceRequest), as REST's :validateDirectoryService.
func (s *Server) ValidateDirectoryService(ctx context.Context, project, location, id string, body []byte) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		var w apiv1.ValidateDirectoryServiceRequest
		if _, err := decodeBody(body, &w); err != nil {
			return nil, err
		}
		return s.validateDirectoryServiceOp(ctx, p, id, w)
	})
}

// CreateActiveDirectory records the creation of Active Directory policy id
// of project and location from body (an ActiveDirectory), as REST's POST.
func (s *Server) CreateActiveDirectory(ctx context.Context, project, location, id string, body []byte) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := intent.CheckID("activeDirectoryId", id); err != nil {
			return nil, err
		}
		var w apiv1.ActiveDirectory
		if _, err := decodeBody(body, &w); err != nil {
			return nil, err
		}
		return s.createADOp(ctx, p, id, w)
	})
}

// UpdateActiveDirectory records the update of Active Directory policy id of
// project and location from body (an ActiveDirectory) and u, as REST's PATCH.
func (s *Server) UpdateActiveDirectory(ctx context.Context, project, location, id string, body []byte, u Update) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		if err := checkPathID("Active Directory", id); err != nil {
			return nil, err
		}
		var w apiv1.ActiveDirectory
		present, err := decodeBody(body, &w)
		if err != nil {
			return nil, err
		}
		return s.updateADOp(ctx, p, id, w, present, u.values())
	})
}

// DeleteActiveDirectory records the deletion of Active Directory policy id
// of project and location, as REST's DELETE.
func (s *Server) DeleteActiveDirectory(ctx context.Context, project, location, id string) (apiv1.Operation, error) {
	return s.write(ctx, project, location, "", func(p parent) (*model.Operation, error) {
		return s.deleteADOp(ctx, p, id)
	})
}
