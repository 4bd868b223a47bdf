// Package intent records what a caller wants done: it validates a create, update
// or delete of a storage pool, volume, snapshot or Active Directory policy,
// allocates what the new resource needs (storage key, endpoint address, operation
// ID), and writes the desired state and its operation in one store transaction.
// The controller then converges. A project's settings (settings.go: its
// throughput cap) are the exception: nothing slow follows a change, so it is
// written at once, with no operation, and OnSettingsChanged wakes the controller.
// The REST API is one caller; a snapshot scheduler,
// the console or a test are others, and get the same model errors (naming the
// field) for the same input. Nothing here knows HTTP or the wire format.
//
// It imports model and store only; api and the daemon import it.
package intent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/store"
)

// Capacity reports the node store's space and volumes' usage, read fresh from the
// storage backend, before a write's transaction, never inside it (capacity.go,
// withReads): a statfs, a quota-group read.
//
// StoreSpace's size is what pools may commit at an overcommit ratio of 1 (the
// store less its overhead and what it keeps), its free what volumes may still be
// given.
type Capacity interface {
	StoreSpace(ctx context.Context) (sizeBytes, freeBytes int64, err error)
	VolumeUsedBytes(ctx context.Context, key string) (int64, error) // key = model.Volume.Key
}

// Allocator is a Capacity that says what a new volume takes from the store (less
// than its capacity when the store provisions thin). Without it a volume takes
// its capacity.
type Allocator interface {
	Allocation(capacityBytes int64) int64
}

// Sealer seals a secret for storage, bound to aad (where it belongs); see
// internal/secret.
type Sealer interface {
	Seal(plaintext, aad string) (string, error)
}

// Options configures a Service. The zero value works (no capacity guard, and an
// Active Directory policy cannot be created without Secrets).
type Options struct {
	// Networks pools may name; default one network "default" on 10.99.0.0/24. A
	// network without an endpoint range gets model.DefaultEndpoints.
	Networks []model.Network
	// Limits; zero = model.DefaultLimits.
	Limits model.Limits
	// Capacity reads the node store's space and volumes' usage; nil = no capacity
	// guard (pools are not checked against the store, no reserve is kept, shrinks
	// are checked against the last observed usage).
	Capacity Capacity
	// OvercommitRatio: Σ capacity of all pools on the node may reach this many times
	// the store's size; 0 = 1.0.
	OvercommitRatio float64
	// Secrets seals the Active Directory join password before it is stored.
	Secrets Sealer
	// NodeID is this node's ID: a volume created while the service is one node
	// is placed on it.
	NodeID string
	// Cluster: the store is shared by several nodes (PostgreSQL). A new volume
	// is placed on a live node that has its network (placement.go), its
	// endpoint taken from that node's range; pools may commit the nodes'
	// stores together.
	Cluster bool
	// DefaultThroughputCapMibps is the project throughput cap (MiB/s, per project
	// and location) where a project's settings set none; 0 = no cap.
	DefaultThroughputCapMibps float64
	// OnSettingsChanged, if set, is called after a project's settings changed (so
	// that the controller applies them).
	OnSettingsChanged func(project, location string)
	// Now returns the current time; nil = time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Service records intents. It holds no state but its options; it is safe for
// concurrent use (the store serialises the writes).
type Service struct {
	opts Options
	log  *slog.Logger
}

// New returns a Service, with opts' defaults filled in.
func New(opts Options) *Service {
	opts.Networks = model.NetworksOrDefault(opts.Networks)
	if opts.Limits == (model.Limits{}) {
		opts.Limits = model.DefaultLimits()
	}
	if opts.OvercommitRatio <= 0 || math.IsNaN(opts.OvercommitRatio) {
		opts.OvercommitRatio = 1
	}
	if !(opts.DefaultThroughputCapMibps > 0) || math.IsInf(opts.DefaultThroughputCapMibps, 1) {
		opts.DefaultThroughputCapMibps = 0
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{opts: opts, log: log}
}

// Options returns the options in effect (defaults filled in).
func (s *Service) Options() Options { return s.opts }

// Network returns the configured network named name.
func (s *Service) Network(name string) (model.Network, bool) {
	for _, n := range s.opts.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return model.Network{}, false
}

// newOperation returns an operation on target, to be stored with the intent.
func (s *Service) newOperation(project, location string, kind model.OpKind, target string) *model.Operation {
	now := s.opts.Now().UTC()
	return &model.Operation{
		Project: project, Location: location, Kind: kind, Target: target, CreateTime: now,
		ID:     fmt.Sprintf("operation-%d-%s-%s", now.UnixMilli(), newID(6), newID(4)),
		Params: model.OpParams{Version: model.OpParamsVersion},
	}
}

// record runs write and stores op in one transaction, returning op.
func record(ctx context.Context, st store.Store, op *model.Operation, write func(tx store.Tx) error) (*model.Operation, error) {
	err := st.Update(ctx, func(tx store.Tx) error {
		if err := write(tx); err != nil {
			return err
		}
		return store.PutOperation(tx, op)
	})
	if err != nil {
		return nil, err
	}
	return op, nil
}

func newID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// lastSegment is the ID at the end of a resource name.
func lastSegment(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			return name[i+1:]
		}
	}
	return name
}

// getIdle reads resource name of kind and refuses it (FAILED_PRECONDITION) while an
// operation runs on it; what and id name it in the message.
func getIdle[T any](tx store.Tx, kind, name, what, id string, meta func(*T) *model.Meta) (*T, error) {
	r, err := store.Get[T](tx, kind, name)
	if err != nil {
		return nil, err
	}
	if st := meta(r).State; st.Busy() {
		return nil, model.Errorf(model.ErrFailedPrecondition, "%s %s is %s; wait for its operation to finish", what, id, st)
	}
	return r, nil
}
