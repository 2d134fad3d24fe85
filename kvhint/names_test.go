package kvhint

import "testing"

func TestNames(t *testing.T) {
	for k := KindShare; k <= KindRelease; k++ {
		got, ok := KindOf(k.ActionType())
		if !ok || got != k || !k.Valid() {
			t.Errorf("kind %v: KindOf(%q) = %v %v", k, k.ActionType(), got, ok)
		}
	}
	if k, ok := KindOf(ActionTypeShareLegacy); !ok || k != KindShare {
		t.Error("legacy share spelling")
	}
	if _, ok := KindOf("kv.evict"); ok || Kind(0).Valid() || Kind(7).ActionType() != "" || Kind(7).String() != "kind(7)" {
		t.Error("unknown kinds")
	}
	for tr := TierDevice; tr <= TierExternal; tr++ {
		if got, ok := ParseTier(tr.String()); !ok || got != tr {
			t.Errorf("tier %v", tr)
		}
	}
	if _, ok := ParseTier(""); ok {
		t.Error(`ParseTier("") accepted`)
	}
	if _, ok := ParseTier("gpu"); ok || Tier(9).Valid() || Tier(9).String() != "tier(9)" {
		t.Error("unknown tiers")
	}
	for _, tc := range []struct {
		a, b Tier
		want bool
	}{{TierDevice, TierHost, true}, {TierHost, TierDevice, false}, {TierDisk, TierExternal, true}, {TierNone, TierDisk, false}, {TierHost, TierNone, false}, {TierHost, TierHost, false}} {
		if got := tc.a.Hotter(tc.b); got != tc.want {
			t.Errorf("%v.Hotter(%v) = %v", tc.a, tc.b, got)
		}
	}
	for o := OutcomeAccepted; o <= OutcomeMissing; o++ {
		if got, ok := ParseOutcome(o.String()); !ok || got != o {
			t.Errorf("outcome %v", o)
		}
	}
	if _, ok := ParseOutcome(""); ok {
		t.Error(`ParseOutcome("") accepted`)
	}
	w := WorkerID{ID: 7, DPRank: 2}
	if w.String() != "7/2" || !w.Less(WorkerID{ID: 7, DPRank: 3}) || !w.Less(WorkerID{ID: 8}) || w.Less(w) {
		t.Error("WorkerID")
	}
	if PhaseActing.String() != "acting" || PhaseReasoning.String() != "reasoning" || EventResume.String() != "resume" || SkipVersion.String() != "unsupported-version" {
		t.Error("names")
	}
	// Marshal through encoding/json by value.
	e := Envelope{MessageID: "m"}
	if b, err := e.MarshalJSON(); err != nil || string(b) != `{"protocol_version":"0.1","message_id":"m","actions":[]}` {
		t.Errorf("%s %v", b, err)
	}
}
