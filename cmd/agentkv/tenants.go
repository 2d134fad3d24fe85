package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentkv/agentkv/gateway/tenant"
)

// reloadOnHUP re-reads the proxy's key file on every SIGHUP until ctx ends
// (a file that fails to parse leaves the keys in use and is logged). The
// returned func stops it.
func reloadOnHUP(ctx context.Context, keys *tenant.Set, log *slog.Logger) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-hup:
				if err := keys.Reload(); err != nil {
					log.Error("proxy: --api-keys not reloaded; the keys in use stay", "err", err)
					continue
				}
				log.Info("proxy: API keys reloaded", "keys", keys.Keys().Len(), "tenants", len(keys.Keys().Tenants()))
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(quit)
		<-done
	}
}

// loopback reports whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
