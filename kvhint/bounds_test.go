package kvhint

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	base := map[Kind]Action{}
	for _, a := range goldenActions() {
		base[a.Kind] = a
	}
	type mut func(a *Action)
	for _, tc := range []struct {
		name  string
		kind  Kind
		mut   mut
		field string // "" = valid
	}{
		{"share ok", KindShare, func(a *Action) {}, ""},
		{"prefetch ok", KindPrefetch, func(a *Action) {}, ""},
		{"demote ok", KindDemote, func(a *Action) {}, ""},
		{"pin ok", KindPin, func(a *Action) {}, ""},
		{"retain ok", KindRetain, func(a *Action) {}, ""},
		{"release ok", KindRelease, func(a *Action) {}, ""},
		{"whole session release", KindRelease, func(a *Action) { a.Target = Target{} }, ""},
		{"open token range", KindDemote, func(a *Action) { a.Target = Target{Range: Range{Unit: UnitTokens, Start: 100}} }, ""},
		{"no id", KindPin, func(a *Action) { a.ID = "" }, "action_id"},
		{"long id", KindPin, func(a *Action) { a.ID = string(make([]byte, 513)) }, "action_id"},
		{"no session", KindPin, func(a *Action) { a.SessionID = "" }, "session_id"},
		{"bad kind", KindPin, func(a *Action) { a.Kind = 9 }, "action_type"},
		{"blocks and range", KindPin, func(a *Action) { a.Target.Range = Range{Unit: UnitBlocks, End: 3} }, "block_hashes"},
		{"too many blocks", KindPin, func(a *Action) { a.Target.Blocks = make([]uint64, DefaultMaxBlocks+1) }, "block_hashes"},
		{"empty range", KindDemote, func(a *Action) { a.Target.Range.Start = 40 }, "block_range"},
		{"empty token range", KindRetain, func(a *Action) { a.Target.Range.Start = 5000 }, "token_range"},
		{"range bounds without unit", KindRelease, func(a *Action) { a.Target.Range = Range{Start: 3} }, "range"},
		{"bad unit", KindRelease, func(a *Action) { a.Target.Range.Unit = 7 }, "range"},
		{"limit too big", KindPrefetch, func(a *Action) { a.Limit = DefaultMaxLimit + 1 }, "limit_blocks"},
		{"bad tier", KindPrefetch, func(a *Action) { a.Dest = 17 }, "dest_tier"},
		{"ttl on demote", KindDemote, func(a *Action) { a.TTL = time.Second }, "ttl_seconds"},
		{"pin without ttl", KindPin, func(a *Action) { a.TTL = 0 }, "ttl_seconds"},
		{"pin ttl too short", KindPin, func(a *Action) { a.TTL = time.Millisecond }, "ttl_seconds"},
		{"pin ttl too long", KindPin, func(a *Action) { a.TTL = 25 * time.Hour }, "ttl_seconds"},
		{"retain priority 0", KindRetain, func(a *Action) { a.Priority = 0 }, "priority"},
		{"retain priority 101", KindRetain, func(a *Action) { a.Priority = 101 }, "priority"},
		{"priority on pin", KindPin, func(a *Action) { a.Priority = 3 }, "priority"},
		{"sources on pin", KindPin, func(a *Action) { a.Sources = []Source{{Endpoint: "e"}} }, "sources"},
		{"share without blocks", KindShare, func(a *Action) { a.Target = Target{Range: Range{Unit: UnitBlocks, End: 4}} }, "block_hashes"},
		{"share without sources", KindShare, func(a *Action) { a.Sources = nil }, "sources"},
		{"share to disk", KindShare, func(a *Action) { a.Dest = TierDisk }, "dest_tier"},
		{"share source without endpoint", KindShare, func(a *Action) { a.Sources = []Source{{Blocks: 1}} }, "sources"},
		{"share source holds too much", KindShare, func(a *Action) { a.Sources = []Source{{Endpoint: "e", Blocks: 4}} }, "sources"},
		{"share too many sources", KindShare, func(a *Action) { a.Sources = make([]Source, 9) }, "sources"},
		{"prefetch to disk", KindPrefetch, func(a *Action) { a.Dest = TierDisk }, "dest_tier"},
		{"prefetch without dest", KindPrefetch, func(a *Action) { a.Dest = TierNone }, "dest_tier"},
		{"demote to device", KindDemote, func(a *Action) { a.Dest = TierDevice }, "dest_tier"},
		{"pin with dest", KindPin, func(a *Action) { a.Dest = TierHost }, "dest_tier"},
		{"retain with dest", KindRetain, func(a *Action) { a.Dest = TierHost }, "dest_tier"},
		{"release with dest", KindRelease, func(a *Action) { a.Dest = TierHost }, "dest_tier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := base[tc.kind]
			a.Target.Blocks = append([]uint64(nil), a.Target.Blocks...)
			tc.mut(&a)
			err := a.Validate(Bounds{})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("want *ValidationError, got %v", err)
			}
			if ve.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", ve.Field, tc.field, err)
			}
		})
	}
}

