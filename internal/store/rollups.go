package store

import (
	"context"
	"database/sql"
	"fmt"
)

// PutRollups inserts or replaces metrics rollups, in one transaction.
func (s *SQLite) PutRollups(ctx context.Context, rows []Rollup) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO metric_rollups(series, start, data) VALUES (?, ?, ?)
		ON CONFLICT(series, start) DO UPDATE SET data = excluded.data`)
	if err != nil {
		return fmt.Errorf("put rollups: %w", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.Series, r.Start, r.Data); err != nil {
			return fmt.Errorf("put rollup %s %d: %w", r.Series, r.Start, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Rollups returns series' rollups with from ≤ Start < to, by Start.
func (s *SQLite) Rollups(ctx context.Context, series string, from, to int64) ([]Rollup, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT start, data FROM metric_rollups WHERE series = ? AND start >= ? AND start < ? ORDER BY start`,
		series, from, to)
	if err != nil {
		return nil, fmt.Errorf("rollups %s: %w", series, err)
	}
	return scanAll(rows, func(r *sql.Rows) (Rollup, error) {
		x := Rollup{Series: series}
		return x, r.Scan(&x.Start, &x.Data)
	})
}

// ExpireRollups deletes every rollup with Start < before and says how many.
func (s *SQLite) ExpireRollups(ctx context.Context, before int64) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM metric_rollups WHERE start < ?`, before)
	if err != nil {
		return 0, fmt.Errorf("expire rollups: %w", err)
	}
	return res.RowsAffected()
}
