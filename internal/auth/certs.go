package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Organizational units that say what a certificate is for. A node
// certificate names a member of the cluster file by its common name; a
// client certificate carries its permissions.
const (
	ouNode       = "augur-node"
	ouClient     = "augur-client"
	ouPermPrefix = "perm:"
)

// File names inside a certificate directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	certExt    = ".crt"
	keyExt     = ".key"
)

// Validity of what augur certs issues unless told otherwise.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	// clockSkewAllowance backdates every certificate a little, so a peer
	// whose clock runs behind accepts a fresh one.
	clockSkewAllowance = time.Hour
)

// CA is a certificate authority that issues node and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert, PEM-encoded.
	CertPEM []byte
}

// NewCA creates a self-signed CA for cluster.
func NewCA(cluster string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl, err := template("augur CA "+cluster, validFor)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA's certificate and key from dir (ca.crt, ca.key).
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", filepath.Join(dir, CACertFile), err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", filepath.Join(dir, CACertFile))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", filepath.Join(dir, CAKeyFile), err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// Save writes the CA's certificate and key into dir; the key is readable by
// its owner only.
func (ca *CA) Save(dir string) error {
	key, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return err
	}
	return writePair(dir, "ca", ca.CertPEM, pemBlock("PRIVATE KEY", key))
}

// IssueNode issues the certificate of cluster member id, reachable at
// hosts (names or IP addresses): it serves, and dials its peers, with it.
func (ca *CA) IssueNode(id string, hosts []string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	tmpl, err := template(id, validFor)
	if err != nil {
		return nil, nil, err
	}
	tmpl.Subject.OrganizationalUnit = []string{ouNode}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = []string{id}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if h != "" && !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// IssueClient issues a client certificate for name with permissions perm.
// It cannot serve, and it names no member, so it cannot act as a server of
// the cluster.
func (ca *CA) IssueClient(name string, perm Permission, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if perm&^(Data|Admin) != 0 || perm == 0 {
		return nil, nil, fmt.Errorf("a client certificate carries data and/or admin, not %v", perm)
	}
	tmpl, err := template(name, validFor)
	if err != nil {
		return nil, nil, err
	}
	tmpl.Subject.OrganizationalUnit = []string{ouClient}
	for n, p := range permNames {
		if perm&p != 0 {
			tmpl.Subject.OrganizationalUnit = append(tmpl.Subject.OrganizationalUnit, ouPermPrefix+n)
		}
	}
	slices.Sort(tmpl.Subject.OrganizationalUnit[1:])
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

func (ca *CA) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", k), nil
}

// WritePair writes name.crt and name.key into dir.
func WritePair(dir, name string, certPEM, keyPEM []byte) error {
	return writePair(dir, name, certPEM, keyPEM)
}

// CertPath and KeyPath are where a certificate directory holds name's pair.
func CertPath(dir, name string) string { return filepath.Join(dir, name+certExt) }
func KeyPath(dir, name string) string  { return filepath.Join(dir, name+keyExt) }

func writePair(dir, name string, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The key first: a certificate without its key is the worse half.
	if err := writeFileAtomic(KeyPath(dir, name), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(CertPath(dir, name), certPEM, 0o644)
}

// writeFileAtomic replaces path in one rename, so a server reloading it
// never reads half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func template(cn string, validFor time.Duration) (*x509.Certificate, error) {
	if strings.TrimSpace(cn) == "" {
		return nil, errors.New("certificate name is empty")
	}
	if validFor <= 0 {
		return nil, fmt.Errorf("validity must be positive, got %v", validFor)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-clockSkewAllowance),
		NotAfter:     now.Add(validFor),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		if ek, err2 := x509.ParseECPrivateKey(b.Bytes); err2 == nil {
			return ek, nil
		}
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}
