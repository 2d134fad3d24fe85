package vllm

import (
	"runtime"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

// decodeAllocMultiple is the stated bound: decoding any payload of up to
// 1 MiB allocates at most this many bytes per payload byte (buffers are
// then reused by the next payload).
const decodeAllocMultiple = 64

// TestDecodeAllocationBounded: ZMQ payloads are untrusted; the densest
// BlockStored (one-byte hashes and tokens, block size 1) and claims of
// huge arrays cost a bounded multiple of the payload.
func TestDecodeAllocationBounded(t *testing.T) {
	arr32 := func(n int) []byte { return []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }
	dense := func(n int) []byte {
		b := []byte{0x92, 0x00, 0x91, 0x95, 0xab}
		b = append(b, "BlockStored"...)
		b = append(b, arr32(n)...)
		for range n {
			b = append(b, 0x01)
		}
		b = append(b, 0xc0)
		b = append(b, arr32(n)...)
		for range n {
			b = append(b, 0x01)
		}
		return append(b, 0x01)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"dense BlockStored", dense((1<<20 - 32) / 2)},
		{"claimed hashes, truncated", dense((1<<20 - 32) / 2)[:1<<19]},
		{"many removals", pack([]any{0, func() []any {
			evs := make([]any, 1<<16)
			for i := range evs {
				evs[i] = []any{"BlockRemoved", []any{i}}
			}
			return evs
		}()})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(DecodeOptions{})
			runtime.GC()
			var a, b runtime.MemStats
			runtime.ReadMemStats(&a)
			_, err := d.Decode(tc.payload, func(*flashindex.Event) error { return nil })
			runtime.ReadMemStats(&b)
			got := b.TotalAlloc - a.TotalAlloc
			t.Logf("%d bytes: allocated %d (%.1fx), err %v", len(tc.payload), got, float64(got)/float64(len(tc.payload)), err)
			if limit := uint64(raceAllocFactor*decodeAllocMultiple*len(tc.payload) + 64<<10); got > limit {
				t.Fatalf("allocated %d for %d bytes, limit %d", got, len(tc.payload), limit)
			}
		})
	}
}
