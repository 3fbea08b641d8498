package plot

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Series is one line of a chart.
type Series struct {
	Label string
	XY    plotter.XYs
}

// Chart is one PNG: a title, a y label, and how to draw a run's lines.
type Chart struct {
	File, Title, YLabel string
	// Series returns the run's lines; none when the run lacks the metric.
	Series func(Run) []Series
	// Unsmoothed charts are drawn raw whatever Options.Smooth says: each
	// validation point is already a mean over the validation set.
	Unsmoothed bool
}

// Charts are the charts Write draws, in order.
var Charts = []Chart{
	{File: "reward.png", Title: "Training reward", YLabel: "mean score (critic/score/mean)", Series: key("critic/score/mean")},
	{File: "val_pass_at_1.png", Title: "Validation pass@1", YLabel: "pass@1", Series: valPassAt1, Unsmoothed: true},
	{File: "loss.png", Title: "Policy loss", YLabel: "actor/pg_loss", Series: key("actor/pg_loss")},
	{File: "entropy.png", Title: "Entropy", YLabel: "actor/entropy", Series: key("actor/entropy")},
	{File: "kl.png", Title: "KL divergence", YLabel: "KL", Series: keys("actor/ppo_kl", "actor/kl_loss", "critic/kl")},
	{File: "response_length.png", Title: "Response length", YLabel: "mean tokens", Series: key("response_length/mean")},
}

// points collects (step, value) for a key, skipping NaN.
func points(r Run, k string) plotter.XYs {
	var xy plotter.XYs
	for _, rec := range r.Records {
		if v, ok := rec.Values[k]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			xy = append(xy, plotter.XY{X: float64(rec.Step), Y: v})
		}
	}
	return xy
}

func key(k string) func(Run) []Series {
	return func(r Run) []Series {
		if xy := points(r, k); len(xy) > 0 {
			return []Series{{Label: r.Name, XY: xy}}
		}
		return nil
	}
}

// keys draws each of the keys the run has, labelled by key. A series
// that is zero at every step (actor/ppo_kl of a run with one on-policy
// mini-batch a step, a KL term that is off) says nothing and is left out.
func keys(ks ...string) func(Run) []Series {
	return func(r Run) []Series {
		var out []Series
		for _, k := range ks {
			if xy := points(r, k); len(xy) > 0 && !allZero(xy) {
				out = append(out, Series{Label: r.Name + " " + k, XY: xy})
			}
		}
		return out
	}
}

func allZero(xy plotter.XYs) bool {
	for _, p := range xy {
		if p.Y != 0 {
			return false
		}
	}
	return true
}

// valPassAt1 draws val/SOURCE/pass@1 for each data source, or val/pass@1
// when there is no per-source key. With one source the line is the run's
// ("arith", not "arith arith"); with several each is "run: source".
func valPassAt1(r Run) []Series {
	sources := map[string]bool{}
	for _, rec := range r.Records {
		for k := range rec.Values {
			if s, ok := strings.CutPrefix(k, "val/"); ok && strings.HasSuffix(s, "/pass@1") {
				sources[strings.TrimSuffix(s, "/pass@1")] = true
			}
		}
	}
	names := make([]string, 0, len(sources))
	for s := range sources {
		names = append(names, s)
	}
	sort.Strings(names)
	var out []Series
	for _, s := range names {
		if xy := points(r, "val/"+s+"/pass@1"); len(xy) > 0 {
			out = append(out, Series{Label: r.Name + ": " + s, XY: xy})
		}
	}
	if len(out) == 1 {
		out[0].Label = r.Name
		if names[0] != r.Name {
			out[0].Label += " (" + names[0] + ")"
		}
	}
	if len(out) == 0 {
		if xy := points(r, "val/pass@1"); len(xy) > 0 {
			out = append(out, Series{Label: r.Name, XY: xy})
		}
	}
	return out
}

// Written is what Write produced.
type Written struct {
	// Files are the PNGs written; Skipped the charts no run had data for.
	Files, Skipped []string
}

// Size of every chart.
var (
	Width  = 16 * vg.Centimeter
	Height = 10 * vg.Centimeter
)

// Options shape the charts; the zero value draws the raw values.
type Options struct {
	// Smooth, in [0, 1), is the weight of TensorBoard's exponential moving
	// average: each drawn point is Smooth × the previous smoothed value +
	// (1 − Smooth) × the value, debiased at the start. 0 draws the raw
	// values; 0.9 averages over about the last 10 points, 0.99 over 100.
	// The raw line stays, faint, behind the smoothed one.
	Smooth float64
}

// Validate refuses what Write cannot draw.
func (o Options) Validate() error {
	if !(o.Smooth >= 0 && o.Smooth < 1) {
		return usererr.Errorf("--smooth %g: give a weight from 0 (no smoothing) up to but not including 1, e.g. 0.9", o.Smooth)
	}
	return nil
}

// Write draws every chart some run has data for into outDir.
func Write(runs []Run, outDir string, opts Options) (Written, error) {
	if err := opts.Validate(); err != nil {
		return Written{}, err
	}
	var w Written
	all := chartLines(runs)
	steps := stepRange(all)
	for ci, ch := range Charts {
		lines := all[ci]
		if len(lines) == 0 {
			w.Skipped = append(w.Skipped, ch.File)
			continue
		}
		path := filepath.Join(outDir, ch.File)
		smooth := opts.Smooth
		if ch.Unsmoothed {
			smooth = 0
		}
		if err := atomicfile.Write(path, func(out io.Writer) error { return draw1(out, ch, lines, smooth, steps) }); err != nil {
			return w, fmt.Errorf("writing %s: %w", path, err)
		}
		w.Files = append(w.Files, path)
	}
	return w, nil
}

