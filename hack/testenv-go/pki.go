package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// pki holds the files of the cluster's certificate authority and the
// credentials derived from it. Everything lives in <state>/pki and is reused
// across restarts so kubeconfigs handed out earlier keep working.
type pki struct {
	dir string

	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	SAKey, SAPub            string
	KubeletCert, KubeletKey string
	FrontProxyCA            string
	FrontProxyCert          string
	FrontProxyKey           string
}

func newPKI(dir string) *pki {
	p := func(n string) string { return filepath.Join(dir, n) }
	return &pki{
		dir:            dir,
		CACert:         p("ca.crt"),
		CAKey:          p("ca.key"),
		ServingCert:    p("apiserver.crt"),
		ServingKey:     p("apiserver.key"),
		AdminCert:      p("admin.crt"),
		AdminKey:       p("admin.key"),
		SAKey:          p("sa.key"),
		SAPub:          p("sa.pub"),
		KubeletCert:    p("kubelet.crt"),
		KubeletKey:     p("kubelet.key"),
		FrontProxyCA:   p("front-proxy-ca.crt"),
		FrontProxyCert: p("front-proxy-client.crt"),
		FrontProxyKey:  p("front-proxy-client.key"),
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ensure creates whatever is missing.
func (p *pki) ensure() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	if !exists(p.CACert) || !exists(p.CAKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               pkix.Name{CommonName: "dco-testenv-ca"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return err
		}
		if err := writeKey(p.CAKey, key); err != nil {
			return err
		}
		if err := writeCert(p.CACert, der); err != nil {
			return err
		}
		// a new CA invalidates everything signed by the old one
		for _, f := range []string{p.ServingCert, p.AdminCert, p.KubeletCert} {
			os.Remove(f)
		}
	}
	caCert, caKey, err := p.loadCA()
	if err != nil {
		return err
	}
	leaf := func(certPath, keyPath, cn string, orgs []string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
		if exists(certPath) && exists(keyPath) {
			return nil
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               pkix.Name{CommonName: cn, Organization: orgs},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(5 * 365 * 24 * time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:           []x509.ExtKeyUsage{usage},
			BasicConstraintsValid: true,
			DNSNames:              dns,
			IPAddresses:           ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writeKey(keyPath, key); err != nil {
			return err
		}
		return writeCert(certPath, der)
	}
	loop := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if err := leaf(p.ServingCert, p.ServingKey, "kube-apiserver", nil, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, loop); err != nil {
		return err
	}
	if err := leaf(p.AdminCert, p.AdminKey, "dco-testenv-admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	if err := leaf(p.KubeletCert, p.KubeletKey, "dco-testenv-kubelet", nil, x509.ExtKeyUsageServerAuth, []string{"localhost"}, loop); err != nil {
		return err
	}
	if !exists(p.FrontProxyCA) || !exists(p.FrontProxyCert) {
		// a separate CA for the aggregation layer's request-header auth
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: "dco-testenv-front-proxy-ca"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return err
		}
		fpCA, _ := x509.ParseCertificate(der)
		if err := writeCert(p.FrontProxyCA, der); err != nil {
			return err
		}
		ckey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		ctmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: "front-proxy-client"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(5 * 365 * 24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, BasicConstraintsValid: true,
		}
		cder, err := x509.CreateCertificate(rand.Reader, ctmpl, fpCA, ckey.Public(), key)
		if err != nil {
			return err
		}
		if err := writeKey(p.FrontProxyKey, ckey); err != nil {
			return err
		}
		if err := writeCert(p.FrontProxyCert, cder); err != nil {
			return err
		}
	}
	if !exists(p.SAKey) || !exists(p.SAPub) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		if err := writeKey(p.SAKey, key); err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			return err
		}
		if err := os.WriteFile(p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (p *pki) loadCA() (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(p.CACert)
	if err != nil {
		return nil, nil, err
	}
	blk, _ := pem.Decode(cb)
	if blk == nil {
		return nil, nil, fmt.Errorf("bad CA cert %s", p.CACert)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(p.CAKey)
	if err != nil {
		return nil, nil, err
	}
	kblk, _ := pem.Decode(kb)
	if kblk == nil {
		return nil, nil, fmt.Errorf("bad CA key %s", p.CAKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, k.(crypto.Signer), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n.Add(n, big.NewInt(1))
}

func writeKey(path string, key any) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
