// Package config reads and checks the cluster file: one YAML document that
// names every ordering replica and storage server of a cluster and the knobs
// they share, and turns it into the configuration of any one of them.
//
//	cluster_id: local
//	ordering:
//	  - {id: o1, addr: 127.0.0.1:7101}
//	storage:
//	  - {id: a1, group: a, addr: 127.0.0.1:7201}
//
// A cluster in lazy mode also lists its sequencing replicas:
//
//	mode: lazy
//	sequencing:
//	  - {id: q1, addr: 127.0.0.1:7301}
//	  - {id: q2, addr: 127.0.0.1:7302}
//
// Decoding is strict: an unknown field is an error, and every duration is a
// Go duration string ("10ms"). Fields left out take the defaults of Default.
// Validate is the one place that checks every bound.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/ordering"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/sequencing"
	"github.com/augur-log/augur/internal/storage"
)

// Roles a server id can have.
const (
	RoleOrdering = "ordering"
	// Ordering modes.
	ModeEager = mode.EagerName
	ModeSpec  = mode.SpecName
	// windowCutsMax bounds the lease window.
	windowCutsMax = 1 << 20
	// reportDelayMax bounds injected report delays.
	reportDelayMax = time.Minute
	RoleStorage    = "storage"
	// RoleSequencing is a sequencing replica of a cluster in lazy mode.
	RoleSequencing = "sequencing"
	// ModeLazy is LazyLog's lazy order.
	ModeLazy = "lazy"
)

// Defaults of the fields a cluster file may leave out.
const (
	DefaultOrderingInterval = time.Millisecond
	DefaultWindowCuts       = 100
	DefaultFailureTimeout   = time.Second
	DefaultFsync            = "group"
	DefaultFsyncInterval    = 10 * time.Millisecond
	DefaultRaftFsync        = true
	DefaultRaftTick         = 20 * time.Millisecond
	DefaultRecordBytesMax   = 1 << 20
	DefaultSegmentBytes     = segment.DefaultSegmentBytes
	DefaultDataDir          = "./augur-data"
	// DefaultSequencingReplicas is f+1 for f = 1: how many sequencing
	// replicas a generated lazy cluster gets.
	DefaultSequencingReplicas = 2
	DefaultLazyBatchInterval  = 500 * time.Microsecond
	DefaultLazyRingEntries    = 1 << 16
)

// DefaultStaggerAbove is the default stagger_above: in speculative mode, the
// largest number of shards that share every cut of a lease window; more are
// split into groups of at most this many (staggered cuts).
const DefaultStaggerAbove = 6

// Bounds checked by Validate.
const (
	// recordBytesMaxLimit is the largest record_bytes_max accepted; the
	// segment store refuses larger record bodies.
	recordBytesMaxLimit = 64 << 20
	// segmentBytesMin and segmentBytesMaxLimit bound segment_bytes; the
	// segment store accepts at most 1 GiB.
	segmentBytesMin      = 4 << 10
	segmentBytesMaxLimit = 1 << 30
	// heartbeatsPerFailureTimeout is how many storage heartbeats fit in one
	// failure timeout: a server is declared failed only after missing them all.
	heartbeatsPerFailureTimeout = 5
	// failureTimeoutMin keeps the heartbeat interval at a millisecond or more.
	failureTimeoutMin = heartbeatsPerFailureTimeout * time.Millisecond
	// clusterIDBytesMax and idBytesMax bound names that travel in every
	// request or name a directory.
	clusterIDBytesMax = 128
	idBytesMax        = 64
	// sequencingReplicasMax bounds the sequencing layer: every lazy
	// append waits for each replica.
	sequencingReplicasMax = 7
	// lazyBatchIntervalMax bounds how long records may wait for order.
	lazyBatchIntervalMax = time.Second
	// lazyRingEntriesMin and lazyRingEntriesMax bound a sequencing ring.
	lazyRingEntriesMin = 64
	lazyRingEntriesMax = 1 << 24
)

// The replication factor: how many storage servers a group lists, each
// holding a copy of every shard of the group. A shard fails over inside
// itself while one copy survives, so fewer than two leave it no failover;
// more than three add a network copy and an fsync to every append for
// failures the other two already mask.
const (
	GroupServersMin = 2
	GroupServersMax = control.ReplicasMax
	// DefaultGroupServers is the replication factor of the clusters augur
	// generates (dev, demo, bench) and of examples/cluster.yaml: f = 1,
	// the least that survives a failure (see README, Fault budget).
	DefaultGroupServers = 2
)

