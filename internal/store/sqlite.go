package store

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/basin-nas/basin/internal/model"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrations embed.FS

// SQLite is the embedded Store: one database file in WAL mode.
type SQLite struct {
	db *sql.DB
}

var _ Backend = (*SQLite)(nil)

// OpenSQLite opens (creating if needed) the database at path and runs migrations.
// The database and its -wal and -shm files are made mode 0600 (see privateFiles).
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	if err := privateFiles(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "synchronous(NORMAL)", "foreign_keys(1)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection: SQLite serialises writers anyway, and this makes every Update
	// a critical section without SQLITE_BUSY retries.
	db.SetMaxOpenConns(1)
	s := &SQLite{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// privateFiles makes the database file at path mode 0600, creating it if needed,
// and corrects the mode of the -wal, -shm and -journal files an earlier run left.
// SQLite creates those with the database file's mode, so they are 0600 too, without
// touching the process umask (which the daemons Basin starts inherit).
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if err := os.Chmod(path+suffix, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("chmod %s: %w", path+suffix, err)
		}
	}
	return nil
}

// migrationHooks run after the SQL of a migration, in its transaction: what SQL
// alone cannot do (indexing stored documents with the Go extractors).
var migrationHooks = map[int]func(context.Context, *sql.Tx) error{
	2: reindex,
	4: reindex,
	5: reindex,
}

