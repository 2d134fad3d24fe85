package admission

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// WorkerID identifies one KV pool the controller places programs on: an
// engine instance (or one data-parallel rank of it). It is a plain uint64 so
// callers can map their own worker identity onto it (the root router maps
// flashindex.Worker{ID, DPRank} to a WorkerID).
type WorkerID uint64

func (w WorkerID) String() string { return strconv.FormatUint(uint64(w), 10) }

// Phase is what a program is doing right now.
type Phase uint8

const (
	// Reasoning: a request (model turn) of the program is in flight, or held
	// waiting for admission.
	Reasoning Phase = iota
	// Acting: between requests; the agent is running a tool. This is the
	// tool boundary at which a program may be paused without preempting a
	// decode.
	Acting
)

func (p Phase) String() string {
	switch p {
	case Reasoning:
		return "reasoning"
	case Acting:
		return "acting"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Lifecycle is whether a program holds a place on a worker.
type Lifecycle uint8

const (
	// Active: assigned to a worker; its tokens count towards that worker's
	// utilisation.
	Active Lifecycle = iota
	// Paused: off every worker (its KV may be evicted). A new program that
	// found no room is Paused and never placed: see Status Queued.
	Paused
	// Terminated: the session ended. Terminated programs are forgotten
	// immediately; the value appears only in decision records and Status.
	Terminated
)

func (l Lifecycle) String() string {
	switch l {
	case Active:
		return "active"
	case Paused:
		return "paused"
	case Terminated:
		return "terminated"
	}
	return fmt.Sprintf("lifecycle(%d)", uint8(l))
}

// Status answers "may this program's next turn run now?".
type Status uint8

const (
	// StatusUnknown: no such program (never started, or already ended). A
	// turn of an unknown program is a new program: StartRequest places or
	// queues it.
	StatusUnknown Status = iota
	// StatusRunnable: the program is Active; its next turn runs at once.
	StatusRunnable
	// StatusPaused: the program is Paused with no turn held; its next turn
	// will be held until a Resume decision.
	StatusPaused
	// StatusHeld: the program is Paused and a turn of it is held; a Resume
	// decision with Released set releases it.
	StatusHeld
	// StatusQueued: a new program waiting for its first placement (its
	// first turn is held).
	StatusQueued
)

func (s Status) String() string {
	switch s {
	case StatusUnknown:
		return "unknown"
	case StatusRunnable:
		return "runnable"
	case StatusPaused:
		return "paused"
	case StatusHeld:
		return "held"
	case StatusQueued:
		return "queued"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Kind is the kind of a decision.
type Kind uint8

const (
	// KindAdmit: a turn may run now on Worker with Priority.
	KindAdmit Kind = iota + 1
	// KindQueue: a new program found no place, its first turn held.
	KindQueue
	// KindHold: a turn of a paused program is held.
	KindHold
	// KindPause: an Acting program was taken off its worker.
	KindPause
	// KindMark: a Reasoning program will be paused at its next tool
	// boundary; its tokens count as a future free.
	KindMark
	// KindUnmark: a mark was withdrawn because the worker fell to the pause
	// target without it.
	KindUnmark
	// KindResume: a paused or queued program was placed on Worker. When
	// Released is set, its held turn may run now with Priority.
	KindResume
	// KindDemote: Worker entered the soft-demote band; new turns of its
	// programs get the soft-demote priority.
	KindDemote
	// KindUndemote: Worker left the soft-demote band.
	KindUndemote
	// KindTerminate: the session ended. Released is set when a held turn was
	// dropped with it.
	KindTerminate
	// KindCancel: a held turn was withdrawn (Cancel, or a cancelled Admit).
	KindCancel
)

var kindNames = [...]string{"", "admit", "queue", "hold", "pause", "mark", "unmark", "resume", "demote", "undemote", "terminate", "cancel"}

func (k Kind) String() string {
	if int(k) > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Reason says why a decision was taken.
type Reason uint8

const (
	// ReasonActive: a turn of an Active program.
	ReasonActive Reason = iota + 1
	// ReasonRoom: a new program was placed on the least-utilised worker with
	// room.
	ReasonRoom
	// ReasonNoRoom: no worker had room for a new program.
	ReasonNoRoom
	// ReasonFairness: a new program queued behind programs already waiting.
	ReasonFairness
	// ReasonPaused: the program is paused.
	ReasonPaused
	// ReasonOverThreshold: the worker reached the pause threshold.
	ReasonOverThreshold
	// ReasonToolBoundary: a marked program reached its tool boundary.
	ReasonToolBoundary
	// ReasonBelowTarget: the worker fell to the pause target.
	ReasonBelowTarget
	// ReasonBinPacked: resumed by the placement policy under the resume
	// ceiling.
	ReasonBinPacked
	// ReasonForced: resumed after waiting for the forced-resume cap,
	// regardless of room.
	ReasonForced
	// ReasonBand: the worker's utilisation entered or left the soft-demote
	// band.
	ReasonBand
	// ReasonSessionEnd: the session ended.
	ReasonSessionEnd
	// ReasonWorkerRemoved: the program's worker was removed.
	ReasonWorkerRemoved
	// ReasonCancelled: the caller withdrew a held turn.
	ReasonCancelled
	// ReasonPreferred: a new program was placed on the caller's preferred
	// worker (StartRequestOn), which had room.
	ReasonPreferred
	// ReasonEmptyWorker: a program too large to fit under the resume
	// ceiling of any worker was placed on a worker with no programs, the
	// best place it will ever get (otherwise it could only run by forced
	// resume after the full cap).
	ReasonEmptyWorker
	// ReasonSwap: a held turn reached Waits.MaxWait; Acting programs were
	// paused (KindPause) or Reasoning ones marked (KindMark) to make room
	// for it, and it was resumed (KindResume) without overcommit.
	ReasonSwap
	// ReasonHome: resumed on its home worker, where it last ran.
	ReasonHome
	// ReasonRelocated: the program's worker could not take its turn (the
	// caller could not use it: failing, or out of routing), and the
	// program moved to a worker the caller offered (Relocate).
	ReasonRelocated
	// ReasonProbe: a turn of a program waiting at the door runs as a
	// probe (Door.Probe), the program staying at the door: KindResume with
	// Released for a held turn, KindAdmit for one run as it arrives.
	ReasonProbe
)

var reasonNames = [...]string{"", "active", "room", "no-room", "fairness", "paused", "over-threshold", "tool-boundary", "below-target", "bin-packed", "forced", "band", "session-end", "worker-removed", "cancelled", "preferred", "empty-worker", "swap", "home", "relocated", "probe"}

func (r Reason) String() string {
	if int(r) > 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Decision is one observable decision of the controller. It is a plain
// value; receivers may keep it.
type Decision struct {
	// Seq numbers decisions from 1 in the order they were taken.
	Seq uint64
	// At is the time passed to the call that took the decision.
	At     time.Time
	Kind   Kind
	Reason Reason
	// Program is the session id; empty for worker-level decisions
	// (KindDemote, KindUndemote).
	Program string
	// Worker is the worker concerned (the new worker for KindAdmit and
	// KindResume, the old one for KindPause); meaningful when HasWorker.
	Worker    WorkerID
	HasWorker bool
	// Tokens is the program's token total when the decision was taken.
	Tokens int64
	// Util is Worker's utilisation U after the decision (0 without a
	// worker).
	Util float64
	// Priority is the priority adjustment for the turn that may run
	// (KindAdmit, KindResume with Released): the resume boost plus the soft
	// demote penalty, in seconds of queue priority.
	Priority float64
	// Released is set on KindResume when a held turn may run now, and on
	// KindTerminate/KindCancel when a held turn was dropped.
	Released bool
	// Waited is how long a released or dropped held turn waited.
	Waited time.Duration
}

func (d Decision) String() string {
	s := d.Kind.String()
	if d.Program != "" {
		s += " " + d.Program
	}
	if d.HasWorker {
		s += " w=" + d.Worker.String()
	}
	s += " reason=" + d.Reason.String()
	if d.Program != "" {
		s += " tokens=" + strconv.FormatInt(d.Tokens, 10)
	}
	if d.HasWorker {
		s += " u=" + strconv.FormatFloat(d.Util, 'f', 3, 64)
	}
	if d.Priority != 0 {
		s += " prio=" + strconv.FormatFloat(d.Priority, 'g', -1, 64)
	}
	if d.Released {
		s += " released"
	}
	if d.Waited != 0 {
		s += " waited=" + d.Waited.String()
	}
	return s
}

// Grant returns the admission a releasing decision gives the program's
// held turns: for a KindResume with Released, Run on Worker, runnable, with
// the decision's priority and reason, and ok; for any other decision (a
// held turn dropped, or nothing released), the zero Admission and false.
// Admitter.Admit returns it to a blocked caller; a router that holds turns
// itself over a RawAdmitter gives it to the turns it releases.
func (d Decision) Grant() (Admission, bool) {
	if d.Kind != KindResume || !d.Released {
		return Admission{}, false
	}
	return Admission{Run: true, Worker: d.Worker, Priority: d.Priority, Status: StatusRunnable, Reason: d.Reason}, true
}

// Admission is the answer to a request start.
type Admission struct {
	// Run is true when the turn may run now on Worker. When false the turn
	// is held (Status says paused or queued) until a KindResume decision
	// with Released for this program.
	Run    bool
	Worker WorkerID
	// Priority is the priority adjustment for the turn (see Decision).
	Priority float64
	Status   Status
	Reason   Reason
}

// Program is a snapshot of one program's state.
type Program struct {
	ID        string
	Phase     Phase
	Lifecycle Lifecycle
	Status    Status
	// Worker is the assigned worker, meaningful when HasWorker (Active).
	Worker    WorkerID
	HasWorker bool
	// Tokens is the last reported prompt+completion total (or the prompt
	// length given at a request start, whichever came last).
	Tokens int64
	// Steps counts request starts (including held ones).
	Steps int
	// Inflight counts turns started and not ended (running or held).
	Inflight int
	// Held counts turns held while Paused.
	Held int
	// Marked: will be paused at its next tool boundary.
	Marked bool
	// Acting is the total time spent acting, up to the last request start
	// (or to the snapshot time while acting).
	Acting time.Duration
	// PausedAt is when the program was last paused or queued (Paused only).
	PausedAt time.Time
	// FirstPrefix is the prefix, in tokens, its first prompt shares with
	// the programs known before it, and SiblingKey the key naming it
	// (SetFirstPrefix); 0 when none was given.
	FirstPrefix int64
	SiblingKey  uint64
}

// WorkerInfo is a snapshot of one worker.
type WorkerInfo struct {
	ID       WorkerID
	Capacity int64
	// Used is the sum of its Active programs' token weights (undecayed).
	Used float64
	// Util is Used / Capacity.
	Util float64
	// Marked is the token weight of programs marked for pause (future frees).
	Marked    float64
	Programs  int
	Demoted   bool
	Reasoning int
	ActingN   int
	// Backlog is the prefill backlog last reported (SetBacklog), in tokens.
	Backlog int64
	// EngineUsed is the KV in use its engine last reported
	// (SetEngineUsage), in tokens; placement counts at least that as used.
	EngineUsed int64
}

// Stats counts decisions and anomalies since the controller was created.
type Stats struct {
	Admitted, Queued, Held, Paused, Marked, Unmarked, Resumed, Forced, Terminated, Cancelled uint64
	// Swapped counts programs resumed at Waits.MaxWait by making room
	// (ReasonSwap); SwapPaused the Acting programs paused for them.
	Swapped, SwapPaused uint64
	// Relocated counts running programs moved off a worker the caller
	// could not use (Relocate).
	Relocated uint64
	// Probed counts the turns that ran as probes while their programs
	// waited at the door (Door.Probe); SiblingsFirst those of them that
	// were first turns run ahead of the line because a sibling ran long
	// (Door.Probe.Siblings).
	Probed, SiblingsFirst uint64
	// DroppedDecisions counts decisions lost because the pending buffer was
	// full (only without Config.OnDecision).
	DroppedDecisions uint64
	// PlacementRejects counts assignments a Placement returned that did not
	// fit (ignored).
	PlacementRejects uint64
}

// Errors. All carry the "admission: " prefix.
var (
	ErrUnknownWorker  = errors.New("admission: unknown worker")
	ErrWorkerExists   = errors.New("admission: worker already exists")
	ErrBadCapacity    = errors.New("admission: capacity must be in (0, MaxTokens]")
	ErrUnknownProgram = errors.New("admission: unknown program")
	ErrNoRequest      = errors.New("admission: no request in flight for program")
	ErrNotHeld        = errors.New("admission: program has no held turn")
	ErrBadTokens      = errors.New("admission: token count outside [0, MaxTokens]")
	ErrEmptyID        = errors.New("admission: empty program id")
	// ErrTerminated is returned by a blocking Admit whose session ended
	// while its turn was held.
	ErrTerminated = errors.New("admission: program terminated while held")
	// ErrWouldWait is returned by TryAdmit when the turn cannot run now.
	ErrWouldWait = errors.New("admission: turn would wait")
)

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "admission: invalid config " + e.Field + ": " + e.Reason
}
