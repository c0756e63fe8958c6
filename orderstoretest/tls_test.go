package orderstoretest

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"runtime"
	"slices"
	"testing"
)

// Addrs: distinct ports of one address of t's own (not 127.0.0.1 on
// Linux), which the server certificate of TLS names.
func TestAddrs(t *testing.T) {
	certs := TLS(t)
	addrs := append(Addrs(t, 3), Addrs(t, 2)...)
	host, _, _ := net.SplitHostPort(addrs[0])
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || runtime.GOOS == "linux" && host == "127.0.0.1" {
		t.Fatalf("Addrs on %s, want a loopback address of the test's own", host)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if h, _, _ := net.SplitHostPort(a); h != host || seen[a] {
			t.Fatalf("Addrs = %v, want distinct ports of one host", addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	b, err := os.ReadFile(certs.ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP(host)) }) {
		t.Errorf("the server certificate names %v, not %s", cert.IPAddresses, host)
	}
	t.Run("another test", func(t *testing.T) {
		if h, _, _ := net.SplitHostPort(Addrs(t, 1)[0]); h == host {
			t.Errorf("a subtest shares its parent's address %s", h)
		}
	})
}
