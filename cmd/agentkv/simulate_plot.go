package main

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/agentkv/agentkv/internal/simrun"
)

// writeSimPlot draws throughput and prefix hit rate against concurrency,
// one line per policy, side by side, as SVG.
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
			t = append(t, plotter.XY{X: float64(r.Concurrency), Y: r.Throughput})
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
	for _, pl := range []*plot.Plot{thr, hit} {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.LogTicks{Prec: -1}
		pl.Legend.Top = false
		pl.Legend.Left = true
		pl.Add(plotter.NewGrid())
	}
	thr.Y.Min = 0

	const w, h = 11 * vg.Inch, 4.5 * vg.Inch
	canvas := vgsvg.New(w, h)
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
