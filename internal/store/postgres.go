package store

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/basin-nas/basin/internal/model"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/postgres/*.sql
var pgMigrations embed.FS

// Advisory lock keys (pg_advisory_xact_lock): one for migrations, one every
// Update takes. Arbitrary constants, the same on every node.
const (
	pgMigrateLock int64 = 0x6261_7369_6e00_0001 // "basin\0" 1
	pgWriteLock   int64 = 0x6261_7369_6e00_0002
)

// pgOpsChannel is the channel an Update that recorded an operation notifies
// on commit (Listen).
const pgOpsChannel = "basin_operations"

// Postgres is the Store on a PostgreSQL database, shared by every node of a
// cluster (any libpq URL: postgres://user:password@host/db?sslmode=…).
//
// Its writes are serialised as SQLite's are: every Update takes one
// transaction-scoped advisory lock before it reads, so a check followed by a
// write (share name free? room in the pool? endpoint address free?) cannot race
// with another Update on any node, and each statement of a READ COMMITTED
// transaction sees every write committed before the lock was granted. Views run
// at REPEATABLE READ, read-only: one consistent snapshot, taking no lock.
// Serialising the writes keeps every caller's check-then-write correct without
// retries (a retried transaction would run its closure twice); a write
// transaction is a few statements, so the lock is held for milliseconds
// (docs/benchmarks.md).
type Postgres struct {
	pool *pgxpool.Pool
}

var _ Backend = (*Postgres)(nil)

