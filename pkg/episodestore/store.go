// Package episodestore keeps episodes on disk, the way the trainer and
// `rllm eval --episodes` write them and `rllm view` reads them.
//
// A run directory holds one pair of files per kept step and phase:
//
//	RUN_DIR/episodes/train/000012.jsonl.gz     the records, one gzip member each
//	RUN_DIR/episodes/train/000012.index.jsonl  one summary line per record
//	RUN_DIR/episodes/val/000010.jsonl.gz       validation at step 10
//
// The data file is an ordinary gzip file (zcat prints one JSON object a
// line), made of one gzip member per record so that a record can be read
// alone from its offset: the index gives each record's offset and length
// with what lists and filters need (reward, termination, data source,
// lengths), so a viewer pages a step without decompressing it.
//
// A record is an episode.Episode (its JSON fields, unchanged) with the
// step, the phase and, for training, the samples exactly as trained:
// token ids, sampling logprobs, loss mask and advantages, with the text
// piece of every token id the record uses. `rllm eval --episodes` writes
// the same records (phase "eval") into one file; a file whose name does
// not end in .gz is written as plain JSON lines.
//
// Files are appended record by record and never rewritten, so a kill
// leaves at worst a cut last record (or index line), which readers skip.
package episodestore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/jsonline"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

// Phases of a record.
const (
	PhaseTrain = "train"
	PhaseVal   = "val"
	PhaseEval  = "eval"
)

// Dir is the episodes directory of a run directory; the phases are its
// subdirectories.
const Dir = "episodes"

// PhaseDir is where a run keeps a phase's episodes by default.
func PhaseDir(runDir, phase string) string { return filepath.Join(runDir, Dir, phase) }

// Names of a step's files.
const (
	DataSuffix  = ".jsonl.gz"
	IndexSuffix = ".index.jsonl"
)

// DataPath and IndexPath name step's files in a phase directory.
func DataPath(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("%06d", step)+DataSuffix)
}

// IndexPath is the index of DataPath(dir, step).
func IndexPath(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("%06d", step)+IndexSuffix)
}

