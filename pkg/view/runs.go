package view

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/plot"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// Bounds of what a scan of the folders visits.
const (
	maxDepth = 8
	maxDirs  = 20000
	maxRuns  = 2000
)

// root is one folder given to the viewer.
type root struct {
	path string // as given, cleaned
	real string // symlinks resolved: every file served is under it
}

// inside reports whether path, symlinks resolved, is under the root.
func (r *root) inside(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(r.real, real)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// run is a training run directory or an eval episodes file.
type run struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Kind string `json:"kind"` // train or eval
	root *root
	dir  string // the run directory (train)
	file string // the episodes file (eval)
	// phases maps a phase to its episodes directory (train runs).
	phases map[string]string
}

// scan finds the runs under the roots: directories with a metrics.jsonl,
// a run.json, a checkpoint pointer or an episodes directory, and files of
// episodes (rllm eval --episodes). Symlinked directories are not entered.
func scan(roots []*root) []*run {
	var out []*run
	dirs := 0
	for ri, r := range roots {
		var walk func(dir string, depth int)
		walk = func(dir string, depth int) {
			if dirs >= maxDirs || len(out) >= maxRuns {
				return
			}
			dirs++
			entries, err := os.ReadDir(dir)
			if err != nil {
				return
			}
			names := map[string]fs.DirEntry{}
			for _, e := range entries {
				names[e.Name()] = e
			}
			isRun := false
			for _, marker := range []string{runs.MetricsFile, runs.ConfigFile, runs.LatestFile, "run.json"} {
				if e, ok := names[marker]; ok && e.Type().IsRegular() {
					isRun = true
				}
			}
			if e, ok := names[episodestore.Dir]; ok && e.IsDir() {
				isRun = true
			}
			rel, _ := filepath.Rel(r.path, dir)
			if isRun {
				out = append(out, &run{ID: runID(ri, rel), Name: displayName(r, rel), Kind: "train", root: r, dir: dir, phases: phaseDirs(r, dir)})
			}
			for _, e := range entries {
				name := e.Name()
				p := filepath.Join(dir, name)
				switch {
				case e.IsDir() && e.Type()&fs.ModeSymlink == 0:
					if depth < maxDepth && !(isRun && (name == episodestore.Dir || strings.HasPrefix(name, runs.StepDirPrefix))) && !strings.HasPrefix(name, ".") {
						walk(p, depth+1)
					}
				case e.Type().IsRegular() && !isRun && (strings.HasSuffix(name, ".jsonl") || strings.HasSuffix(name, ".jsonl.gz")):
					if isEpisodesFile(p) && len(out) < maxRuns {
						relf, _ := filepath.Rel(r.path, p)
						out = append(out, &run{ID: runID(ri, relf), Name: displayName(r, relf), Kind: "eval", root: r, file: p})
					}
				}
			}
		}
		walk(r.path, 0)
	}
	return out
}

func runID(root int, rel string) string {
	return strconv.Itoa(root) + ":" + filepath.ToSlash(rel)
}

func displayName(r *root, rel string) string {
	if rel == "." {
		return filepath.Base(r.path)
	}
	return filepath.ToSlash(filepath.Join(filepath.Base(r.path), rel))
}

// phaseDirs are a run's episodes directories: where its config.json says
// (trainer.rollout_data_dir, trainer.validation_data_dir) when that is
// under the root, else the defaults.
func phaseDirs(r *root, dir string) map[string]string {
	p := map[string]string{
		episodestore.PhaseTrain: episodestore.PhaseDir(dir, episodestore.PhaseTrain),
		episodestore.PhaseVal:   episodestore.PhaseDir(dir, episodestore.PhaseVal),
	}
	cfg := readConfig(dir)
	if tr, ok := cfg["trainer"].(map[string]any); ok {
		for key, phase := range map[string]string{"rollout_data_dir": episodestore.PhaseTrain, "validation_data_dir": episodestore.PhaseVal} {
			if s, ok := tr[key].(string); ok && s != "" {
				if !filepath.IsAbs(s) {
					continue // relative to where the run was started, which is not known here
				}
				if r.inside(s) {
					p[phase] = s
				}
			}
		}
	}
	return p
}

// isEpisodesFile reports whether a file starts with an episode record.
// Its answers are kept by file size and time: the runs list rescans.
func isEpisodesFile(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	key := fileKey{path, st.Size(), st.ModTime()}
	episodesFiles.Lock()
	ok, seen := episodesFiles.m[key]
	episodesFiles.Unlock()
	if seen {
		return ok
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	episodestore.Scan(io.LimitReader(f, 64<<20), 0, func(_, _ int64, rec *episodestore.Record) error {
		ok = rec.ID != "" && rec.Trajectories != nil
		return errStop
	})
	episodesFiles.Lock()
	if len(episodesFiles.m) > 10000 {
		clear(episodesFiles.m)
	}
	episodesFiles.m[key] = ok
	episodesFiles.Unlock()
	return ok
}

type fileKey struct {
	path  string
	size  int64
	mtime time.Time
}

var episodesFiles = struct {
	sync.Mutex
	m map[fileKey]bool
}{m: map[fileKey]bool{}}

// readConfig is a run's config.json's configuration (nil when none).
func readConfig(dir string) map[string]any {
	b, err := boundedio.ReadFile(context.Background(), filepath.Join(dir, runs.ConfigFile), 8<<20)
	if err != nil {
		return nil
	}
	var rc struct {
		TotalSteps int            `json:"total_steps"`
		Config     map[string]any `json:"config"`
	}
	if json.Unmarshal(b, &rc) != nil {
		return nil
	}
	if rc.Config == nil {
		rc.Config = map[string]any{}
	}
	rc.Config["__total_steps"] = float64(rc.TotalSteps)
	return rc.Config
}

// runSummary is one row of the runs list.
type runSummary struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	Status     string            `json:"status"`
	Steps      int               `json:"steps"`
	TotalSteps int               `json:"total_steps,omitempty"`
	BestVal    *bestVal          `json:"best_val,omitempty"`
	Episodes   int64             `json:"episode_bytes"`
	Updated    string            `json:"updated,omitempty"`
	Config     map[string]string `json:"config_diff,omitempty"`
	Note       string            `json:"note,omitempty"`
}

