package kvhint

import (
	"runtime"
	"strings"
	"testing"
)

// allocDuring reports the bytes f allocated (TotalAlloc delta).
func allocDuring(f func()) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// decoderAllocMultiple is the stated bound: no input of up to 1 MiB makes
// a kvhint decoder allocate more than this many bytes per input byte. The
// worst: 4096 five-byte binary actions of unknown kinds, each a Skip record
// with its strings (74x), and JSON with 349K empty actions, which
// encoding/json splits before the count check (42x).
const decoderAllocMultiple = 80

// hostileHints are ~1 MiB inputs built to cost the decoders the most per
// byte: array headers claiming as many elements as bytes remain, then the
// smallest elements that still decode or fail late.
func hostileHints() map[string][]byte {
	const n = 1 << 20
	arr32 := func(count int) []byte {
		return []byte{0xdd, byte(count >> 24), byte(count >> 16), byte(count >> 8), byte(count)}
	}
	binEnvN := func(elem []byte, count int) []byte {
		b := []byte{0x95, BinaryFormat, 0xa0, 0xa0, 0xa0}
		b = append(b, arr32(count)...)
		for range count {
			b = append(b, elem...)
		}
		return b
	}
	binEnv := func(elem []byte) []byte {
		b := []byte{0x95, BinaryFormat, 0xa0, 0xa0, 0xa0} // [format, pv, id, session, actions]
		count := (n - len(b) - 5) / len(elem)
		b = append(b, arr32(count)...)
		for range count {
			b = append(b, elem...)
		}
		return b
	}
	binReply := func(elem []byte) []byte {
		b := []byte{0x94, BinaryFormat, 0xa0, 0xa0}
		count := (n - len(b) - 5) / len(elem)
		b = append(b, arr32(count)...)
		for range count {
			b = append(b, elem...)
		}
		return b
	}
	jsonList := func(head, elem, tail string) []byte {
		count := (n - len(head) - len(tail)) / (len(elem) + 1)
		return []byte(head + strings.TrimSuffix(strings.Repeat(elem+",", count), ",") + tail)
	}
	return map[string][]byte{
		"binary envelope, garbage actions claimed": binEnv([]byte{0x01})[:n/2],
		"binary envelope, unknown kinds":           binEnv([]byte{0x93, 0x7f, 0x01, 0x00}),
		"binary envelope, MaxWireActions unknown":  binEnvN([]byte{0x94, 0x7f, 0x01, 0x00, 0xa0}, MaxWireActions),
		"binary envelope, MaxWireActions bad v2":   binEnvN([]byte{0x94, 0x01, 0x02, 0x00, 0xa0}, MaxWireActions),
		"binary envelope, truncated after header":  binEnv([]byte{0x93, 0x7f, 0x01, 0x00})[:64],
		"binary reply, minimal results":            binReply([]byte{0x94, 0xa0, 0x01, 0x00, 0xa0}),
		"binary reply, garbage results claimed":    binReply([]byte{0x01})[:n/2],
		"json envelope, unknown actions":           jsonList(`{"protocol_version":"1.0","message_id":"m","actions":[`, `{"action_id":"","action_type":"x","action_version":"1.0"}`, `]}`),
		"json envelope, empty actions":             jsonList(`{"protocol_version":"1.0","message_id":"m","actions":[`, `{}`, `]}`),
		"json reply, minimal results":              jsonList(`{"protocol_version":"1.0","message_id":"m","results":[`, `{"action_id":"","outcome":"accepted"}`, `]}`),
		"json reply, empty results":                jsonList(`{"protocol_version":"1.0","message_id":"m","results":[`, `{}`, `]}`),
	}
}

// TestDecodersAllocationBounded: issue #22's target for KV hint envelopes
// and engine replies (untrusted bytes from the network).
func TestDecodersAllocationBounded(t *testing.T) {
	for name, in := range hostileHints() {
		t.Run(name, func(t *testing.T) {
			var err error
			got := allocDuring(func() {
				switch {
				case strings.HasPrefix(name, "binary envelope"):
					var e Envelope
					err = DecodeBinary(in, &e)
				case strings.HasPrefix(name, "binary reply"):
					var r Reply
					err = DecodeBinaryReply(in, &r)
				case strings.HasPrefix(name, "json envelope"):
					var e Envelope
					err = DecodeJSON(in, &e)
				default:
					var r Reply
					err = DecodeReplyJSON(in, &r)
				}
			})
			t.Logf("%d bytes: allocated %d (%.1fx), err %v", len(in), got, float64(got)/float64(len(in)), err)
			if limit := uint64(decoderAllocMultiple*len(in) + 64<<10); got > limit {
				t.Fatalf("allocated %d bytes for %d bytes of input, limit %d", got, len(in), limit)
			}
		})
	}
}

// TestReplyDecodersAtomic: issue #22 item 2 asked whether the reply
// decoders share the vLLM decoder's flaw (results used, then the message
// reported malformed). They do not: the Reply is replaced only on success;
// a reply whose valid results are followed by a fault leaves it zero.
func TestReplyDecodersAtomic(t *testing.T) {
	r := Reply{MessageID: "m", Results: []Result{{ActionID: "a", Outcome: OutcomeAccepted, Blocks: 3}}}
	bin, err := r.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := r.AppendJSON(nil)
	for _, tc := range []struct {
		name string
		dec  func([]byte, *Reply) error
		in   []byte
	}{
		{"binary, trailing bytes", DecodeBinaryReply, append(append([]byte{}, bin...), 0x00)},
		{"binary, truncated", DecodeBinaryReply, bin[:len(bin)-1]},
		{"json, result without outcome after a good one", DecodeReplyJSON,
			[]byte(`{"protocol_version":"0.1","message_id":"m","results":[{"action_id":"a","outcome":"accepted"},{"action_id":"b"}]}`)},
		{"json, trailing garbage", DecodeReplyJSON, append(append([]byte{}, js...), " x"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Reply{MessageID: "stale", Results: []Result{{ActionID: "old"}}}
			if err := tc.dec(tc.in, &got); err == nil || got.MessageID != "" || len(got.Results) != 0 {
				t.Fatalf("err %v, reply %+v", err, got)
			}
		})
	}
}
