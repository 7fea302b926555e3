package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/augur-log/augur/internal/auth"
)

// TLS is the tls: block of a cluster file. Relative paths are relative to
// the cluster file's directory.
//
//	tls:
//	  dir: certs            # ca.crt, and <id>.crt and <id>.key of every server
//	  client: admin         # certs/admin.crt and .key: what CLI commands use
//	  tokens: tokens.yaml   # optional: bearer tokens, stored hashed
type TLS struct {
	Dir string `yaml:"dir"`
	// CA overrides dir/ca.crt.
	CA     string `yaml:"ca,omitempty"`
	Client string `yaml:"client,omitempty"`
	Tokens string `yaml:"tokens,omitempty"`
}

func (c *Cluster) validateTLS() error {
	switch {
	case c.TLS == nil && !c.Insecure:
		return errors.New("no tls: block; add one (augur certs init writes the certificates and the block) or set insecure: true to run plaintext")
	case c.TLS != nil && c.Insecure:
		return errors.New("both a tls: block and insecure: true; choose one")
	case c.TLS != nil && c.TLS.Dir == "":
		return errors.New("tls: dir is empty (the directory of the servers' certificates)")
	}
	return nil
}

// resolve makes the relative paths of t relative to dir, the cluster
// file's directory, so they stay right wherever the file is saved.
func (t *TLS) resolve(dir string) {
	if t == nil {
		return
	}
	for _, p := range []*string{&t.Dir, &t.CA, &t.Tokens} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// CertDir is the directory of the cluster's certificates, "" when insecure.
func (c *Cluster) CertDir() string {
	if c.TLS == nil {
		return ""
	}
	return c.TLS.Dir
}

func (c *Cluster) caFile() string {
	if c.TLS.CA != "" {
		return c.TLS.CA
	}
	return filepath.Join(c.CertDir(), auth.CACertFile)
}

// ServerSecurity is how server id serves and dials: with its certificate
// from the certificate directory, trusting the cluster CA, accepting the
// servers of this file as peers and the token file's tokens.
func (c *Cluster) ServerSecurity(id string) (*auth.Security, error) {
	if _, err := c.Role(id); err != nil {
		return nil, err
	}
	if c.Insecure {
		return auth.Insecure(), nil
	}
	dir := c.CertDir()
	m, err := auth.Load(auth.Files{
		CA:     c.caFile(),
		Cert:   auth.CertPath(dir, id),
		Key:    auth.KeyPath(dir, id),
		Tokens: c.TLS.Tokens,
	})
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", id, err)
	}
	return auth.New(m, c.Members()), nil
}

// Members lists the servers of the file as their peers check them.
func (c *Cluster) Members() map[string]auth.Member {
	members := map[string]auth.Member{}
	for _, o := range c.Ordering {
		members[o.ID] = auth.Member{Perm: auth.Ordering, Host: host(o.Addr)}
	}
	for _, s := range c.Storage {
		members[s.ID] = auth.Member{Perm: auth.Storage, Host: host(s.Addr), Group: s.Group}
	}
	for _, q := range c.Sequencing {
		members[q.ID] = auth.Member{Perm: auth.Sequencing, Host: host(q.Addr)}
	}
	return members
}

// ClientFiles are the TLS files a client of the cluster uses: the cluster
// CA and the certificate named by tls.client (none without one).
func (c *Cluster) ClientFiles() auth.Files {
	if c.TLS == nil {
		return auth.Files{}
	}
	f := auth.Files{CA: c.caFile()}
	if c.TLS.Client != "" {
		f.Cert, f.Key = auth.CertPath(c.CertDir(), c.TLS.Client), auth.KeyPath(c.CertDir(), c.TLS.Client)
	}
	return f
}

// host is the host of a server address, which the server's certificate
// must name.
func host(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// ClientTLS is the TLS configuration of a client of the cluster with the
// certificate named by tls.client; nil when the cluster is insecure.
func (c *Cluster) ClientTLS() (*tls.Config, error) {
	if c.Insecure {
		return nil, nil
	}
	m, err := auth.Load(c.ClientFiles())
	if err != nil {
		return nil, err
	}
	return auth.ClientTLS(m), nil
}
