package secret

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// caPurpose is the additional data of a sealed CA key.
const caPurpose = "sbx-secret-ca"

// Certificate lifetimes: a sandbox's CA lasts as long as the sandbox may
// (its forks keep it); a leaf the proxy presents for a host is made on
// demand, lasts a week and is made again a day before it ends.
const (
	caLifetime   = 20 * 365 * 24 * time.Hour
	leafLifetime = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
)

// NewCA makes a sandbox's certificate authority (ECDSA P-256, crypto/x509):
// the certificate (PEM, "CERTIFICATE") that sbxd puts in the sandbox's
// trust store, and its private key (PKCS #8 DER) sealed by k, which never
// leaves sbxd. name is put in the subject (the sandbox's id).
func (k *Keeper) NewCA(name string) (certPEM, sealedKey []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sbx egress proxy CA " + name, Organization: []string{"sbx"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), k.Seal(kder, caPurpose), nil
}

// Authority issues the certificates the egress proxy presents to one
// sandbox for the hosts whose TLS it terminates. Safe for concurrent use.
type Authority struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	leafMu sync.Mutex
	leaves map[string]*tls.Certificate
	// leafKey is shared by the leaves: one key generation per sandbox, not
	// per host.
	leafKey *ecdsa.PrivateKey
}

// OpenCA opens a CA that NewCA made.
//
// Errors: ErrUnsealable (another sbxd's key), or a certificate or key
// that does not parse.
func (k *Keeper) OpenCA(certPEM, sealedKey []byte) (*Authority, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("secret CA: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("secret CA: %w", err)
	}
	kder, err := k.Open(sealedKey, caPurpose)
	if err != nil {
		return nil, err
	}
	pk, err := x509.ParsePKCS8PrivateKey(kder)
	if err != nil {
		return nil, fmt.Errorf("secret CA key: %w", err)
	}
	key, ok := pk.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("secret CA key: not ECDSA")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, key: key, leaves: map[string]*tls.Certificate{}, leafKey: leafKey}, nil
}

// Certificate is the CA's certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// Leaf returns a certificate for host (a DNS name, lowercase), signed by
// the CA, with the CA in its chain; made once and kept until a day before
// it ends.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	a.leafMu.Lock()
	defer a.leafMu.Unlock()
	if c := a.leaves[host]; c != nil && time.Until(c.Leaf.NotAfter) > leafRenew {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey, Leaf: leaf}
	if len(a.leaves) > 1024 {
		clear(a.leaves)
	}
	a.leaves[host] = c
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("secret: crypto/rand: " + err.Error())
	}
	return n
}
