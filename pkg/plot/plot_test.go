package plot

import (
	"bytes"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func TestReadMetrics(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		steps   []int
		score   []float64 // critic/score/mean per step, NaN when absent or null
		wantErr string
	}{
		{name: "plain", in: `{"step":0,"val/pass@1":0.1}` + "\n" + `{"step":1,"critic/score/mean":0.5}` + "\n",
			steps: []int{0, 1}, score: []float64{math.NaN(), 0.5}},
		// A resumed run redoes steps 2 and 3: the later records win.
		{name: "resumed", in: "{\"step\":1,\"critic/score/mean\":0.1}\n{\"step\":2,\"critic/score/mean\":0.2}\n{\"step\":3,\"critic/score/mean\":0.3}\n{\"step\":2,\"critic/score/mean\":0.25}\n{\"step\":3,\"critic/score/mean\":0.35}\n{\"step\":4,\"critic/score/mean\":0.4}\n",
			steps: []int{1, 2, 3, 4}, score: []float64{0.1, 0.25, 0.35, 0.4}},
		{name: "partial last line", in: "{\"step\":1,\"critic/score/mean\":0.1}\n{\"step\":2,\"critic/sc",
			steps: []int{1}, score: []float64{0.1}},
		{name: "complete last line without newline", in: "{\"step\":1,\"critic/score/mean\":0.1}\n{\"step\":2,\"critic/score/mean\":0.2}",
			steps: []int{1, 2}, score: []float64{0.1, 0.2}},
		{name: "null and blank lines", in: "\n{\"step\":1,\"critic/score/mean\":null,\"note\":\"x\"}\n\n",
			steps: []int{1}, score: []float64{math.NaN()}},
		{name: "broken middle line", in: "{\"step\":1}\n{\"step\":2,\n{\"step\":3}\n", wantErr: "m.jsonl:2: not a JSON object"},
		{name: "no step", in: "{\"event\":\"log\",\"message\":\"hi\"}\n", wantErr: "m.jsonl:1: no \"step\" number"},
		{name: "negative step", in: "{\"step\":-1}\n", wantErr: "m.jsonl:1"},
		{name: "fractional step", in: "{\"step\":1.5}\n", wantErr: "m.jsonl:1"},
		{name: "empty", in: "", steps: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := ReadMetrics(strings.NewReader(tt.in), "m.jsonl")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !usererr.Is(err) {
					t.Fatalf("err = %v, want a user error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != len(tt.steps) {
				t.Fatalf("got %d records, want %d: %+v", len(recs), len(tt.steps), recs)
			}
			for i, r := range recs {
				if r.Step != tt.steps[i] {
					t.Errorf("record %d: step %d, want %d", i, r.Step, tt.steps[i])
				}
				got, ok := r.Values["critic/score/mean"]
				if !ok {
					got = math.NaN()
				}
				if !(got == tt.score[i] || math.IsNaN(got) && math.IsNaN(tt.score[i])) {
					t.Errorf("step %d: score %v, want %v", r.Step, got, tt.score[i])
				}
				if _, ok := r.Values["note"]; ok {
					t.Errorf("a text field became a metric")
				}
			}
		})
	}
}

func FuzzReadMetrics(f *testing.F) {
	f.Add([]byte("{\"step\":1,\"a\":1}\n{\"step\":1,\"a\":2}\n"))
	f.Add([]byte("{\"step\":0,\"val/x/pass@1\":null}\n{\"step\":"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ReadMetrics(bytes.NewReader(b), "f")
		if err != nil {
			return
		}
		for i := 1; i < len(recs); i++ {
			if recs[i].Step <= recs[i-1].Step {
				t.Fatalf("steps not strictly increasing: %d then %d", recs[i-1].Step, recs[i].Step)
			}
		}
	})
}

