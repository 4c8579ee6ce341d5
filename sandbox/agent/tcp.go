package agent

// The agent's network mode, for sandboxes the host cannot give pipes to (a
// pod on a Kubernetes node): the agent listens on TCP and the host dials it
// over a network it must not trust.
//
// Both directions are authenticated per sandbox, from one Credentials made
// by the host and handed to the agent out of band (a Kubernetes Secret):
//
//   - The agent serves TLS 1.3 with a certificate made for this sandbox
//     alone; the host pins that exact certificate, so nobody else on the
//     network can pose as the agent or read the frames.
//   - Inside TLS, the host's first frame is frameAuth carrying a random
//     32-byte token. The agent compares it in constant time and closes any
//     connection that sends something else, or nothing within AuthTimeout.
//     Only then does it send Ready: an unauthenticated peer never sees a
//     frame.
//
// The agent serves every authenticated connection at once (each gateway
// replica keeps one), their commands through one queue, one at a time in
// the order they arrived (ServeTLS), and exits when the last one it
// serves ends, like the stdio mode exits when its stdin closes (the pod
// restarts it).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// frameAuth is the host's first frame on a network connection; payload:
// the token.
const frameAuth byte = 6

// TokenSize is the length of the token in bytes.
const TokenSize = 32

// AuthTimeout bounds the TLS handshake and the token frame of a new
// connection.
const AuthTimeout = 10 * time.Second

// ServerName is the name in every agent certificate and the one the host
// asks for; the pin, not the name, is what identifies the sandbox.
const ServerName = "shellgate-agent"

// File names of Credentials in a directory (a mounted Secret).
const (
	CertFile  = "tls.crt"
	KeyFile   = "tls.key"
	TokenFile = "token"
)

// ErrUnauthenticated is what the agent records for a connection it closed
// because it did not authenticate.
var ErrUnauthenticated = errors.New("agent: connection not authenticated")

// Credentials authenticate one sandbox's agent and its host to each other.
// The agent needs all three; the host needs CertPEM (to pin) and Token.
type Credentials struct {
	CertPEM, KeyPEM []byte
	Token           []byte
}

// NewCredentials makes a fresh self-signed ECDSA P-256 certificate and a
// random token for one sandbox.
func NewCredentials() (Credentials, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Credentials{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return Credentials{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: ServerName},
		DNSNames:     []string{ServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0), // the pin, not the date, is what counts
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Credentials{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Credentials{}, err
	}
	token := make([]byte, TokenSize)
	if _, err := rand.Read(token); err != nil {
		return Credentials{}, err
	}
	return Credentials{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Token:   token,
	}, nil
}

// ReadCredentials reads tls.crt, tls.key and token from dir.
func ReadCredentials(dir string) (Credentials, error) {
	var c Credentials
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{CertFile, &c.CertPEM}, {KeyFile, &c.KeyPEM}, {TokenFile, &c.Token}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return Credentials{}, fmt.Errorf("agent credentials: %w", err)
		}
		*f.dst = b
	}
	if len(c.Token) != TokenSize {
		return Credentials{}, fmt.Errorf("agent credentials: token is %d bytes, want %d", len(c.Token), TokenSize)
	}
	return c, nil
}

// ServerTLS is the agent's TLS configuration from c.
func (c Credentials) ServerTLS() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("agent credentials: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// ClientTLS is the host's TLS configuration: it trusts c's certificate and
// nothing else.
func (c Credentials) ClientTLS() (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CertPEM) {
		return nil, errors.New("agent credentials: no certificate in CertPEM")
	}
	return &tls.Config{RootCAs: pool, ServerName: ServerName, MinVersion: tls.VersionTLS13}, nil
}

// DialTCP connects to an agent listening at addr, authenticates with c and
// waits for its Ready frame. The agent's certificate must be c's.
func DialTCP(ctx context.Context, addr string, c Credentials) (*Client, error) {
	if len(c.Token) != TokenSize {
		return nil, fmt.Errorf("agent: token is %d bytes, want %d", len(c.Token), TokenSize)
	}
	cfg, err := c.ClientTLS()
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 15 * time.Second}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w", addr, err)
	}
	if err := writeFrame(conn, frameAuth, 0, c.Token); err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent at %s: %w", addr, err)
	}
	cl, err := Dial(ctx, conn, conn)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w", addr, err)
	}
	return cl, nil
}

// authenticate reads the token frame from a new connection: exactly one
// frameAuth of TokenSize bytes equal to token.
func authenticate(conn net.Conn, token []byte) error {
	var hdr [9]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	n := int(hdr[5])<<24 | int(hdr[6])<<16 | int(hdr[7])<<8 | int(hdr[8])
	if hdr[0] != frameAuth || n != TokenSize {
		return fmt.Errorf("%w: first frame type %d of %d bytes", ErrUnauthenticated, hdr[0], n)
	}
	got := make([]byte, TokenSize)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if subtle.ConstantTimeCompare(got, token) != 1 {
		return fmt.Errorf("%w: wrong token", ErrUnauthenticated)
	}
	return nil
}
