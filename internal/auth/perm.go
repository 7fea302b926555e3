// Package auth secures augur's connections: TLS credentials for every
// server and client, the identity of a caller (a cluster member by its node
// certificate, a client by its certificate or bearer token), and the one
// table that says which permission each gRPC method needs.
//
// Every gRPC server and connection of augur gets its options here
// (ServerOptions, DialOptions), so one place decides what is encrypted and
// who may call what.
package auth

import (
	"fmt"
	"strings"

	pb "github.com/augur-log/augur/api/augurpb"
)

// Permission is a set of rights; a method needs any one of the rights of
// its table entry.
type Permission uint8

const (
	// Data: append, read, subscribe, resolve, status.
	Data Permission = 1 << iota
	// Admin: trim, add and finalize shards.
	Admin
	// Storage: what a storage server of the cluster file does to its
	// peers and to the ordering layer (replicate, report, watch, register
	// its shards).
	Storage
	// Ordering: what an ordering replica of the cluster file does to its
	// peers (Raft messages) and, as lazy order's control plane, to the
	// sequencing replicas (seal, flush, start a view).
	Ordering
	// Sequencing: what a sequencing replica of the cluster file does to
	// its peers and to the shards (garbage collection, mappings,
	// stable-gp, heartbeats).
	Sequencing
)

// permNames are the names of the permissions a client can be given.
var permNames = map[string]Permission{"data": Data, "admin": Admin}

func (p Permission) String() string {
	var names []string
	for _, n := range []struct {
		p    Permission
		name string
	}{{Data, "data"}, {Admin, "admin"}, {Storage, "storage server"}, {Ordering, "ordering replica"}, {Sequencing, "sequencing replica"}} {
		if p&n.p != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " or ")
}

// ParsePermissions reads client permission names ("data", "admin").
func ParsePermissions(names []string) (Permission, error) {
	var p Permission
	for _, n := range names {
		q, ok := permNames[strings.TrimSpace(n)]
		if !ok {
			return 0, fmt.Errorf("unknown permission %q (want data or admin)", n)
		}
		p |= q
	}
	if p == 0 {
		return 0, fmt.Errorf("no permission given (want data, admin or both)")
	}
	return p, nil
}

// Methods is the permission each gRPC method of augur needs. A method not
// listed is refused to everyone, so a new RPC works only once it has an
// entry here: add one line per new method.
var Methods = map[string]Permission{
	pb.Log_Append_FullMethodName:    Data,
	pb.Log_Subscribe_FullMethodName: Data,
	pb.Log_Resolve_FullMethodName:   Data,

	pb.Replica_Replicate_FullMethodName: Storage,
	pb.Replica_Ping_FullMethodName:      Data | Storage,
	// A client asks a storage server to add a shard, which the server then
	// registers with the ordering layer as itself.
	pb.Replica_AddShard_FullMethodName: Admin,
	// A replica repairing its copy fetches entries from a live replica.
	pb.Replica_Fetch_FullMethodName: Storage,

	pb.Ordering_Heartbeat_FullMethodName:     Storage | Sequencing,
	pb.Ordering_Watch_FullMethodName:         Storage | Sequencing,
	pb.Ordering_RegisterShard_FullMethodName: Storage,
	pb.Ordering_FinalizeShard_FullMethodName: Admin,
	pb.Ordering_Trim_FullMethodName:          Admin,
	pb.Ordering_Status_FullMethodName:        Data | Storage | Ordering | Sequencing,
	pb.Ordering_RejoinShard_FullMethodName:   Storage,

	pb.RaftTransport_Send_FullMethodName: Ordering,

	// Lazy order. Clients send metadata to the sequencing replicas and
	// data to the shards, and read; the sequencing leader collects,
	// orders and advances stable-gp; the control plane reconfigures; a
	// shard's primary places and backups fetch.
	pb.Sequencing_Append_FullMethodName:           Data,
	pb.Sequencing_CheckTail_FullMethodName:        Data,
	pb.Sequencing_Collect_FullMethodName:          Sequencing,
	pb.Sequencing_Seal_FullMethodName:             Ordering,
	pb.Sequencing_Flush_FullMethodName:            Ordering,
	pb.Sequencing_StartView_FullMethodName:        Ordering,
	pb.Sequencing_SequencingStatus_FullMethodName: Data | Ordering | Sequencing,
	pb.LazyShard_Store_FullMethodName:             Data,
	pb.LazyShard_Order_FullMethodName:             Sequencing | Ordering | Storage,
	pb.LazyShard_Place_FullMethodName:             Storage,
	pb.LazyShard_Fetch_FullMethodName:             Storage,
	pb.LazyShard_Stable_FullMethodName:            Sequencing | Ordering,
	pb.LazyShard_Mapping_FullMethodName:           Data | Storage | Sequencing,
	pb.LazyShard_Read_FullMethodName:              Data,
	pb.LazyShard_Copy_FullMethodName:              Storage,

	// Targets are applied to by players, which are clients of the log.
	pb.Target_Apply_FullMethodName:       Data,
	pb.Target_LastApplied_FullMethodName: Data,
}
