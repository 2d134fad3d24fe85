package sharedpool

import (
	"errors"
	"runtime"
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

// payloadAllocMultiple is the stated bound: no payload of up to 1 MiB makes
// DecodePayload allocate more than this many bytes per payload byte (plus
// 64 KiB). The worst case is MaxBatchEvents one-byte events, each rejected
// (a Rejection record and its error: about 106 bytes per event byte).
const payloadAllocMultiple = 128

// TestDecodePayloadAllocationBounded: Mooncake store events arrive from the
// network; hostile payloads of up to 1 MiB cost a bounded multiple.
func TestDecodePayloadAllocationBounded(t *testing.T) {
	arr32 := func(n int) []byte { return []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }
	batch := func(elem []byte, n int) []byte {
		b := append([]byte{0x92, 0x00}, arr32(n)...)
		for range n {
			b = append(b, elem...)
		}
		return b
	}
	const mib = 1 << 20
	hashes := append([]byte{0x92, 0x00, 0x91, 0x81, 0xaa}, "seq_hashes"...)
	hashes = append(hashes, arr32(mib-len(hashes)-5)...)
	for len(hashes) < mib {
		hashes = append(hashes, 0x01)
	}
	for _, tc := range []struct {
		name      string
		payload   []byte
		malformed bool
	}{
		{"claimed events, truncated", batch([]byte{0x80}, mib-8)[:mib/2], true},
		{"too many events", batch([]byte{0x80}, mib-8), true},
		{"MaxBatchEvents empty maps", batch([]byte{0x80}, MaxBatchEvents), false},
		{"MaxBatchEvents non-maps", batch([]byte{0x01}, MaxBatchEvents), false},
		{"MaxBatchEvents minimal stored", batch(append([]byte{0x81, 0xaa}, "event_type\xa6stored"...), MaxBatchEvents), false},
		{"one event, 1M hashes", hashes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			got := allocDuring(func() { _, err = DecodePayload(tc.payload) })
			t.Logf("%d bytes: allocated %d (%.1fx), err %v", len(tc.payload), got, float64(got)/float64(len(tc.payload)), err)
			if tc.malformed != errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("err %v, malformed %v", err, tc.malformed)
			}
			if limit := uint64(payloadAllocMultiple*len(tc.payload) + 64<<10); got > limit {
				t.Fatalf("allocated %d for %d bytes, limit %d", got, len(tc.payload), limit)
			}
		})
	}
}

// TestDecodePayloadAtomic: issue #22 item 2 asked whether this decoder has
// the vLLM one's flaw (events applied, then the batch reported
// malformed). It cannot: DecodePayload returns the events only with a nil
// error. A bad dp rank or trailing bytes after valid events yields the
// zero Batch.
func TestDecodePayloadAtomic(t *testing.T) {
	ev := append([]byte{0x82, 0xaa}, "event_type\xa6stored\xaaobject_key\xa1k"...)
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"rank is an array", append(append([]byte{0x93, 0x00, 0x91}, ev...), 0x91, 0x00)},
		{"rank is negative", append(append([]byte{0x93, 0x00, 0x91}, ev...), 0xff)},
		{"trailing bytes", append(append([]byte{0x92, 0x00, 0x91}, ev...), 0x00)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := DecodePayload(tc.payload)
			if !errors.Is(err, ErrMalformedFrame) || len(b.Events) != 0 || len(b.Rejected) != 0 {
				t.Fatalf("err %v, batch %+v", err, b)
			}
		})
	}
	good := append([]byte{0x92, 0x00, 0x91}, ev...)
	if b, err := DecodePayload(good); err != nil || len(b.Events) != 1 {
		t.Fatalf("valid payload: %v, %+v", err, b)
	}
}
