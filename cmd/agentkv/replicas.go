package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/eventplane"
	"github.com/agentkv/agentkv/eventplane/embedded"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/sharedpool"
)

// natsFlags are the proxy's event-plane flags (--nats and friends).
type natsFlags struct {
	url, model, name, dir *string
	port                  *int
	snapshotEvery         *time.Duration
}

func addNATSFlags(fs flagSet) *natsFlags {
	return &natsFlags{
		url:           fs.String("nats", "", "run as one router replica on this NATS JetStream server (nats://HOST:4222), or \"embedded\" to start one in this process; KV events then come from an \"agentkv relay\" beside each worker"),
		model:         fs.String("model", "default", "with --nats: the model name that scopes the stream and buckets (the same on every replica and relay)"),
		name:          fs.String("replica", "", "with --nats: this replica's name (letters, digits, - and _; default: host name and listen port)"),
		dir:           fs.String("nats-dir", "", "with --nats embedded: the JetStream store directory (default: a new temporary directory)"),
		port:          fs.Int("nats-port", 4222, "with --nats embedded: the client port on 127.0.0.1 (0: any free port)"),
		snapshotEvery: fs.Duration("snapshot-every", eventplane.DefaultSnapshotEvery, "with --nats: how often this replica stores an index snapshot"),
	}
}

// natsReplica is the proxy's event-plane state between prepare and stop.
type natsReplica struct {
	srv   *embedded.Server
	plane *eventplane.Plane
	rp    *eventplane.Replica
	pool  *sharedpool.Pool // the shared KV pool, fed from the stream (relays with --store)
	seq   uint64
	name  string
	log   *slog.Logger
}

// prepare connects to (or starts) NATS, loads the newest snapshot into
// cfg and points the gateway's routing at the replica. It returns nil when
// --nats is not set.
func (f *natsFlags) prepare(ctx context.Context, cfg *gateway.StackConfig, listen string, log *slog.Logger, stdout io.Writer) (*natsReplica, error) {
	if *f.url == "" {
		return nil, nil
	}
	for _, w := range cfg.Workers {
		if w.Events != "" {
			return nil, usagef("proxy: with --nats, KV events come from \"agentkv relay\" beside each worker: drop events= from --worker %s", w.URL)
		}
	}
	nr := &natsReplica{log: log, name: *f.name}
	if nr.name == "" {
		host, _ := os.Hostname()
		nr.name = host + "-" + listen
	}
	nr.name = sanitize(nr.name)
	url := *f.url
	if url == "embedded" {
		dir := *f.dir
		if dir == "" {
			d, err := os.MkdirTemp("", "agentkv-nats-")
			if err != nil {
				return nil, err
			}
			dir = d
		}
		srv, err := embedded.Start(embedded.Config{Dir: dir, Port: *f.port})
		if err != nil {
			return nil, fmt.Errorf("proxy: --nats embedded: %w", err)
		}
		nr.srv, url = srv, srv.URL()
		fmt.Fprintf(stdout, "agentkv proxy: embedded NATS JetStream at %s (store %s)\n", url, dir)
	}
	plane, err := eventplane.Connect(url, eventplane.Config{Model: *f.model, SnapshotEvery: *f.snapshotEvery, Logger: log})
	if err != nil {
		nr.stop()
		return nil, err
	}
	nr.plane = plane
	// Every replica indexes the shared pool from the stream (its layout
	// comes with the relay's batches); without a relay with --store it
	// stays empty and credits nothing.
	if nr.pool, err = sharedpool.NewPool(sharedpool.Config{}); err != nil {
		nr.stop()
		return nil, err
	}
	cfg.SharedPool = nr.pool
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := plane.Ensure(c); err != nil {
		// NATS down at start: route on local state, the replica catches up later.
		log.Warn("proxy: NATS not reachable; starting cold on local state", "err", err)
	} else if snap, err := eventplane.LoadSnapshot(c, plane); err == nil {
		if snap.Pool != nil {
			if err := nr.pool.Restore(bytes.NewReader(snap.Pool)); err != nil {
				// The index without the pool would skip the pool batches
				// before the snapshot: start cold instead.
				log.Warn("proxy: shared-pool snapshot not restored; starting cold", "err", err)
				snap = nil
			}
		}
		if snap != nil {
			cfg.IndexSnapshot = bytes.NewReader(snap.Data)
			nr.seq = snap.Seq
			log.Info("proxy: starting warm from snapshot", "replica", snap.Replica, "seq", snap.Seq, "bytes", len(snap.Data),
				"pool_bytes", len(snap.Pool), "pool_pages", nr.pool.Len())
		}
	} else if !errors.Is(err, eventplane.ErrNoSnapshot) {
		log.Warn("proxy: snapshot not loaded; starting cold", "err", err)
	}
	cfg.ExternalEvents = true
	cfg.Gateway.Route = func(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, error) {
		return nr.rp.Route(ctx, req)
	}
	return nr, nil
}

