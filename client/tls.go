package client

import (
	"crypto/tls"

	"github.com/augur-log/augur/internal/auth"
)

// LoadTLS reads the TLS files of a client: the cluster CA (caFile), and
// optionally a client certificate and its key, as augur certs issue writes
// them. Without a certificate the client authenticates by Config.Token.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	m, err := auth.Load(auth.Files{CA: caFile, Cert: certFile, Key: keyFile})
	if err != nil {
		return nil, err
	}
	return auth.ClientTLS(m), nil
}
