// Package testpki makes throwaway certificates for tests of TLS and mutual
// TLS: a CA, a server certificate for 127.0.0.1 and localhost, a client
// certificate the CA signed, and one another CA signed.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a set of certificates written as PEM files into a directory.
type PKI struct {
	// CAFile holds the CA certificate; CertFile and KeyFile the server's
	// certificate (for 127.0.0.1, ::1 and localhost) and key;
	// ClientCertFile and ClientKeyFile a client certificate of the CA.
	CAFile, CertFile, KeyFile     string
	ClientCertFile, ClientKeyFile string
	// Server is the server certificate and key; Client the CA's client
	// certificate; Stranger one another CA signed.
	Server, Client, Stranger tls.Certificate
	// Pool holds the CA certificate.
	Pool *x509.CertPool
}

// New writes the certificates into dir. They are valid for an hour.
func New(dir string) (*PKI, error) {
	ca, caKey, err := selfSigned("txsink test CA")
	if err != nil {
		return nil, err
	}
	other, otherKey, err := selfSigned("another CA")
	if err != nil {
		return nil, err
	}
	p := &PKI{Pool: x509.NewCertPool(),
		CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"), ClientKeyFile: filepath.Join(dir, "client-key.pem")}
	p.Pool.AddCert(ca)
	if err := writePEM(p.CAFile, "CERTIFICATE", ca.Raw); err != nil {
		return nil, err
	}
	if p.Server, err = issue(ca, caKey, "127.0.0.1", x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if err := writePair(p.Server, p.CertFile, p.KeyFile); err != nil {
		return nil, err
	}
	if p.Client, err = issue(ca, caKey, "client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if err := writePair(p.Client, p.ClientCertFile, p.ClientKeyFile); err != nil {
		return nil, err
	}
	if p.Stranger, err = issue(other, otherKey, "client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return p, nil
}

// PKCS8Bundle returns c's private key (PKCS #8, unencrypted) followed by
// its certificate, PEM-encoded: the keystore a Kafka broker reads with
// ssl.keystore.type=PEM (Kafka does not read SEC 1 "EC PRIVATE KEY" blocks).
func PKCS8Bundle(c tls.Certificate) ([]byte, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("testpki: %w", err)
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
	for _, der := range c.Certificate {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return out, nil
}

// WritePair writes c's certificate and its key (SEC 1) as PEM files, for
// clients that load a key pair from files.
func WritePair(c tls.Certificate, certFile, keyFile string) error {
	return writePair(c, certFile, keyFile)
}

// ClientConfig returns a client TLS configuration that trusts the CA and,
// when cert is not nil, presents cert whatever CAs the server asks for.
func (p *PKI) ClientConfig(cert *tls.Certificate) *tls.Config {
	c := &tls.Config{RootCAs: p.Pool}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return c
}

func selfSigned(cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tpl := template(cn)
	tpl.IsCA, tpl.BasicConstraintsValid = true, true
	tpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("testpki: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tpl := template(cn)
	tpl.KeyUsage = x509.KeyUsageDigitalSignature
	tpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	if usage == x509.ExtKeyUsageServerAuth {
		tpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("testpki: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
}

func writePair(c tls.Certificate, certFile, keyFile string) error {
	if err := writePEM(certFile, "CERTIFICATE", c.Certificate[0]); err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return err
	}
	return writePEM(keyFile, "EC PRIVATE KEY", kb)
}

func writePEM(path, typ string, b []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600)
}
