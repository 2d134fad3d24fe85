package sharedpool

import "testing"

func TestHitsCredits(t *testing.T) {
	// 20 pages; shared hits at [0,3), [5,12), [15,20).
	h := Hits{Pages: 20, Total: 15, Ranges: []Range{{0, 3}, {5, 12}, {15, 20}}}
	tests := []struct {
		name             string
		device, host, dk int
		beyondDevice     int
		beyondTiers      int
		run              int // RunFrom(device+host+disk)
	}{
		{"cold worker", 0, 0, 0, 15, 15, 3},
		{"device covers the first range", 3, 0, 0, 12, 12, 0},
		{"device ends inside a range", 7, 0, 0, 10, 10, 5},
		{"host continues the device prefix", 5, 3, 0, 12, 9, 4},
		// The upstream double count: host and disk hits of [5,12) are
		// credited at their tier weight and again as shared beyond device.
		{"host and disk", 5, 3, 4, 12, 5, 0},
		{"everything local", 20, 0, 0, 0, 0, 0},
		{"depth past the request", 25, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		if got := h.SharedBeyondDevice(tt.device); got != tt.beyondDevice {
			t.Errorf("%s: SharedBeyondDevice %d, want %d", tt.name, got, tt.beyondDevice)
		}
		if got := h.SharedBeyondTiers(tt.device, tt.host, tt.dk); got != tt.beyondTiers {
			t.Errorf("%s: SharedBeyondTiers %d, want %d", tt.name, got, tt.beyondTiers)
		}
		if got := h.RunFrom(tt.device + tt.host + tt.dk); got != tt.run {
			t.Errorf("%s: RunFrom %d, want %d", tt.name, got, tt.run)
		}
		// Beyond agrees with counting page by page.
		pos := tt.device + tt.host + tt.dk
		n := 0
		for i := max(pos, 0); i < h.Pages; i++ {
			if h.Contains(i) {
				n++
			}
		}
		if n != tt.beyondTiers {
			t.Errorf("%s: per-page count %d, Beyond %d", tt.name, n, tt.beyondTiers)
		}
	}
	if got := h.Beyond(-4); got != 15 {
		t.Errorf("Beyond(-4) = %d", got)
	}
	var empty Hits
	if empty.Beyond(0) != 0 || empty.RunFrom(0) != 0 || empty.Contains(0) {
		t.Error("empty hits credit something")
	}
	if (Range{3, 8}).Len() != 5 {
		t.Error("Range.Len")
	}
}
