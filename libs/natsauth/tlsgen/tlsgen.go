// Package tlsgen makes the TLS material of a ConfigSync NATS deployment that has no PKI of its own: a
// local certificate authority and server (and client) certificates signed by it, with Go's crypto/x509
// only. devstack (`make run`), natsauthgen and the tests use it. Keys are ECDSA P-256; files are PEM,
// keys written with mode 0600.
package tlsgen

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
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside a TLS directory.
const (
	CAFile         = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
)

// Validity of what Ensure creates; a certificate within Renewal of its end is made anew.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 2 * 365 * 24 * time.Hour
	Renewal        = 30 * 24 * time.Hour
)

// Files are the paths of a TLS directory's CA and server certificate.
type Files struct {
	Dir        string
	CA         string
	ServerCert string
	ServerKey  string
}

// Authority is a CA that signs certificates.
type Authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for clients' root pools.
	PEM []byte
}

// Ensure returns the TLS directory dir, creating on first use (or renewing when expired or near its
// end) a CA and a server certificate for hosts (DNS names and IP addresses). An existing server
// certificate that lacks one of hosts is made anew; the CA is kept as long as it is valid, so clients
// that trust it keep working.
func Ensure(dir string, hosts ...string) (Files, error) {
	f := Files{Dir: dir, CA: filepath.Join(dir, CAFile), ServerCert: filepath.Join(dir, ServerCertFile), ServerKey: filepath.Join(dir, ServerKeyFile)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("tlsgen: %w", err)
	}
	ca, err := loadAuthority(dir)
	if err != nil {
		if ca, err = NewAuthority("ConfigSync local CA"); err != nil {
			return f, err
		}
		if err := ca.Write(dir); err != nil {
			return f, err
		}
		_ = os.Remove(f.ServerCert) // signed by the old CA, if any
	}
	if serverCertCovers(f.ServerCert, ca, hosts) {
		return f, nil
	}
	certPEM, keyPEM, err := ca.Issue("configsync-nats", hosts, ServerValidity, true)
	if err != nil {
		return f, err
	}
	if err := writeFile(f.ServerKey, keyPEM, 0o600); err != nil {
		return f, err
	}
	return f, writeFile(f.ServerCert, certPEM, 0o644)
}

// NewAuthority creates a CA named name.
func NewAuthority(name string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsgen: CA key: %w", err)
	}
	tmpl := certTemplate(name, CAValidity)
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLenZero = true, true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsgen: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsgen: CA certificate: %w", err)
	}
	return &Authority{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Write stores the CA certificate and key in dir (CAFile, CAKeyFile).
func (a *Authority) Write(dir string) error {
	der, err := x509.MarshalECPrivateKey(a.key)
	if err != nil {
		return fmt.Errorf("tlsgen: CA key: %w", err)
	}
	if err := writeFile(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CAFile), a.PEM, 0o644)
}

// Issue signs a certificate for name: a server certificate (server auth) for hosts, or a client
// certificate (client auth) when server is false. It returns the certificate and key PEM.
func (a *Authority) Issue(name string, hosts []string, validity time.Duration, server bool) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsgen: key: %w", err)
	}
	tmpl := certTemplate(name, validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		// Cluster routes connect as clients of each other with the same certificate.
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsgen: sign %s: %w", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsgen: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// WriteClientCert issues a client certificate for name into dir (<name>.pem, <name>-key.pem) and
// returns the two paths.
func (a *Authority) WriteClientCert(dir, name string) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := a.Issue(name, nil, ServerValidity, false)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writeFile(certFile, certPEM, 0o644)
}

// LoadAuthority reads the CA of a TLS directory written by Ensure or Write.
func LoadAuthority(dir string) (*Authority, error) { return loadAuthority(dir) }

func loadAuthority(dir string) (*Authority, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("tlsgen: CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsgen: CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsgen: CA key: %w", err)
	}
	if !cert.IsCA || time.Until(cert.NotAfter) < Renewal {
		return nil, errors.New("tlsgen: CA is not a CA or is about to expire")
	}
	return &Authority{cert: cert, key: key, PEM: certPEM}, nil
}

// serverCertCovers reports whether path holds a certificate signed by ca, valid beyond Renewal, for
// every one of hosts.
func serverCertCovers(path string, ca *Authority, hosts []string) bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		return false
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil || cert.CheckSignatureFrom(ca.cert) != nil || time.Until(cert.NotAfter) < Renewal {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// certTemplate is what every certificate made here shares: a random serial, name in the ConfigSync
// organization, valid from an hour ago (clock skew) for validity.
func certTemplate(name string, validity time.Duration) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"ConfigSync"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
	}
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("tlsgen: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tlsgen: %w", err)
	}
	return nil
}
