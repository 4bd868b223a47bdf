package intent

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

var (
	networkRE = regexp.MustCompile(`^projects/([^/]+)/global/networks/([A-Za-z0-9][A-Za-z0-9._-]{0,62})$`)
	adRefRE   = regexp.MustCompile(`^projects/([^/]+)/locations/([^/]+)/activeDirectories/([^/]+)$`)
)

// PoolCreate asks for a storage pool.
type PoolCreate struct {
	// Pool holds the project, location, ID and spec; its create time and state are
	// set here.
	Pool *model.Pool
}

// CreatePool records a pool to create.
func (s *Service) CreatePool(ctx context.Context, st store.Store, req PoolCreate) (*model.Operation, error) {
	pl := req.Pool
	if err := CheckID("storagePoolId", pl.ID); err != nil {
		return nil, err
	}
	pl.CreateTime, pl.State = s.opts.Now().UTC(), model.StateCreating
	if pl.QosType == model.QosUnspecified {
		pl.QosType = model.QosAuto
	}
	op := s.newOperation(pl.Project, pl.Location, model.OpPoolCreate, pl.Name())
	return s.withReads(ctx, true, func(r *reads) (*model.Operation, error) {
		return record(ctx, st, op, func(tx store.Tx) error {
			if err := s.validatePoolSpec(tx, pl, nil); err != nil {
				return err
			}
			if err := s.checkPoolCommit(tx, r, pl, 0); err != nil {
				return err
			}
			return tx.Insert(store.KindPool, pl.Name(), model.LocationName(pl.Project, pl.Location), pl)
		})
	})
}

// PoolUpdate asks to change a pool.
type PoolUpdate struct {
	Project, Location, ID string
	// Patch changes the pool as read in the transaction; its error is answered as is.
	Patch func(tx store.Tx, pl *model.Pool) error
}

// UpdatePool records a change to a pool that is not busy: its volumes must still
// fit, a QoS type change moves them, a growth must fit the node's store.
func (s *Service) UpdatePool(ctx context.Context, st store.Store, req PoolUpdate) (*model.Operation, error) {
	if err := CheckPathID("Storage pool", req.ID); err != nil {
		return nil, err
	}
	name := model.LocationName(req.Project, req.Location) + "/storagePools/" + req.ID
	op := s.newOperation(req.Project, req.Location, model.OpPoolUpdate, name)
	// The pool is read afresh in each transaction: the write may run again
	// once the store's space is read (a growth).
	return s.withReads(ctx, false, func(r *reads) (*model.Operation, error) {
		return record(ctx, st, op, func(tx store.Tx) error {
			pl, err := getIdle(tx, store.KindPool, name, "storage pool", req.ID, func(r *model.Pool) *model.Meta { return &r.Meta })
			if err != nil {
				return err
			}
			op.Prev, _ = json.Marshal(pl)
			prev := *pl
			if err := req.Patch(tx, pl); err != nil {
				return err
			}
			if err := s.validatePoolSpec(tx, pl, &prev); err != nil {
				return err
			}
			if pl.QosType != prev.QosType {
				if err := s.switchQosType(tx, pl); err != nil {
					return err
				}
			}
			if err := s.checkPoolFits(tx, pl); err != nil {
				return err
			}
			if err := s.checkPoolCommit(tx, r, pl, prev.CapacityGib); err != nil {
				return err
			}
			pl.State = model.StateUpdating
			return store.PutPool(tx, pl)
		})
	})
}

// PoolDelete asks to delete a pool.
type PoolDelete struct {
	Project, Location, ID string
}

// DeletePool records a pool's deletion; it must hold no volumes.
func (s *Service) DeletePool(ctx context.Context, st store.Store, req PoolDelete) (*model.Operation, error) {
	if err := CheckPathID("Storage pool", req.ID); err != nil {
		return nil, err
	}
	name := model.LocationName(req.Project, req.Location) + "/storagePools/" + req.ID
	op := s.newOperation(req.Project, req.Location, model.OpPoolDelete, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		pl, err := getIdle(tx, store.KindPool, name, "storage pool", req.ID, func(r *model.Pool) *model.Meta { return &r.Meta })
		if err != nil {
			return err
		}
		use, err := store.UsageOfPool(tx, name)
		if err != nil {
			return err
		}
		if use.Volumes > 0 {
			return model.Errorf(model.ErrFailedPrecondition, "storage pool %s still has %d volume(s); delete them first", req.ID, use.Volumes)
		}
		pl.State = model.StateDeleting
		return store.PutPool(tx, pl)
	})
}