// StepOfFile parses a data file's name ("000012.jsonl.gz" is step 12).
func StepOfFile(name string) (int, bool) {
	s, ok := strings.CutSuffix(name, DataSuffix)
	if !ok || s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Record is one episode as kept.
type Record struct {
	// The episode's fields come first, so a record reads as the episode
	// it is (a line starts with its "id").
	episode.Episode
	Step  int    `json:"step"`
	Phase string `json:"phase"`
	// Group is the task group's position in the step's batch.
	Group int `json:"group"`
	// Samples are the training sequences of the episode as the update
	// saw them (training records only; the steps' own token arrays are
	// then left out, as the samples hold them).
	Samples []Sample `json:"samples,omitempty"`
	// Pieces is the text of every token id the record uses.
	Pieces map[int]string `json:"pieces,omitempty"`
}

// Sample is one training sequence of an episode.
type Sample struct {
	// Trajectory is the index of its trajectory in the episode; Step the
	// step's index in per-step mode, -1 for a whole trajectory.
	Trajectory  int       `json:"trajectory"`
	Step        int       `json:"step"`
	PromptIDs   []int     `json:"prompt_ids"`
	ResponseIDs []int     `json:"response_ids"`
	Logprobs    []float64 `json:"logprobs"`
	LossMask    []int8    `json:"loss_mask"`
	// Advantage is the outcome advantage; Advantages, when a token-level
	// estimator set them, one per response token.
	Advantage  float64   `json:"advantage"`
	Advantages []float64 `json:"advantages,omitempty"`
	Reward     float64   `json:"reward"`
	// Masked says a filter left the whole sample out of the loss.
	Masked        bool                      `json:"masked,omitempty"`
	Termination   episode.TerminationReason `json:"termination,omitempty"`
	TokenMismatch bool                      `json:"token_mismatch,omitempty"`
}

// AdvantageAt is the advantage of response token j.
func (s *Sample) AdvantageAt(j int) float64 {
	if s.Advantages != nil && j < len(s.Advantages) {
		return s.Advantages[j]
	}
	return s.Advantage
}

// Entry is one index line: where a record is and what lists show of it.
type Entry struct {
	Offset int64  `json:"off"`
	Length int64  `json:"len"`
	ID     string `json:"id"`
	Task   string `json:"task"`
	Group  int    `json:"group"`
	// Reward is the episode's reward (the mean of its trajectories').
	Reward      float64 `json:"reward"`
	Correct     bool    `json:"correct"`
	Termination string  `json:"term"`
	Source      string  `json:"source"`
	// PromptTokens and ResponseTokens are the lengths of its first
	// sample (or step); Turns its steps.
	PromptTokens   int    `json:"prompt_tokens"`
	ResponseTokens int    `json:"response_tokens"`
	Turns          int    `json:"turns"`
	Truncated      bool   `json:"truncated,omitempty"`
	Error          string `json:"error,omitempty"`
}

// TaskOf is the task part of an episode id "task_id:rollout_index".
func TaskOf(episodeID string) string {
	if i := strings.LastIndexByte(episodeID, ':'); i >= 0 {
		return episodeID[:i]
	}
	return episodeID
}

// Reward is an episode's reward: the mean of its trajectories' rewards.
func Reward(ep *episode.Episode) float64 {
	if len(ep.Trajectories) == 0 {
		return 0
	}
	r := 0.0
	for _, tr := range ep.Trajectories {
		r += tr.Reward
	}
	return r / float64(len(ep.Trajectories))
}

// Summarize is the index entry of a record (without its place).
func Summarize(rec *Record) Entry {
	e := Entry{ID: rec.ID, Task: TaskOf(rec.ID), Group: rec.Group, Reward: finite(Reward(&rec.Episode)),
		Correct: rec.IsCorrect, Termination: string(rec.TerminationReason), Error: clip(rec.Error, 200)}
	e.Source, _ = rec.Task["data_source"].(string)
	for _, tr := range rec.Trajectories {
		e.Turns += len(tr.Steps)
	}
	switch {
	case len(rec.Samples) > 0:
		for _, s := range rec.Samples {
			e.ResponseTokens += len(s.ResponseIDs)
		}
		e.PromptTokens = len(rec.Samples[0].PromptIDs)
	default:
		for _, tr := range rec.Trajectories {
			for _, st := range tr.Steps {
				e.ResponseTokens += len(st.ResponseIDs)
				if e.PromptTokens == 0 {
					e.PromptTokens = len(st.PromptIDs)
				}
				if st.FinishReason == "length" {
					e.Truncated = true
				}
			}
		}
	}
	if rec.TerminationReason == episode.TerminationMaxResponseLength || rec.TerminationReason == episode.TerminationMaxPromptLength {
		e.Truncated = true
	}
	for _, s := range rec.Samples {
		if s.Termination == episode.TerminationMaxResponseLength {
			e.Truncated = true
		}
	}
	return e
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Level is the gzip level of records: BestSpeed costs the trainer a
// third of the default level's time for a few percent more bytes
// (docs/benchmarks.md).
var Level = gzip.BestSpeed

// gzipWriters keeps compressors between steps (each holds about a MB).
var gzipWriters sync.Pool

// Writer appends records to a data file and, when it has one, their
// entries to an index.
type Writer struct {
	data, index io.Writer
	compress    bool
	off         int64
	buf         bytes.Buffer
	n           int
}

// NewWriter writes records to data (gzip members when compress is set,
// else JSON lines) and their entries to index (nil: none). off is
// data's current size (the first record's offset).
func NewWriter(data, index io.Writer, compress bool, off int64) *Writer {
	return &Writer{data: data, index: index, compress: compress, off: off}
}

// Write appends one record and returns the bytes it took in the data file.
func (w *Writer) Write(rec *Record) (int64, error) {
	line, err := jsonline.Marshal(finiteRecord(rec))
	if err != nil {
		return 0, fmt.Errorf("episode %s: %w", rec.ID, err)
	}
	out := line
	if w.compress {
		w.buf.Reset()
		zw, _ := gzipWriters.Get().(*gzip.Writer)
		if zw == nil {
			zw, _ = gzip.NewWriterLevel(&w.buf, Level)
		} else {
			zw.Reset(&w.buf)
		}
		zw.Write(line)
		err := zw.Close()
		gzipWriters.Put(zw)
		if err != nil {
			return 0, err
		}
		out = w.buf.Bytes()
	}
	if _, err := w.data.Write(out); err != nil {
		return 0, err
	}
	e := Summarize(rec)
	e.Offset, e.Length = w.off, int64(len(out))
	w.off += int64(len(out))
	w.n++
	if w.index != nil {
		b, err := jsonline.Marshal(e)
		if err != nil {
			return 0, err
		}
		if _, err := w.index.Write(b); err != nil {
			return 0, err
		}
	}
	return int64(len(out)), nil
}

// StepFile is one step's pair of files being written; what is written
// reaches the files by Close (a step's records are written together).
type StepFile struct {
	*Writer
	data, index *os.File
	bd, bi      *bufio.Writer
}

// Create opens step's files in dir for appending, creating dir; a step
// written again (a redone step) appends to what is there, so callers
// remove redone steps first (RemoveAfter).
func Create(dir string, step int) (*StepFile, error) {
	if err := os.MkdirAll(dir, atomicfile.DirMode); err != nil {
		return nil, err
	}
	data, err := os.OpenFile(DataPath(dir, step), os.O_CREATE|os.O_WRONLY|os.O_APPEND, atomicfile.FileMode)
	if err != nil {
		return nil, err
	}
	index, err := os.OpenFile(IndexPath(dir, step), os.O_CREATE|os.O_WRONLY|os.O_APPEND, atomicfile.FileMode)
	if err != nil {
		data.Close()
		return nil, err
	}
	st, err := data.Stat()
	if err != nil {
		data.Close()
		index.Close()
		return nil, err
	}
	bd, bi := bufio.NewWriterSize(data, 64<<10), bufio.NewWriterSize(index, 16<<10)
	return &StepFile{Writer: NewWriter(bd, bi, true, st.Size()), data: data, index: index, bd: bd, bi: bi}, nil
}

// Close writes out what is buffered, the records first, and closes both
// files.
func (f *StepFile) Close() error {
	return errors.Join(f.bd.Flush(), f.bi.Flush(), f.data.Close(), f.index.Close())
}

// Steps lists the steps with a data file in dir, oldest first, and their
// files' total size. A missing dir has none.
func Steps(dir string) (steps []int, bytes int64, err error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for _, e := range entries {
		if n, ok := StepOfFile(e.Name()); ok && e.Type().IsRegular() {
			steps = append(steps, n)
		}
		if info, err := e.Info(); err == nil && e.Type().IsRegular() {
			bytes += info.Size()
		}
	}
	return steps, bytes, nil
}

// RemoveAfter removes the files of every step after step in dir (the
// steps a resumed run redoes) and returns how many steps it removed.
func RemoveAfter(dir string, step int) (int, error) {
	steps, _, err := Steps(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range steps {
		if s <= step {
			continue
		}
		for _, p := range []string{DataPath(dir, s), IndexPath(dir, s)} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return n, err
			}
		}
		n++
	}
	return n, nil
}

// finiteRecord returns rec, or a copy whose non-finite numbers (which
// JSON cannot hold) are replaced: ±inf logprobs by ∓9999, vLLM's
// convention for -inf, and NaN by 0.
func finiteRecord(rec *Record) *Record {
	if allFinite(rec) {
		return rec
	}
	cp := *rec
	cp.Samples = make([]Sample, len(rec.Samples))
	for i, s := range rec.Samples {
		s.Logprobs = finiteAll(s.Logprobs)
		s.Advantages = finiteAll(s.Advantages)
		s.Advantage, s.Reward = finite(s.Advantage), finite(s.Reward)
		cp.Samples[i] = s
	}
	cp.Trajectories = make([]episode.Trajectory, len(rec.Trajectories))
	for i, tr := range rec.Trajectories {
		tr.Reward = finite(tr.Reward)
		tr.Steps = append([]episode.Step(nil), tr.Steps...)
		for j := range tr.Steps {
			st := &tr.Steps[j]
			st.Logprobs = finiteAll(st.Logprobs)
			st.Reward, st.Advantage, st.MCReturn = finite(st.Reward), finite(st.Advantage), finite(st.MCReturn)
		}
		cp.Trajectories[i] = tr
	}
	if rec.Metrics != nil {
		cp.Metrics = make(map[string]float64, len(rec.Metrics))
		for k, v := range rec.Metrics {
			cp.Metrics[k] = finite(v)
		}
	}
	return &cp
}

func allFinite(rec *Record) bool {
	ok := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return false
			}
		}
		return true
	}
	for _, s := range rec.Samples {
		if !ok(s.Logprobs...) || !ok(s.Advantages...) || !ok(s.Advantage, s.Reward) {
			return false
		}
	}
	for _, tr := range rec.Trajectories {
		if !ok(tr.Reward) {
			return false
		}
		for _, st := range tr.Steps {
			if !ok(st.Logprobs...) || !ok(st.Reward, st.Advantage, st.MCReturn) {
				return false
			}
		}
	}
	for _, v := range rec.Metrics {
		if !ok(v) {
			return false
		}
	}
	return true
}

// NegInf is how a -inf logprob is written (vLLM's convention).
const NegInf = -9999.0

func finite(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return 0
	case math.IsInf(x, -1):
		return NegInf
	case math.IsInf(x, 1):
		return -NegInf
	}
	return x
}

func finiteAll(xs []float64) []float64 {
	if xs == nil {
		return nil
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = finite(x)
	}
	return out
}
