package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/agentkv/agentkv/internal/simrun"
)

// panel is one plot of a metric against concurrency, one line per policy.
type panel struct {
	title, ylabel string
	y             func(*simrun.Result) float64
	percent       bool // the axis runs 0-100
	capLabels     bool // label kv+cap's points with the cap that won
}

// writeSimPlot draws, side by side, the closed loop's throughput (kv+cap's
// points labelled with the cap that won: "cap 48", or "cap none"), prefix hit
// rate and median program completion against concurrency, one line per
// policy; with batch results, a second row: the batch makespan, the
// engines' idle share and median completion. SVG, or PNG when path ends
// in ".png".
func writeSimPlot(path, workload string, results, batch []*simrun.Result, policies []simrun.Policy) error {
	minutes := func(d time.Duration) float64 { return d.Minutes() }
	var rows [][]*plot.Plot
	if len(results) > 0 {
		row, err := simPanels(results, policies, []panel{
			{title: "Throughput (" + workload + ")", ylabel: "model tokens / s", y: (*simrun.Result).SteadyThroughput, capLabels: true},
			{title: "Prefix-cache hit rate", ylabel: "hit rate (%)", y: func(r *simrun.Result) float64 { return 100 * r.HitRate }, percent: true},
			{title: "Program completion p50", ylabel: "minutes", y: func(r *simrun.Result) float64 { return minutes(r.Completion.P50) }},
		})
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if len(batch) > 0 {
		steps := ""
		if batch[0].RolloutSteps > 1 {
			steps = fmt.Sprintf(", %d steps", batch[0].RolloutSteps)
		}
		row, err := simPanels(batch, policies, []panel{
			{title: "Batch makespan (" + workload + steps + ")", ylabel: "minutes", y: func(r *simrun.Result) float64 { return minutes(r.Makespan) }, capLabels: true},
			{title: "Batch: engines idle", ylabel: "idle share of the makespan (%)", y: func(r *simrun.Result) float64 { return 100 * (1 - r.Busy) }, percent: true},
			{title: "Batch: program completion p50", ylabel: "minutes", y: func(r *simrun.Result) float64 { return minutes(r.Completion.P50) }},
		})
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil
	}
	w, h := 15*vg.Inch, vg.Length(len(rows))*4.5*vg.Inch
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
	tiles := draw.Tiles{Rows: len(rows), Cols: 3, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(rows, tiles, dc)
	for i, row := range rows {
		for j, pl := range row {
			pl.Draw(canvases[i][j])
		}
	}

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

// simPanels draws one row of panels over results.
func simPanels(results []*simrun.Result, policies []simrun.Policy, panels []panel) ([]*plot.Plot, error) {
	var ticks []plot.Tick
	seen := map[int]bool{}
	for _, r := range results {
		if r.Concurrency > 0 && !seen[r.Concurrency] {
			seen[r.Concurrency] = true
			ticks = append(ticks, plot.Tick{Value: float64(r.Concurrency), Label: fmt.Sprint(r.Concurrency)})
		}
	}
	var row []*plot.Plot
	for _, pn := range panels {
		pl := plot.New()
		pl.Title.Text = pn.title
		pl.X.Label.Text = "concurrent agent programs"
		pl.Y.Label.Text = pn.ylabel
		for i, p := range policies {
			var xys plotter.XYs
			var caps []string
			for _, r := range results {
				if r.Policy != p.Name || r.Concurrency == 0 {
					continue
				}
				xys = append(xys, plotter.XY{X: float64(r.Concurrency), Y: pn.y(r)})
				caps = append(caps, "cap "+capLabel(r))
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			pl.Add(line, points)
			pl.Legend.Add(p.Name, line, points)
			if pn.capLabels && p.BestCap {
				labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: caps})
				if err != nil {
					return nil, err
				}
				for k := range labels.TextStyle {
					labels.TextStyle[k].Color = plotutil.Color(i)
					labels.TextStyle[k].YAlign = draw.YBottom
				}
				labels.Offset = vg.Point{X: vg.Millimeter, Y: vg.Millimeter}
				pl.Add(labels)
			}
		}
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		pl.Legend.Top = false
		pl.Legend.Left = true
		pl.Add(plotter.NewGrid())
		pl.Y.Min = 0
		if pn.percent {
			pl.Y.Max = 100
		} else {
			pl.Y.Tick.Marker = intTicks{}
		}
		row = append(row, pl)
	}
	return row, nil
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