type bestVal struct {
	Step  int     `json:"step"`
	Key   string  `json:"key"`
	Value float64 `json:"value"`
}

// Statuses of a run.
const (
	statusTraining    = "training"
	statusFinished    = "finished"
	statusInterrupted = "interrupted"
	statusCrashed     = "crashed"
	statusEval        = "eval"
	statusEmpty       = "no steps"
)

// summarize reads what the runs list shows of a run. now is the clock
// that tells a live run (one written to lately) from a stopped one.
func (s *Server) summarize(r *run, now time.Time) runSummary {
	sum := runSummary{ID: r.ID, Name: r.Name, Kind: r.Kind}
	if r.Kind == "eval" {
		sum.Status = statusEval
		if st, err := os.Stat(r.file); err == nil {
			sum.Episodes = st.Size()
			sum.Updated = st.ModTime().UTC().Format(time.RFC3339)
		}
		return sum
	}
	recs, mtime, err := s.metrics(r)
	if err != nil {
		sum.Note = err.Error()
	}
	latest := mtime
	for _, d := range r.phases {
		if st, err := os.Stat(d); err == nil && st.ModTime().After(latest) {
			latest = st.ModTime()
		}
		if _, n, err := episodestore.Steps(d); err == nil {
			sum.Episodes += n
		}
	}
	if !latest.IsZero() {
		sum.Updated = latest.UTC().Format(time.RFC3339)
	}
	cfg := readConfig(r.dir)
	if t, ok := cfg["__total_steps"].(float64); ok {
		sum.TotalSteps = int(t)
	}
	var stepSecs []float64
	for _, rec := range recs {
		if rec.Step > sum.Steps && hasTrainMetrics(rec) {
			sum.Steps = rec.Step
		}
		if v, ok := rec.Values["timing_s/step"]; ok && !math.IsNaN(v) {
			stepSecs = append(stepSecs, v)
		}
		if v, ok := rec.Values["val/pass@1"]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			if sum.BestVal == nil || v > sum.BestVal.Value {
				sum.BestVal = &bestVal{Step: rec.Step, Key: "val/pass@1", Value: v}
			}
		}
	}
	ckpt, hasCkpt, _ := runs.Latest(r.dir)
	// A live run writes a step at least every few step times.
	patience := 120 * time.Second
	if len(stepSecs) > 0 {
		slices.Sort(stepSecs)
		patience = max(patience, time.Duration(3*stepSecs[len(stepSecs)/2]*float64(time.Second)))
	}
	switch {
	case sum.TotalSteps > 0 && sum.Steps >= sum.TotalSteps && hasCkpt && ckpt >= sum.TotalSteps:
		sum.Status = statusFinished
	case !latest.IsZero() && now.Sub(latest) < patience:
		sum.Status = statusTraining
	case sum.Steps == 0 && !hasCkpt:
		sum.Status = statusEmpty
	case hasCkpt && ckpt >= sum.Steps:
		sum.Status = statusInterrupted // stopped with a checkpoint of its last step
	default:
		sum.Status = statusCrashed
	}
	return sum
}

func hasTrainMetrics(rec plot.Record) bool {
	_, ok := rec.Values["training/global_step"]
	return ok || len(rec.Values) > 0 && rec.Step > 0
}

// configDiffs sets each summary's config_diff: the keys whose values
// differ between the runs (secrets' values hidden).
func configDiffs(runs []*run, sums []runSummary) {
	flat := make([]map[string]string, len(runs))
	keys := map[string]bool{}
	for i, r := range runs {
		if r.Kind != "train" {
			continue
		}
		flat[i] = map[string]string{}
		flatten("", readConfig(r.dir), flat[i])
		delete(flat[i], "__total_steps")
		for k := range flat[i] {
			keys[k] = true
		}
	}
	var differ []string
	for k := range keys {
		first, seen, same := "", false, true
		n := 0
		for i := range runs {
			if flat[i] == nil {
				continue
			}
			n++
			v := flat[i][k]
			if !seen {
				first, seen = v, true
			} else if v != first {
				same = false
			}
		}
		if !same && n > 1 {
			differ = append(differ, k)
		}
	}
	sort.Strings(differ)
	if len(differ) > 200 {
		differ = differ[:200]
	}
	for i := range sums {
		if flat[i] == nil || len(differ) == 0 {
			continue
		}
		sums[i].Config = map[string]string{}
		for _, k := range differ {
			v := flat[i][k]
			if secretKey(k) && v != "null" && v != `""` && v != "" {
				v = "(hidden)"
			}
			sums[i].Config[k] = v
		}
	}
}

func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, vv, out)
		}
	default:
		b, _ := json.Marshal(x)
		s := string(b)
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		out[prefix] = s
	}
}

// secretKey says a key names a secret whose value is not shown (an API
// key an agent's arguments carry); key names such as api_key_env are
// only names and are shown.
func secretKey(k string) bool {
	k = strings.ToLower(k[strings.LastIndexByte(k, '.')+1:])
	if strings.HasSuffix(k, "_env") || strings.HasSuffix(k, "_file") {
		return false
	}
	for _, w := range []string{"api_key", "apikey", "token", "secret", "password"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

var errStop = fmt.Errorf("stop")
