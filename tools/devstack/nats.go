package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/natsauth/tlsgen"
)

// startNATS runs the embedded nats-server with JetStream in operator mode (per-agent JWT users) and TLS
// only, keeping its store, accounts and certificates under dataDir so a second `make run` finds its
// streams, credentials and CA again. tlsFiles is the local CA and the server certificate
// (.data/tls, made on the first start).
func startNATS(addr, dataDir string, auth *natsauth.Authority, tlsFiles tlsgen.Files) (*server.Server, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("nats address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("nats port %q: %w", portText, err)
	}
	opts := &server.Options{
		ServerName: "configsync-devstack",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(dataDir, "nats"),
		NoSigs:     true,
		NoLog:      true,
	}
	if err := natsserver.Configure(opts, auth, filepath.Join(dataDir, "nats-accounts")); err != nil {
		return nil, err
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: tlsFiles.ServerCert, KeyFile: tlsFiles.ServerKey, Timeout: 5})
	if err != nil {
		return nil, fmt.Errorf("nats TLS: %w", err)
	}
	opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server on %s not ready after 10s", addr)
	}
	return ns, nil
}