// validatePoolSpec checks the fields a pool create or update sets. prev is the pool
// before an update (nil on create): references it already held were checked when
// they were set and are not checked again, so an update of other fields never fails
// on them.
func (s *Service) validatePoolSpec(tx store.Tx, pl, prev *model.Pool) error {
	lim := s.opts.Limits
	if pl.ServiceLevel == model.LevelUnspecified {
		return model.Invalid("serviceLevel", "is required (PREMIUM, EXTREME, STANDARD or FLEX)")
	}
	if pl.CapacityGib <= 0 {
		return model.Invalid("capacityGib", "is required and must be positive")
	}
	if pl.CapacityGib < lim.MinPoolGib || pl.CapacityGib > lim.MaxPoolGib {
		return model.Invalid("capacityGib", "%d GiB is outside the allowed range %d–%d GiB", pl.CapacityGib, lim.MinPoolGib, lim.MaxPoolGib)
	}
	pl.Network = LongNetwork(pl.Project, pl.Network)
	pl.ActiveDirectory = LongActiveDirectory(pl.Project, pl.Location, pl.ActiveDirectory)
	if prev == nil || prev.Network != pl.Network {
		if err := s.checkNetworkRef(pl.Project, pl.Network); err != nil {
			return err
		}
	} else if _, ok := s.Network(model.NetworkName(pl.Network)); !ok {
		return s.unconfiguredNetwork(pl.Network)
	}
	if pl.ActiveDirectory != "" && (prev == nil || prev.ActiveDirectory != pl.ActiveDirectory) {
		if err := checkADRef(tx, pl, pl.ActiveDirectory); err != nil {
			return err
		}
	}
	if prev != nil && prev.ActiveDirectory != pl.ActiveDirectory {
		if err := noKerberosVolumes(tx, pl); err != nil {
			return err
		}
	}
	if pl.CustomPerformanceEnabled && pl.ServiceLevel != model.LevelFlex {
		return model.Invalid("customPerformanceEnabled", "is only available for FLEX pools")
	}
	if pl.CustomPerformanceEnabled {
		if pl.TotalThroughputMibps < lim.FlexCustomMinThrough || pl.TotalThroughputMibps > lim.FlexCustomMaxThrough {
			return model.Invalid("totalThroughputMibps", "must be between %d and %d MiB/s for custom performance", lim.FlexCustomMinThrough, lim.FlexCustomMaxThrough)
		}
		if pl.TotalIops == 0 {
			pl.TotalIops = 1024 + 16*(pl.TotalThroughputMibps-64)
		}
		if pl.TotalIops < 0 || pl.TotalIops > 160000 {
			return model.Invalid("totalIops", "must be at most 160000")
		}
	} else if pl.TotalThroughputMibps != 0 || pl.TotalIops != 0 {
		return model.Invalid("totalThroughputMibps", "can only be set when customPerformanceEnabled is true")
	}
	if pl.AllowAutoTiering {
		return model.Invalid("allowAutoTiering", "auto-tiering is not supported by Basin")
	}
	return CheckMeta(&pl.Meta)
}

