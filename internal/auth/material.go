package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ReloadPollInterval is how often Watch looks for changed files.
const ReloadPollInterval = time.Second

// Files names the TLS material of one process. CA is required; Cert and Key
// go together (a client may authenticate by token instead); Tokens is
// optional and only servers read it.
type Files struct {
	CA     string
	Cert   string
	Key    string
	Tokens string
}

// Material is the current TLS material of a process: the trusted CAs, its
// own certificate, and the token grants. Reload swaps all of it at once;
// handshakes after a reload use the new material, and connections already
// open keep theirs.
type Material struct {
	files Files
	cur   atomic.Pointer[loaded]

	// mu serialises reloads; stamps are the modification times of the
	// files as last loaded.
	mu     sync.Mutex
	stamps map[string]time.Time
}

type loaded struct {
	pool   *x509.CertPool
	cert   *tls.Certificate // nil: no certificate
	tokens map[[sha256.Size]byte]grant
}

// grant is what a token or client certificate allows.
type grant struct {
	name string
	perm Permission
	// shards, when not nil, are the only shards the grant reaches.
	shards []uint32
	// server and group name the cluster member of a node certificate.
	server, group string
}

// Load reads the files of f.
func Load(f Files) (*Material, error) {
	if f.CA == "" {
		return nil, errors.New("tls: no CA certificate file")
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a certificate needs its key and a key its certificate")
	}
	m := &Material{files: f}
	if err := m.Reload(); err != nil {
		return nil, err
	}
	return m, nil
}

// Reload reads the files again. On any error it keeps the material it had
// and returns the error: a half-written file must not lock out a cluster.
func (m *Material) Reload() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	stamps := m.readStamps()
	l, err := m.files.load()
	if err != nil {
		return err
	}
	m.cur.Store(l)
	m.stamps = stamps
	return nil
}

// changed says whether any file's modification time differs from the last
// load.
func (m *Material) changed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.readStamps()
	for p, t := range now {
		if !m.stamps[p].Equal(t) {
			return true
		}
	}
	return false
}

func (m *Material) readStamps() map[string]time.Time {
	stamps := map[string]time.Time{}
	for _, p := range []string{m.files.CA, m.files.Cert, m.files.Key, m.files.Tokens} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			stamps[p] = fi.ModTime()
		}
	}
	return stamps
}

// Watch reloads the material whenever one of its files changes or hup
// delivers, until ctx ends; on hup it calls onHUP too (nil for nothing).
// Failed reloads are logged and the old material stays in use.
func (m *Material) Watch(ctx context.Context, hup <-chan os.Signal, onHUP func(), log *slog.Logger) {
	tick := time.NewTicker(ReloadPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if onHUP != nil {
				onHUP()
			}
		case <-tick.C:
			if !m.changed() {
				continue
			}
		}
		if err := m.Reload(); err != nil {
			log.Error("tls: reload failed; keeping the previous certificates and tokens", "err", err)
		} else {
			log.Info("tls: reloaded certificates and tokens")
		}
	}
}

func (f Files) load() (*loaded, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("tls: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", f.CA)
	}
	l := &loaded{pool: pool}
	if f.Cert != "" {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", f.Cert, err)
		}
		if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return nil, fmt.Errorf("tls: certificate %s is not signed by the CA of %s: %w", f.Cert, f.CA, err)
		}
		l.cert = &c
	}
	if f.Tokens != "" {
		if l.tokens, err = loadTokens(f.Tokens); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Name is the common name of the process's own certificate, "" without one.
func (m *Material) Name() string {
	if c := m.cur.Load().cert; c != nil {
		return c.Leaf.Subject.CommonName
	}
	return ""
}

func hashToken(tok string) [sha256.Size]byte { return sha256.Sum256([]byte(tok)) }

// HashToken is the hex SHA-256 of a token, as a token file stores it.
func HashToken(tok string) string {
	h := hashToken(tok)
	return hex.EncodeToString(h[:])
}