// headerReplica names the replica that served a request; headerForwarded
// marks a request one replica forwarded to its program's owner.
const (
	headerReplica   = "X-Agentkv-Replica"
	headerForwarded = "X-Agentkv-Forwarded-By"
)

// start runs the replica on the stack's router and adds /readyz to h.
// With admission, each program's turns are admitted by one owner replica:
// a turn of a program another live replica owns is forwarded there.
func (nr *natsReplica) start(s *gateway.Stack, h http.Handler, self string, admission bool, maxBody int64) (http.Handler, error) {
	m, err := eventplane.NewMetrics(s.Registry())
	if err != nil {
		return nil, err
	}
	r := s.Router()
	rp, err := eventplane.NewReplica(nr.plane, eventplane.ReplicaConfig{Name: nr.name, Router: r, Pool: nr.pool,
		StartSeq: nr.seq + 1, Metrics: m, URL: self,
		// A worker whose relay went is removed; when its relay comes back
		// the worker (one of --worker, by ID) is routed to again.
		OnWorker: func(w eventplane.WorkerInfo, up bool) {
			if !up {
				r.RemoveWorker(w.ID)
				return
			}
			if w.ID >= uint64(s.Workers()) || slices.ContainsFunc(r.Workers(), func(k flashindex.Worker) bool { return k.ID == w.ID }) {
				return
			}
			id := int(w.ID)
			if s.WorkerInfo(id).BlockSize == 0 {
				// Not connected yet (it was down when the proxy
				// started): the stack adds it when it first answers.
				// The normal join, not a refusal.
				nr.log.Debug("proxy: worker's relay is up; the worker joins when it answers", "worker", id)
				return
			}
			if err := r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo { return s.WorkerInfo(id) })); err != nil {
				nr.log.Warn("proxy: returning worker refused", "worker", id, "err", err)
			}
		}})
	if err != nil {
		return nil, err
	}
	nr.rp = rp
	rp.Start(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Gateway().Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := rp.Ready(); err != nil {
			// Degraded still routes: 200 with the reason, so a load
			// balancer keeps the replica while operators see why.
			w.Header().Set("X-Agentkv-Degraded", "1")
			fmt.Fprintf(w, "degraded: %v\n", err)
			return
		}
		fmt.Fprintf(w, "ok: replica %s applied %d\n", nr.name, rp.Applied())
	})
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(headerReplica, nr.name)
		h.ServeHTTP(w, r)
	})
	if admission {
		mux.Handle("/", nr.forwardOwned(local, maxBody))
	} else {
		mux.Handle("/", local)
	}
	return mux, nil
}

// forwardOwned sends a request of a program owned by another live
// replica to that replica, so one admission controller decides each
// program; everything else, and a request the owner cannot take, is served
// here.
func (nr *natsReplica) forwardOwned(local http.Handler, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get(headerForwarded) != "" {
			local.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil || int64(len(body)) > maxBody {
			local.ServeHTTP(w, r) // the gateway answers the oversized or broken body
			return
		}
		ac, _ := session.Default.FromRequest(r, body)
		program := ac.ProgramID
		if program == "" {
			program = ac.SessionID
		}
		if program == "" {
			local.ServeHTTP(w, r)
			return
		}
		o, err := nr.rp.Owner(r.Context(), program)
		target, perr := url.Parse(o.URL)
		if err != nil || o.Self || o.URL == "" || perr != nil {
			local.ServeHTTP(w, r)
			return
		}
		fwd := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = pr.In.Host
				pr.Out.Header.Set(headerForwarded, nr.name)
			},
			FlushInterval: -1,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				nr.log.Warn("proxy: program owner unreachable; admitting here", "owner", o.Name, "err", err)
				r.Body = io.NopCloser(bytes.NewReader(body))
				local.ServeHTTP(w, r)
			},
		}
		fwd.ServeHTTP(w, r)
	})
}

func (nr *natsReplica) stop() {
	if nr == nil {
		return
	}
	if nr.rp != nil {
		_ = nr.rp.Close()
	}
	if nr.plane != nil {
		nr.plane.Close()
	}
	if nr.srv != nil {
		nr.srv.Stop()
	}
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