// Cluster is the content of a cluster file.
type Cluster struct {
	ClusterID string `yaml:"cluster_id"`
	// Mode is "eager" (Scalog: cuts follow reports) or "spec" (SpecLog:
	// fix-ante ordering; subscribers may get records before their cut).
	Mode string `yaml:"mode"`
	// WindowCuts is the lease window of speculative mode, in cuts.
	WindowCuts uint64 `yaml:"window_cuts"`
	// NoLagFix and NoQuotaChange turn those speculative mechanisms off,
	// for experiments.
	NoLagFix      bool `yaml:"no_lag_fix,omitempty"`
	NoQuotaChange bool `yaml:"no_quota_change,omitempty"`
	// NoEagerFallback keeps speculative mode speculating where fills cost
	// more than speculation saves (spec.Config.EagerAbove 0).
	NoEagerFallback bool `yaml:"no_eager_fallback,omitempty"`
	// StaggerAbove is, in speculative mode, the largest number of shards
	// that share every cut; more are split into groups of at most this
	// many, and cut j waits only for group j mod groups (staggered cuts).
	// 0 turns staggering off: every shard is in every cut.
	StaggerAbove int `yaml:"stagger_above"`
	// OrderingInterval is, in eager order, how long the leader batches
	// reports while a cut awaits commit or while they fill a cut (a few
	// with none in flight are cut at once, at most once per three fifths
	// of the interval); in speculative order, the period quotas are sized
	// for.
	OrderingInterval Duration `yaml:"ordering_interval"`
	// FailureTimeout is how long a storage server may stay silent before it
	// is taken out of its shards' configurations (a shard left without
	// replicas is finalized); storage servers heartbeat five times per
	// timeout.
	FailureTimeout Duration `yaml:"failure_timeout"`
	// Fsync is the storage servers' sync policy: group (an append is
	// acknowledged only once every replica of its shard fsynced it; one
	// fsync covers every record that arrived meanwhile), or the opt-outs
	// interval and never (acknowledged once written: a power loss of every
	// replica can lose acknowledged appends), or always (an fsync per
	// write).
	Fsync string `yaml:"fsync"`
	// FsyncInterval is how often fsync interval syncs, and how often
	// fsync group syncs the positions files (which nothing waits for).
	FsyncInterval Duration `yaml:"fsync_interval"`
	// RaftFsync makes the ordering replicas fsync their Raft WAL before
	// acknowledging an entry, so a cut commits (and is applied) only once
	// a quorum fsynced it. false is the opt-out: a power loss of a quorum
	// can lose committed cuts, and with them positions already given out.
	RaftFsync      bool     `yaml:"raft_fsync"`
	RaftTick       Duration `yaml:"raft_tick"`
	RecordBytesMax int      `yaml:"record_bytes_max"`
	SegmentBytes   int64    `yaml:"segment_bytes"`
	// CatchUpBytesPerSecond paces a storage server's catch-up from
	// another replica (the repair of damaged records), so that it leaves
	// live traffic the source's disk and the network; 0 means the default.
	CatchUpBytesPerSecond int64 `yaml:"catchup_bytes_per_second,omitempty"`
	// DataDir holds one directory per server, named by its id. A relative
	// path is relative to the working directory of the server process.
	DataDir  string         `yaml:"data_dir"`
	Ordering []OrderingNode `yaml:"ordering"`
	// Storage lists the storage servers; servers with the same group form
	// one replica group, and the first of a group in this list is its
	// primary. A group lists GroupServersMin to GroupServersMax servers:
	// its size is the replication factor of its shards.
	Storage []StorageNode `yaml:"storage"`
	// Sequencing lists the sequencing replicas of a cluster in lazy mode
	// (f+1 of them tolerate f failures); the first leads the first view.
	// Other modes list none.
	Sequencing []SequencingNode `yaml:"sequencing,omitempty"`
	// LazyBatchInterval is the least time between the starts of two of
	// the sequencing leader's batches (lazy mode): a batch goes out as
	// soon as records wait and the batch before it is stable, but not
	// sooner.
	LazyBatchInterval Duration `yaml:"lazy_batch_interval,omitempty"`
	// LazyRingEntries bounds each sequencing replica's ring of unordered
	// record metadata (lazy mode); a full ring pushes back on appenders.
	LazyRingEntries int `yaml:"lazy_ring_entries,omitempty"`
	// MetricsAddr, when set, is where each process serves Prometheus
	// metrics; a node's own metrics_addr overrides it (needed when several
	// processes share a host).
	MetricsAddr string `yaml:"metrics_addr,omitempty"`
	// TLS secures every connection of the cluster; Insecure: true is the
	// only way to run without it.
	TLS      *TLS `yaml:"tls,omitempty"`
	Insecure bool `yaml:"insecure,omitempty"`
}

