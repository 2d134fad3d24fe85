package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/agentkv/agentkv/internal/simrun"
)

// writeSimPlot draws throughput and prefix hit rate against concurrency,
// one line per policy, side by side, as SVG (or PNG when path ends in
// ".png").
func writeSimPlot(path, workload string, results []*simrun.Result, policies []simrun.Policy) error {
	thr := plot.New()
	thr.Title.Text = "Throughput (" + workload + ")"
	thr.X.Label.Text = "concurrent agent programs"
	thr.Y.Label.Text = "model tokens / s"
	hit := plot.New()
	hit.Title.Text = "Prefix-cache hit rate"
	hit.X.Label.Text = "concurrent agent programs"
	hit.Y.Label.Text = "hit rate (%)"
	hit.Y.Min, hit.Y.Max = 0, 100
	for i, p := range policies {
		var t, h plotter.XYs
		for _, r := range results {
			if r.Policy != p.Name || r.Concurrency == 0 {
				continue
			}
			t = append(t, plotter.XY{X: float64(r.Concurrency), Y: r.SteadyThroughput()})
			h = append(h, plotter.XY{X: float64(r.Concurrency), Y: 100 * r.HitRate})
		}
		if len(t) == 0 {
			continue
		}
		for _, pair := range []struct {
			pl  *plot.Plot
			xys plotter.XYs
		}{{thr, t}, {hit, h}} {
			line, points, err := plotter.NewLinePoints(pair.xys)
			if err != nil {
				return err
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			pair.pl.Add(line, points)
			pair.pl.Legend.Add(p.Name, line, points)
		}
	}
	var ticks []plot.Tick
	seen := map[int]bool{}
	for _, r := range results {
		if r.Concurrency > 0 && !seen[r.Concurrency] {
			seen[r.Concurrency] = true
			ticks = append(ticks, plot.Tick{Value: float64(r.Concurrency), Label: fmt.Sprint(r.Concurrency)})
		}
	}
	for _, pl := range []*plot.Plot{thr, hit} {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		pl.Legend.Top = false
		pl.Legend.Left = true
		pl.Add(plotter.NewGrid())
	}
	thr.Y.Min = 0
	thr.Y.Tick.Marker = intTicks{}

	const w, h = 11 * vg.Inch, 4.5 * vg.Inch
	var canvas interface {
		vg.CanvasSizer
		WriteTo(io.Writer) (int64, error)
	}
	if strings.EqualFold(filepath.Ext(path), ".png") {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	} else {
		canvas = vgsvg.New(w, h)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{thr, hit}}, tiles, dc)
	thr.Draw(canvases[0][0])
	hit.Draw(canvases[0][1])

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing plot: %w", err)
	}
	return f.Close()
}

// intTicks labels the default ticks without decimals.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}