func writeRun(t *testing.T, dir string, lines ...string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWriteCharts(t *testing.T) {
	root := t.TempDir()
	a := writeRun(t, filepath.Join(root, "a", "run"),
		`{"step":0,"val/pass@1":0.1,"val/arith/pass@1":0.1,"val/countdown/pass@1":0.0}`,
		`{"step":1,"critic/score/mean":0.2,"actor/pg_loss":0.1,"actor/ppo_kl":0.01,"response_length/mean":5}`,
		`{"step":2,"critic/score/mean":0.3,"actor/pg_loss":0.05,"actor/ppo_kl":null,"response_length/mean":6,"val/pass@1":0.3,"val/arith/pass@1":0.4,"val/countdown/pass@1":0.2}`)
	b := writeRun(t, filepath.Join(root, "b", "run"),
		`{"step":1,"critic/score/mean":0.1,"response_length/mean":7}`,
		`{"step":2,"critic/score/mean":0.15,"response_length/mean":8}`)
	var runs []Run
	for _, d := range []string{a, b} {
		r, err := ReadRun(d)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	out := filepath.Join(root, "plots")
	w, err := Write(runs, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"reward.png", "val_pass_at_1.png", "loss.png", "kl.png", "response_length.png"}
	if len(w.Files) != len(want) {
		t.Fatalf("wrote %v, want %v", w.Files, want)
	}
	for i, f := range w.Files {
		if filepath.Base(f) != want[i] {
			t.Errorf("file %d: %s, want %s", i, f, want[i])
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s is %v", f, b)
		}
	}
	if len(w.Skipped) != 1 || w.Skipped[0] != "entropy.png" {
		t.Errorf("skipped %v, want [entropy.png]", w.Skipped)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != len(want) {
		t.Errorf("%d files in the output directory (temporary files left?)", len(entries))
	}
}

func TestSeries(t *testing.T) {
	r := Run{Name: "r", Records: []Record{
		{Step: 0, Values: map[string]float64{"val/pass@1": 0.5}},
		{Step: 5, Values: map[string]float64{"val/pass@1": 0.7, "actor/ppo_kl": 0.1, "actor/kl_loss": math.NaN()}},
	}}
	if s := valPassAt1(r); len(s) != 1 || s[0].Label != "r" || len(s[0].XY) != 2 || s[0].XY[1].X != 5 || s[0].XY[1].Y != 0.7 {
		t.Errorf("overall pass@1 series %+v", s)
	}
	if s := keys("actor/ppo_kl", "actor/kl_loss")(r); len(s) != 1 || s[0].Label != "r actor/ppo_kl" {
		t.Errorf("KL series %+v", s)
	}
	names := uniqueNames([]Run{{Name: "run", Dir: "a/run"}, {Name: "run", Dir: "b/run/"}, {Name: "x", Dir: "x"}})
	if strings.Join(names, ",") != "a/run,b/run,x" {
		t.Errorf("names %v", names)
	}
}

func TestReadRunErrors(t *testing.T) {
	root := t.TempDir()
	empty := filepath.Join(root, "empty")
	os.Mkdir(empty, 0o755)
	noRecs := writeRun(t, filepath.Join(root, "norecs"), "")
	for _, dir := range []string{filepath.Join(root, "missing"), empty, noRecs} {
		if _, err := ReadRun(dir); !usererr.Is(err) {
			t.Errorf("ReadRun(%s) = %v, want a user error", dir, err)
		}
	}
}

func TestEmptiestCorner(t *testing.T) {
	rising := Series{XY: plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}, {X: 2, Y: 2}, {X: 3, Y: 3}}}
	falling := Series{XY: plotter.XYs{{X: 0, Y: 3}, {X: 1, Y: 2}, {X: 2, Y: 1}, {X: 3, Y: 0}}}
	tests := []struct {
		s         Series
		top, left bool
	}{
		{rising, true, true},   // the top left is empty
		{falling, true, false}, // the top right is empty
	}
	for i, tt := range tests {
		if top, left := emptiestCorner([]Series{tt.s}); top != tt.top || left != tt.left {
			t.Errorf("case %d: top %v left %v, want %v %v", i, top, left, tt.top, tt.left)
		}
	}
}

// The default run's validation line is labelled by the run alone, several
// sources each "run: source"; a KL series that is zero at every step is
// left out.
func TestSeriesLabels(t *testing.T) {
	rec := func(step int, kv ...any) Record {
		m := map[string]float64{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(float64)
		}
		return Record{Step: step, Values: m}
	}
	arith := Run{Name: "arith", Records: []Record{
		rec(0, "val/pass@1", 0.1, "val/arith/pass@1", 0.1, "actor/ppo_kl", 0.0, "actor/kl_loss", 0.0),
		rec(50, "val/pass@1", 0.5, "val/arith/pass@1", 0.5, "actor/ppo_kl", 0.0, "actor/kl_loss", 0.02),
	}}
	if s := valPassAt1(arith); len(s) != 1 || s[0].Label != "arith" {
		t.Errorf("default run's validation: %+v, want one line labelled arith", s)
	}
	arith.Name = "seed1"
	if s := valPassAt1(arith); len(s) != 1 || s[0].Label != "seed1 (arith)" {
		t.Errorf("one source in a run named otherwise: %+v", s)
	}
	mixed := Run{Name: "r", Records: []Record{rec(0, "val/math/pass@1", 0.2, "val/code/pass@1", 0.3)}}
	if s := valPassAt1(mixed); len(s) != 2 || s[0].Label != "r: code" || s[1].Label != "r: math" {
		t.Errorf("two sources: %+v", s)
	}
	if s := keys("actor/ppo_kl", "actor/kl_loss")(arith); len(s) != 1 || s[0].Label != "seed1 actor/kl_loss" {
		t.Errorf("KL series %+v: want actor/ppo_kl (always 0) left out", s)
	}
}

// --smooth is TensorBoard's debiased EMA; out-of-range weights are user
// errors, and smoothed charts are written.
func TestSmooth(t *testing.T) {
	xy := plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: 0}, {X: 3, Y: 1}}
	got := ema(xy, 0.5)
	// last: 0.5, 0.25, 0.625; debias 1-0.5^n: 0.5, 0.75, 0.875.
	want := []float64{1, 1.0 / 3, 0.625 / 0.875}
	for i := range want {
		if math.Abs(got[i].Y-want[i]) > 1e-12 || got[i].X != xy[i].X {
			t.Errorf("ema[%d] = %v, want (%g, %g)", i, got[i], xy[i].X, want[i])
		}
	}
	if got := ema(xy, 0); got[1].Y != 0 {
		t.Errorf("weight 0 changed the values: %v", got)
	}
	for _, w := range []float64{-0.1, 1, 2, math.NaN()} {
		if err := (Options{Smooth: w}).Validate(); err == nil || !strings.Contains(err.Error(), "--smooth") {
			t.Errorf("smooth %g: %v", w, err)
		}
	}
	dir := writeRun(t, filepath.Join(t.TempDir(), "run"),
		`{"step":1,"critic/score/mean":0.2}`, `{"step":2,"critic/score/mean":0.6}`, `{"step":3,"critic/score/mean":0.1}`)
	r, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Write([]Run{r}, filepath.Join(dir, "plots"), Options{Smooth: 0.9})
	if err != nil || len(w.Files) != 1 {
		t.Fatalf("wrote %v: %v", w.Files, err)
	}
}

