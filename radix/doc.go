// Package radix is the Session-Prefix Indexer: which KV blocks each agent
// session's context consists of, and which of them it shares with other
// sessions.
//
// # Model
//
// A session's context is a chain of block hashes (root first, the sequence
// hashes flashindex computes, where each hash commits to every block before
// it). The tree stores the union of live sessions' chains as a radix tree
// with compressed edges: a run of blocks with no branching is one node, and
// a node splits only where contexts diverge. A session is a branch; a
// subagent's branch forks from its parent's wherever their contexts stop
// agreeing (often right after the shared system prompt).
//
// Each session holds up to MaxFrontiers (4) frontiers, the ends of the
// branches it references. A request that extends a frontier advances it; a
// resend of an earlier prefix changes nothing; a context that agrees with
// none of them (compaction rewrote it, or a side request with another
// prefix) opens a new frontier and the least recent one beyond the bound
// is released. The most recent frontier is the session's lineage.
//
// # Hydration
//
// UpdateFromMatch(session, chain) records a routed request. It finds where
// chain leaves the tree in one lookup when chain extends one of the
// session's frontiers (O(log n) lookups by binary search otherwise, e.g. a
// subagent's first request) and inserts only the new tail: extending an
// 8,000-block context by 192 blocks costs 192 inserts. The tree checks the
// join block, not the whole prefix, so chains must be prefix-chained.
//
// Stored(session, parent, blocks) attributes an engine's stored-block event
// to the session whose request caused it. Both reject a block the tree
// already holds under another parent (*ParentConflictError) or a chain
// that would repeat a block (*CycleError); errors.Is(err, ErrLineage)
// matches both, and a failed update changes nothing.
//
// Engine evictions do not delete lineage: the tree records what a session's
// context is, not where its blocks are cached (flashindex does that), so it
// has no per-block removal. Blocks leave only when no live session
// references them: RemoveSession, the MaxSessions LRU bound (65,536
// sessions by default; Config.OnEvict reports evictions), or a frontier
// pushed out by MaxFrontiers. Removal re-compresses the edges it leaves.
//
// # Queries
//
//   - Lineage: the session's chain, root first (copies one run per node);
//     Path: the same as compressed segments, O(depth in nodes).
//   - Frontiers: the ends of the session's branches.
//   - Sessions(block): every session whose lineage includes block;
//     CountSessions(block, limit): how many, stopping at limit;
//     SharedRefs: that count for each leading block of a session's lineage.
//   - Under(session): sessions whose lineage contains all of the session's
//     and goes deeper (subagents forked at or below its frontier).
//   - Split(session): how many leading blocks of its lineage other live
//     sessions also reference, and how many are its own unique tail, in
//     O(depth in nodes), whatever the number of blocks.
//   - Junction(chain): how many leading blocks of a chain naming no
//     session the tree holds on one path (a new session's prompt shares
//     them with the sessions it knows), O(log len(chain)) lookups.
//   - Stats: sessions, frontiers, nodes, blocks and an estimate of bytes.
//
// # Representation
//
// Block hash → (node, depth) lives in an open-addressing table with
// pointer-free 16-byte slots, so the garbage collector never scans it and
// an insert is one short probe. Nodes, frontiers and sessions live in
// slices addressed by 32-bit ids with free lists. Splitting or merging an
// edge relabels the smaller side's blocks only.
//
// # Thread safety and ownership
//
// Tree is safe for concurrent use: a RawTree (the synchronous core, not
// safe for concurrent use, not even for concurrent queries, which use
// scratch fields) behind one mutex. OnEvict is called after the lock is
// released. The tree never keeps a caller's slice; query results are
// appended to the caller's dst and belong to the caller.
package radix
