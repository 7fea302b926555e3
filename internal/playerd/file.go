package playerd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/player"
)

// File is the player's configuration file (player.yaml):
//
//	cluster: cluster.yaml        # the cluster file, relative to this file
//	# or: cluster_id: dev + ordering: [127.0.0.1:7101]
//	status_addr: 127.0.0.1:7301  # /status and /metrics, HTTPS on a secured cluster
//	status_cert: player1         # its certificate in the cluster's tls.dir
//	route: key-hash              # key-hash, tags or all
//	batch_entries_max: 256
//	empty_every: 1024
//	ack_timeout: 5s
//	targets:
//	  - {name: kv1, addr: 127.0.0.1:7401}
//
// Every bound left out takes its default.
type File struct {
	Cluster    string   `yaml:"cluster"`
	ClusterID  string   `yaml:"cluster_id"`
	Ordering   []string `yaml:"ordering"`
	StatusAddr string   `yaml:"status_addr"`
	// StatusCert names the certificate (NAME.crt, NAME.key in the
	// cluster file's tls.dir) status_addr serves HTTPS with.
	StatusCert         string       `yaml:"status_cert"`
	Route              string       `yaml:"route"`
	BatchEntriesMax    int          `yaml:"batch_entries_max"`
	BatchBytesMax      int          `yaml:"batch_bytes_max"`
	QueueEntriesMax    int          `yaml:"queue_entries_max"`
	QueueBytesMax      int          `yaml:"queue_bytes_max"`
	InflightBatchesMax int          `yaml:"inflight_batches_max"`
	EmptyEvery         uint64       `yaml:"empty_every"`
	AckTimeout         string       `yaml:"ack_timeout"`
	FullTimeout        string       `yaml:"full_timeout"`
	ConnectTimeout     string       `yaml:"connect_timeout"`
	ReconnectMin       string       `yaml:"reconnect_min"`
	ReconnectMax       string       `yaml:"reconnect_max"`
	RecoveryChunk      int          `yaml:"recovery_chunk"`
	Targets            []TargetSpec `yaml:"targets"`
	// Insecure dials a cluster named by cluster_id and ordering
	// plaintext; a cluster file says itself whether it is secured.
	Insecure bool `yaml:"insecure,omitempty"`
}

// LoadFile reads and checks a player file. A relative Cluster path is made
// relative to the file's directory.
func LoadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Cluster != "" && !filepath.IsAbs(f.Cluster) {
		f.Cluster = filepath.Join(filepath.Dir(path), f.Cluster)
	}
	if _, err := f.Config(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// Config returns the server configuration the file describes, checking
// every field together.
func (f *File) Config() (Config, error) {
	var errs []error
	c := Config{
		Targets: f.Targets,
		Core: player.Config{
			BatchEntriesMax: f.BatchEntriesMax, BatchBytesMax: f.BatchBytesMax,
			QueueEntriesMax: f.QueueEntriesMax, QueueBytesMax: f.QueueBytesMax,
			InflightBatchesMax: f.InflightBatchesMax, EmptyEvery: f.EmptyEvery,
		},
		RecoveryChunk: f.RecoveryChunk,
	}
	switch f.Route {
	case "", "key-hash":
		c.Core.Route = player.RouteKeyHash
	case "tags":
		c.Core.Route = player.RouteTags
	case "all":
		c.Core.Route = player.RouteAll
	default:
		errs = append(errs, fmt.Errorf("route %q is not key-hash, tags or all", f.Route))
	}
	for _, d := range []struct {
		name string
		s    string
		v    *time.Duration
	}{
		{"ack_timeout", f.AckTimeout, &c.AckTimeout}, {"full_timeout", f.FullTimeout, &c.FullTimeout},
		{"connect_timeout", f.ConnectTimeout, &c.ConnectTimeout},
		{"reconnect_min", f.ReconnectMin, &c.ReconnectMin}, {"reconnect_max", f.ReconnectMax, &c.ReconnectMax},
	} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil || v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", d.name, d.s))
		}
		*d.v = v
	}
	switch {
	case f.Cluster != "" && (f.ClusterID != "" || len(f.Ordering) > 0):
		errs = append(errs, errors.New("give either cluster (a cluster file) or cluster_id with ordering, not both"))
	case f.Cluster == "" && (f.ClusterID == "" || len(f.Ordering) == 0):
		errs = append(errs, errors.New("name the cluster: cluster (a cluster file), or cluster_id with ordering"))
	}
	switch {
	case f.StatusCert != "" && f.StatusAddr == "":
		errs = append(errs, errors.New("status_cert goes with status_addr, which it secures"))
	case f.StatusCert != "" && f.Cluster == "":
		errs = append(errs, errors.New("status_cert names a certificate in the cluster file's tls.dir: it needs cluster (a cluster file)"))
	}
	for i, t := range f.Targets {
		if t.Addr == "" {
			errs = append(errs, fmt.Errorf("target %d (%q) has no addr", i, t.Name))
		}
	}
	if err := c.withDefaults().Core.Validate(); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// StatusFiles are the TLS files status_addr serves with when c, the
// cluster file (nil when the file names the cluster by cluster_id), is
// secured: the cluster CA and the certificate status_cert names. They are
// zero when the player runs plaintext, which only an insecure cluster
// allows.
func (f *File) StatusFiles(c *config.Cluster) (auth.Files, error) {
	if c == nil || c.Insecure {
		if f.StatusCert != "" {
			return auth.Files{}, errors.New("status_cert does not go with a plaintext cluster (insecure: true)")
		}
		return auth.Files{}, nil
	}
	if f.StatusAddr == "" {
		return auth.Files{}, nil
	}
	if f.StatusCert == "" {
		return auth.Files{}, errors.New("status_addr serves HTTPS on a secured cluster: name its certificate with status_cert " +
			"(issue it with: augur certs issue --config CLUSTER_FILE player NAME --host HOST)")
	}
	dir := c.CertDir()
	return auth.Files{CA: c.ClientFiles().CA, Cert: auth.CertPath(dir, f.StatusCert), Key: auth.KeyPath(dir, f.StatusCert)}, nil
}