// A line longer than any step's record is refused by name:line, without
// reading it whole (a file that is not a metrics log, or endless bytes).
func TestReadMetricsRefusesHugeLine(t *testing.T) {
	in := io.MultiReader(strings.NewReader(`{"step":1,"critic/score/mean":0.5}`+"\n"), zeros{})
	_, err := ReadMetrics(in, "run/metrics.jsonl")
	if err == nil || !strings.Contains(err.Error(), "run/metrics.jsonl:2: the line is larger than 16 MiB") || !usererr.Is(err) {
		t.Fatalf("error %v, want one naming run/metrics.jsonl:2 and the bound", err)
	}
}

// zeros is /dev/zero: bytes without end and without a line break.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Every chart of one Write shares the step axis and so its ticks: a run
// whose training metrics start at step 1 and whose validation starts at
// step 0 (val_before_train) gets the same labels on both charts.
func TestChartsShareStepTicks(t *testing.T) {
	var recs []Record
	for step := 0; step <= 1550; step++ {
		v := map[string]float64{}
		if step > 0 {
			v["critic/score/mean"] = 0.5
		}
		if step%50 == 0 {
			v["val/pass@1"] = 0.5
		}
		recs = append(recs, Record{Step: step, Values: v})
	}
	all := chartLines([]Run{{Name: "r", Records: recs}})
	steps := stepRange(all)
	labels := func(file string) string {
		for ci, ch := range Charts {
			if ch.File != file {
				continue
			}
			p, err := chartPlot(ch, all[ci], 0, steps)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
				if tk.Label != "" {
					out = append(out, tk.Label)
				}
			}
			return strings.Join(out, ",")
		}
		t.Fatalf("no chart %s", file)
		return ""
	}
	reward, val := labels("reward.png"), labels("val_pass_at_1.png")
	if reward != val || reward != "0,500,1000,1500" {
		t.Errorf("step labels: reward %q, validation %q; want both 0,500,1000,1500", reward, val)
	}
}
