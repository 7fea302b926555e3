package auth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/devcluster"
)

// startTLS starts a TLS dev cluster of one shard and waits until it is
// ready.
func startTLS(t *testing.T, orderingReplicas int) *devcluster.Cluster {
	return startTLSShards(t, orderingReplicas, 1)
}

func startTLSShards(t *testing.T, orderingReplicas, shards int) *devcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), TLS: true, Shards: shards, Replicas: 2, OrderingReplicas: orderingReplicas})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return dc
}

// issueClient issues a client certificate with the cluster's CA into a
// directory of its own and returns its files.
func issueClient(t *testing.T, dc *devcluster.Cluster, name string, perm auth.Permission) auth.Files {
	t.Helper()
	ca, err := auth.LoadCA(dc.CertDir())
	if err != nil {
		t.Fatal(err)
	}
	return writeClient(t, ca, dc, name, perm)
}

func writeClient(t *testing.T, ca *auth.CA, dc *devcluster.Cluster, name string, perm auth.Permission) auth.Files {
	t.Helper()
	cert, key, err := ca.IssueClient(name, perm, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := auth.WritePair(dir, name, cert, key); err != nil {
		t.Fatal(err)
	}
	return auth.Files{CA: filepath.Join(dc.CertDir(), auth.CACertFile), Cert: auth.CertPath(dir, name), Key: auth.KeyPath(dir, name)}
}

func tlsConfig(t *testing.T, f auth.Files) *tls.Config {
	t.Helper()
	m, err := auth.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return auth.ClientTLS(m)
}

func clientConfig(t *testing.T, dc *devcluster.Cluster, f auth.Files) client.Config {
	t.Helper()
	return client.Config{ClusterID: dc.ClusterID, Ordering: dc.OrderingAddrs(), TLS: tlsConfig(t, f)}
}

func dial(t *testing.T, cfg client.Config) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { cl.Close() })
	}
	return cl, err
}