// switchQosType moves a pool's volumes to its new QoS type: to MANUAL, each volume
// keeps the throughput it had automatically (capacity × rate, which fits the budget);
// to AUTO, assignments are dropped and throughput follows capacity again.
func (s *Service) switchQosType(tx store.Tx, pl *model.Pool) error {
	es, err := tx.Index(store.IdxPoolCapacity, pl.Name())
	if err != nil {
		return err
	}
	names := make([]string, 0, len(es))
	for _, e := range es {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	auto := *pl
	auto.QosType = model.QosAuto
	for _, name := range names {
		v, err := store.Get[model.Volume](tx, store.KindVolume, name)
		if err != nil {
			return err
		}
		if v.State.Busy() {
			return model.Errorf(model.ErrFailedPrecondition, "volume %s is %s; wait for its operation before changing qosType", v.ID, v.State)
		}
		v.ThroughputMibps = 0
		if pl.QosType == model.QosManual {
			v.ThroughputMibps = math.Round(model.VolumeThroughputMibps(v, &auto, s.opts.Limits)*1000) / 1000
		}
		if err := store.PutVolume(tx, v); err != nil {
			return err
		}
	}
	return nil
}

// checkPoolFits refuses a pool change that leaves its volumes without room: capacity
// below Σ volume capacity, or a manual-QoS budget below Σ assigned throughput.
func (s *Service) checkPoolFits(tx store.Tx, pl *model.Pool) error {
	use, err := store.UsageOfPool(tx, pl.Name())
	if err != nil {
		return err
	}
	if use.Volumes == 0 {
		return nil
	}
	if pl.CapacityGib < use.CapacityGib {
		return model.Errorf(model.ErrFailedPrecondition, "capacityGib: %d GiB is less than the %d GiB its volumes use", pl.CapacityGib, use.CapacityGib)
	}
	if pl.QosType == model.QosManual {
		if budget := model.PoolBudgetMibps(pl, s.opts.Limits); use.ThroughputMibps > budget+1e-9 {
			return model.Errorf(model.ErrFailedPrecondition, "the pool's throughput budget %.2f MiB/s is less than the %.2f MiB/s assigned to its volumes", budget, use.ThroughputMibps)
		}
	}
	return nil
}

// LongNetwork returns a pool's network reference in its long form: a bare name (what
// gcloud sends for --network=name=default) means the network of that name in the
// pool's project, projects/{project}/global/networks/{name}, as upstream takes it.
// Anything else is returned as it is, for checkNetworkRef to judge.
func LongNetwork(project, ref string) string {
	if ref == "" || strings.Contains(ref, "/") {
		return ref
	}
	return "projects/" + project + "/global/networks/" + ref
}

// noKerberosVolumes refuses a change of pool pl's Active Directory policy while
// it has Kerberos volumes: its policy's machine is their NFS service principal,
// and their clients' tickets are for it. It reads the location's volumes, on
// policy changes only.
func noKerberosVolumes(tx store.Tx, pl *model.Pool) error {
	vols, err := store.List[model.Volume](tx, store.KindVolume, model.LocationName(pl.Project, pl.Location))
	if err != nil {
		return err
	}
	for _, v := range vols {
		if v.KerberosEnabled && v.PoolName() == pl.Name() {
			return model.Errorf(model.ErrFailedPrecondition, "activeDirectory cannot change while the pool has Kerberos volumes (%s): "+
				"its policy's machine is their NFS server's identity", v.ID)
		}
	}
	return nil
}

// LongActiveDirectory returns a pool's Active Directory reference in its long form:
// a bare ID (gcloud sends --active-directory=ad1 as typed) means the policy of that
// ID in the pool's project and location.
func LongActiveDirectory(project, location, ref string) string {
	if ref == "" || strings.Contains(ref, "/") {
		return ref
	}
	return model.LocationName(project, location) + "/activeDirectories/" + ref
}

// checkNetworkRef checks a pool's network: projects/{p}/global/networks/{n} where p is
// the caller's project and n a network given to basin serve. Networks belong to the
// node and every project sees each of them under its own project name, so another
// project's name is refused before anything is looked up: the answer cannot depend
// on anything outside the caller's project.
func (s *Service) checkNetworkRef(project, ref string) error {
	if ref == "" {
		return model.Invalid("network", "is required: a network name, or projects/%s/global/networks/{network}", project)
	}
	m := networkRE.FindStringSubmatch(ref)
	if m == nil || m[1] != project {
		return model.Invalid("network", "must be a network name or projects/%s/global/networks/{network}, naming a network of project %s", project, project)
	}
	if _, ok := s.Network(m[2]); !ok {
		return s.unconfiguredNetwork(ref)
	}
	return nil
}

func (s *Service) unconfiguredNetwork(ref string) error {
	var names []string
	for _, n := range s.opts.Networks {
		names = append(names, n.Name)
	}
	return model.Invalid("network", "network %q is not configured in this Basin (configured: %s)", model.NetworkName(ref), strings.Join(names, ", "))
}

// checkADRef checks a reference to an Active Directory policy. Only policies of the
// caller's project and the pool's location can be named; anything else gets one
// answer, before any lookup, so it cannot reveal whether another project's policy
// exists.
func checkADRef(tx store.Tx, pl *model.Pool, ref string) error {
	loc := model.LocationName(pl.Project, pl.Location)
	m := adRefRE.FindStringSubmatch(ref)
	if m == nil || m[1] != pl.Project || m[2] != pl.Location {
		return model.Invalid("activeDirectory", "must be the ID or full name of an Active Directory policy in %s: %s/activeDirectories/{id}", loc, loc)
	}
	if !idRE.MatchString(m[3]) {
		return model.Invalid("activeDirectory", "Active Directory policy %q does not exist in %s", m[3], loc)
	}
	a, err := store.Get[model.ActiveDirectory](tx, store.KindActiveDirectory, ref)
	if errors.Is(err, model.ErrNotFound) {
		return model.Invalid("activeDirectory", "Active Directory policy %q does not exist in %s", m[3], loc)
	}
	if err != nil {
		return err
	}
	if a.State == model.StateDeleting {
		return model.Errorf(model.ErrFailedPrecondition, "activeDirectory: Active Directory policy %s is being deleted", a.ID)
	}
	return nil
}

// ValidateDirectory records a check of a pool's Active Directory policy against
// its domain (storagePools:validateDirectoryService): DC discovery, a bind as the
// policy's user and its rights on the OU, without joining. The pool must have a
// policy and not be busy; nothing is changed by the check.
func (s *Service) ValidateDirectory(ctx context.Context, st store.Store, project, location, id string) (*model.Operation, error) {
	if err := CheckPathID("Storage pool", id); err != nil {
		return nil, err
	}
	name := model.LocationName(project, location) + "/storagePools/" + id
	op := s.newOperation(project, location, model.OpPoolValidateDirectory, name)
	return record(ctx, st, op, func(tx store.Tx) error {
		pl, err := getIdle(tx, store.KindPool, name, "storage pool", id, func(r *model.Pool) *model.Meta { return &r.Meta })
		if err != nil {
			return err
		}
		if pl.ActiveDirectory == "" {
			return model.Errorf(model.ErrFailedPrecondition, "storage pool %s has no Active Directory policy to validate", id)
		}
		return nil
	})
}
