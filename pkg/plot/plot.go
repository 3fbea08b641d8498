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
}

// Charts are the charts Write draws, in order.
var Charts = []Chart{
	{File: "reward.png", Title: "Training reward", YLabel: "mean score (critic/score/mean)", Series: key("critic/score/mean")},
	{File: "val_pass_at_1.png", Title: "Validation pass@1", YLabel: "pass@1", Series: valPassAt1},
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

// keys draws each of the keys the run has, labelled by key.
func keys(ks ...string) func(Run) []Series {
	return func(r Run) []Series {
		var out []Series
		for _, k := range ks {
			if xy := points(r, k); len(xy) > 0 {
				out = append(out, Series{Label: r.Name + " " + k, XY: xy})
			}
		}
		return out
	}
}

// valPassAt1 draws val/SOURCE/pass@1 for each data source, or val/pass@1
// when there is no per-source key.
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
			out = append(out, Series{Label: r.Name + " " + s, XY: xy})
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

// Write draws every chart some run has data for into outDir.
func Write(runs []Run, outDir string) (Written, error) {
	var w Written
	names := uniqueNames(runs)
	for _, ch := range Charts {
		var lines []Series
		for i, r := range runs {
			r.Name = names[i]
			lines = append(lines, ch.Series(r)...)
		}
		if len(lines) == 0 {
			w.Skipped = append(w.Skipped, ch.File)
			continue
		}
		path := filepath.Join(outDir, ch.File)
		if err := atomicfile.Write(path, func(out io.Writer) error { return draw1(out, ch, lines) }); err != nil {
			return w, fmt.Errorf("writing %s: %w", path, err)
		}
		w.Files = append(w.Files, path)
	}
	return w, nil
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

func draw1(out io.Writer, ch Chart, lines []Series) error {
	p := gplot.New()
	p.Title.Text = ch.Title
	p.X.Label.Text = "step"
	p.Y.Label.Text = ch.YLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = emptiestCorner(lines)
	p.Legend.Padding = vg.Points(4)
	for i, s := range lines {
		c := plotutil.Color(i)
		if len(s.XY) <= 40 {
			l, pts, err := plotter.NewLinePoints(s.XY)
			if err != nil {
				return err
			}
			style(l, pts, c, i)
			p.Add(l, pts)
			p.Legend.Add(s.Label, l, pts)
			continue
		}
		l, err := plotter.NewLine(s.XY)
		if err != nil {
			return err
		}
		style(l, nil, c, i)
		p.Add(l)
		p.Legend.Add(s.Label, l)
	}
	wt, err := p.WriterTo(Width, Height, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(out)
	return err
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
