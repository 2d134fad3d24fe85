package admission

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c, err := NewRawAdmitter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Config()
	if got.PauseThreshold != 0.95 || got.PauseTarget != 0.80 || got.SoftDemote != 0.80 ||
		got.Hysteresis != 0.10 || got.SoftDemotePriority != -2 || got.ResumeBoost != 1 ||
		got.Buffer != 100 || got.ForcedResume != 30*time.Minute || got.Interval != 5*time.Second ||
		got.ActingWeight != 1 || got.DecayHalfLife != 0 || got.MaxPending != 1<<16 || got.Placement == nil {
		t.Fatalf("defaults: %+v", got)
	}
	if r := (Config{}).ResumeCeiling(); math.Abs(r-0.85) > 1e-12 {
		t.Fatalf("resume ceiling %v", r)
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"negative threshold", Config{PauseThreshold: -1}, "PauseThreshold"},
		{"NaN target", Config{PauseTarget: math.NaN()}, "PauseTarget"},
		{"target above threshold", Config{PauseThreshold: 0.7, PauseTarget: 0.75}, "PauseTarget"},
		{"soft above threshold", Config{PauseThreshold: 0.9, PauseTarget: 0.5, SoftDemote: 0.91}, "SoftDemote"},
		{"hysteresis too big", Config{PauseThreshold: 0.3, PauseTarget: 0.2, SoftDemote: 0.2, Hysteresis: 0.3}, "Hysteresis"},
		{"positive demote priority", Config{SoftDemotePriority: 1}, "SoftDemotePriority"},
		{"negative buffer", Config{Buffer: -1}, "Buffer"},
		{"huge buffer", Config{Buffer: MaxTokens + 1}, "Buffer"},
		{"negative forced", Config{ForcedResume: -time.Second}, "ForcedResume"},
		{"negative decay", Config{DecayHalfLife: -time.Second}, "DecayHalfLife"},
		{"infinite weight", Config{ActingWeight: math.Inf(1)}, "ActingWeight"},
		{"negative cold start", Config{Door: &Door{ColdStartPrograms: -1}}, "Door.ColdStartPrograms"},
		{"door share above 1", Config{Door: &Door{ActingGrowth: 1.5}}, "Door.ActingGrowth"},
		{"NaN door share", Config{Door: &Door{ActingGrowth: math.NaN()}}, "Door.ActingGrowth"},
		{"negative observed cap", Config{Door: &Door{ColdStartObserved: -1}}, "Door.ColdStartObserved"},
		{"negative cold floor", Config{Door: &Door{ColdStartFloor: -1}}, "Door.ColdStartFloor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRawAdmitter(tc.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("err %v, want ConfigError on %s", err, tc.field)
			}
		})
	}
}

func TestDrainBounded(t *testing.T) {
	c, _ := NewRawAdmitter(Config{MaxPending: 3})
	_ = c.AddWorker(1, 1<<20)
	for i := 0; i < 5; i++ {
		_, _ = c.StartRequest(epoch, string(rune('a'+i)), 1)
	}
	ds := c.Drain(nil)
	if len(ds) != 3 || ds[0].Seq != 1 || ds[2].Seq != 3 || c.Stats().DroppedDecisions != 2 {
		t.Fatalf("drained %v, stats %+v", ds, c.Stats())
	}
	if len(c.Drain(nil)) != 0 {
		t.Fatal("drain did not empty the buffer")
	}
}

// TestPlacementRejects: a misbehaving Placement cannot overfill a worker.
func TestPlacementRejects(t *testing.T) {
	bad := PlacementFunc(func(items []Item, bins []Bin, dst []int) {
		for i := range dst {
			dst[i] = 0 // everything on bin 0, fits or not
		}
		if len(dst) > 0 {
			dst[len(dst)-1] = 99 // out of range
		}
	})
	c, _ := NewRawAdmitter(Config{Placement: bad})
	for i := 0; i < 4; i++ {
		_, _ = c.StartRequest(epoch, string(rune('a'+i)), 300)
	}
	_ = c.AddWorker(1, 1000)
	r := c.Tick(epoch.Add(time.Second))
	if r.Resumed != 2 || c.Stats().PlacementRejects != 2 {
		t.Fatalf("resumed %d rejects %d", r.Resumed, c.Stats().PlacementRejects)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
	if w, _ := c.Worker(1); w.Used > 850 {
		t.Fatalf("overfilled: %+v", w)
	}
}

// TestDeterminism: the same calls give the same decisions.
func TestDeterminism(t *testing.T) {
	run := func() []Decision {
		var out []Decision
		s := newSim(t, 42, Config{OnDecision: nil}, true)
		s.ctl.cfg.OnDecision = func(d Decision) { out = append(out, d); s.dec = append(s.dec, d) }
		s.run(72 * time.Hour)
		return out
	}
	a, b := run(), run()
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d vs %d decisions", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("decision %d differs:\n%v\n%v", i, a[i], b[i])
		}
	}
}
