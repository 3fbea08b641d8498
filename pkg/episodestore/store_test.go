package episodestore

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func testRecord(i int, reward float64) *Record {
	ep := episode.Episode{
		ID: episode.EpisodeID("task"+string(rune('a'+i%3)), i), Task: episode.Task{"question": "1+1", "data_source": "arith"},
		TerminationReason: episode.TerminationEnvDone, IsCorrect: reward > 0,
		Trajectories: []episode.Trajectory{{Name: "solver", Reward: reward, Steps: []episode.Step{{
			PromptIDs: []int{1, 2, 3}, ResponseIDs: []int{4, 5}, Logprobs: []float64{-0.5, -0.25}, LossMask: []int8{1, 1},
			ChatCompletions: []episode.Message{{Role: "user", Content: "1+1"}, {Role: "assistant", Content: "2"}},
		}}}},
	}
	rec := &Record{Step: 3, Phase: PhaseTrain, Group: i / 2, Episode: Compact(&ep)}
	rec.Samples = []Sample{{Trajectory: 0, Step: -1, PromptIDs: []int{1, 2, 3}, ResponseIDs: []int{4, 5, 6 + i},
		Logprobs: []float64{-0.5, -0.25, 0}, LossMask: []int8{1, 1, 0}, Advantage: reward - 0.5, Reward: reward}}
	AddPieces(rec, func(ids []int, _ bool) (string, error) { return "<" + string(rune('a'+ids[0]%26)) + ">", nil })
	return rec
}

func writeStep(t *testing.T, dir string, step int, recs []*Record) {
	t.Helper()
	f, err := Create(dir, step)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, err := f.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var recs []*Record
	for i := range 5 {
		recs = append(recs, testRecord(i, float64(i%2)))
	}
	writeStep(t, dir, 3, recs)
	entries, err := ReadIndex(DataPath(dir, 3), IndexPath(dir, 3))
	if err != nil || len(entries) != 5 {
		t.Fatalf("ReadIndex = %d entries, %v", len(entries), err)
	}
	for i, e := range entries {
		got, err := ReadRecord(DataPath(dir, 3), e)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Samples, recs[i].Samples) || got.ID != recs[i].ID || !reflect.DeepEqual(got.Pieces, recs[i].Pieces) {
			t.Errorf("record %d read back as %+v, want %+v", i, got.Samples, recs[i].Samples)
		}
		if e.Reward != float64(i%2) || e.Source != "arith" || e.ResponseTokens != 3 || e.Task != TaskOf(recs[i].ID) {
			t.Errorf("entry %d = %+v", i, e)
		}
		if got.Trajectories[0].Steps[0].PromptIDs != nil {
			t.Error("Compact kept the step's token ids")
		}
	}
	// The data file is an ordinary gzip file: one JSON line per record.
	f, _ := os.Open(DataPath(dir, 3))
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(zr)
	if n := strings.Count(string(all), "\n"); n != 5 {
		t.Errorf("zcat shows %d lines, want 5", n)
	}
	// Index gone: the records themselves give the same entries.
	os.Remove(IndexPath(dir, 3))
	again, err := ReadIndex(DataPath(dir, 3), IndexPath(dir, 3))
	if err != nil || !reflect.DeepEqual(again, entries) {
		t.Errorf("entries without the index = %+v, %v; want %+v", again, err, entries)
	}
}

