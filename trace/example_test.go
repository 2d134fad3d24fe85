package trace_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/agentkv/agentkv/trace"
)

func ExampleWriter() {
	var out bytes.Buffer
	w, err := trace.NewWriter(trace.WriterConfig{Sink: &out})
	if err != nil {
		panic(err)
	}
	rec := trace.Record{
		EventTimeUnixMs: 1777312801000,
		AgentContext:    trace.AgentContext{SessionID: "run-42:researcher"},
		Request: trace.Request{
			RequestID: "req-1", InputTokens: 128, OutputTokens: 16, RequestReceivedMs: 1777312800000,
			Replay: trace.Replay{TraceBlockSize: 64, InputLength: 128, InputSequenceHashes: []uint64{11, 22}},
		},
	}
	if err := w.Write(&rec); err != nil {
		fmt.Println("dropped:", err)
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	fmt.Print(out.String())
	fmt.Println(w.Stats().Written, "written")
	// Output:
	// {"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1777312801000,"agent_context":{"session_id":"run-42:researcher"},"request":{"request_id":"req-1","input_tokens":128,"output_tokens":16,"request_received_ms":1777312800000,"replay":{"trace_block_size":64,"input_length":128,"input_sequence_hashes":[11,22]}}}
	// 1 written
}

func ExampleReadMooncake() {
	in := `{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 500, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2]}
`
	w, err := trace.ReadMooncake(strings.NewReader(in), "example.jsonl", 512)
	if err != nil {
		panic(err)
	}
	s, _ := trace.Summarize(&w)
	fmt.Printf("%d requests, open-loop %v, ceiling %.0f%% of blocks\n", s.Requests, s.OpenLoop, 100*s.Ceiling.BlockRatio())
	// Output: 2 requests, open-loop true, ceiling 40% of blocks
}

func ExampleSynthetic() {
	w := trace.Synthetic(trace.SyntheticConfig{Sessions: 8, Seed: 1})
	s, _ := trace.Summarize(&w)
	fmt.Println(s.Sessions, "sessions,", s.Requests, "requests")
	fmt.Println("first prompt starts with the shared system prompt:", w.Sessions[0].Turns[0].InputTokens > 15040)
	// Output:
	// 8 sessions, 46 requests
	// first prompt starts with the shared system prompt: true
}

func ExampleTile() {
	w := trace.Synthetic(trace.SyntheticConfig{Sessions: 2, Seed: 3})
	tiled, _ := trace.Tile(&w, trace.TileConfig{Copies: 3, Stagger: 10e9})
	fmt.Println(len(tiled.Sessions), tiled.Sessions[0].ID, tiled.Sessions[len(tiled.Sessions)-1].ID)
	// Output: 6 s0#0 s1#2
}

func ExampleWriteChromeTrace() {
	w := trace.Synthetic(trace.SyntheticConfig{Sessions: 1, Seed: 1})
	p, _ := trace.Schedule(&w, trace.TimingModel{})
	// Write the timeline to a file and open it in ui.perfetto.dev.
	f, _ := os.CreateTemp("", "timeline-*.json")
	defer os.Remove(f.Name())
	defer f.Close()
	fmt.Println(trace.WriteChromeTrace(f, trace.PlanSpans(&w, p)))
	// Output: <nil>
}
