package main

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
)

func newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create the cluster CA and issue server and client certificates",
	}
	cmd.AddCommand(newCertsInitCmd(), newCertsIssueCmd())
	return cmd
}

// loadForCerts loads the cluster file and checks it names a certificate
// directory.
func loadForCerts(path string) (*config.Cluster, error) {
	if path == "" {
		return nil, errors.New("--config is required")
	}
	c, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if c.CertDir() == "" {
		return nil, fmt.Errorf("%s has no tls: block; add one such as\n  tls: {dir: certs, client: %s}", path, config.AdminClient)
	}
	return c, nil
}

func newCertsInitCmd() *cobra.Command {
	var path string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "init --config FILE",
		Short: "Create the CA in the cluster file's tls.dir and issue every server's certificate and the admin client's",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadForCerts(path)
			if err != nil {
				return err
			}
			if err := c.InitCerts(validFor); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "augur certs: CA and certificates of %d servers and client %q written to %s\n"+
				"keep ca.key offline once every certificate is issued; each server needs ca.crt and its own <id>.crt and <id>.key\n",
				len(c.Ordering)+len(c.Storage), config.AdminClient, c.CertDir())
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "cluster file with a tls: block")
	cmd.Flags().DurationVar(&validFor, "valid-for", auth.DefaultCertValidity, "validity of the issued certificates")
	return cmd
}

func newCertsIssueCmd() *cobra.Command {
	var path string
	var perms, hosts []string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "issue --config FILE (server ID | client NAME --perm data[,admin] | target NAME --host HOST | player NAME --host HOST)",
		Short: "Issue (or reissue, to rotate) a server's, client's, target's or player's certificate with the cluster CA",
		Long: `Issue a certificate with the CA in the cluster file's tls.dir:

  server ID     the certificate of server ID of the cluster file, naming its id
                and the host of its address (reissue one to rotate it: the
                server reloads it on SIGHUP or within a second)
  client NAME   a client certificate with --perm data, admin or both
  target NAME   the serving certificate of a player target (augur target),
                reached at --host HOST (repeatable)
  player NAME   the certificate a player's status_addr serves HTTPS with
                (status_cert: NAME in the player file), reached at --host HOST

Certificates go to tls.dir as ID.crt and ID.key.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadForCerts(path)
			if err != nil {
				return err
			}
			kind, name := args[0], args[1]
			if kind != "client" && len(perms) > 0 {
				return errors.New("--perm is for client certificates; a server's permissions follow from its role")
			}
			if kind != "target" && kind != "player" && len(hosts) > 0 {
				return errors.New("--host is for target and player certificates; a server's host is its address in the cluster file")
			}
			ca, err := auth.LoadCA(c.CertDir())
			if err != nil {
				return err
			}
			switch kind {
			case "server":
				err = c.IssueServerCert(ca, name, validFor)
			case "target":
				err = c.IssueTargetCert(ca, name, hosts, validFor)
			case "player":
				err = c.IssuePlayerCert(ca, name, hosts, validFor)
			case "client":
				var perm auth.Permission
				if perm, err = auth.ParsePermissions(perms); err == nil {
					err = c.IssueClientCert(ca, name, perm, validFor)
				}
			default:
				return fmt.Errorf("issue a server, client, target or player certificate, not %q", kind)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "augur certs: %s and %s written\n", auth.CertPath(c.CertDir(), name), auth.KeyPath(c.CertDir(), name))
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "cluster file with a tls: block")
	cmd.Flags().StringSliceVar(&perms, "perm", nil, "client permissions: data, admin")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "target or player: host name or IP address it is reached at (repeatable)")
	cmd.Flags().DurationVar(&validFor, "valid-for", auth.DefaultCertValidity, "validity of the certificate")
	return cmd
}

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage bearer tokens",
	}
	var file string
	var perms []string
	var shards []uint
	add := &cobra.Command{
		Use:   "add --file TOKENS NAME --perm data[,admin] [--shard N]...",
		Short: "Create a bearer token; its hash goes to the token file, the token is printed once",
		Long: `Create a bearer token for NAME with the given permissions. The token file
(the cluster file's tls.tokens) keeps only its SHA-256; the token itself is
printed once, on stdout. Servers pick the new token up on SIGHUP or within a
second. Clients send it with --token-file FILE or the AUGUR_TOKEN variable.
With --shard the token reaches only those shards: appends, reads and
subscriptions of other shards, and trim and shard add, are refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return errors.New("--file is required")
			}
			var only []uint32
			for _, s := range shards {
				if s > math.MaxUint32 {
					return fmt.Errorf("--shard %d is not a shard id", s)
				}
				only = append(only, uint32(s))
			}
			tok, err := auth.AddToken(file, args[0], perms, only)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	add.Flags().StringVar(&file, "file", "", "token file (the cluster file's tls.tokens)")
	add.Flags().StringSliceVar(&perms, "perm", nil, "permissions: data, admin")
	add.Flags().UintSliceVar(&shards, "shard", nil, "restrict the token to these shards (repeatable; default: every shard)")
	cmd.AddCommand(add)
	return cmd
}
