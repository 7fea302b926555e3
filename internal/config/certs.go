package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/augur-log/augur/internal/auth"
)

// AdminClient is the client certificate InitCerts issues, with the data and
// admin permissions.
const AdminClient = "admin"

// InitCerts creates the cluster CA in the certificate directory and issues
// the certificate of every server and of the admin client. It refuses to
// replace an existing CA, whose certificates the servers may trust.
func (c *Cluster) InitCerts(validFor time.Duration) error {
	dir := c.CertDir()
	if dir == "" {
		return errors.New("the cluster file has no tls: block naming a certificate directory")
	}
	if _, err := os.Stat(filepath.Join(dir, auth.CACertFile)); err == nil {
		return fmt.Errorf("%s already holds a CA; issue certificates with it (augur certs issue) or choose another dir", dir)
	}
	ca, err := auth.NewCA(c.ClusterID, auth.DefaultCAValidity)
	if err != nil {
		return err
	}
	if err := ca.Save(dir); err != nil {
		return err
	}
	for _, id := range c.ids() {
		if err := c.IssueServerCert(ca, id, validFor); err != nil {
			return err
		}
	}
	return c.IssueClientCert(ca, AdminClient, auth.Data|auth.Admin, validFor)
}

// IssueServerCert issues server id's certificate, naming its id and the
// host of its address, into the certificate directory.
func (c *Cluster) IssueServerCert(ca *auth.CA, id string, validFor time.Duration) error {
	addr, err := c.Addr(id)
	if err != nil {
		return err
	}
	cert, key, err := ca.IssueNode(id, []string{host(addr)}, validFor)
	if err != nil {
		return err
	}
	return auth.WritePair(c.CertDir(), id, cert, key)
}

// IssueClientCert issues client name's certificate into the certificate
// directory. A client may not share a server's name.
func (c *Cluster) IssueClientCert(ca *auth.CA, name string, perm auth.Permission, validFor time.Duration) error {
	if _, err := c.Role(name); err == nil {
		return fmt.Errorf("%q is a server of the cluster file; a client needs a name of its own", name)
	}
	if !validName(name) {
		return fmt.Errorf("client name %q may hold only letters, digits, '-', '_' and '.'", name)
	}
	cert, key, err := ca.IssueClient(name, perm, validFor)
	if err != nil {
		return err
	}
	return auth.WritePair(c.CertDir(), name, cert, key)
}

// IssueTargetCert issues the serving certificate of player target name,
// reachable at hosts, into the certificate directory. A target is no
// member of the cluster: its certificate gives it no right on the cluster.
func (c *Cluster) IssueTargetCert(ca *auth.CA, name string, hosts []string, validFor time.Duration) error {
	return c.issueServingCert(ca, "target", name, hosts, validFor)
}

// IssuePlayerCert issues the certificate a player's status endpoint
// (status_addr) serves with, reachable at hosts. Like a target's, it gives
// no right on the cluster; the player dials the cluster as a client.
func (c *Cluster) IssuePlayerCert(ca *auth.CA, name string, hosts []string, validFor time.Duration) error {
	return c.issueServingCert(ca, "player", name, hosts, validFor)
}

func (c *Cluster) issueServingCert(ca *auth.CA, kind, name string, hosts []string, validFor time.Duration) error {
	if _, err := c.Role(name); err == nil {
		return fmt.Errorf("%q is a server of the cluster file; a %s needs a name of its own", name, kind)
	}
	if !validName(name) {
		return fmt.Errorf("%s name %q may hold only letters, digits, '-', '_' and '.'", kind, name)
	}
	if len(hosts) == 0 {
		return fmt.Errorf("a %s certificate needs the hosts it is reached at (--host)", kind)
	}
	cert, key, err := ca.IssueNode(name, hosts, validFor)
	if err != nil {
		return err
	}
	return auth.WritePair(c.CertDir(), name, cert, key)
}
