package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/basin-nas/basin/internal/api"
	"github.com/basin-nas/basin/internal/config"
	"github.com/basin-nas/basin/internal/connlimit"
	"github.com/basin-nas/basin/internal/grpcapi"
)

// The files of the gRPC listener's own certificate under the data directory
// (no --grpc-cert-file): a CA of Basin's own, which clients trust, and the
// listener's certificate it issues.
const (
	GRPCCAFile      = "grpc-ca.pem"
	grpcCAKeyFile   = "grpc-ca-key.pem"
	grpcCertFile    = "grpc-cert.pem"
	grpcKeyFile     = "grpc-key.pem"
	grpcLeafLife    = 397 * 24 * time.Hour
	grpcCALife      = 10 * 365 * 24 * time.Hour
	grpcRenewBefore = 30 * 24 * time.Hour
)

// grpcServer is the v1 API over gRPC on cfg.GRPCListen, TLS only.
type grpcServer struct {
	g      *grpc.Server
	health *grpcapi.Health
	ln     net.Listener
	done   chan error
	log    *slog.Logger
	once   sync.Once
}

// serveGRPC listens on cfg.GRPCListen and serves a's API over gRPC with TLS
// (ALPN h2): cfg's certificate, or one issued by Basin's own CA
// (grpcCertificate). Every call is authenticated, rate-limited, authorized and
// audited by a as its REST calls are (internal/grpcapi).
func serveGRPC(cfg config.Config, a *api.Server, log *slog.Logger, now time.Time) (*grpcServer, error) {
	cert, err := grpcCertificate(cfg, log, now)
	if err != nil {
		return nil, fmt.Errorf("grpc certificate: %w", err)
	}
	// credentials.NewTLS offers h2 by ALPN and refuses clients that offer
	// another protocol only.
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	inner, err := net.Listen("tcp", cfg.GRPCListen)
	if err != nil {
		return nil, err
	}
	// REST's bounds, as far as they translate: connections in all and per
	// source (the oldest that never sent a byte goes first at a cap), a
	// request the size of REST's largest body, REST's header bound, streams
	// per connection, and idle connections closed. grpc-go reads a request
	// before the interceptor authenticates it: without these an anonymous
	// client could hold 4 MiB per stream on unbounded streams and
	// connections.
	// Stream workers run calls on goroutines kept from call to call, whose
	// stacks have grown to what a handler needs, as net/http runs a
	// connection's requests on one: a goroutine of its own per call made a
	// gRPC GET 30-50 µs slower than REST's (docs/benchmarks.md).
	// Static HTTP/2 flow-control windows: grpc-go's default, windows grown by
	// a bandwidth estimate, sent a PING (which the client must answer) and a
	// WINDOW_UPDATE on nearly every call, and let a stream's window grow to
	// 16 MiB of data the handler has not read; static, a stream holds at most
	// the largest request (grpc-go refills the connection's window as data
	// arrives, so what bounds a connection is its streams' windows together).
	ln := connlimit.New(inner, connlimit.Options{Max: cfg.HTTP.MaxConns, PerSource: cfg.HTTP.MaxConnsPerSource})
	opts := []grpc.ServerOption{grpc.Creds(creds), grpc.MaxRecvMsgSize(grpcMaxRequest), grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.StaticStreamWindowSize(grpcStreamWindow), grpc.StaticConnWindowSize(grpcConnWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(uint32(runtime.NumCPU()))}
	if t := cfg.HTTP.ReadHeaderTimeout; t > 0 {
		opts = append(opts, grpc.ConnectionTimeout(t)) // the TLS and HTTP/2 handshakes
	}
	if n := cfg.HTTP.MaxHeaderBytes; n > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(n)))
	}
	if t := cfg.HTTP.IdleTimeout; t > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: t}))
	}
	g, health := grpcapi.New(a, opts...)
	s := &grpcServer{g: g, health: health, ln: ln, done: make(chan error, 1), log: log}
	go func() { s.done <- s.g.Serve(ln) }()
	return s, nil
}

// The gRPC listener's bounds beside cfg.HTTP's: a request message no larger
// than REST's largest body, streams (calls in flight) per connection, and the
// static HTTP/2 receive windows of a stream (the largest request and its
// framing) and of a connection.
const (
	grpcMaxRequest   = 1 << 20
	grpcMaxStreams   = 100
	grpcStreamWindow = grpcMaxRequest + 64<<10
	grpcConnWindow   = 4 << 20
)

// Addr is the address the server listens on.
func (s *grpcServer) Addr() net.Addr { return s.ln.Addr() }

// Stop stops taking calls and waits for those running to end, until ctx is
// done; then it closes every connection. Calls after the first do nothing.
func (s *grpcServer) Stop(ctx context.Context) { s.once.Do(func() { s.stop(ctx) }) }

