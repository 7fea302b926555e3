package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// tokenHeader carries a bearer token: "authorization: Bearer <token>".
const (
	tokenHeader = "authorization"
	tokenScheme = "Bearer "
)

// Member is one server of the cluster file as its peers see it.
type Member struct {
	// Perm is Storage or Ordering: what the member's certificate allows.
	Perm Permission
	// Host is the host of its address, which its certificate must name.
	Host string
	// Group is a storage server's group: the shards it may serve.
	Group string
}

// Security is how one process serves and dials: plaintext (only when the
// cluster file says insecure: true), or TLS with its material and the
// cluster's members.
type Security struct {
	insecure bool
	m        *Material
	// members are replaced whole when the cluster file gains servers.
	members atomic.Pointer[map[string]Member]
}

// Insecure is plaintext with no authentication; callers must have been told
// so explicitly.
func Insecure() *Security { return &Security{insecure: true} }

// New secures a process with m; members are the servers of the cluster
// file by id (empty for a client).
func New(m *Material, members map[string]Member) *Security {
	s := &Security{m: m}
	s.SetMembers(members)
	return s
}

// SetMembers replaces the servers whose node certificates are accepted.
func (s *Security) SetMembers(members map[string]Member) { s.members.Store(&members) }

// IsInsecure says whether s is plaintext.
func (s *Security) IsInsecure() bool { return s.insecure }

// Material is the TLS material, nil when insecure.
func (s *Security) Material() *Material { return s.m }

// ServerOptions are the credentials and the permission checks of a gRPC
// server; add them to rpcopt.ServerOptions.
func (s *Security) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	}
	if !s.insecure {
		opts = append(opts, grpc.Creds(credentials.NewTLS(ServerTLS(s.m, "h2"))))
	}
	return opts
}

// TransportCredentials are what the process dials others with.
func (s *Security) TransportCredentials() credentials.TransportCredentials {
	if s.insecure {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(ClientTLS(s.m))
}

// DialOption is TransportCredentials as a dial option.
func (s *Security) DialOption() grpc.DialOption {
	return grpc.WithTransportCredentials(s.TransportCredentials())
}

// HTTPServerTLS is the TLS configuration of an HTTP endpoint (metrics),
// nil when insecure.
func (s *Security) HTTPServerTLS() *tls.Config {
	if s.insecure {
		return nil
	}
	return ServerTLS(s.m, "h2", "http/1.1")
}

// ServerTLS serves with m's current certificate and asks for a client
// certificate, which is verified against m's current CAs when given
// (clients may authenticate by token instead).
func ServerTLS(m *Material, protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := m.cur.Load()
			if l.cert == nil {
				return nil, errors.New("tls: this process has no certificate to serve with")
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				NextProtos:   protos,
				Certificates: []tls.Certificate{*l.cert},
				ClientCAs:    l.pool,
				ClientAuth:   tls.VerifyClientCertIfGiven,
			}, nil
		},
	}
}

// ClientTLS dials with m's current certificate (if any) and accepts a
// server whose certificate m's current CAs signed for the dialled host.
func ClientTLS(m *Material) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The standard verification would pin the CAs of this moment;
		// VerifyConnection does the same checks with the CAs of the
		// handshake, so a reload reaches new connections.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: server sent no certificate")
			}
			opts := x509.VerifyOptions{
				Roots:         m.cur.Load().pool,
				DNSName:       cs.ServerName,
				Intermediates: x509.NewCertPool(),
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("tls: server certificate: %w", err)
			}
			return nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := m.cur.Load().cert; c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil
		},
	}
}

// TokenCredentials sends tok as a bearer token with every call; it is never
// sent over plaintext.
func TokenCredentials(tok string) credentials.PerRPCCredentials { return tokenCreds(tok) }

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{tokenHeader: tokenScheme + string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }

func (s *Security) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	who, err := s.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if err := who.checkShard(info.FullMethod, req); err != nil {
		return nil, err
	}
	if who.server != "" {
		ctx = context.WithValue(ctx, serverKey{}, Server{ID: who.server, Group: who.group})
	}
	return h(ctx, req)
}

// Server is a cluster member that called with its node certificate.
type Server struct {
	ID    string
	Group string
}

type serverKey struct{}

// CallingServer returns the server whose node certificate authenticated a
// call; ok is false for clients, tokens and insecure clusters, where
// a caller may claim any identity.
func CallingServer(ctx context.Context) (srv Server, ok bool) {
	srv, ok = ctx.Value(serverKey{}).(Server)
	return srv, ok
}

func (s *Security) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	who, err := s.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if who.shards != nil {
		ss = shardCheckedStream{ServerStream: ss, who: who, method: info.FullMethod}
	}
	if who.server != "" {
		ss = serverStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), serverKey{}, Server{ID: who.server, Group: who.group})}
	}
	return h(srv, ss)
}

// serverStream tells a stream's handler which server calls.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

