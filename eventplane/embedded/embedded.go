// Package embedded runs a NATS server with JetStream inside the process,
// for trying router replicas without installing nats-server (agentkv proxy
// --nats embedded) and for tests. It listens on loopback only.
//
// A production set-up runs nats-server -js (a three-server cluster for
// fault tolerance) and points every replica at it; this package exists so
// the event plane can be tried, and tested, with nothing else running.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures a Server. Zero fields mean the documented defaults.
type Config struct {
	// Dir is the JetStream store directory. Required: the stream, its
	// snapshots and the buckets survive a restart of the server on the
	// same directory.
	Dir string
	// Port is the client port on 127.0.0.1; 0 picks a free one (see URL).
	Port int
	// StartTimeout bounds the wait for the server to accept connections
	// (default 10 s).
	StartTimeout time.Duration
}

// Server is a running in-process NATS server. It is safe for concurrent
// use.
type Server struct {
	s   *server.Server
	url string
}

// ErrNotReady reports a server that did not accept connections in time.
var ErrNotReady = errors.New("embedded: NATS server not ready")

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded: Config.Dir is required")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "agentkv-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.Dir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 << 20,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(cfg.StartTimeout) {
		s.Shutdown()
		return nil, ErrNotReady
	}
	return &Server{s: s, url: s.ClientURL()}, nil
}

// URL is the client URL, nats://127.0.0.1:port.
func (s *Server) URL() string { return s.url }

// Port is the client port (to restart a server on the same one).
func (s *Server) Port() int {
	if a, ok := s.s.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
}