func (s *grpcServer) stop(ctx context.Context) {
	// Health checks answer NOT_SERVING from now on, while calls drain.
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { s.g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.log.Warn("grpc shutdown: calls still running are cut off")
		s.g.Stop()
		<-stopped
	}
	if err := <-s.done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		s.log.Warn("grpc", "err", err)
	}
}

// grpcCertificate is the gRPC listener's certificate: cfg's files, or the one
// Basin issues itself from a CA of its own under the data directory. The CA is
// made once and kept (clients trust grpc-ca.pem); the listener's certificate is
// issued again when it is missing, would expire within 30 days, or does not
// name every name clients may reach the listener by (localhost, the loopback
// addresses, the host name, --grpc-listen's host, --public-url's host). Keys are
// kept mode 0600.
func grpcCertificate(cfg config.Config, log *slog.Logger, now time.Time) (tls.Certificate, error) {
	if cfg.GRPCCertFile != "" {
		return tls.LoadX509KeyPair(cfg.GRPCCertFile, cfg.GRPCKeyFile)
	}
	dir := cfg.DataDir
	caFile := filepath.Join(dir, GRPCCAFile)
	ca, caKey, err := loadPair(caFile, filepath.Join(dir, grpcCAKeyFile))
	if _, statErr := os.Stat(caFile); err != nil && (!errors.Is(err, os.ErrNotExist) || statErr == nil) {
		// Clients trust this CA: a new one would break every one of them
		// silently. A first start cut short leaves a key without its
		// certificate (writePair writes the key first), which is made anew.
		return tls.Certificate{}, fmt.Errorf("Basin's gRPC CA %s cannot be used (%w); fix it, or remove it and its key to make a new one, which clients must then trust again", caFile, err)
	}
	if err != nil || now.After(ca.NotAfter) {
		if err == nil {
			log.Warn("grpc: Basin's CA expired; making a new one, which clients must trust again", "not_after", ca.NotAfter)
		}
		if ca, caKey, err = issue(nil, nil, pkix.Name{CommonName: "Basin gRPC CA"}, nil, now, grpcCALife); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePair(filepath.Join(dir, GRPCCAFile), filepath.Join(dir, grpcCAKeyFile), ca, caKey); err != nil {
			return tls.Certificate{}, err
		}
	}
	names := grpcNames(cfg)
	leaf, key, err := loadPair(filepath.Join(dir, grpcCertFile), filepath.Join(dir, grpcKeyFile))
	if err != nil || !leafFits(leaf, ca, names, now) {
		if leaf, key, err = issue(ca, caKey, pkix.Name{CommonName: names[0]}, names, now, grpcLeafLife); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePair(filepath.Join(dir, grpcCertFile), filepath.Join(dir, grpcKeyFile), leaf, key); err != nil {
			return tls.Certificate{}, err
		}
		log.Info("grpc: issued the listener's certificate", "names", names, "not_after", leaf.NotAfter)
	}
	log.Info("grpc: clients trust Basin's CA", "ca_file", filepath.Join(dir, GRPCCAFile))
	return tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// grpcNames are the names the listener's own certificate is for.
func grpcNames(cfg config.Config) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	add := func(n string) {
		if ip := net.ParseIP(n); n != "" && (ip == nil || !ip.IsUnspecified()) && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if h, err := os.Hostname(); err == nil {
		add(h)
	}
	if h, _, err := net.SplitHostPort(cfg.GRPCListen); err == nil {
		add(h)
	}
	if u, err := url.Parse(cfg.PublicURL); err == nil && cfg.PublicURL != "" {
		add(u.Hostname())
	}
	return names
}

// leafFits says whether leaf is ca's, valid past the renewal margin, and
// names every one of names.
func leafFits(leaf, ca *x509.Certificate, names []string, now time.Time) bool {
	if leaf.CheckSignatureFrom(ca) != nil || now.Add(grpcRenewBefore).After(leaf.NotAfter) {
		return false
	}
	for _, n := range names {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// issue makes a key and a certificate for it: a CA's (parent nil: self-signed),
// or a server certificate for names signed by parent.
func issue(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, subject pkix.Name, names []string, now time.Time, life time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: subject, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life),
		BasicConstraintsValid: true}
	if parent == nil {
		tmpl.IsCA, tmpl.MaxPathLenZero = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, n := range names {
			if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// loadPair reads a certificate and its ECDSA key, as writePair writes them.
func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an ECDSA key", keyPath)
	}
	return pair.Leaf, key, nil
}

// writePair writes a certificate (mode 0644) and its key (0600), each
// atomically.
func writePair(certPath, keyPath string, cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
