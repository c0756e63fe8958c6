package orderstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/orderstore/orderstore/embedded"
)

// scaleOut adds [cluster], [leafnode] and the domain to ec: NATS's own
// clustering (JetStream over Raft routes) and leaf nodes, nothing of
// orderstore's making.
func (c Config) scaleOut(ec *embedded.Config) error {
	ec.Domain = c.JetStream.Domain
	if cl := c.Cluster; cl.Enabled() {
		host, port, err := splitHostPort("cluster.listen", cl.Listen)
		if err != nil {
			return err
		}
		ec.Cluster = embedded.Cluster{Name: cl.Name, Host: host, Port: port, Routes: cl.Routes, User: cl.User, Password: cl.Password}
		if ec.Cluster.TLS, err = loadPeerTLS("cluster.tls", cl.TLS); err != nil {
			return err
		}
	}
	ln := c.LeafNode
	if ln.Listen != "" {
		host, port, err := splitHostPort("leafnode.listen", ln.Listen)
		if err != nil {
			return err
		}
		ec.LeafNode.Host, ec.LeafNode.Port = host, port
		ec.LeafNode.User, ec.LeafNode.Password, ec.LeafNode.Account = ln.User, ln.Password, StreamAccount
		// Leaf peers (edges) bind to StreamAccount: what crosses the link
		// is only what sourcing and the hub watcher need, both ways
		// (the internal subjects table, subjects.go).
		ec.LeafNode.FromLeaf, ec.LeafNode.ToLeaf = c.leafPermissions()
		if ec.LeafNode.TLS, err = loadTLS("leafnode.tls", ln.TLS); err != nil {
			return err
		}
	}
	ec.LeafNode.ReconnectInterval = ln.ReconnectInterval
	// Nothing of this node's own crosses a leaf connection but what a
	// hub's sourcing needs (the internal subjects table): with one account
	// on both sides, an edge's ORDER_EVENTS (orders.>) would otherwise
	// also store every other edge's events, the buckets each other's
	// writes, and a peer on the hub would read this edge's acks. The hub
	// reaches an edge's streams only through its JetStream domain
	// ($JS.<domain>.API), and sourced events travel on the source
	// consumer's own deliver subject.
	denyImports, denyExports := c.leafDenies()
	for i, r := range ln.Remotes {
		t, err := loadPeerTLS(fmt.Sprintf("leafnode.remotes[%d].tls", i), r.TLS)
		if err != nil {
			return err
		}
		ec.LeafNode.Remotes = append(ec.LeafNode.Remotes, embedded.LeafRemote{URL: r.URL, User: r.User, Password: r.Password,
			Credentials: r.Credentials, LocalAccount: StreamAccount, TLS: t, DenyImports: denyImports, DenyExports: denyExports})
	}
	return nil
}

func splitHostPort(key, hostport string) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: %w", key, hostport, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: port: %w", key, hostport, err)
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}

// loadPeerTLS is the TLS of a connection that both dials and accepts
// (routes) or dials (a leaf remote): CAFile verifies the peer's
// certificate, CertFile and KeyFile are presented to it.
func loadPeerTLS(key string, t TLSConfig) (*tls.Config, error) {
	if !t.Enabled() && t.CAFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.MinVersion == "1.3" {
		cfg.MinVersion = tls.VersionTLS13
	}
	if t.Enabled() {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, withHint(fmt.Errorf("%s: cert_file %q, key_file %q: %w", key, t.CertFile, t.KeyFile, err),
				"both must be PEM files: the certificate (chain) and its unencrypted private key")
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s: ca_file %q: %w", key, t.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: ca_file %q holds no PEM certificate", key, t.CAFile)
		}
		cfg.RootCAs, cfg.ClientCAs = pool, pool
		if t.Verify {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return cfg, nil
}

// CheckFiles loads every TLS certificate, key and CA file the config
// names, as Start would, and reports every problem at once (each naming
// its key): what `orderstore check` runs beside Validate.
func (c Config) CheckFiles() error {
	var errs []error
	add := func(_ *tls.Config, err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(loadTLS("server.tls", c.Server.TLS))
	add(loadTLS("admin.tls", c.Admin.TLS))
	add(loadPeerTLS("cluster.tls", c.Cluster.TLS))
	add(loadTLS("leafnode.tls", c.LeafNode.TLS))
	for i, r := range c.LeafNode.Remotes {
		add(loadPeerTLS(fmt.Sprintf("leafnode.remotes[%d].tls", i), r.TLS))
	}
	return errors.Join(errs...)
}
