package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
)

// Validate checks every field and bound of the cluster file and reports all
// problems at once, one per line.
func (c *Cluster) Validate() error { return c.validate(true) }

// ValidateWithoutStorage is Validate for an ordering layer run on its own,
// whose shards are registered by something other than the storage servers
// of the file (the emulated shards of a benchmark): an empty storage list is
// allowed. Such a cluster is not a valid cluster file.
func (c *Cluster) ValidateWithoutStorage() error { return c.validate(false) }

func (c *Cluster) validate(needStorage bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case c.ClusterID == "":
		bad("cluster_id is empty")
	case len(c.ClusterID) > clusterIDBytesMax:
		bad("cluster_id is %d bytes long, at most %d allowed", len(c.ClusterID), clusterIDBytesMax)
	}
	if _, err := mode.Lookup(c.Mode); err != nil {
		bad("mode: %v", err)
	}
	if c.Mode == ModeSpec && (c.WindowCuts == 0 || c.WindowCuts > windowCutsMax) {
		bad("window_cuts must be between 1 and %d, got %d", windowCutsMax, c.WindowCuts)
	}
	if c.StaggerAbove < 0 {
		bad("stagger_above must not be negative (0 turns staggered cuts off), got %d", c.StaggerAbove)
	}
	if c.OrderingInterval <= 0 {
		bad("ordering_interval must be positive, got %v", c.OrderingInterval)
	}
	if c.FailureTimeout.D() < failureTimeoutMin {
		bad("failure_timeout must be at least %v (storage servers heartbeat %d times per timeout), got %v",
			failureTimeoutMin, heartbeatsPerFailureTimeout, c.FailureTimeout)
	} else if c.OrderingInterval > 0 && c.FailureTimeout <= c.OrderingInterval {
		bad("failure_timeout (%v) must be longer than ordering_interval (%v)", c.FailureTimeout, c.OrderingInterval)
	}
	if _, err := segment.ParseSyncPolicy(c.Fsync); err != nil {
		bad("fsync must be group, interval, never or always, got %q", c.Fsync)
	}
	if c.FsyncInterval <= 0 {
		bad("fsync_interval must be positive, got %v", c.FsyncInterval)
	}
	if c.RaftTick <= 0 {
		bad("raft_tick must be positive, got %v", c.RaftTick)
	}
	if c.RecordBytesMax <= 0 || c.RecordBytesMax > recordBytesMaxLimit {
		bad("record_bytes_max must be in (0, %d], got %d", recordBytesMaxLimit, c.RecordBytesMax)
	}
	if c.SegmentBytes < segmentBytesMin || c.SegmentBytes > segmentBytesMaxLimit {
		bad("segment_bytes must be in [%d, %d], got %d", segmentBytesMin, segmentBytesMaxLimit, c.SegmentBytes)
	}
	if c.CatchUpBytesPerSecond < 0 {
		bad("catchup_bytes_per_second must not be negative, got %d", c.CatchUpBytesPerSecond)
	}
	if strings.TrimSpace(c.DataDir) == "" {
		bad("data_dir is empty")
	}
	if c.MetricsAddr != "" {
		if err := checkAddr(c.MetricsAddr, true); err != nil {
			bad("metrics_addr: %v", err)
		}
	}

	if err := c.validateTLS(); err != nil {
		errs = append(errs, err)
	}
	if len(c.Ordering) == 0 {
		bad("ordering lists no replicas; at least one is required (three tolerate one failure)")
	}
	if needStorage && len(c.Storage) == 0 {
		bad("storage lists no servers; at least one is required")
	}
	ids := map[string]string{}   // id -> where it was first seen
	addrs := map[string]string{} // listen addr -> id
	metrics := map[string]string{}
	checkNode := func(kind string, i int, id, addr, metricsAddr string) {
		where := fmt.Sprintf("%s[%d]", kind, i)
		switch {
		case id == "":
			bad("%s: id is empty", where)
		case len(id) > idBytesMax:
			bad("%s: id %q is longer than %d bytes", where, id, idBytesMax)
		case !validName(id):
			bad("%s: id %q may hold only letters, digits, '-', '_' and '.', and must not start with '.' (it names a data directory)", where, id)
		default:
			if prev, dup := ids[id]; dup {
				bad("%s: id %q is already used by %s", where, id, prev)
			} else {
				ids[id] = where
			}
		}
		if err := checkAddr(addr, false); err != nil {
			bad("%s (%s): addr: %v", where, id, err)
		} else if prev, dup := addrs[addr]; dup {
			bad("%s (%s): addr %s is already used by %s", where, id, addr, prev)
		} else {
			addrs[addr] = id
		}
		if metricsAddr != "" {
			if err := checkAddr(metricsAddr, true); err != nil {
				bad("%s (%s): metrics_addr: %v", where, id, err)
			} else if prev, dup := metrics[metricsAddr]; dup {
				bad("%s (%s): metrics_addr %s is already used by %s", where, id, metricsAddr, prev)
			} else {
				metrics[metricsAddr] = id
			}
		}
	}
	for i, o := range c.Ordering {
		checkNode("ordering", i, o.ID, o.Addr, o.MetricsAddr)
	}
	switch {
	case c.Mode == ModeLazy && len(c.Sequencing) == 0:
		bad("sequencing lists no replicas; lazy mode needs at least one (%d tolerate one failure)", DefaultSequencingReplicas)
	case c.Mode != ModeLazy && len(c.Sequencing) > 0:
		bad("sequencing lists %d replicas, but only mode lazy has sequencing replicas (mode is %q)", len(c.Sequencing), c.Mode)
	}
	if len(c.Sequencing) > sequencingReplicasMax {
		bad("sequencing lists %d replicas, at most %d allowed (every append waits for all of them)", len(c.Sequencing), sequencingReplicasMax)
	}
	if c.Mode == ModeLazy {
		if c.LazyBatchInterval <= 0 || c.LazyBatchInterval.D() > lazyBatchIntervalMax {
			bad("lazy_batch_interval must be in (0, %v], got %v", lazyBatchIntervalMax, c.LazyBatchInterval)
		}
		if c.LazyRingEntries < lazyRingEntriesMin || c.LazyRingEntries > lazyRingEntriesMax {
			bad("lazy_ring_entries must be in [%d, %d], got %d", lazyRingEntriesMin, lazyRingEntriesMax, c.LazyRingEntries)
		}
	} else if c.LazyBatchInterval != 0 || c.LazyRingEntries != 0 {
		bad("lazy_batch_interval and lazy_ring_entries apply only to mode lazy (mode is %q)", c.Mode)
	}
	for i, q := range c.Sequencing {
		checkNode("sequencing", i, q.ID, q.Addr, q.MetricsAddr)
	}
	for i, s := range c.Storage {
		checkNode("storage", i, s.ID, s.Addr, s.MetricsAddr)
		if s.ReportDelay < 0 || s.ReportDelay.D() > reportDelayMax {
			bad("storage[%d] (%s): report_delay must be in [0, %v], got %v", i, s.ID, reportDelayMax, s.ReportDelay)
		}
		if s.Group == "" {
			bad("storage[%d] (%s): group is empty", i, s.ID)
		} else if !validName(s.Group) || len(s.Group) > idBytesMax {
			bad("storage[%d] (%s): group %q may hold only letters, digits, '-', '_' and '.' (at most %d bytes)", i, s.ID, s.Group, idBytesMax)
		}
	}
	// A group exists only through its servers, so every group named above
	// has at least one; the storage list as a whole must not be empty.
	for _, g := range c.Groups() {
		if g == "" {
			continue // reported above, per server
		}
		if n := len(c.Group(g)); n < GroupServersMin || n > GroupServersMax {
			bad("storage group %q lists %d server%s (%s); a group needs %d or %d, its replication factor (%d survive one failure, %d stay replicated through one)",
				g, n, plural(n), strings.Join(c.groupIDs(g), ", "), GroupServersMin, GroupServersMax, GroupServersMin, GroupServersMax)
		}
	}
	if id, clash := addrs[c.MetricsAddr]; c.MetricsAddr != "" && clash {
		bad("metrics_addr %s is also the listen addr of %s", c.MetricsAddr, id)
	}
	for _, a := range slices.Sorted(maps.Keys(metrics)) {
		id := metrics[a]
		if other, clash := addrs[a]; clash {
			bad("metrics_addr %s of %s is also the listen addr of %s", a, id, other)
		}
	}
	return errors.Join(errs...)
}

// checkAddr checks a host:port listen address; port 0 is allowed only where
// nobody needs to find the address (metrics).
func checkAddr(addr string, allowZeroPort bool) error {
	if addr == "" {
		return errors.New("empty (want host:port)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if strings.ContainsAny(host, " \t") {
		return fmt.Errorf("%q: host contains blanks", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number in [1, 65535]", addr, port)
	}
	if p == 0 && !allowZeroPort {
		return fmt.Errorf("%q: port 0 cannot be reached by other servers; give a fixed port", addr)
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func validName(s string) bool {
	if s == "" || s[0] == '.' {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
