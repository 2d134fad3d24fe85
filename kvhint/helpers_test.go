package kvhint

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// randString returns a short string; with odd set it may contain characters
// JSON must escape and multi-byte runes.
func randString(r *rand.Rand, odd bool) string {
	const plain = "abcdefghijklmnopqrstuvwxyz0123456789-_:/."
	const weird = "\"\\\n\t\x01é→🙂<>&"
	n := r.IntN(12)
	if r.IntN(20) == 0 {
		n = 32 + r.IntN(300) // exercise str8/str16 headers
	}
	var b strings.Builder
	for range n {
		if odd && r.IntN(6) == 0 {
			rs := []rune(weird)
			b.WriteRune(rs[r.IntN(len(rs))])
		} else {
			b.WriteByte(plain[r.IntN(len(plain))])
		}
	}
	return b.String()
}

func randHash(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return uint64(r.IntN(300)) // small: exercises compact msgpack widths
	case 1:
		return uint64(r.Uint32())
	}
	return r.Uint64()
}

func randHashes(r *rand.Rand, n int) []uint64 {
	if n == 0 {
		return nil
	}
	h := make([]uint64, n)
	for i := range h {
		h[i] = randHash(r)
	}
	return h
}

// randValidAction returns an action of kind k that passes Validate with the
// default Bounds.
func randValidAction(r *rand.Rand, k Kind, id, session string) Action {
	a := Action{ID: id, Kind: k, SessionID: session}
	switch r.IntN(3) {
	case 0:
		a.Target.Blocks = randHashes(r, 1+r.IntN(12))
	case 1:
		u := UnitBlocks + Unit(r.IntN(2))
		start := uint64(r.IntN(1000))
		end := uint64(0)
		if r.IntN(2) == 0 {
			end = start + 1 + uint64(r.IntN(1000))
		}
		a.Target.Range = Range{Unit: u, Start: start, End: end}
	}
	if r.IntN(3) == 0 {
		a.Limit = uint32(1 + r.IntN(DefaultMaxLimit))
	}
	ttl := func() time.Duration {
		if r.IntN(2) == 0 {
			return time.Duration(1+r.IntN(3600)) * time.Second
		}
		return DefaultMinTTL + time.Duration(r.Int64N(int64(DefaultMaxTTL-DefaultMinTTL)))
	}
	switch k {
	case KindShare:
		if len(a.Target.Blocks) == 0 {
			a.Target = Target{Blocks: randHashes(r, 1+r.IntN(12))}
		}
		a.Dest = []Tier{TierNone, TierDevice, TierHost}[r.IntN(3)]
		a.Sources = make([]Source, 1+r.IntN(3))
		for i := range a.Sources {
			a.Sources[i] = Source{
				Worker:   WorkerID{ID: randHash(r), DPRank: uint32(r.IntN(8))},
				Endpoint: "tcp://10.0.0." + fmt.Sprint(r.IntN(255)) + ":" + fmt.Sprint(20000+r.IntN(9999)),
				Tier:     Tier(r.IntN(5)),
				Blocks:   uint32(r.IntN(len(a.Target.Blocks) + 1)),
			}
		}
	case KindPrefetch:
		a.Dest = []Tier{TierDevice, TierHost}[r.IntN(2)]
	case KindDemote:
		a.Dest = []Tier{TierHost, TierDisk, TierExternal}[r.IntN(3)]
	case KindPin:
		a.TTL = ttl()
	case KindRetain:
		a.TTL = ttl()
		a.Priority = int32(1 + r.IntN(DefaultMaxPriority))
	}
	return a
}

// randEnvelope returns a valid envelope with n actions of random kinds.
func randEnvelope(r *rand.Rand, n int, odd bool) Envelope {
	e := Envelope{MessageID: "m-" + randString(r, odd)}
	if e.MessageID == "m-" {
		e.MessageID = "m-0"
	}
	if r.IntN(4) != 0 {
		e.ProtocolVersion = ProtocolVersion
	}
	if r.IntN(2) == 0 {
		e.SessionID = "s-" + randString(r, odd)
	}
	for i := range n {
		session := e.SessionID
		if session == "" || r.IntN(3) == 0 {
			session = "s-" + randString(r, odd)
		}
		k := Kind(1 + r.IntN(6))
		e.Actions = append(e.Actions, randValidAction(r, k, fmt.Sprintf("%s.%d", e.MessageID, i), session))
	}
	return e
}

// normalized applies the decoders' conventions to an expected envelope: the
// default protocol version, actions inheriting the envelope's session,
// empty slices as nil.
func normalized(e Envelope) Envelope {
	if e.ProtocolVersion == "" {
		e.ProtocolVersion = ProtocolVersion
	}
	e.Skipped = nil
	if len(e.Actions) == 0 {
		e.Actions = nil
		return e
	}
	acts := make([]Action, len(e.Actions))
	copy(acts, e.Actions)
	for i := range acts {
		a := &acts[i]
		if a.SessionID == "" {
			a.SessionID = e.SessionID
		}
		if len(a.Target.Blocks) == 0 {
			a.Target.Blocks = nil
		}
		if len(a.Sources) == 0 {
			a.Sources = nil
		}
	}
	e.Actions = acts
	return e
}

// diffEnvelopes describes the first difference between two envelopes, or
// returns "".
func diffEnvelopes(want, got Envelope) string {
	if want.ProtocolVersion != got.ProtocolVersion || want.MessageID != got.MessageID || want.SessionID != got.SessionID {
		return fmt.Sprintf("header: want (%q,%q,%q) got (%q,%q,%q)", want.ProtocolVersion, want.MessageID, want.SessionID, got.ProtocolVersion, got.MessageID, got.SessionID)
	}
	if len(want.Actions) != len(got.Actions) {
		return fmt.Sprintf("actions: want %d got %d (skipped %+v)", len(want.Actions), len(got.Actions), got.Skipped)
	}
	for i := range want.Actions {
		if !reflect.DeepEqual(want.Actions[i], got.Actions[i]) {
			return fmt.Sprintf("action %d:\nwant %+v\ngot  %+v", i, want.Actions[i], got.Actions[i])
		}
	}
	if !reflect.DeepEqual(want.Skipped, got.Skipped) {
		return fmt.Sprintf("skipped: want %+v got %+v", want.Skipped, got.Skipped)
	}
	return ""
}

func mustJSON(t testing.TB, e *Envelope) []byte {
	t.Helper()
	b, err := e.AppendJSON(nil)
	if err != nil {
		t.Fatalf("AppendJSON: %v", err)
	}
	return b
}

func mustBinary(t testing.TB, e *Envelope) []byte {
	t.Helper()
	b, err := e.AppendBinary(nil)
	if err != nil {
		t.Fatalf("AppendBinary: %v", err)
	}
	return b
}
