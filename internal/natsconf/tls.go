package natsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/orderstore/orderstore/internal/hint"
)

// LoadTLS loads a [*.tls] table as Start uses it, naming key in its errors. A listener's (the
// client port, admin, a hub's leaf listener: peer false) needs a certificate, and its CA verifies
// client certificates (required with verify). A peer link's (cluster routes, an edge's leaf
// remotes: peer true) CA verifies the other side both ways, and a leaf remote may have no
// certificate of its own (it only verifies the hub).
func LoadTLS(key string, t TLSConfig, peer bool) (*tls.Config, error) {
	if !t.Enabled() && !(peer && t.CAFile != "") {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.MinVersion == "1.3" {
		cfg.MinVersion = tls.VersionTLS13
	}
	if t.Enabled() {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, hint.Wrap(fmt.Errorf("%s: cert_file %q, key_file %q: %w", key, t.CertFile, t.KeyFile, err),
				"both must be PEM files: the certificate (chain) and its unencrypted private key")
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.CAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s: ca_file %q: %w", key, t.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		remedy := "it must be the PEM certificates of the CAs that sign client certificates"
		if peer {
			remedy = "it must be the PEM certificates of the CAs that sign the other nodes' certificates"
		}
		return nil, hint.Wrap(fmt.Errorf("%s: ca_file %q holds no PEM certificate", key, t.CAFile), remedy)
	}
	cfg.ClientCAs = pool
	switch {
	case t.Verify:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	case !peer:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if peer {
		cfg.RootCAs = pool
	}
	return cfg, nil
}