// OpenPostgres connects to the database at url and runs the migrations it lacks,
// under an advisory lock (nodes starting together migrate once).
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--database: %w", err)
	}
	// Writers wait for the write lock holding a connection each: keep room for
	// reads beside them, unless the URL sets its own (pool_max_conns).
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, 16)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--database: %w", err)
	}
	s := &Postgres{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Postgres) migrate(ctx context.Context) error {
	files, err := fs.Glob(pgMigrations, "migrations/postgres/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store: connect: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLock); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, f := range files {
		num, _, _ := strings.Cut(strings.TrimPrefix(f, "migrations/postgres/"), "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return fmt.Errorf("migration %s: bad name", f)
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&done); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if done {
			continue
		}
		body, err := pgMigrations.ReadFile(f)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", f, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations(version) VALUES ($1)`, version); err != nil {
			return fmt.Errorf("migration %s: %w", f, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Close closes the connections.
func (s *Postgres) Close() error {
	s.pool.Close()
	return nil
}

// Listen calls fn after every committed Update, of any node, that recorded an
// operation (a new one, its progress or its end) or a project's settings (its
// throughput cap, which every node's traffic shaping follows), and once after each
// (re)connection (what it may have missed), until ctx ends. It listens on a
// connection of its own, outside the pool, made again a second after it fails.
// fn must not block: notifications of one burst come one after another.
func (s *Postgres) Listen(ctx context.Context, fn func(), onErr func(error)) {
	for ctx.Err() == nil {
		err := s.listen(ctx, fn)
		if ctx.Err() != nil {
			return
		}
		if onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Postgres) listen(ctx context.Context, fn func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("listen: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `LISTEN `+pgOpsChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fn()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		fn()
	}
}

// Compact rewrites the documents' tables (VACUUM FULL), so that overwritten rows
// do not linger in their files. PostgreSQL's write-ahead log keeps them until its
// segments are recycled.
func (s *Postgres) Compact(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `VACUUM FULL resources, index_entries`); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	return nil
}

// Update runs fn in a write transaction, serialised with every other Update of
// every node, committing if it returns nil.
func (s *Postgres) Update(ctx context.Context, fn func(Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgWriteLock); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	ptx := &pgTx{ctx: ctx, tx: tx}
	if err := fn(ptx); err != nil {
		return err
	}
	if ptx.notify {
		// Delivered to listeners when (and only if) the transaction commits.
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, pgOpsChannel); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// View runs fn in a read-only transaction on one snapshot.
func (s *Postgres) View(ctx context.Context, fn func(Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx)
	return fn(&pgTx{ctx: ctx, tx: tx})
}

type pgTx struct {
	ctx    context.Context
	tx     pgx.Tx
	notify bool // an operation or settings were written: notify listeners on commit
}

func (t *pgTx) Get(kind, name string, out any) error {
	var data []byte
	err := t.tx.QueryRow(t.ctx, `SELECT data FROM resources WHERE kind = $1 AND name = $2`, kind, name).Scan(&data)
	return decodeDoc(kind, name, data, errors.Is(err, pgx.ErrNoRows), err, out)
}

func (t *pgTx) List(kind, parent string) ([][]byte, error) {
	return pgColumn[[]byte](t, "data", kind, parent)
}

func (t *pgTx) Names(kind, parent string) ([]string, error) {
	return pgColumn[string](t, "name", kind, parent)
}

// pgColumn reads one column (data or name) of the documents of kind under parent
// ("" = all), ordered by name.
func pgColumn[T any](t *pgTx, column, kind, parent string) ([]T, error) {
	q, args := `SELECT `+column+` FROM resources WHERE kind = $1`, []any{kind}
	if parent != "" {
		q, args = q+` AND parent = $2`, append(args, parent)
	}
	rows, err := t.tx.Query(t.ctx, q+` ORDER BY name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	return out, nil
}

func (t *pgTx) Put(kind, name, parent string, v any) error {
	t.notify = t.notify || kind == KindOperation || kind == KindSettings
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", kind, err)
	}
	_, err = t.tx.Exec(t.ctx, `INSERT INTO resources(kind, name, parent, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (kind, name) DO UPDATE SET parent = excluded.parent, data = excluded.data`, kind, name, parent, data)
	if err != nil {
		return fmt.Errorf("put %s %s: %w", kind, name, err)
	}
	if !indexedKinds[kind] {
		return nil
	}
	rows, err := extract(kind, data)
	if err != nil {
		return err
	}
	if _, err := t.tx.Exec(t.ctx, `DELETE FROM index_entries WHERE kind = $1 AND name = $2`, kind, name); err != nil {
		return fmt.Errorf("index %s %s: %w", kind, name, err)
	}
	for _, r := range rows {
		num, err := numString(r.num)
		if err != nil {
			return fmt.Errorf("index %s %s: %w", kind, name, err)
		}
		if _, err := t.tx.Exec(t.ctx, `INSERT INTO index_entries(kind, name, idx, key, value, num) VALUES ($1, $2, $3, $4, $5, $6::numeric)`,
			kind, name, r.idx, []byte(r.key), r.value, num); err != nil {
			return fmt.Errorf("index %s %s: %w", kind, name, err)
		}
	}
	return nil
}

// numString renders an index entry's num exactly, as numeric's input.
func numString(v any) (string, error) {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10), nil
	case float64:
		return strconv.FormatFloat(n, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("index num of type %T", v)
}

func (t *pgTx) Insert(kind, name, parent string, v any) error {
	var exists bool
	if err := t.tx.QueryRow(t.ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE kind = $1 AND name = $2)`, kind, name).Scan(&exists); err != nil {
		return fmt.Errorf("insert %s %s: %w", kind, name, err)
	}
	if exists {
		return model.Errorf(model.ErrAlreadyExists, "Resource '%s' already exists", name)
	}
	return t.Put(kind, name, parent, v)
}

func (t *pgTx) Delete(kind, name string) error {
	if _, err := t.tx.Exec(t.ctx, `DELETE FROM resources WHERE kind = $1 AND name = $2`, kind, name); err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	if indexedKinds[kind] {
		if _, err := t.tx.Exec(t.ctx, `DELETE FROM index_entries WHERE kind = $1 AND name = $2`, kind, name); err != nil {
			return fmt.Errorf("delete %s %s: %w", kind, name, err)
		}
	}
	return nil
}

func (t *pgTx) Index(idx, key string) ([]IndexEntry, error) {
	return t.entries(idx, `SELECT name, value, num::float8 FROM index_entries WHERE idx = $1 AND key = $2 ORDER BY num, name`, idx, []byte(key))
}

func (t *pgTx) IndexBelow(idx, key string, num float64, limit int) ([]IndexEntry, error) {
	return t.entries(idx, `SELECT name, value, num::float8 FROM index_entries WHERE idx = $1 AND key = $2 AND num < $3 ORDER BY num, name LIMIT $4`,
		idx, []byte(key), num, limit)
}

// entries runs a query of index idx's entries (name, value, num).
func (t *pgTx) entries(idx, query string, args ...any) ([]IndexEntry, error) {
	rows, err := t.tx.Query(t.ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", idx, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IndexEntry, error) {
		var e IndexEntry
		return e, r.Scan(&e.Name, &e.Value, &e.Num)
	})
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", idx, err)
	}
	return out, nil
}

func (t *pgTx) IndexSum(idx, key string) (float64, int, error) {
	var sum float64
	var n int
	err := t.tx.QueryRow(t.ctx, `SELECT coalesce(sum(num), 0)::float8, count(*) FROM index_entries WHERE idx = $1 AND key = $2`, idx, []byte(key)).Scan(&sum, &n)
	if err != nil {
		return 0, 0, fmt.Errorf("index %s: %w", idx, err)
	}
	return sum, n, nil
}

func (t *pgTx) IndexDocs(idx, key string) ([][]byte, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT r.data FROM index_entries i JOIN resources r ON r.kind = i.kind AND r.name = i.name
		WHERE i.idx = $1 AND i.key = $2 ORDER BY i.num, i.name`, idx, []byte(key))
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", idx, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", idx, err)
	}
	return out, nil
}

func (t *pgTx) NextSeq(key string) (int64, error) {
	var v int64
	err := t.tx.QueryRow(t.ctx, `INSERT INTO sequences(key, value) VALUES ($1, 1)
		ON CONFLICT (key) DO UPDATE SET value = sequences.value + 1 RETURNING value`, key).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("sequence %s: %w", key, err)
	}
	return v, nil
}

func (t *pgTx) Seq(key string) (int64, error) {
	var v int64
	err := t.tx.QueryRow(t.ctx, `SELECT value FROM sequences WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sequence %s: %w", key, err)
	}
	return v, nil
}

// PutRollups inserts or replaces metrics rollups, in one transaction.
func (s *Postgres) PutRollups(ctx context.Context, rows []Rollup) error {
	if len(rows) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(`INSERT INTO metric_rollups(series, start, data) VALUES ($1, $2, $3)
			ON CONFLICT (series, start) DO UPDATE SET data = excluded.data`, r.Series, r.Start, r.Data)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("put rollups: %w", err)
	}
	return nil
}

// Rollups returns series' rollups with from ≤ Start < to, by Start.
func (s *Postgres) Rollups(ctx context.Context, series string, from, to int64) ([]Rollup, error) {
	rows, err := s.pool.Query(ctx, `SELECT start, data FROM metric_rollups WHERE series = $1 AND start >= $2 AND start < $3 ORDER BY start`,
		series, from, to)
	if err != nil {
		return nil, fmt.Errorf("rollups %s: %w", series, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Rollup, error) {
		x := Rollup{Series: series}
		return x, r.Scan(&x.Start, &x.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("rollups %s: %w", series, err)
	}
	return out, nil
}

// ExpireRollups deletes every rollup with Start < before and says how many.
func (s *Postgres) ExpireRollups(ctx context.Context, before int64) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM metric_rollups WHERE start < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("expire rollups: %w", err)
	}
	return tag.RowsAffected(), nil
}