// chartLines are the lines of each of Charts, in order, for runs.
func chartLines(runs []Run) [][]Series {
	names := uniqueNames(runs)
	out := make([][]Series, len(Charts))
	for ci, ch := range Charts {
		for i, r := range runs {
			r.Name = names[i]
			out[ci] = append(out[ci], ch.Series(r)...)
		}
	}
	return out
}

// stepRange is the x range every chart shares: from step 0 (validation
// before training is step 0; training metrics start at 1) to the last
// step of any line. One range gives every chart the same ticks: with each
// chart's own range, the training charts (1 to 1550) were labelled at
// 200, 800, 1400 and the validation chart (0 to 1550) at 0, 500, 1000, 1500.
func stepRange(charts [][]Series) [2]float64 {
	r := [2]float64{0, math.Inf(-1)}
	for _, lines := range charts {
		for _, s := range lines {
			for _, p := range s.XY {
				r[0], r[1] = math.Min(r[0], p.X), math.Max(r[1], p.X)
			}
		}
	}
	if math.IsInf(r[1], -1) || r[1] <= r[0] {
		r[1] = r[0] + 1
	}
	return r
}

// uniqueNames labels runs by directory name, or by path when two runs
// share a name.
func uniqueNames(runs []Run) []string {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name]++
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Name
		if count[r.Name] > 1 {
			out[i] = filepath.Clean(r.Dir)
		}
	}
	return out
}

func draw1(out io.Writer, ch Chart, lines []Series, smooth float64, steps [2]float64) error {
	p, err := chartPlot(ch, lines, smooth, steps)
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(Width, Height, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(out)
	return err
}

// chartPlot lays out one chart over the shared step range.
func chartPlot(ch Chart, lines []Series, smooth float64, steps [2]float64) (*gplot.Plot, error) {
	p := gplot.New()
	p.Title.Text = ch.Title
	p.X.Label.Text = "step"
	p.Y.Label.Text = ch.YLabel
	if smooth > 0 {
		p.Title.Text += fmt.Sprintf(" (smoothed, EMA %g)", smooth)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = emptiestCorner(lines)
	p.Legend.Padding = vg.Points(4)
	for i, s := range lines {
		c := plotutil.Color(i)
		if smooth > 0 && len(s.XY) > 1 {
			raw, err := plotter.NewLine(s.XY)
			if err != nil {
				return nil, err
			}
			style(raw, nil, faint(c), i)
			raw.Width = vg.Points(0.75)
			p.Add(raw)
			s.XY = ema(s.XY, smooth)
		}
		if len(s.XY) <= 40 {
			l, pts, err := plotter.NewLinePoints(s.XY)
			if err != nil {
				return nil, err
			}
			style(l, pts, c, i)
			p.Add(l, pts)
			p.Legend.Add(s.Label, l, pts)
			continue
		}
		l, err := plotter.NewLine(s.XY)
		if err != nil {
			return nil, err
		}
		style(l, nil, c, i)
		p.Add(l)
		p.Legend.Add(s.Label, l)
	}
	p.X.Min, p.X.Max = steps[0], steps[1]
	return p, nil
}

// ema is TensorBoard's smoothing of a scalar series: an exponential
// moving average with weight w, divided by 1 − w^n so the first points
// are not pulled toward 0 (TensorBoard's
// tensorboard/components/vz_line_chart2/line-chart.ts, resmoothDataset).
func ema(xy plotter.XYs, w float64) plotter.XYs {
	out := make(plotter.XYs, len(xy))
	last, n := 0.0, 0
	for i, p := range xy {
		last = last*w + (1-w)*p.Y
		n++
		out[i] = plotter.XY{X: p.X, Y: last / (1 - math.Pow(w, float64(n)))}
	}
	return out
}

// faint is c at a third of its opacity, for the raw line behind a
// smoothed one.
func faint(c color.Color) color.Color {
	r, g, b, a := c.RGBA()
	return color.NRGBA64{R: uint16(r * 0xffff / max(a, 1)), G: uint16(g * 0xffff / max(a, 1)), B: uint16(b * 0xffff / max(a, 1)), A: uint16(a / 3)}
}

func style(l *plotter.Line, pts *plotter.Scatter, c color.Color, i int) {
	l.Color = c
	l.Width = vg.Points(1.5)
	l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
	if pts != nil {
		pts.Color = c
		pts.Shape = draw.CircleGlyph{}
		pts.Radius = vg.Points(2)
	}
}

// emptiestCorner picks the corner of the chart with the fewest points for
// the legend, so that it hides as little of the lines as it can.
func emptiestCorner(lines []Series) (top, left bool) {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range lines {
		for _, p := range s.XY {
			xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
		}
	}
	// counts[top][left] of points in each corner (40% of each axis).
	var counts [2][2]int
	for _, s := range lines {
		for _, p := range s.XY {
			fx, fy := frac(p.X, xmin, xmax), frac(p.Y, ymin, ymax)
			for t := 0; t < 2; t++ {
				for l := 0; l < 2; l++ {
					inX := (l == 1 && fx <= 0.4) || (l == 0 && fx >= 0.6)
					inY := (t == 1 && fy >= 0.6) || (t == 0 && fy <= 0.4)
					if inX && inY {
						counts[t][l]++
					}
				}
			}
		}
	}
	// Prefer top right, as gonum does, when corners tie.
	best, bt, bl := counts[1][0], true, false
	for _, c := range []struct{ t, l bool }{{true, true}, {false, false}, {false, true}} {
		n := counts[b2i(c.t)][b2i(c.l)]
		if n < best {
			best, bt, bl = n, c.t, c.l
		}
	}
	return bt, bl
}

func frac(v, lo, hi float64) float64 {
	if hi <= lo {
		return 0.5
	}
	return (v - lo) / (hi - lo)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
