// Package kv is an embedded player target: a file-backed key-value store
// (bbolt) that applies each batch of entries, and the batch's last index, in
// one bbolt transaction. An entry sets its key to its payload; an entry with
// an empty payload deletes its key.
package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/augur-log/augur/target"
)

var (
	bucketData    = []byte("data")
	bucketMeta    = []byte("meta")
	bucketHistory = []byte("history")
	keyLast       = []byte("last")
)

// openLockTimeout bounds the wait for the file lock of a database another
// process holds open, so a second target on the same file fails instead of
// hanging.
const openLockTimeout = 5 * time.Second

// Options configure a Store.
type Options struct {
	// History keeps, beside the data, every applied entry's index and key
	// in apply order, so that a test or an operator can check that the
	// target got each of its entries exactly once. It grows without bound.
	History bool
}

// Store is a target.Store over one bbolt file.
type Store struct {
	db   *bolt.DB
	opts Options
}

var _ target.Store = (*Store)(nil)

// Open opens or creates the store at path.
func Open(path string, opts Options) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: openLockTimeout})
	if err != nil {
		return nil, fmt.Errorf("kv target: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketData, bucketMeta, bucketHistory} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("kv target: init %s: %w", path, err)
	}
	return &Store{db: db, opts: opts}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Apply applies b and records b.Last in one transaction, which bbolt makes
// durable before it returns.
func (s *Store) Apply(_ context.Context, b target.Batch) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		data, hist := tx.Bucket(bucketData), tx.Bucket(bucketHistory)
		for _, e := range b.Entries {
			var err error
			if len(e.Payload) == 0 {
				err = data.Delete([]byte(e.Key))
			} else {
				err = data.Put([]byte(e.Key), e.Payload)
			}
			if err != nil {
				return err
			}
			if s.opts.History {
				// Keyed by an apply counter, not by the index, so that an
				// entry applied twice would show twice.
				seq, err := hist.NextSequence()
				if err != nil {
					return err
				}
				if err := hist.Put(index(seq), append(index(e.Index), e.Key...)); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketMeta).Put(keyLast, index(b.Last))
	})
}

// LastApplied returns the index the last Apply recorded.
func (s *Store) LastApplied(context.Context) (uint64, error) {
	var last uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyLast)
		if v == nil {
			return nil
		}
		if len(v) != 8 {
			return errors.New("kv target: corrupt last applied index")
		}
		last = binary.BigEndian.Uint64(v)
		return nil
	})
	return last, err
}

// Get returns the value of key and whether it is set.
func (s *Store) Get(key string) ([]byte, bool, error) {
	var val []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketData).Get([]byte(key)); v != nil {
			val = append([]byte(nil), v...)
		}
		return nil
	})
	return val, val != nil, err
}

// Applied is one entry of the history.
type Applied struct {
	Index uint64
	Key   string
}

// History returns the applied entries in the order they were applied
// (Options.History must have been on), an entry applied twice twice.
func (s *Store) History() ([]Applied, error) {
	var out []Applied
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHistory).ForEach(func(_, v []byte) error {
			if len(v) < 8 {
				return errors.New("kv target: corrupt history")
			}
			out = append(out, Applied{Index: binary.BigEndian.Uint64(v), Key: string(v[8:])})
			return nil
		})
	})
	return out, err
}

// index encodes i so that bbolt's byte order is numeric order.
func index(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