// OrderingNode is one ordering replica.
type OrderingNode struct {
	ID          string `yaml:"id"`
	Addr        string `yaml:"addr"`
	MetricsAddr string `yaml:"metrics_addr,omitempty"`
}

// StorageNode is one storage server.
type StorageNode struct {
	ID          string `yaml:"id"`
	Group       string `yaml:"group"`
	Addr        string `yaml:"addr"`
	MetricsAddr string `yaml:"metrics_addr,omitempty"`
	// ReportDelay makes the server a straggler: every report to the
	// ordering layer is held back this long. Fault injection for tests.
	ReportDelay Duration `yaml:"report_delay,omitempty"`
}

// SequencingNode is one sequencing replica (lazy mode).
type SequencingNode struct {
	ID          string `yaml:"id"`
	Addr        string `yaml:"addr"`
	MetricsAddr string `yaml:"metrics_addr,omitempty"`
}

// Duration is a time.Duration written as a Go duration string.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalYAML reads a duration string such as "10ms".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	// A *yaml.TypeError lets the decoder go on to the other fields, so a
	// bad duration does not hide the file's other problems.
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as \"10ms\"", n.Line)}}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration such as \"10ms\" (%v)", n.Line, n.Value, err)}}
	}
	*d = Duration(v)
	return nil
}

// Default returns a cluster with every default set and no servers.
func Default() *Cluster {
	return &Cluster{
		Mode:             ModeEager,
		WindowCuts:       DefaultWindowCuts,
		StaggerAbove:     DefaultStaggerAbove,
		OrderingInterval: Duration(DefaultOrderingInterval),
		FailureTimeout:   Duration(DefaultFailureTimeout),
		Fsync:            DefaultFsync,
		FsyncInterval:    Duration(DefaultFsyncInterval),
		RaftFsync:        DefaultRaftFsync,
		RaftTick:         Duration(DefaultRaftTick),
		RecordBytesMax:   DefaultRecordBytesMax,
		SegmentBytes:     DefaultSegmentBytes,
		DataDir:          DefaultDataDir,
	}
}

// SetLazyDefaults fills the lazy-mode knobs a lazy cluster file left out.
func (c *Cluster) SetLazyDefaults() {
	if c.Mode != ModeLazy {
		return
	}
	if c.LazyBatchInterval == 0 {
		c.LazyBatchInterval = Duration(DefaultLazyBatchInterval)
	}
	if c.LazyRingEntries == 0 {
		c.LazyRingEntries = DefaultLazyRingEntries
	}
}

// Load reads, decodes and validates the cluster file at path.
func Load(path string) (*Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster file: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", path, err)
	}
	c.TLS.resolve(dir)
	return c, nil
}

// Parse decodes and validates a cluster file's content.
func Parse(data []byte) (*Cluster, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var problems []error
	if err := dec.Decode(c); err != nil {
		var fields *yaml.TypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("empty cluster file")
		case errors.As(err, &fields):
			// The decoder went on past the fields it could not take
			// (unknown names, values of the wrong type), which keep their
			// defaults: report them with whatever Validate finds in the
			// rest, so one run shows every problem.
			for _, msg := range fields.Errors {
				problems = append(problems, errors.New(msg))
			}
		default:
			// Not YAML (a syntax error): nothing else can be checked.
			return nil, err
		}
	}
	c.SetLazyDefaults()
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		problems = append(problems, errors.New("more than one YAML document; a cluster file holds exactly one"))
	}
	if err := c.Validate(); err != nil {
		problems = append(problems, err)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return c, nil
}

// Marshal encodes c as a cluster file.
func (c *Cluster) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encode cluster file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode cluster file: %w", err)
	}
	return buf.Bytes(), nil
}

// Save writes c to path as a cluster file.
func (c *Cluster) Save(path string) error {
	data, err := c.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write cluster file: %w", err)
	}
	return nil
}

