package devcluster

import (
	"crypto/tls"
	"os"
	"path/filepath"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
)

// Where a TLS dev cluster keeps its certificates, under its data dir.
const (
	tlsDirName     = "tls"
	tokensFileName = "tokens.yaml"
)

// initTLS creates the CA, every server's and the admin client's
// certificates, and an empty token file; it returns the admin client's
// material.
func initTLS(cfg *config.Cluster) (*auth.Material, error) {
	if err := cfg.InitCerts(auth.DefaultCertValidity); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg.TLS.Tokens, nil, 0o600); err != nil {
		return nil, err
	}
	return auth.Load(cfg.ClientFiles())
}

// issueServerCerts issues the certificates of servers ids with the
// cluster's CA.
func issueServerCerts(cfg *config.Cluster, ids []string) error {
	ca, err := auth.LoadCA(cfg.CertDir())
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := cfg.IssueServerCert(ca, id, auth.DefaultCertValidity); err != nil {
			return err
		}
	}
	return nil
}

// CertDir is where a TLS cluster's certificates are ("" when insecure):
// ca.crt and ca.key, <id>.crt and .key per server, admin.crt and .key.
func (c *Cluster) CertDir() string { return c.Config().CertDir() }

// TokensFile is the token file of a TLS cluster ("" when insecure).
func (c *Cluster) TokensFile() string {
	cfg := c.Config()
	if cfg.TLS == nil {
		return ""
	}
	return filepath.Clean(cfg.TLS.Tokens)
}

// MetricsTLS is the TLS configuration of a metrics endpoint of the cluster,
// served with the first ordering replica's certificate; nil when insecure.
func (c *Cluster) MetricsTLS() *tls.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[c.cfg.Ordering[0].ID].sec.HTTPServerTLS()
}

// TargetSecurity is how a player target named name serves next to the
// cluster: with a certificate of the cluster's CA for 127.0.0.1, accepting
// the cluster's clients (players) with the data permission; plaintext when
// the cluster is.
func (c *Cluster) TargetSecurity(name string) (*auth.Security, error) {
	cfg := c.Config()
	if cfg.Insecure {
		return auth.Insecure(), nil
	}
	ca, err := auth.LoadCA(cfg.CertDir())
	if err != nil {
		return nil, err
	}
	if err := cfg.IssueTargetCert(ca, name, []string{"127.0.0.1"}, auth.DefaultCertValidity); err != nil {
		return nil, err
	}
	m, err := auth.Load(auth.Files{CA: filepath.Join(cfg.CertDir(), auth.CACertFile), Cert: auth.CertPath(cfg.CertDir(), name), Key: auth.KeyPath(cfg.CertDir(), name)})
	if err != nil {
		return nil, err
	}
	return auth.New(m, nil), nil
}
