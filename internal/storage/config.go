package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
)

// Peer is one storage server of a group.
type Peer struct {
	ID   string
	Addr string
}

// Config configures one storage server.
type Config struct {
	ClusterID string
	ID        string
	// Group lists the servers of this server's replica group in a fixed
	// order, this one included; the first is the primary of every shard the
	// group forms.
	Group     []Peer
	GroupName string
	// Ordering lists the ordering replicas' addresses.
	Ordering []string
	Dir      string
	Sync     segment.SyncPolicy
	// SyncInterval is how often SyncInterval policy fsyncs, and how often
	// SyncGroup fsyncs the positions files.
	SyncInterval   time.Duration
	SegmentBytes   int64
	RecordBytesMax int
	// HeartbeatInterval is how often an idle server tells the ordering layer
	// it is alive; it must be well under the ordering layer's failure timeout.
	HeartbeatInterval time.Duration
	// Mode is the cluster's ordering mode: it supplies each primary's
	// ordering (when to report, which no-ops to fill) and says whether
	// speculative subscriptions are served.
	Mode mode.Mode
	// CatchUpBytesPerSecond paces a replica's catch-up (repair) from
	// another, so that it leaves the source and this disk to live
	// traffic; 0 means DefaultCatchUpBytesPerSecond.
	CatchUpBytesPerSecond int64
	// ReportDelay holds back every report by this long: fault injection
	// that makes the server a straggler (see Server.SetReportDelay).
	ReportDelay time.Duration
	Logger      *slog.Logger
	// Creds secure the connections to the group's peers and the ordering
	// layer; nil is plaintext.
	Creds credentials.TransportCredentials
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.ClusterID == "":
		return errors.New("storage: cluster id is empty")
	case c.ID == "":
		return errors.New("storage: server id is empty")
	case c.GroupName == "":
		return errors.New("storage: group name is empty")
	case len(c.Ordering) == 0:
		return errors.New("storage: no ordering replicas")
	case c.Dir == "":
		return errors.New("storage: data directory is empty")
	case c.RecordBytesMax <= 0:
		return fmt.Errorf("storage: record size limit must be positive, got %d", c.RecordBytesMax)
	case c.HeartbeatInterval <= 0:
		return fmt.Errorf("storage: heartbeat interval must be positive, got %v", c.HeartbeatInterval)
	case c.Mode == nil:
		return errors.New("storage: no ordering mode")
	case c.CatchUpBytesPerSecond < 0:
		return fmt.Errorf("storage: catch-up pace must not be negative, got %d bytes/s", c.CatchUpBytesPerSecond)
	case (c.Sync == segment.SyncInterval || c.Sync == segment.SyncGroup) && c.SyncInterval <= 0:
		return fmt.Errorf("storage: fsync interval must be positive, got %v", c.SyncInterval)
	}
	if c.self() < 0 {
		return fmt.Errorf("storage: server %q is not in its group", c.ID)
	}
	return nil
}

func (c *Config) self() int {
	for i, p := range c.Group {
		if p.ID == c.ID {
			return i
		}
	}
	return -1
}

// catchUpBytesPerSecond is the pace of a catch-up.
func (c *Config) catchUpBytesPerSecond() int64 {
	if c.CatchUpBytesPerSecond == 0 {
		return DefaultCatchUpBytesPerSecond
	}
	return c.CatchUpBytesPerSecond
}

// isPrimary reports whether this server is its group's primary.
func (c *Config) isPrimary() bool { return c.self() == 0 }