// Role says whether id is an ordering replica or a storage server.
func (c *Cluster) Role(id string) (string, error) {
	if c.orderingIndex(id) >= 0 {
		return RoleOrdering, nil
	}
	if c.storageIndex(id) >= 0 {
		return RoleStorage, nil
	}
	if c.sequencingIndex(id) >= 0 {
		return RoleSequencing, nil
	}
	return "", fmt.Errorf("no server %q in the cluster file (known: %v)", id, c.ids())
}

// OrderingAddrs lists the ordering replicas' addresses in file order.
func (c *Cluster) OrderingAddrs() []string {
	addrs := make([]string, len(c.Ordering))
	for i, o := range c.Ordering {
		addrs[i] = o.Addr
	}
	return addrs
}

// Groups lists the storage groups in order of first appearance.
func (c *Cluster) Groups() []string {
	var groups []string
	seen := map[string]bool{}
	for _, s := range c.Storage {
		if !seen[s.Group] {
			seen[s.Group] = true
			groups = append(groups, s.Group)
		}
	}
	return groups
}

// Group lists the servers of group in file order; the first is its primary.
func (c *Cluster) Group(group string) []StorageNode {
	var nodes []StorageNode
	for _, s := range c.Storage {
		if s.Group == group {
			nodes = append(nodes, s)
		}
	}
	return nodes
}

// groupIDs lists the ids of group's servers in file order.
func (c *Cluster) groupIDs(group string) []string {
	var ids []string
	for _, s := range c.Group(group) {
		ids = append(ids, s.ID)
	}
	return ids
}

// Addr returns the listen address of server id.
func (c *Cluster) Addr(id string) (string, error) {
	if i := c.orderingIndex(id); i >= 0 {
		return c.Ordering[i].Addr, nil
	}
	if i := c.storageIndex(id); i >= 0 {
		return c.Storage[i].Addr, nil
	}
	if i := c.sequencingIndex(id); i >= 0 {
		return c.Sequencing[i].Addr, nil
	}
	return "", fmt.Errorf("no server %q in the cluster file (known: %v)", id, c.ids())
}

// MetricsAddrOf returns where server id serves metrics, or "" for nowhere.
func (c *Cluster) MetricsAddrOf(id string) string {
	if i := c.orderingIndex(id); i >= 0 && c.Ordering[i].MetricsAddr != "" {
		return c.Ordering[i].MetricsAddr
	}
	if i := c.storageIndex(id); i >= 0 && c.Storage[i].MetricsAddr != "" {
		return c.Storage[i].MetricsAddr
	}
	if i := c.sequencingIndex(id); i >= 0 && c.Sequencing[i].MetricsAddr != "" {
		return c.Sequencing[i].MetricsAddr
	}
	return c.MetricsAddr
}

// ServerDir is the data directory of server id.
func (c *Cluster) ServerDir(id string) string { return filepath.Join(c.DataDir, id) }

// HeartbeatInterval is how often storage servers heartbeat: a fifth of the
// failure timeout.
func (c *Cluster) HeartbeatInterval() time.Duration {
	return c.FailureTimeout.D() / heartbeatsPerFailureTimeout
}

// OrderingMode returns the cluster's ordering mode with the file's
// parameters.
func (c *Cluster) OrderingMode() (mode.Mode, error) {
	return mode.Parse(c.Mode, mode.Params{
		OrderingInterval: c.OrderingInterval.D(),
		FailureTimeout:   c.FailureTimeout.D(),
		WindowCuts:       c.WindowCuts,
		StaggerAbove:     c.StaggerAbove,
		NoLagFix:         c.NoLagFix,
		NoQuotaChange:    c.NoQuotaChange,
		NoEagerFallback:  c.NoEagerFallback,
	})
}

// OrderingConfig returns the configuration of ordering replica id.
func (c *Cluster) OrderingConfig(id string, logger *slog.Logger) (ordering.Config, error) {
	if c.orderingIndex(id) < 0 {
		return ordering.Config{}, fmt.Errorf("%q is not an ordering replica of the cluster file (ordering: %v)", id, c.orderingIDs())
	}
	members := make([]ordering.Member, len(c.Ordering))
	for i, o := range c.Ordering {
		members[i] = ordering.Member{ID: o.ID, Addr: o.Addr}
	}
	md, err := c.OrderingMode()
	if err != nil {
		return ordering.Config{}, err
	}
	var seqMembers []ordering.Member
	for _, q := range c.Sequencing {
		seqMembers = append(seqMembers, ordering.Member{ID: q.ID, Addr: q.Addr})
	}
	return ordering.Config{
		Mode:             md,
		Sequencing:       seqMembers,
		ClusterID:        c.ClusterID,
		ID:               id,
		Members:          members,
		Dir:              c.ServerDir(id),
		RaftFsync:        c.RaftFsync,
		RaftTick:         c.RaftTick.D(),
		OrderingInterval: c.OrderingInterval.D(),
		FailureTimeout:   c.FailureTimeout.D(),
		// The leader speaks on each storage server's streams as often as
		// the server heartbeats.
		KeepaliveInterval: c.HeartbeatInterval(),
		Logger:            logger,
	}, nil
}