// A kill leaves a data file cut anywhere in its last record and an index
// cut anywhere in its last line: every earlier record still reads.
func TestCutFiles(t *testing.T) {
	dir := t.TempDir()
	writeStep(t, dir, 1, []*Record{testRecord(0, 1), testRecord(1, 0), testRecord(2, 1)})
	data, _ := os.ReadFile(DataPath(dir, 1))
	index, _ := os.ReadFile(IndexPath(dir, 1))
	entries, _ := ReadIndex(DataPath(dir, 1), IndexPath(dir, 1))
	last := entries[2].Offset
	for cutAt := last; cutAt < int64(len(data)); cutAt += 7 {
		for _, idx := range [][]byte{index, index[:len(index)-5], nil} {
			os.WriteFile(DataPath(dir, 1), data[:cutAt], 0o644)
			os.WriteFile(IndexPath(dir, 1), idx, 0o644)
			got, err := ReadIndex(DataPath(dir, 1), IndexPath(dir, 1))
			if err != nil || len(got) != 2 {
				t.Fatalf("cut at %d of %d (index %d bytes): %d entries, %v; want the 2 complete ones", cutAt, len(data), len(idx), len(got), err)
			}
			if _, err := ReadRecord(DataPath(dir, 1), got[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A damaged record before the end is an error naming its offset.
	bad := append([]byte(nil), data...)
	bad[entries[1].Offset+12] ^= 0xff
	os.WriteFile(DataPath(dir, 1), bad, 0o644)
	os.Remove(IndexPath(dir, 1))
	if _, err := ReadIndex(DataPath(dir, 1), ""); err == nil || !strings.Contains(err.Error(), "offset") {
		t.Errorf("a damaged record read as %v", err)
	}
}

// rllm eval's plain JSON lines of episodes read as eval records.
func TestPlainLines(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, nil, false, 0)
	for i := range 3 {
		r := testRecord(i, 1)
		r.Phase, r.Samples = PhaseEval, nil
		w.Write(r)
	}
	b.WriteString(`{"id":"cut:0","termination_re`)
	path := filepath.Join(t.TempDir(), "eps.jsonl")
	os.WriteFile(path, b.Bytes(), 0o644)
	recs, err := ReadAll(path)
	if err != nil || len(recs) != 3 || recs[2].Phase != PhaseEval {
		t.Fatalf("ReadAll = %d records, %v", len(recs), err)
	}
	os.WriteFile(path, []byte(`{"id":"t:0","termination_reason":"env_done","trajectories":[]}`+"\n"), 0o644)
	if recs, err := ReadAll(path); err != nil || len(recs) != 1 || recs[0].Phase != PhaseEval {
		t.Errorf("an episode without record fields: %v, %v", recs, err)
	}
}

func TestNonFinite(t *testing.T) {
	r := testRecord(0, 1)
	r.Samples[0].Logprobs[0] = math.Inf(-1)
	r.Samples[0].Advantage = math.NaN()
	r.Trajectories[0].Reward = math.Inf(1)
	r.Metrics = map[string]float64{"x": math.NaN()}
	dir := t.TempDir()
	writeStep(t, dir, 2, []*Record{r})
	recs, err := ReadAll(DataPath(dir, 2))
	if err != nil || len(recs) != 1 {
		t.Fatal(err)
	}
	s := recs[0].Samples[0]
	if s.Logprobs[0] != NegInf || s.Advantage != 0 || recs[0].Trajectories[0].Reward != -NegInf {
		t.Errorf("non-finite numbers read back as %v %v %v", s.Logprobs[0], s.Advantage, recs[0].Trajectories[0].Reward)
	}
	if !math.IsInf(r.Samples[0].Logprobs[0], -1) {
		t.Error("the caller's record was changed")
	}
}

func TestRemoveAfter(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []int{1, 2, 3, 10} {
		writeStep(t, dir, s, []*Record{testRecord(0, 1)})
	}
	n, err := RemoveAfter(dir, 2)
	if err != nil || n != 2 {
		t.Fatalf("RemoveAfter = %d, %v", n, err)
	}
	steps, _, _ := Steps(dir)
	if !reflect.DeepEqual(steps, []int{1, 2}) {
		t.Errorf("steps left %v", steps)
	}
	if _, err := os.Stat(IndexPath(dir, 3)); !os.IsNotExist(err) {
		t.Error("step 3's index left")
	}
	if n, err := RemoveAfter(filepath.Join(dir, "none"), 0); n != 0 || err != nil {
		t.Errorf("a missing dir: %d, %v", n, err)
	}
}

func TestRecordLimit(t *testing.T) {
	old := MaxRecord
	MaxRecord = 100
	defer func() { MaxRecord = old }()
	dir := t.TempDir()
	writeStep(t, dir, 1, []*Record{testRecord(0, 1)})
	if _, err := ReadAll(DataPath(dir, 1)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("a record over the limit: %v", err)
	}
}

func FuzzScan(f *testing.F) {
	var b bytes.Buffer
	w := NewWriter(&b, nil, true, 0)
	w.Write(testRecord(0, 1))
	w.Write(testRecord(1, 0))
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:b.Len()-3])
	f.Add([]byte(`{"id":"a:0","step":1,"phase":"train","samples":[{"prompt_ids":[1]}]}` + "\n"))
	f.Add([]byte("\x1f\x8b"))
	old := MaxRecord
	MaxRecord = 1 << 20
	defer func() { MaxRecord = old }()
	f.Fuzz(func(t *testing.T, data []byte) {
		var last int64 = -1
		Scan(bytes.NewReader(data), 0, func(off, n int64, rec *Record) error {
			if off <= last || n <= 0 || off+n > int64(len(data)) {
				t.Fatalf("record at %d+%d in %d bytes after %d", off, n, len(data), last)
			}
			last = off
			Summarize(rec)
			TokenSamples(rec)
			return nil
		})
	})
}
