package orderstoretest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Certs are the PEM files of a throwaway certificate authority, a server certificate for the
// loopback addresses and a client certificate, for tests that make real TLS handshakes (see [TLS]).
type Certs struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string // for 127.0.0.1, ::1, localhost and the address of [Addrs]
	ClientCert, ClientKey string // signed by the CA, for client authentication
	// OtherCA is a second CA that signed nothing here: a client trusting
	// only it must fail to verify the server.
	OtherCA string
}

// TLS writes a fresh CA, server and client certificate into a temporary directory of t. Use them
// for Server.TLS and Admin.TLS, and give clients Certs.CA (nats.RootCAs, natscli's --tlsca).
func TLS(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := authority(t, "orderstore test CA")
	other, _ := authority(t, "some other CA")
	f := Certs{
		CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	writePEM(t, f.CA, "CERTIFICATE", ca.Raw)
	writePEM(t, f.OtherCA, "CERTIFICATE", other.Raw)
	leaf(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(ownLoopback(t).addr())},
		// Both: cluster nodes present it when they dial each other too.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, f.ServerCert, f.ServerKey)
	leaf(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "orderstore test client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, f.ClientCert, f.ClientKey)
	return f
}

// issue makes a key and a certificate from tmpl signed by parent's key
// (self-signed when parent is nil), valid from an hour ago for a day.
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	// A random serial number, as CAs make them.
	tmpl.SerialNumber, _ = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func authority(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	return issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil, nil)
}

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, certFile, keyFile string) {
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cert, key := issue(t, tmpl, ca, caKey)
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", cert.Raw)
	writePEM(t, keyFile, "PRIVATE KEY", kb)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Addrs returns n listen addresses ("host:port") for the route, leaf or client listeners of t whose
// addresses must be known before they start (each cluster node lists every node's route; edges dial
// a hub that is not up yet) or must stay the same when their server restarts. They are ports of a
// loopback address of t's own, a random 127.x.y.z (Linux routes all of 127.0.0.0/8 to lo), where
// nothing else listens: unlike a port of 127.0.0.1 that was free a moment ago, no other test's or
// process's listener or connection can take one between now and when it is used, nor while its
// server is down. (Outgoing connections to it come from 127.0.0.1, and the ports lie below the
// kernel's ephemeral range, net.ipv4.ip_local_port_range, where every random port of a listener on
// all addresses comes from.) Each call returns further ports of the same address; the server
// certificate of [TLS] for the same t is valid for it. Config validation counts it as loopback.
//
// Where 127.0.0.1 is the only loopback address (macOS), they are its ports that were free just now.
func Addrs(t testing.TB, n int) []string {
	t.Helper()
	lb := ownLoopback(t)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	low, high := 20000, ephemeralLow()-1
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 10000 {
			t.Fatalf("Addrs: no %d free ports on %s in %d..%d", n, lb.host, low, high)
		}
		if lb.next < low || lb.next > high {
			lb.next = low + mrand.IntN(high-low+1)
		}
		addr := net.JoinHostPort(lb.host, strconv.Itoa(lb.next))
		lb.next++
		// Only a listener on all addresses with this port (a service's fixed port) or an address
		// 127.x.y.z not routed to lo (macOS) stops this.
		l, err := net.Listen("tcp", addr)
		if errors.Is(err, syscall.EADDRNOTAVAIL) && lb.host != "127.0.0.1" {
			lb.host = "127.0.0.1"
			continue
		}
		if err != nil {
			continue
		}
		l.Close()
		addrs = append(addrs, addr)
	}
	return addrs
}

// loopback is t's own loopback address and the next port [Addrs] tries on it.
type loopback struct {
	mu   sync.Mutex
	host string
	next int
}

func (lb *loopback) addr() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.host
}

var (
	loopbacksMu sync.Mutex
	loopbacks   = map[testing.TB]*loopback{}
)

// ownLoopback is t's loopback address: a random 127.x.y.z, x > 0 (clear
// of 127.0.0.1, systemd-resolved's 127.0.0.53 and Debian's 127.0.1.1 for
// the host name), the same for every call with t.
func ownLoopback(t testing.TB) *loopback {
	loopbacksMu.Lock()
	defer loopbacksMu.Unlock()
	if lb, ok := loopbacks[t]; ok {
		return lb
	}
	lb := &loopback{host: fmt.Sprintf("127.%d.%d.%d", 1+mrand.IntN(254), mrand.IntN(256), 1+mrand.IntN(254))}
	loopbacks[t] = lb
	t.Cleanup(func() {
		loopbacksMu.Lock()
		delete(loopbacks, t)
		loopbacksMu.Unlock()
	})
	return lb
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= 21000 {
		return 32768
	}
	return lo
}