// StorageConfig returns the configuration of storage server id.
func (c *Cluster) StorageConfig(id string, logger *slog.Logger) (storage.Config, error) {
	i := c.storageIndex(id)
	if i < 0 {
		return storage.Config{}, fmt.Errorf("%q is not a storage server of the cluster file (storage: %v)", id, c.storageIDs())
	}
	sync, err := segment.ParseSyncPolicy(c.Fsync)
	if err != nil {
		return storage.Config{}, fmt.Errorf("fsync: %w", err)
	}
	md, err := c.OrderingMode()
	if err != nil {
		return storage.Config{}, err
	}
	self := c.Storage[i]
	var group []storage.Peer
	for _, s := range c.Group(self.Group) {
		group = append(group, storage.Peer{ID: s.ID, Addr: s.Addr})
	}
	return storage.Config{
		ClusterID:             c.ClusterID,
		ID:                    id,
		Group:                 group,
		GroupName:             self.Group,
		Ordering:              c.OrderingAddrs(),
		Dir:                   c.ServerDir(id),
		Sync:                  sync,
		SyncInterval:          c.FsyncInterval.D(),
		SegmentBytes:          c.SegmentBytes,
		RecordBytesMax:        c.RecordBytesMax,
		HeartbeatInterval:     c.HeartbeatInterval(),
		Mode:                  md,
		ReportDelay:           self.ReportDelay.D(),
		CatchUpBytesPerSecond: c.CatchUpBytesPerSecond,
		Logger:                logger,
	}, nil
}

// SequencingConfig returns the configuration of sequencing replica id.
func (c *Cluster) SequencingConfig(id string, logger *slog.Logger) (sequencing.Config, error) {
	if c.sequencingIndex(id) < 0 {
		return sequencing.Config{}, fmt.Errorf("%q is not a sequencing replica of the cluster file (sequencing: %v)", id, c.sequencingIDs())
	}
	var peers []sequencing.Peer
	for _, q := range c.Sequencing {
		peers = append(peers, sequencing.Peer{ID: q.ID, Addr: q.Addr})
	}
	return sequencing.Config{
		ClusterID:     c.ClusterID,
		ID:            id,
		Replicas:      peers,
		Ordering:      c.OrderingAddrs(),
		BatchInterval: c.LazyBatchInterval.D(),
		RingMax:       c.LazyRingEntries,
		Logger:        logger,
	}, nil
}

func (c *Cluster) orderingIndex(id string) int {
	for i, o := range c.Ordering {
		if o.ID == id {
			return i
		}
	}
	return -1
}

func (c *Cluster) storageIndex(id string) int {
	for i, s := range c.Storage {
		if s.ID == id {
			return i
		}
	}
	return -1
}

func (c *Cluster) orderingIDs() []string {
	ids := make([]string, len(c.Ordering))
	for i, o := range c.Ordering {
		ids[i] = o.ID
	}
	return ids
}

func (c *Cluster) storageIDs() []string {
	ids := make([]string, len(c.Storage))
	for i, s := range c.Storage {
		ids[i] = s.ID
	}
	return ids
}

func (c *Cluster) sequencingIndex(id string) int {
	for i, q := range c.Sequencing {
		if q.ID == id {
			return i
		}
	}
	return -1
}

func (c *Cluster) sequencingIDs() []string {
	ids := make([]string, len(c.Sequencing))
	for i, q := range c.Sequencing {
		ids[i] = q.ID
	}
	return ids
}

// SequencingAddrs lists the sequencing replicas' addresses in file order.
func (c *Cluster) SequencingAddrs() []string {
	addrs := make([]string, len(c.Sequencing))
	for i, q := range c.Sequencing {
		addrs[i] = q.Addr
	}
	return addrs
}

func (c *Cluster) ids() []string {
	return append(append(c.orderingIDs(), c.storageIDs()...), c.sequencingIDs()...)
}
