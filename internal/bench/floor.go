package bench

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// floorProbeEvery paces the floor probe's calls, as an open-loop client
// paces appends: each call starts from a sleeping goroutine, as an append
// does, so the floor includes the same wake-up costs.
const floorProbeEvery = time.Millisecond

// floorProbe measures the round trip of an almost empty gRPC call (a
// health check) to a server in this process over loopback TCP: the least
// any RPC costs on this machine, under the load the run puts on it. It is
// what an append's latency is compared with (a Kafka append on these
// machines takes about eight of them at the median).
type floorProbe struct {
	srv  *grpc.Server
	conn *grpc.ClientConn
	lat  *Latency
}

// startFloorProbe starts the probe's server and connects to it.
func startFloorProbe() (*floorProbe, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("floor probe: %w", err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("floor probe: %w", err)
	}
	return &floorProbe{srv: srv, conn: conn, lat: NewLatency()}, nil
}

// run calls the probe every floorProbeEvery until until or until ctx ends,
// and records each round trip; the first call, which connects, is not
// recorded. It records one call even when connecting took it past until
// (a short warm-up on a loaded machine), so that every run reports a
// floor.
func (f *floorProbe) run(ctx context.Context, until time.Time) error {
	hc := healthpb.NewHealthClient(f.conn)
	a := NewAlarm()
	defer a.Close()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return fmt.Errorf("floor probe: %w", err)
	}
	for next := time.Now(); ; {
		next = next.Add(floorProbeEvery)
		if !next.Before(until) && f.lat.Count() > 0 {
			return nil
		}
		if err := a.SleepUntil(ctx, next); err != nil {
			return nil
		}
		start := time.Now()
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("floor probe: %w", err)
		}
		f.lat.Record(time.Since(start))
	}
}

// close stops the server and the connection.
func (f *floorProbe) close() {
	f.conn.Close()
	f.srv.Stop()
}