func (s *SQLite) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if err != nil {
			return fmt.Errorf("migration %s: bad name", f)
		}
		body, err := migrations.ReadFile(f)
		if err != nil {
			return err
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
			tx.Rollback()
			return err
		}
		if n == 0 {
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				tx.Rollback()
				return fmt.Errorf("migration %s: %w", f, err)
			}
			if hook := migrationHooks[version]; hook != nil {
				if err := hook(ctx, tx); err != nil {
					tx.Rollback()
					return fmt.Errorf("migration %s: %w", f, err)
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version) VALUES (?)`, version); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// Compact rewrites the database without its free pages and empties the WAL, so
// that nothing deleted or overwritten lingers in the files (used after clear-text
// secrets were sealed in place).
func (s *SQLite) Compact(ctx context.Context) error {
	for _, q := range []string{`VACUUM`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("compact: %s: %w", q, err)
		}
	}
	return nil
}

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

// Update runs fn in a write transaction, committing if it returns nil.
func (s *SQLite) Update(ctx context.Context, fn func(Tx) error) error {
	return s.run(ctx, fn)
}

// View runs fn in a transaction that is always rolled back.
func (s *SQLite) View(ctx context.Context, fn func(Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	return fn(&sqliteTx{ctx: ctx, tx: tx})
}

func (s *SQLite) run(ctx context.Context, fn func(Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(&sqliteTx{ctx: ctx, tx: tx}); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

type sqliteTx struct {
	ctx context.Context
	tx  *sql.Tx
}

func (t *sqliteTx) Get(kind, name string, out any) error {
	var data []byte
	err := t.tx.QueryRowContext(t.ctx, `SELECT data FROM resources WHERE kind = ? AND name = ?`, kind, name).Scan(&data)
	return decodeDoc(kind, name, data, errors.Is(err, sql.ErrNoRows), err, out)
}

// decodeDoc finishes a Get: model.ErrNotFound if the document is missing, the
// read's error, or the document decoded into out.
func decodeDoc(kind, name string, data []byte, missing bool, err error, out any) error {
	if missing {
		return model.Errorf(model.ErrNotFound, "Resource '%s' was not found", name)
	}
	if err != nil {
		return fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", kind, name, err)
	}
	return nil
}

func (t *sqliteTx) List(kind, parent string) ([][]byte, error) {
	var rows *sql.Rows
	var err error
	if parent == "" {
		rows, err = t.tx.QueryContext(t.ctx, `SELECT data FROM resources WHERE kind = ? ORDER BY name`, kind)
	} else {
		rows, err = t.tx.QueryContext(t.ctx, `SELECT data FROM resources WHERE kind = ? AND parent = ? ORDER BY name`, kind, parent)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	return scanAll(rows, func(r *sql.Rows) ([]byte, error) {
		var data []byte
		return data, r.Scan(&data)
	})
}

func (t *sqliteTx) Put(kind, name, parent string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", kind, err)
	}
	_, err = t.tx.ExecContext(t.ctx, `INSERT INTO resources(kind, name, parent, data) VALUES (?, ?, ?, ?)
		ON CONFLICT(kind, name) DO UPDATE SET parent = excluded.parent, data = excluded.data`, kind, name, parent, data)
	if err != nil {
		return fmt.Errorf("put %s %s: %w", kind, name, err)
	}
	return putIndex(t.ctx, t.tx, kind, name, data)
}

// putIndex replaces the index entries of a document.
func putIndex(ctx context.Context, tx *sql.Tx, kind, name string, data []byte) error {
	if !indexedKinds[kind] {
		return nil
	}
	rows, err := extract(kind, data)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM index_entries WHERE kind = ? AND name = ?`, kind, name); err != nil {
		return fmt.Errorf("index %s %s: %w", kind, name, err)
	}
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO index_entries(kind, name, idx, key, value, num) VALUES (?, ?, ?, ?, ?, ?)`,
			kind, name, r.idx, r.key, r.value, r.num); err != nil {
			return fmt.Errorf("index %s %s: %w", kind, name, err)
		}
	}
	return nil
}

// reindex rebuilds every index entry from the stored documents (run by the
// migration that adds or changes an index).
func reindex(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM index_entries`); err != nil {
		return fmt.Errorf("reindex: %w", err)
	}
	for kind := range indexedKinds {
		rows, err := tx.QueryContext(ctx, `SELECT name, data FROM resources WHERE kind = ?`, kind)
		if err != nil {
			return fmt.Errorf("reindex %s: %w", kind, err)
		}
		type doc struct {
			name string
			data []byte
		}
		var docs []doc
		for rows.Next() {
			var d doc
			if err := rows.Scan(&d.name, &d.data); err != nil {
				rows.Close()
				return err
			}
			docs = append(docs, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, d := range docs {
			if err := putIndex(ctx, tx, kind, d.name, d.data); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *sqliteTx) Names(kind, parent string) ([]string, error) {
	var rows *sql.Rows
	var err error
	if parent == "" {
		rows, err = t.tx.QueryContext(t.ctx, `SELECT name FROM resources WHERE kind = ? ORDER BY name`, kind)
	} else {
		rows, err = t.tx.QueryContext(t.ctx, `SELECT name FROM resources WHERE kind = ? AND parent = ? ORDER BY name`, kind, parent)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kind, err)
	}
	return scanAll(rows, func(r *sql.Rows) (string, error) {
		var n string
		return n, r.Scan(&n)
	})
}

func (t *sqliteTx) Index(idx, key string) ([]IndexEntry, error) {
	return t.entries(idx, `SELECT name, value, num FROM index_entries WHERE idx = ? AND key = ? ORDER BY num, name`, idx, key)
}

func (t *sqliteTx) IndexBelow(idx, key string, num float64, limit int) ([]IndexEntry, error) {
	return t.entries(idx, `SELECT name, value, num FROM index_entries WHERE idx = ? AND key = ? AND num < ? ORDER BY num, name LIMIT ?`,
		idx, key, num, limit)
}

// entries runs a query of index idx's entries (name, value, num).
func (t *sqliteTx) entries(idx, query string, args ...any) ([]IndexEntry, error) {
	rows, err := t.tx.QueryContext(t.ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", idx, err)
	}
	return scanAll(rows, func(r *sql.Rows) (IndexEntry, error) {
		var e IndexEntry
		return e, r.Scan(&e.Name, &e.Value, &e.Num)
	})
}

func (t *sqliteTx) IndexSum(idx, key string) (float64, int, error) {
	var sum float64
	var n int
	err := t.tx.QueryRowContext(t.ctx, `SELECT coalesce(total(num), 0), count(*) FROM index_entries WHERE idx = ? AND key = ?`, idx, key).Scan(&sum, &n)
	if err != nil {
		return 0, 0, fmt.Errorf("index %s: %w", idx, err)
	}
	return sum, n, nil
}

func (t *sqliteTx) IndexDocs(idx, key string) ([][]byte, error) {
	rows, err := t.tx.QueryContext(t.ctx, `SELECT r.data FROM index_entries i JOIN resources r ON r.kind = i.kind AND r.name = i.name
		WHERE i.idx = ? AND i.key = ? ORDER BY i.num, i.name`, idx, key)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", idx, err)
	}
	return scanAll(rows, func(r *sql.Rows) ([]byte, error) {
		var data []byte
		return data, r.Scan(&data)
	})
}

func (t *sqliteTx) Insert(kind, name, parent string, v any) error {
	var n int
	if err := t.tx.QueryRowContext(t.ctx, `SELECT count(*) FROM resources WHERE kind = ? AND name = ?`, kind, name).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return model.Errorf(model.ErrAlreadyExists, "Resource '%s' already exists", name)
	}
	return t.Put(kind, name, parent, v)
}

func (t *sqliteTx) Delete(kind, name string) error {
	if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM resources WHERE kind = ? AND name = ?`, kind, name); err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	if indexedKinds[kind] {
		if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM index_entries WHERE kind = ? AND name = ?`, kind, name); err != nil {
			return fmt.Errorf("delete %s %s: %w", kind, name, err)
		}
	}
	return nil
}

func (t *sqliteTx) NextSeq(key string) (int64, error) {
	var v int64
	err := t.tx.QueryRowContext(t.ctx, `INSERT INTO sequences(key, value) VALUES (?, 1)
		ON CONFLICT(key) DO UPDATE SET value = value + 1 RETURNING value`, key).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("sequence %s: %w", key, err)
	}
	return v, nil
}

func (t *sqliteTx) Seq(key string) (int64, error) {
	var v int64
	err := t.tx.QueryRowContext(t.ctx, `SELECT value FROM sequences WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sequence %s: %w", key, err)
	}
	return v, nil
}

// scanAll reads every row with scan and closes rows.
func scanAll[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
