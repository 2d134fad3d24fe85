// Package eventplane runs several agentkv routers ("replicas") in front of
// the same workers with one view of the KV cache, on NATS JetStream. The
// core packages never import it (nor NATS): a replica is an ordinary
// agentkv.Router fed through its public API (ApplyEvent, the replica
// hooks SetLoadObserver / SetRemoteLoad / OwnLoad, Config.IndexSnapshot,
// Override.AllowedRanks).
//
// # Pieces
//
//	engine ──ZMQ──► relay (Publisher) ──► stream <prefix>.kv.<model>.<worker>.<rank>
//	                                                   │  (one subject per worker rank, in order)
//	Mooncake master ──ZMQ──► relay ──► stream <prefix>.pool.<model>.<pool>
//	                                                   │  (store batches, with the pool's layout)
//	             replica A (Replica) ◄── durable consumer, acks ──┤
//	             replica B (Replica) ◄────────────────────────────┘
//	             replicas ──► object store: index + shared-pool snapshots, the sequence they cover
//	             replicas ◄─► core NATS <prefix>.load.<model>.<replica>: own active load
//	             replicas ◄─► KV bucket sessions: session → worker rank (compare-and-set, TTL)
//	             relays   ──► KV bucket workers: presence heartbeats (TTL); gone → removed
//	             replicas ──► KV bucket replicas: presence (TTL); program owners in sessions
//
// # One relay beside each worker
//
// Engines publish KV events on ZMQ, and each worker's stream must enter
// JetStream exactly once. A small `agentkv relay` runs beside each worker
// (same host or pod): it subscribes to the worker's ZMQ sockets with
// engine/vllm's Subscriber (replay of missed batches included) and
// publishes through a Publisher. The alternative, electing one replica per
// worker to bridge it, was rejected: the bridge would move between
// replicas on every election, each move a window where two replicas
// bridge (duplicates) or none does (loss), and the ZMQ replay buffer of
// the engine, which is what makes a reconnect lossless, is only useful to
// a subscriber that stays put. A relay has one job, lives and dies with its
// worker (so its presence record is the worker's liveness), needs no
// election, and scales with the workers rather than with the replicas.
//
// Exactly once: the Publisher stamps consecutive event ids per worker rank
// (continuing after the last stored one when a relay restarts, behind a
// Cleared event, since it cannot know what it missed), and publishes each
// message with a Nats-Msg-Id (a retried publish is dropped by the stream's
// duplicate window) and the subject sequence it expects to follow
// (Nats-Expected-Last-Subject-Sequence: a second relay writing the same
// worker is detected and resynchronised, never interleaved). While NATS is
// down the relay buffers events (bounded; on overflow it drops them and
// its next message starts with Cleared, so replicas under-report rather
// than keep blocks the engine evicted).
//
// # Wire format
//
// Messages are msgpack (see codec.go): a KV message carries consecutive
// events of one worker rank with token ids reduced to the block's local
// hash by the relay, about 18 bytes per stored block; a shared-pool
// message carries one Mooncake store batch ([sharedpool.Batch]) on
// <prefix>.pool.<model>.<pool>, with the pool's layout
// (PublisherConfig.PoolLayout), so every replica reads object keys alike
// and a layout change lands at the same stream position on all of them.
// DecodeKV and DecodePool never panic and bound every length (fuzzed).
//
// # The shared pool
//
// A model has one shared pool (SGLang HiCache on a Mooncake store). Its
// master publishes object events on ZMQ; a relay (`agentkv relay --store`,
// a Publisher whose ApplyPool is fed by engine/sglang's StoreSubscriber)
// carries each batch into the stream. A relay may carry the pool alone (a
// Publisher without a worker: PublisherConfig.Worker.BlockSize 0) or
// beside its worker's events. Mooncake keeps no replay buffer, so what a
// relay misses shows as a gap in the batch sequence numbers, and every
// replica's sharedpool.Index clears on it as a single router would; two
// relays carrying the same master publish each batch under the same
// message id (pool, sequence number, batch time), and the stream keeps one
// copy. A rejected event (malformed in Mooncake's message) travels as a
// remove of its object on every medium, which is what the index does with
// it. Replicas apply pool messages in stream order with the KV events
// (ReplicaConfig.Pool), so two replicas hold identical pools after the
// same sequence.
//
// # Consuming
//
// Every replica has a durable pull consumer (AckAll, explicit
// acknowledgement of the last message applied) on the model's stream and
// applies messages strictly in stream order: a message at or below the
// applied sequence is a redelivery and is dropped; one beyond the next
// sequence is held until the missing ones are redelivered (a consumer
// recreated at applied+1 if they are not); events the stream no longer
// holds (retention) clear the index, which then rebuilds from later
// events; a stream recreated under the replica (a server that lost its
// store: the stream's creation time changed) clears the index too, and the
// new stream is applied from its start. Relays notice the same through
// the expected subject sequence and number their events afresh. The index itself drops a repeated event id per worker, so a
// relay's retry is idempotent too. A replica that falls behind catches up
// from the stream at its full apply rate (see BENCHMARKS.md).
//
// # Snapshots
//
// Every Config.SnapshotEvery each replica serialises its index (the
// flashindex zstd format) and its shared pool (the sharedpool zstd
// format) between two messages, so the snapshot covers exactly the stream
// sequence it records, and stores both as one object in the object store,
// "replica.<name>", with that sequence and the index's length in its
// metadata. A new or restarted replica calls LoadSnapshot (the newest
// snapshot by sequence), builds its router with Config.IndexSnapshot,
// restores Snapshot.Pool into its pool (sharedpool.Pool.Restore) and
// starts its Replica at StartSeq = Snapshot.Seq+1: it routes with the
// cache and the pool of the moment of the snapshot at once. The stream keeps Config.Retention of events,
// four snapshot periods by default, so the events after the newest
// snapshot are always there.
//
// # What is shared and what is local
//
//	state                        where                      consistency
//	KV block index               stream → every replica     identical after the same sequence
//	shared-pool index            stream → every replica     identical after the same sequence;
//	                                                        in the snapshots
//	active load (per worker)     core NATS, every change    each replica adds the others' latest
//	                                                        report to its own; lost with its sender
//	session bindings             KV bucket, CAS, TTL        authoritative; local table mirrors it
//	worker membership            KV bucket (relay presence) gone → removed on every replica
//	session table, lineage,      local                      rebuilt from the turns a replica sees
//	hash cache, hints, traces
//	admission (paused programs)  one owner per program      owner in the sessions bucket (CAS);
//	                                                        turns forwarded to it (see below)
//
// Admission state is consistent by one owner per program: the first
// replica to see a program claims it in the sessions bucket
// ("p.<program>", compare-and-set, the bucket's TTL), and Replica.Owner
// tells every other replica who that is; agentkv proxy --admission --nats
// forwards a turn of a program another live replica owns to it, so one
// admission controller decides which of its programs run and which pause.
// A program whose owner's presence record (replicas bucket, renewed every
// third of Config.WorkerTTL) is gone is taken over by compare-and-set;
// an owner that cannot be reached has the turn admitted locally. With
// NATS down every replica owns what it sees (degraded, as above).
//
// Load reports carry absolute values with a sequence number, published at
// every change (coalesced) and every ReplicaConfig.LoadEvery; a replica
// silent for three heartbeats has its load dropped. Propagation takes one
// core-NATS hop (tens of microseconds on loopback), so two replicas
// herding in the same instant is bounded by that window, not removed.
//
// # Session bindings
//
// Replica.Route looks the session up in the sessions bucket. A binding to
// a live worker rank pins the request there; none: a subagent is placed
// where its parent is bound, anything else where the router chooses, and
// the binding is created with compare-and-set (the loser of a race
// re-routes to the winner's worker before anything is sent); a binding to
// a worker that is gone is moved by compare-and-set. The bucket's TTL
// expires idle sessions; every turn renews it. With the bucket unreachable
// the router's own session table decides (give the router
// Config.Affinity), and Route says so (BindLocal).
//
// # Failure handling
//
// NATS unreachable: relays buffer, replicas keep routing on their index,
// their own load and their local session table; Ready returns an error
// wrapping ErrDegraded (serve it in /readyz), the degraded metric is 1 and
// the disconnect is logged. On reconnect the durable consumer resumes from
// the last acknowledged sequence. A worker whose presence record is
// deleted (its relay stopped) or expires (relay or host died) is removed
// from every replica's router.
//
// # Thread safety
//
// Plane, Publisher and Replica are safe for concurrent use. The codec
// functions are pure.
package eventplane
