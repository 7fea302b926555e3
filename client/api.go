// Package client is augur's Go SDK: append records to a shared log, read
// them back by position, and subscribe to the totally ordered stream.
//
//	c, err := client.Dial(ctx, client.Config{ClusterID: "dev", Ordering: []string{"127.0.0.1:7101"}})
//	pos, err := c.Append(ctx, client.Record{Key: "k", Payload: []byte("hello")})
//	sub, err := c.Subscribe(ctx, 0, client.Filter{})
//	for { e, err := sub.Next(ctx); ... }
package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"
)

// Record is what an application appends.
type Record struct {
	Key     string
	Tags    []string
	Payload []byte
}

// Entry is a record at its global position.
type Entry struct {
	Position uint64
	Shard    uint32
	Record   Record
}

// Ack is the outcome of an append: the record's global position and the
// shard that stores it.
type Ack struct {
	Position uint64
	Shard    uint32
	// Unordered says the record is durable but not ordered yet (lazy
	// order): Position means nothing. AppendSync waits for the position.
	Unordered bool
}

// Filter selects records in a subscription; the zero Filter selects all. A
// record matches when its key is one of Keys (if any), it carries at least
// one of Tags (if any), and it is stored on Shard (if set).
type Filter struct {
	Keys []string
	Tags []string
	// Shard, when set, makes the subscription follow that shard alone, as
	// a per-shard downstream task does: its records come in position order
	// as soon as the shard has them (with SubscribeSpec's speculative
	// delivery: as soon as they are durable), without waiting for the
	// positions of other shards in between. When the shard is finalized,
	// Next returns ErrShardFinalized after its last record (and, with
	// SubscribeSpec, after the confirmation that covers it). A shard whose
	// every replica died says nothing more: the subscription goes quiet.
	Shard *uint32
}

// OnShard returns a Filter that keeps only the records of shard id.
func OnShard(id uint32) Filter { return Filter{Shard: &id} }

// Placement chooses the shard of an append that does not name one.
type Placement int

const (
	// RoundRobin spreads appends over the live shards in turn.
	RoundRobin Placement = iota
	// ByKey sends records with the same key to the same shard while the set
	// of live shards stays the same.
	ByKey
)

// Config configures a client.
type Config struct {
	ClusterID string
	// Ordering lists ordering replicas' addresses; any one that answers will do.
	Ordering  []string
	Placement Placement
	// InflightMax bounds the appends in flight at once (default 4096);
	// AppendAsync blocks when it is reached.
	InflightMax int
	// RecordBytesMax rejects larger payloads before sending (default 1 MiB;
	// the servers enforce their own limit too).
	RecordBytesMax int
	// ClientID identifies this client for idempotent retries; zero picks a
	// random one.
	ClientID uint64
	// RetryInterval paces reconnection attempts (default 50ms).
	RetryInterval time.Duration
	// TLS secures every connection (see LoadTLS); Insecure: true is the
	// only way to dial without it, for clusters run with insecure: true.
	TLS      *tls.Config
	Insecure bool
	// Token, if set, is sent as a bearer token with every call (only over
	// TLS); without it the client is known by its TLS certificate.
	Token string
}

// Errors a caller can test for with errors.Is.
var (
	ErrTrimmed       = errors.New("augur: position is trimmed")
	ErrInvalidRecord = errors.New("augur: invalid record")
	ErrUnknownShard  = errors.New("augur: unknown shard")
	ErrWrongCluster  = errors.New("augur: wrong cluster id")
	// ErrUnauthenticated: the cluster does not know who the client is (no
	// client certificate or bearer token, or an unknown token).
	ErrUnauthenticated = errors.New("augur: unauthenticated")
	// ErrPermissionDenied: the client lacks the permission the call needs.
	ErrPermissionDenied = errors.New("augur: permission denied")
	ErrNoLiveShard      = errors.New("augur: no live shard")
	ErrClosed           = errors.New("augur: client closed")
	// ErrShardFinalized fails an AppendToShard whose shard was finalized
	// before the record was ordered (Append moves such records instead).
	ErrShardFinalized = errors.New("augur: shard finalized")
	// ErrOutcomeUnknown fails an append whose shard failed whole before
	// acknowledging it: no copy is left to say whether it was stored.
	ErrOutcomeUnknown = errors.New("augur: append outcome unknown")
	// ErrNoop is Read's answer for a position that holds a no-op: in
	// speculative mode shards fill their quotas with no-ops, which take
	// positions but carry no record.
	ErrNoop = errors.New("augur: the position holds a no-op, not a record")
)

// ServerError carries a server's refusal.
type ServerError struct {
	Code    string
	Message string
}

func (e *ServerError) Error() string { return fmt.Sprintf("augur: %s: %s", e.Code, e.Message) }