// authorize refuses a call before it reaches its handler, so a refused call
// changes nothing. It returns who calls (everyone, unrestricted, when
// insecure).
func (s *Security) authorize(ctx context.Context, method string) (grant, error) {
	need, ok := Methods[method]
	if !ok {
		return grant{}, status.Errorf(codes.PermissionDenied, "%s is open to nobody: it has no entry in the permission table (auth.Methods)", method)
	}
	if s.insecure {
		return grant{}, nil
	}
	who, err := s.identify(ctx)
	if err != nil {
		return grant{}, err
	}
	if who.perm&need == 0 {
		return grant{}, status.Errorf(codes.PermissionDenied, "%s may %s; %s needs %s", who.name, permList(who.perm), method, need)
	}
	return who, nil
}

// shardNamer is a request that concerns one shard.
type shardNamer interface{ GetShard() uint32 }

// checkShard refuses a caller restricted to some shards a request that
// names another shard, and an admin call that concerns the whole cluster
// (trim, adding a shard). Requests that name no shard and read no records
// (status) stay open to it.
func (g grant) checkShard(method string, req any) error {
	if g.shards == nil {
		return nil
	}
	if r, ok := req.(shardNamer); ok {
		if !slices.Contains(g.shards, r.GetShard()) {
			return status.Errorf(codes.PermissionDenied, "%s may use shards %v only; this %s call is for shard %d", g.name, g.shards, method, r.GetShard())
		}
		return nil
	}
	if Methods[method]&Admin != 0 {
		return status.Errorf(codes.PermissionDenied, "%s may use shards %v only; %s concerns the whole cluster", g.name, g.shards, method)
	}
	return nil
}

// shardCheckedStream checks every message a shard-restricted caller sends
// before the handler sees it.
type shardCheckedStream struct {
	grpc.ServerStream
	who    grant
	method string
}

func (s shardCheckedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.who.checkShard(s.method, m)
}

func permList(p Permission) string {
	if p == 0 {
		return "do nothing"
	}
	return "act as " + strings.ReplaceAll(p.String(), " or ", " and ")
}

// identify finds who calls: the holder of a bearer token if one was sent,
// else the holder of a verified client certificate.
func (s *Security) identify(ctx context.Context) (grant, error) {
	l := s.m.cur.Load()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if vals := md.Get(tokenHeader); len(vals) > 0 {
			tok, ok := strings.CutPrefix(vals[0], tokenScheme)
			if !ok {
				return grant{}, status.Error(codes.Unauthenticated, "the authorization header is not \"Bearer <token>\"")
			}
			g, ok := l.tokens[hashToken(tok)]
			if !ok {
				return grant{}, status.Error(codes.Unauthenticated, "the bearer token is not in this cluster's token file")
			}
			g.name = "token " + g.name
			return g, nil
		}
	}
	p, ok := peer.FromContext(ctx)
	var chains [][]*x509.Certificate
	if ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			chains = ti.State.VerifiedChains
		}
	}
	if len(chains) == 0 || len(chains[0]) == 0 {
		return grant{}, status.Error(codes.Unauthenticated, "no credentials: send a client certificate signed by the cluster CA or a bearer token")
	}
	return s.certGrant(chains[0][0])
}

func (s *Security) certGrant(leaf *x509.Certificate) (grant, error) {
	name := leaf.Subject.CommonName
	ous := leaf.Subject.OrganizationalUnit
	switch {
	case slices.Contains(ous, ouNode):
		m, ok := (*s.members.Load())[name]
		if !ok {
			return grant{}, status.Errorf(codes.PermissionDenied, "node certificate %q names no server of this cluster", name)
		}
		if err := leaf.VerifyHostname(m.Host); err != nil {
			return grant{}, status.Errorf(codes.PermissionDenied, "node certificate %q does not name its server's host %s", name, m.Host)
		}
		return grant{name: "server " + name, perm: m.Perm, server: name, group: m.Group}, nil
	case slices.Contains(ous, ouClient):
		var perm Permission
		for _, ou := range ous {
			if n, ok := strings.CutPrefix(ou, ouPermPrefix); ok {
				perm |= permNames[n]
			}
		}
		return grant{name: "client " + name, perm: perm}, nil
	}
	return grant{}, status.Errorf(codes.PermissionDenied, "certificate %q is neither an augur node nor an augur client certificate", name)
}

// wrongClusterPrefix starts the refusal of a request for another cluster.
const wrongClusterPrefix = "cluster id "

// WrongCluster refuses a request that names cluster id, which is not the
// server's. The server's own id is not told: whoever asks may not be
// entitled to learn it.
func WrongCluster(id string) error {
	return status.Errorf(codes.PermissionDenied, wrongClusterPrefix+"%q is not this cluster's", id)
}

// IsWrongCluster says whether st is a WrongCluster refusal (and not a
// refusal for lack of permission).
func IsWrongCluster(st *status.Status) bool {
	return st.Code() == codes.PermissionDenied && strings.HasPrefix(st.Message(), wrongClusterPrefix)
}
