package config

import (
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/ordering"
	"github.com/augur-log/augur/internal/sequencing"
	"github.com/augur-log/augur/internal/storage"
)

// Server is one server of a cluster, of any role.
type Server interface {
	// Register adds the server's gRPC services.
	Register(*grpc.Server)
	Start()
	Stop()
}

// NewServer opens server id of the cluster, an ordering replica, a
// storage server or a sequencing replica, with its data in its own
// directory. It dials its peers with sec (see ServerSecurity).
func (c *Cluster) NewServer(id string, lg *slog.Logger, sec *auth.Security) (Server, error) {
	role, err := c.Role(id)
	if err != nil {
		return nil, err
	}
	switch role {
	case RoleOrdering:
		oc, err := c.OrderingConfig(id, lg)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(oc.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("server %s: data dir: %w", id, err)
		}
		oc.Creds = sec.TransportCredentials()
		return ordering.New(oc)
	case RoleStorage:
		sc, err := c.StorageConfig(id, lg)
		if err != nil {
			return nil, err
		}
		sc.Creds = sec.TransportCredentials()
		return storage.New(sc)
	case RoleSequencing:
		qc, err := c.SequencingConfig(id, lg)
		if err != nil {
			return nil, err
		}
		qc.Creds = sec.TransportCredentials()
		return sequencing.New(qc)
	}
	return nil, fmt.Errorf("server %s: unknown role %q", id, role)
}
