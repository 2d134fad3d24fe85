package kvhint

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenActions has one fully populated action of every kind.
func goldenActions() []Action {
	return []Action{
		{ID: "m-1.0", Kind: KindShare, SessionID: "sess-a", Target: Target{Blocks: []uint64{11, 22, 18446744073709551615}}, Dest: TierDevice,
			Sources: []Source{
				{Worker: WorkerID{ID: 7, DPRank: 0}, Endpoint: "tcp://10.0.0.7:23280", Tier: TierDevice, Blocks: 3},
				{Worker: WorkerID{ID: 9, DPRank: 1}, Endpoint: "tcp://10.0.0.9:23281", Tier: TierHost, Blocks: 2},
			}},
		{ID: "m-1.1", Kind: KindPrefetch, SessionID: "sess-a", Target: Target{Blocks: []uint64{33, 44}}, Dest: TierDevice, Limit: 64},
		{ID: "m-1.2", Kind: KindDemote, SessionID: "sess-a", Target: Target{Range: Range{Unit: UnitBlocks, Start: 12, End: 40}}, Dest: TierHost},
		{ID: "m-1.3", Kind: KindPin, SessionID: "sess-a", Target: Target{Blocks: []uint64{1, 2, 3, 4}}, TTL: 5 * time.Minute},
		{ID: "m-1.4", Kind: KindRetain, SessionID: "sess-a", Target: Target{Range: Range{Unit: UnitTokens, Start: 0, End: 4096}}, TTL: 2500 * time.Millisecond, Priority: 80},
		{ID: "m-1.5", Kind: KindRelease, SessionID: "sess-a", Target: Target{Range: Range{Unit: UnitBlocks, Start: 12}}},
	}
}

func goldenCases() map[string]any {
	cases := map[string]any{}
	acts := goldenActions()
	for i := range acts {
		cases["action-"+acts[i].Kind.String()] = &Envelope{ProtocolVersion: ProtocolVersion, MessageID: "m-1", SessionID: "sess-a", Actions: acts[i : i+1]}
	}
	cases["envelope-whole-session"] = &Envelope{ProtocolVersion: ProtocolVersion, MessageID: "m-2", Actions: []Action{{ID: "m-2.0", Kind: KindRelease, SessionID: "sess-b"}}}
	cases["envelope-mixed"] = &Envelope{ProtocolVersion: ProtocolVersion, MessageID: "m-1", SessionID: "sess-a", Actions: acts}
	cases["reply"] = &Reply{ProtocolVersion: ProtocolVersion, MessageID: "m-1", Results: []Result{
		{ActionID: "m-1.0", Outcome: OutcomeAccepted, Blocks: 3},
		{ActionID: "m-1.1", Outcome: OutcomeDeferred, Blocks: 2},
		{ActionID: "m-1.2", Outcome: OutcomeClipped, Blocks: 16, Reason: "host tier full"},
		{ActionID: "m-1.3", Outcome: OutcomeMissing},
		{ActionID: "m-1.4", Outcome: OutcomeRejected, Reason: "retain unsupported"},
	}}
	return cases
}

// TestGolden compares the JSON encoding of every action kind, two
// envelopes and a reply with testdata/golden/*.json (go test -update
// rewrites them), and decodes each file back to the value it came from.
func TestGolden(t *testing.T) {
	for name, v := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			var compact []byte
			var err error
			switch x := v.(type) {
			case *Envelope:
				compact, err = x.AppendJSON(nil)
			case *Reply:
				compact, err = x.AppendJSON(nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, compact, "", "  "); err != nil {
				t.Fatalf("invalid JSON: %v\n%s", err, compact)
			}
			pretty.WriteByte('\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Fatalf("%s differs from the encoder's output:\n%s", path, pretty.Bytes())
			}
			switch x := v.(type) {
			case *Envelope:
				var got Envelope
				if err := DecodeJSON(want, &got); err != nil {
					t.Fatal(err)
				}
				if d := diffEnvelopes(normalized(*x), got); d != "" {
					t.Fatal(d)
				}
				if err := got.Validate(Bounds{}); err != nil {
					t.Fatalf("golden envelope does not validate: %v", err)
				}
			case *Reply:
				var got Reply
				if err := DecodeReplyJSON(want, &got); err != nil {
					t.Fatal(err)
				}
				if !replyEqual(*x, got) {
					t.Fatalf("reply round trip: want %+v got %+v", *x, got)
				}
			}
		})
	}
}