func TestValidateEnvelope(t *testing.T) {
	ok := Envelope{MessageID: "m", SessionID: "s", Actions: []Action{{ID: "a", Kind: KindRelease}, {ID: "b", Kind: KindRelease, SessionID: "t"}}}
	if err := ok.Validate(Bounds{}); err != nil {
		t.Fatalf("action session inherited from envelope: %v", err)
	}
	for name, tc := range map[string]struct {
		e     Envelope
		index int
		field string
	}{
		"no message id":     {Envelope{}, -1, "message_id"},
		"too many actions":  {Envelope{MessageID: "m", Actions: make([]Action, 65)}, -1, "actions"},
		"duplicate id":      {Envelope{MessageID: "m", SessionID: "s", Actions: []Action{{ID: "a", Kind: KindRelease}, {ID: "a", Kind: KindRelease}}}, 1, "action_id"},
		"no session at all": {Envelope{MessageID: "m", Actions: []Action{{ID: "a", Kind: KindRelease}}}, 0, "session_id"},
		"long session":      {Envelope{MessageID: "m", SessionID: string(make([]byte, 600))}, -1, "session_id"},
	} {
		var ve *ValidationError
		if err := tc.e.Validate(Bounds{}); !errors.As(err, &ve) || ve.Index != tc.index || ve.Field != tc.field {
			t.Errorf("%s: %v, want index %d field %s", name, err, tc.index, tc.field)
		}
	}
	// Custom bounds apply.
	pin := Envelope{MessageID: "m", Actions: []Action{{ID: "a", Kind: KindPin, SessionID: "s", TTL: time.Hour}}}
	if err := pin.Validate(Bounds{MaxTTL: time.Minute}); !errors.Is(err, ErrInvalid) {
		t.Errorf("MaxTTL not applied: %v", err)
	}
}

func TestBoundsCheck(t *testing.T) {
	for _, tc := range []struct {
		b  Bounds
		ok bool
	}{
		{Bounds{}, true},
		{Bounds{MinTTL: time.Hour, MaxTTL: time.Minute}, false},
		{Bounds{MinTTL: 48 * time.Hour}, false},
		{Bounds{MaxTTL: MaxWireTTL}, true},
		{Bounds{MaxTTL: MaxWireTTL + 1}, false},
		{Bounds{MaxBlocks: -1}, false},
	} {
		if err := tc.b.Check(); (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", tc.b, err)
		}
	}
}

// TestClipProperty: after Clip, an action that was structurally valid
// validates; Clip reports a change exactly when the action changed; Clip
// never writes into the caller's slices.
func TestClipProperty(t *testing.T) {
	tight := Bounds{MinTTL: 10 * time.Second, MaxTTL: time.Hour, MaxPriority: 50, MaxBlocks: 4, MaxLimit: 100, MaxSources: 2}
	for seed := uint64(1); seed <= 2000; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		a := randValidAction(r, Kind(1+r.IntN(6)), "a", "s")
		// Push parameters out of the tight bounds.
		if a.Kind == KindPin || a.Kind == KindRetain {
			a.TTL = time.Duration(r.Int64N(int64(2 * time.Hour)))
		}
		if a.Kind == KindRetain {
			a.Priority = int32(r.IntN(200)) - 50
		}
		a.Limit = uint32(r.IntN(200))
		orig := a
		origBlocks := append([]uint64(nil), a.Target.Blocks...)
		origSources := append([]Source(nil), a.Sources...)
		changed := a.Clip(tight)
		if err := a.Validate(tight); err != nil {
			t.Fatalf("seed %d: after Clip: %v\nbefore %+v\nafter  %+v", seed, err, orig, a)
		}
		same := a.TTL == orig.TTL && a.Priority == orig.Priority && a.Limit == orig.Limit &&
			len(a.Target.Blocks) == len(orig.Target.Blocks) && len(a.Sources) == len(orig.Sources)
		for i := range a.Sources {
			same = same && a.Sources[i] == origSources[i]
		}
		if changed == same {
			t.Fatalf("seed %d: Clip reported %v but action same=%v", seed, changed, same)
		}
		for i := range origBlocks {
			if orig.Target.Blocks[i] != origBlocks[i] {
				t.Fatalf("seed %d: Clip wrote into Blocks", seed)
			}
		}
		for i := range origSources {
			if orig.Sources[i] != origSources[i] {
				t.Fatalf("seed %d: Clip wrote into Sources", seed)
			}
		}
	}
}
