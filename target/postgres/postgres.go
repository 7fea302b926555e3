// Package postgres is a player target on PostgreSQL: it applies each batch
// of entries as key-value mutations of one table, and the batch's last
// index, in one transaction. An entry sets its key to its payload; an entry
// with an empty payload deletes its key.
package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/augur-log/augur/target"
)

// DefaultTable names the key-value table when Options.Table is empty.
const DefaultTable = "augur_kv"

// Options configure a Store.
type Options struct {
	// Table is the key-value table; the last applied index lives in
	// Table_applied and, with History, the apply history in Table_history.
	// Several targets may share a database under different tables.
	Table string
	// History keeps every applied entry's index and key in apply order, so
	// that a test or an operator can check that the target got each of its
	// entries exactly once. It grows without bound.
	History bool
}

// Store is a target.Store on a PostgreSQL database.
type Store struct {
	pool                  *pgxpool.Pool
	opts                  Options
	kv, applied, history  string
	upsert, del, hist, ix string
}

var _ target.Store = (*Store)(nil)

// Open connects to the database named by dsn and creates the tables if
// they do not exist.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres target: %w", err)
	}
	s := &Store{
		pool: pool, opts: opts,
		kv:      pgx.Identifier{opts.Table}.Sanitize(),
		applied: pgx.Identifier{opts.Table + "_applied"}.Sanitize(),
		history: pgx.Identifier{opts.Table + "_history"}.Sanitize(),
	}
	s.upsert = "INSERT INTO " + s.kv + " (key, value, idx) VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, idx = EXCLUDED.idx"
	s.del = "DELETE FROM " + s.kv + " WHERE key = $1"
	s.hist = "INSERT INTO " + s.history + " (idx, key) VALUES ($1, $2)"
	s.ix = "UPDATE " + s.applied + " SET last_index = $1"
	schema := []string{
		"CREATE TABLE IF NOT EXISTS " + s.kv + " (key text PRIMARY KEY, value bytea NOT NULL, idx bigint NOT NULL)",
		// One row: the last applied index.
		"CREATE TABLE IF NOT EXISTS " + s.applied + " (one boolean PRIMARY KEY DEFAULT true CHECK (one), last_index bigint NOT NULL)",
		"INSERT INTO " + s.applied + " (last_index) VALUES (0) ON CONFLICT DO NOTHING",
		"CREATE TABLE IF NOT EXISTS " + s.history + " (seq bigserial PRIMARY KEY, idx bigint NOT NULL, key text NOT NULL)",
	}
	for _, q := range schema {
		if _, err := pool.Exec(ctx, q); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres target: create tables: %w", err)
		}
	}
	return s, nil
}

// Close closes the connections.
func (s *Store) Close() { s.pool.Close() }

// Apply applies b and records b.Last in one transaction, sent as one
// round trip of queued statements.
func (s *Store) Apply(ctx context.Context, b target.Batch) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var q pgx.Batch
		for _, e := range b.Entries {
			if len(e.Payload) == 0 {
				q.Queue(s.del, e.Key)
			} else {
				q.Queue(s.upsert, e.Key, e.Payload, int64(e.Index))
			}
			if s.opts.History {
				q.Queue(s.hist, int64(e.Index), e.Key)
			}
		}
		q.Queue(s.ix, int64(b.Last))
		return tx.SendBatch(ctx, &q).Close()
	})
}

// LastApplied returns the index the last Apply recorded.
func (s *Store) LastApplied(ctx context.Context) (uint64, error) {
	var last int64
	if err := s.pool.QueryRow(ctx, "SELECT last_index FROM "+s.applied).Scan(&last); err != nil {
		return 0, err
	}
	if last < 0 {
		return 0, errors.New("postgres target: negative last applied index")
	}
	return uint64(last), nil
}

// Get returns the value of key and whether it is set.
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	var v []byte
	err := s.pool.QueryRow(ctx, "SELECT value FROM "+s.kv+" WHERE key = $1", key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// Applied is one entry of the history.
type Applied struct {
	Index uint64
	Key   string
}

// History returns the applied entries in the order they were applied
// (Options.History must have been on), an entry applied twice twice.
func (s *Store) History(ctx context.Context) ([]Applied, error) {
	rows, err := s.pool.Query(ctx, "SELECT idx, key FROM "+s.history+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Applied, error) {
		var a Applied
		var ix int64
		err := r.Scan(&ix, &a.Key)
		a.Index = uint64(ix)
		return a, err
	})
}
