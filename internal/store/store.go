// Package store keeps Basin's metadata: every resource and operation, as documents in
// one transactional store. The store is deterministic: names, IDs and timestamps
// come from the caller.
//
// Two implementations pass the same conformance suite (storetest): SQLite (pure
// Go, WAL), the embedded default, and PostgreSQL (postgres.go), which several
// Basin nodes can share. Open picks one by the --store URL.
//
// Beside the documents the store keeps indexes (index.go), filled on every Put from
// the document, so that a write's checks (shareName taken? pool capacity in use?
// endpoints in use?) and the controller's list of unfinished operations cost the
// same however many resources are stored. Their typed helpers (PendingOperations,
// UsageOfPool, …) are what callers use.
//
// Metrics rollups (rollups.go) are rows of a table of their own, not documents:
// the metrics sampler writes one per volume every 5 minutes and deletes them after
// their retention.
//
// Imported by the daemon, api, controller and iam packages.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/basin-nas/basin/internal/model"
)

// Kinds of stored documents.
const (
	KindPool            = "storagePool"
	KindVolume          = "volume"
	KindSnapshot        = "snapshot"
	KindActiveDirectory = "activeDirectory"
	KindOperation       = "operation"
	KindServiceAccount  = "serviceAccount"
	KindKey             = "serviceAccountKey"
	KindIAMPolicy       = "iamPolicy"
	KindAudit           = "auditEntry"
	// KindSettings documents are projects' Basin-only settings, one per project and
	// location, named projects/{p}/locations/{l}/settings.
	KindSettings = "settings"
	// KindExportID documents are NFS export IDs in use, named by the ID in decimal;
	// KindExportIDCursor holds the last ID handed out (document "last").
	KindExportID       = "exportId"
	KindExportIDCursor = "exportIdCursor"
	// KindSnapshotSchedule documents are the snapshot scheduler's state of a
	// volume (internal/schedule), named by the volume's name.
	KindSnapshotSchedule = "snapshotSchedule"
	// KindNode documents are the Basin nodes that registered, named by node ID
	// (internal/daemon nodes.go).
	KindNode = "node"
	// KindClusterKey holds the ID of the key the stored secrets are sealed with
	// (document "secrets"; internal/daemon), never the key.
	KindClusterKey = "clusterKey"
	// KindHosting documents say which node serves another node's volumes on a
	// network (model.Hosting, named model.HostingName); KindDrain documents
	// mark nodes drained (model.Drain, named by node ID).
	KindHosting = "hosting"
	KindDrain   = "drain"
)

// Store runs transactions. Update transactions are serialised: a check followed by a
// write inside one Update cannot race with another Update.
type Store interface {
	Update(ctx context.Context, fn func(Tx) error) error
	View(ctx context.Context, fn func(Tx) error) error
	Close() error
}

// Backend is a Store with the rest of what Basin keeps in its database: metrics
// rollups (a table of their own) and compaction.
type Backend interface {
	Store
	// PutRollups inserts or replaces metrics rollups, in one transaction.
	PutRollups(ctx context.Context, rows []Rollup) error
	// Rollups returns series' rollups with from ≤ Start < to, by Start.
	Rollups(ctx context.Context, series string, from, to int64) ([]Rollup, error)
	// ExpireRollups deletes every rollup with Start < before and says how many.
	ExpireRollups(ctx context.Context, before int64) (int64, error)
	// Compact rewrites the stored documents so that nothing overwritten or
	// deleted lingers in the database's files.
	Compact(ctx context.Context) error
}

// Open opens the store url names: "" is the embedded SQLite database at
// sqlitePath; postgres:// and postgresql:// URLs (libpq's form) are PostgreSQL.
func Open(ctx context.Context, url, sqlitePath string) (Backend, error) {
	switch {
	case url == "":
		return OpenSQLite(ctx, sqlitePath)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return OpenPostgres(ctx, url)
	}
	return nil, errors.New("--database: want a postgres:// or postgresql:// URL (or none, for the embedded SQLite database)")
}

// Tx reads and writes documents inside a transaction.
type Tx interface {
	// Get decodes the document into out, or returns model.ErrNotFound.
	Get(kind, name string, out any) error
	// List returns the documents of kind under parent ("" = all), ordered by name.
	List(kind, parent string) ([][]byte, error)
	// Names returns the names of the documents of kind under parent ("" = all),
	// ordered by name, without reading the documents.
	Names(kind, parent string) ([]string, error)
	// Put inserts or replaces a document (and its index entries, see index.go).
	Put(kind, name, parent string, v any) error
	// Insert adds a document, or returns model.ErrAlreadyExists.
	Insert(kind, name, parent string, v any) error
	// Delete removes a document; deleting an absent one is not an error.
	Delete(kind, name string) error
	// Index returns the entries of index idx under key, ordered by num, then name.
	Index(idx, key string) ([]IndexEntry, error)
	// IndexBelow returns up to limit entries of index idx under key whose num is
	// below num, ordered by num, then name.
	IndexBelow(idx, key string, num float64, limit int) ([]IndexEntry, error)
	// IndexSum returns Σ num and the number of entries of index idx under key.
	IndexSum(idx, key string) (sum float64, n int, err error)
	// IndexDocs returns the documents of the entries of index idx under key, in the
	// order of Index.
	IndexDocs(idx, key string) ([][]byte, error)
	// NextSeq returns the next value of a named counter, starting at 1.
	NextSeq(key string) (int64, error)
	// Seq returns the last value NextSeq returned for key, or 0.
	Seq(key string) (int64, error)
}

// Get reads one typed document.
func Get[T any](tx Tx, kind, name string) (*T, error) {
	var v T
	if err := tx.Get(kind, name, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// List reads the typed documents of kind under parent, ordered by name.
func List[T any](tx Tx, kind, parent string) ([]*T, error) {
	raws, err := tx.List(kind, parent)
	if err != nil {
		return nil, err
	}
	out := make([]*T, 0, len(raws))
	for _, r := range raws {
		v := new(T)
		if err := json.Unmarshal(r, v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kind, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Typed helpers for the resources, keyed by their resource names.

// PutPool stores a pool.
func PutPool(tx Tx, p *model.Pool) error {
	return tx.Put(KindPool, p.Name(), model.LocationName(p.Project, p.Location), p)
}

// PutVolume stores a volume.
func PutVolume(tx Tx, v *model.Volume) error {
	return tx.Put(KindVolume, v.Name(), model.LocationName(v.Project, v.Location), v)
}

// PutSnapshot stores a snapshot.
func PutSnapshot(tx Tx, s *model.Snapshot) error {
	return tx.Put(KindSnapshot, s.Name(), s.VolumeName(), s)
}

// PutAD stores an Active Directory policy.
func PutAD(tx Tx, a *model.ActiveDirectory) error {
	return tx.Put(KindActiveDirectory, a.Name(), model.LocationName(a.Project, a.Location), a)
}

// PutSettings stores a project's settings in a location.
func PutSettings(tx Tx, s *model.Settings) error {
	return tx.Put(KindSettings, s.Name(), model.LocationName(s.Project, s.Location), s)
}

// PutOperation stores an operation.
func PutOperation(tx Tx, o *model.Operation) error {
	return tx.Put(KindOperation, o.Name(), model.LocationName(o.Project, o.Location), o)
}

// Rollup is one stored metrics rollup (internal/metrics): a series (a volume's
// storage key), the Unix second its 5-minute bucket starts and the encoded
// summary. Rollups live in a table of their own, not among the resources.
type Rollup struct {
	Series string
	Start  int64
	Data   []byte
}