func mustDial(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	cl, err := dial(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// conn is a raw gRPC connection to addr with tlsCfg (nil: plaintext).
func conn(t *testing.T, addr string, tlsCfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func wantCode(t *testing.T, what string, err error, code codes.Code, mention string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
	if !strings.Contains(st.Message(), mention) {
		t.Fatalf("%s: the refusal %q does not say %q", what, st.Message(), mention)
	}
}

// shardTable is what a refused call must leave alone: the trim point and
// each shard's id, group, replicas and state.
func shardTable(t *testing.T, admin *client.Client) *pb.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := admin.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := &pb.StatusResponse{Trim: st.Trim}
	for _, s := range st.Shards {
		out.Shards = append(out.Shards, &pb.ShardInfo{Id: s.Id, Group: s.Group, Replicas: s.Replicas, State: s.State})
	}
	return out
}

func sameTable(t *testing.T, before, after *pb.StatusResponse) {
	t.Helper()
	if !proto.Equal(before, after) {
		t.Fatalf("a refused call changed the cluster:\nbefore %v\nafter  %v", before, after)
	}
}

func TestRefusals(t *testing.T) {
	dc := startTLS(t, 3)
	admin, err := dc.Dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := t.Context()
	for range 10 {
		if _, err := admin.Append(ctx, client.Record{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	o1 := dc.OrderingAddrs()[0]

	t.Run("plaintext client", func(t *testing.T) {
		_, err := dial(t, client.Config{ClusterID: dc.ClusterID, Ordering: dc.OrderingAddrs(), Insecure: true})
		if err == nil {
			t.Fatal("a plaintext client reached a TLS cluster")
		}
		_, err = pb.NewOrderingClient(conn(t, o1, nil)).Status(ctx, &pb.StatusRequest{ClusterId: dc.ClusterID})
		wantCode(t, "plaintext Status", err, codes.Unavailable, "")
	})

	t.Run("certificate of another CA", func(t *testing.T) {
		other, err := auth.NewCA("other", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// The client trusts the cluster, but its certificate (with every
		// permission) comes from a CA the cluster does not know.
		// auth.Load refuses such a pair, so the client is put together by
		// hand.
		f := writeClient(t, other, dc, "mallory", auth.Data|auth.Admin)
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		caPEM, err := os.ReadFile(f.CA)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caPEM)
		// GetClientCertificate sends the certificate even though the
		// server asks for its own CA's.
		forged := &tls.Config{RootCAs: roots, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
		before := shardTable(t, admin)
		if _, err := dial(t, client.Config{ClusterID: dc.ClusterID, Ordering: dc.OrderingAddrs(), TLS: forged}); err == nil {
			t.Fatal("a client with another CA's certificate was let in")
		}
		_, err = pb.NewOrderingClient(conn(t, o1, forged)).Trim(ctx, &pb.TrimRequest{ClusterId: dc.ClusterID, Position: 5})
		wantCode(t, "Trim with another CA's certificate", err, codes.Unavailable, "")
		sameTable(t, before, shardTable(t, admin))
	})

	t.Run("no token", func(t *testing.T) {
		ca := auth.Files{CA: filepath.Join(dc.CertDir(), auth.CACertFile)}
		cfg := clientConfig(t, dc, ca)
		_, err := dial(t, cfg)
		if !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("no certificate, no token: %v, want ErrUnauthenticated", err)
		}
		_, err = pb.NewOrderingClient(conn(t, o1, tlsConfig(t, ca))).Status(ctx, &pb.StatusRequest{ClusterId: dc.ClusterID})
		wantCode(t, "Status without credentials", err, codes.Unauthenticated, "client certificate")

		cfg.Token = "augur_guessed"
		if _, err := dial(t, cfg); !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("unknown token: %v, want ErrUnauthenticated", err)
		}

		// A token added to the token file works once the servers reload
		// it, with the permission it was given.
		tok, err := auth.AddToken(dc.TokensFile(), "ci", []string{"data"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := dc.ReloadTLS(); err != nil {
			t.Fatal(err)
		}
		cfg.Token = tok
		cl := mustDial(t, cfg)
		if _, err := cl.Append(ctx, client.Record{Payload: []byte("by token")}); err != nil {
			t.Fatalf("append with a data token: %v", err)
		}
		before := shardTable(t, admin)
		if err := cl.Trim(ctx, 3); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "admin") {
			t.Fatalf("trim with a data token: %v, want ErrPermissionDenied naming admin", err)
		}
		sameTable(t, before, shardTable(t, admin))
	})

	t.Run("data client trims and finalizes", func(t *testing.T) {
		cl := mustDial(t, clientConfig(t, dc, issueClient(t, dc, "reader", auth.Data)))
		if _, err := cl.Append(ctx, client.Record{Payload: []byte("data may append")}); err != nil {
			t.Fatal(err)
		}
		before := shardTable(t, admin)
		if len(before.Shards) == 0 {
			t.Fatal("no shards")
		}
		if err := cl.Trim(ctx, 5); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "admin") {
			t.Fatalf("trim by a data client: %v, want ErrPermissionDenied naming admin", err)
		}
		if err := cl.FinalizeShard(ctx, before.Shards[0].Id, 0); !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("finalize by a data client: %v, want ErrPermissionDenied", err)
		}
		if _, err := cl.AddShard(ctx, before.Shards[0].Group); !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("add shard by a data client: %v, want ErrPermissionDenied", err)
		}
		sameTable(t, before, shardTable(t, admin))
	})

	t.Run("client certificate acting as a server", func(t *testing.T) {
		// A valid client certificate with every client permission: what a
		// storage server started with a client's certificate presents.
		f := issueClient(t, dc, "intruder", auth.Data|auth.Admin)
		before := shardTable(t, admin)
		oc := pb.NewOrderingClient(conn(t, o1, tlsConfig(t, f)))
		_, err := oc.RegisterShard(ctx, &pb.RegisterShardRequest{ClusterId: dc.ClusterID, Group: "z",
			Replicas: []*pb.ReplicaAddr{{Id: "z1", Addr: "127.0.0.1:1"}}})
		wantCode(t, "RegisterShard with a client certificate", err, codes.PermissionDenied, "storage server")
		hb, err := oc.Heartbeat(ctx)
		if err == nil {
			_, err = hb.Recv()
		}
		wantCode(t, "Heartbeat with a client certificate", err, codes.PermissionDenied, "storage server")
		raft, err := pb.NewRaftTransportClient(conn(t, o1, tlsConfig(t, f))).Send(ctx)
		if err == nil {
			_, err = raft.CloseAndRecv()
		}
		wantCode(t, "Raft Send with a client certificate", err, codes.PermissionDenied, "ordering replica")
		sameTable(t, before, shardTable(t, admin))
	})

	t.Run("node certificates", func(t *testing.T) {
		ca, err := auth.LoadCA(dc.CertDir())
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		// A node certificate for a server the cluster file does not list.
		cert, key, err := ca.IssueNode("z9", []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := auth.WritePair(dir, "z9", cert, key); err != nil {
			t.Fatal(err)
		}
		stranger := auth.Files{CA: filepath.Join(dc.CertDir(), auth.CACertFile), Cert: auth.CertPath(dir, "z9"), Key: auth.KeyPath(dir, "z9")}
		before := shardTable(t, admin)
		_, err = pb.NewOrderingClient(conn(t, o1, tlsConfig(t, stranger))).RegisterShard(ctx, &pb.RegisterShardRequest{ClusterId: dc.ClusterID, Group: "z"})
		wantCode(t, "RegisterShard by a stranger node", err, codes.PermissionDenied, "names no server")
		// A storage server of the cluster may not speak Raft.
		a1 := dc.StorageIDs()[0]
		storage := auth.Files{CA: filepath.Join(dc.CertDir(), auth.CACertFile), Cert: auth.CertPath(dc.CertDir(), a1), Key: auth.KeyPath(dc.CertDir(), a1)}
		raft, err := pb.NewRaftTransportClient(conn(t, o1, tlsConfig(t, storage))).Send(ctx)
		if err == nil {
			_, err = raft.CloseAndRecv()
		}
		wantCode(t, "Raft Send by a storage server", err, codes.PermissionDenied, "ordering replica")
		sameTable(t, before, shardTable(t, admin))
	})
}

// TestRotationKeepsSubscription reissues every server's certificate while a
// subscription is open: the subscription goes on, and new connections get
// the new certificates.
func TestRotationKeepsSubscription(t *testing.T) {
	dc := startTLS(t, 1)
	ctx := t.Context()
	admin := mustDial(t, dc.ClientConfig())
	sub, err := admin.Subscribe(ctx, 0, client.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	next := func(want string) {
		t.Helper()
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		e, err := sub.Next(nctx)
		if err != nil {
			t.Fatalf("subscription: %v", err)
		}
		if string(e.Record.Payload) != want {
			t.Fatalf("subscription delivered %q, want %q", e.Record.Payload, want)
		}
	}
	if _, err := admin.Append(ctx, client.Record{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	next("before")

	ca, err := auth.LoadCA(dc.CertDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dc.Config()
	for _, id := range append(dc.OrderingIDs(), dc.StorageIDs()...) {
		if err := cfg.IssueServerCert(ca, id, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := dc.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	// A new handshake presents the reissued certificate.
	o1 := dc.OrderingIDs()[0]
	data, err := os.ReadFile(auth.CertPath(dc.CertDir(), o1))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	reissued, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	tc := dc.ClientConfig().TLS.Clone()
	tc.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", dc.OrderingAddrs()[0], tc)
	if err != nil {
		t.Fatal(err)
	}
	served := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if served.SerialNumber.Cmp(reissued.SerialNumber) != 0 {
		t.Fatalf("after the reload %s serves certificate %v, want the reissued %v", o1, served.SerialNumber, reissued.SerialNumber)
	}

	fresh := mustDial(t, dc.ClientConfig())
	if _, err := fresh.Append(ctx, client.Record{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	next("after")
}

// TestAddGroupUnderTLS adds a storage group to a running TLS cluster: the
// servers already running accept the new servers' certificates, so the new
// group registers its shard.
func TestAddGroupUnderTLS(t *testing.T) {
	dc := startTLS(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := dc.AddGroup(ctx, "b"); err != nil {
		t.Fatal(err)
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if _, err := auth.AddToken(path, "ci", []string{"root"}, nil); err == nil || !strings.Contains(err.Error(), `unknown permission "root"`) {
		t.Fatalf("token with an unknown permission: %v", err)
	}
	tok, err := auth.AddToken(path, "ci", []string{"data"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.AddToken(path, "ci", []string{"admin"}, nil); err == nil {
		t.Fatal("a second token named ci was added")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), tok) || !strings.Contains(string(data), auth.HashToken(tok)) {
		t.Fatalf("the token file must hold the token's hash, not the token:\n%s", data)
	}
}

// TestShardRestrictedToken gives a token data and admin on one shard of
// two: the other shard and the whole-cluster admin calls are refused, and
// refusals end appends and subscriptions at once instead of retrying.
func TestShardRestrictedToken(t *testing.T) {
	dc := startTLSShards(t, 1, 2)
	ctx := t.Context()
	admin := mustDial(t, dc.ClientConfig())
	before := shardTable(t, admin)
	if len(before.Shards) != 2 {
		t.Fatalf("want 2 shards, got %v", before.Shards)
	}
	mine, other := before.Shards[0].Id, before.Shards[1].Id
	tok, err := auth.AddToken(dc.TokensFile(), "tenant", []string{"data", "admin"}, []uint32{mine})
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	cfg := clientConfig(t, dc, auth.Files{CA: filepath.Join(dc.CertDir(), auth.CACertFile)})
	cfg.Token = tok
	cl := mustDial(t, cfg)

	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.AppendToShard(callCtx, client.Record{Payload: []byte("mine")}, mine); err != nil {
		t.Fatalf("append to its own shard: %v", err)
	}
	if _, err := cl.AppendToShard(callCtx, client.Record{Payload: []byte("not mine")}, other); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("append to another shard: %v, want ErrPermissionDenied", err)
	}
	sub, err := cl.Subscribe(callCtx, 0, client.Filter{Shard: &mine})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if e, err := sub.Next(callCtx); err != nil || string(e.Record.Payload) != "mine" {
		t.Fatalf("subscription to its own shard: %q, %v", e.Record.Payload, err)
	}
	subOther, err := cl.Subscribe(callCtx, 0, client.Filter{Shard: &other})
	if err != nil {
		t.Fatal(err)
	}
	defer subOther.Close()
	if _, err := subOther.Next(callCtx); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("subscription to another shard: %v, want ErrPermissionDenied", err)
	}
	if err := cl.Trim(callCtx, 1); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "whole cluster") {
		t.Fatalf("trim by a shard-restricted admin: %v, want ErrPermissionDenied", err)
	}
	if err := cl.FinalizeShard(callCtx, other, 0); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("finalize of another shard: %v, want ErrPermissionDenied", err)
	}
	after := shardTable(t, admin)
	sameTable(t, before, after)
}

// TestStorageServerSpeaksOnlyForItself: a storage server's certificate lets
// it register and rejoin shards as itself, in its own group, and nothing
// else; each refusal leaves the shard table as it was.
func TestStorageServerSpeaksOnlyForItself(t *testing.T) {
	dc := startTLSShards(t, 1, 2)
	admin, err := dc.Dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := t.Context()
	before := shardTable(t, admin)
	shardOf := map[string]uint32{}
	addrOf := map[string]string{}
	for _, s := range before.Shards {
		shardOf[s.Group] = s.Id
		for _, r := range s.Replicas {
			addrOf[r.Id] = r.Addr
		}
	}
	// a1 serves group a's shard; a2 is its peer; b1 serves group b's.
	a1 := auth.Files{CA: filepath.Join(dc.CertDir(), auth.CACertFile), Cert: auth.CertPath(dc.CertDir(), "a1"), Key: auth.KeyPath(dc.CertDir(), "a1")}
	ord := pb.NewOrderingClient(conn(t, dc.OrderingAddrs()[0], tlsConfig(t, a1)))
	rejoin := func(shard uint32, as string) error {
		_, err := ord.RejoinShard(ctx, &pb.RejoinShardRequest{ClusterId: dc.ClusterID, Shard: shard, Epoch: 1,
			Replica: &pb.ReplicaAddr{Id: as, Addr: addrOf[as]}})
		return err
	}
	wantCode(t, "a1 rejoins as a2", rejoin(shardOf["a"], "a2"), codes.PermissionDenied, "only its own copies")
	wantCode(t, "a1 rejoins group b's shard", rejoin(shardOf["b"], "a1"), codes.PermissionDenied, `belongs to group "b"`)
	register := func(group string, ids ...string) error {
		req := &pb.RegisterShardRequest{ClusterId: dc.ClusterID, Group: group}
		for _, id := range ids {
			req.Replicas = append(req.Replicas, &pb.ReplicaAddr{Id: id, Addr: addrOf[id]})
		}
		_, err := ord.RegisterShard(ctx, req)
		return err
	}
	wantCode(t, "a1 registers a shard of group b", register("b", "b1", "b2"), codes.PermissionDenied, "only a shard of its own group")
	wantCode(t, "a1 registers a shard it does not serve", register("a", "a2"), codes.PermissionDenied, "that it serves")
	beat, err := ord.Heartbeat(ctx)
	if err == nil {
		err = beat.Send(&pb.HeartbeatRequest{ClusterId: dc.ClusterID, ServerId: "a2", Incarnation: 1, GoingAway: true})
	}
	if err == nil {
		_, err = beat.Recv()
	}
	wantCode(t, "a1 beats as a2", err, codes.PermissionDenied, "only for itself")
	sameTable(t, before, shardTable(t, admin))
}
