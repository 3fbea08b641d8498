package view

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"net/http"
	"sort"
	"unicode/utf8"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// Bounds of one episode's answer.
const (
	maxText        = 64 << 10 // one message, observation or action
	maxTokenWindow = 5000
	maxPromptTail  = 2000
)

// clipText cuts s to n bytes on a rune boundary and says whether it did.
func clipText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

type shownMessage struct {
	Role      string             `json:"role"`
	Content   string             `json:"content"`
	Reasoning string             `json:"reasoning,omitempty"`
	ToolCalls []episode.ToolCall `json:"tool_calls,omitempty"`
	Name      string             `json:"name,omitempty"`
	Clipped   bool               `json:"clipped,omitempty"`
}

type shownStep struct {
	Reward        *float64 `json:"reward"`
	Done          bool     `json:"done"`
	FinishReason  string   `json:"finish_reason,omitempty"`
	WeightVersion string   `json:"weight_version,omitempty"`
	Action        string   `json:"action,omitempty"`
	Observation   string   `json:"observation,omitempty"`
	ResponseLen   int      `json:"response_len"`
}

type shownTrajectory struct {
	Name         string         `json:"name"`
	Reward       *float64       `json:"reward"`
	Steps        []shownStep    `json:"steps"`
	Conversation []shownMessage `json:"conversation"`
}

// tokens is a window of a sample's tokens, as parallel arrays.
type tokens struct {
	Offset int        `json:"offset"`
	IDs    []int      `json:"ids"`
	Text   []string   `json:"text"`
	LP     []*float64 `json:"lp"`
	Mask   []int8     `json:"mask"`
	Adv    []*float64 `json:"adv"`
}

type shownSample struct {
	Trajectory    int      `json:"trajectory"`
	Step          int      `json:"step"`
	PromptLen     int      `json:"prompt_len"`
	ResponseLen   int      `json:"response_len"`
	Reward        *float64 `json:"reward"`
	Advantage     *float64 `json:"advantage"`
	Masked        bool     `json:"masked,omitempty"`
	Termination   string   `json:"termination,omitempty"`
	TokenMismatch bool     `json:"token_mismatch,omitempty"`
	Trained       bool     `json:"trained"`
}

func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func (s *Server) apiEpisode(w http.ResponseWriter, req *http.Request) {
	r, phase, step, ok := s.runStep(w, req)
	if !ok {
		return
	}
	i, err := intParam(req, "i", 0, 0, math.MaxInt32)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	si, err := intParam(req, "sample", 0, 0, math.MaxInt32)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	tokOff, err := intParam(req, "tok_offset", 0, 0, math.MaxInt32)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	tokLim, err := intParam(req, "tok_limit", 2000, 1, maxTokenWindow)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	entries, data, err := s.entries(r, phase, step)
	if errors.Is(err, fs.ErrNotExist) {
		http.NotFound(w, req)
		return
	}
	if err != nil && entries == nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if i >= len(entries) {
		http.Error(w, "no such episode", http.StatusNotFound)
		return
	}
	rec, err := episodestore.ReadRecord(data, entries[i])
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	writeJSON(w, showEpisode(rec, entries[i], si, tokOff, tokLim))
}

func showEpisode(rec *episodestore.Record, e episodestore.Entry, si, tokOff, tokLim int) map[string]any {
	out := map[string]any{
		"id": rec.ID, "step": rec.Step, "phase": rec.Phase, "group": rec.Group, "termination_reason": rec.TerminationReason,
		"is_correct": rec.IsCorrect, "reward": num(e.Reward), "error": rec.Error, "data_source": e.Source, "task_id": e.Task,
		"truncated": e.Truncated,
	}
	metrics := map[string]*float64{}
	for k, v := range rec.Metrics {
		metrics[k] = num(v)
	}
	out["metrics"] = metrics
	task := map[string]string{}
	for k, v := range rec.Task {
		b, _ := json.Marshal(v)
		task[k], _ = clipText(string(b), 4096)
	}
	out["task"] = task
	var trajs []shownTrajectory
	for _, tr := range rec.Trajectories {
		st := shownTrajectory{Name: tr.Name, Reward: num(tr.Reward)}
		for _, s := range tr.Steps {
			ss := shownStep{Reward: num(s.Reward), Done: s.Done, FinishReason: s.FinishReason, WeightVersion: s.WeightVersion, ResponseLen: len(s.ResponseIDs)}
			act := s.Action.Content
			if act == "" && (len(s.Action.ToolCalls) > 0 || s.Action.Fields != nil) {
				b, _ := json.Marshal(s.Action)
				act = string(b)
			}
			ss.Action, _ = clipText(act, 4096)
			if s.Observation != nil {
				var obs string
				if str, ok := s.Observation.(string); ok {
					obs = str
				} else {
					b, _ := json.Marshal(s.Observation)
					obs = string(b)
				}
				ss.Observation, _ = clipText(obs, 4096)
			}
			st.Steps = append(st.Steps, ss)
		}
		// The conversation is the last step's that has one.
		for j := len(tr.Steps) - 1; j >= 0; j-- {
			if cc := tr.Steps[j].ChatCompletions; len(cc) > 0 {
				budget := 8 * maxText
				for _, m := range cc {
					sm := shownMessage{Role: m.Role, Name: m.Name, ToolCalls: m.ToolCalls}
					var c1, c2 bool
					sm.Content, c1 = clipText(m.Content, min(maxText, max(budget, 256)))
					sm.Reasoning, c2 = clipText(m.Reasoning, maxText)
					sm.Clipped = c1 || c2
					budget -= len(sm.Content)
					st.Conversation = append(st.Conversation, sm)
				}
				break
			}
		}
		trajs = append(trajs, st)
	}
	out["trajectories"] = trajs
	samples := episodestore.TokenSamples(rec)
	shown := make([]shownSample, len(samples))
	for k, s := range samples {
		trained := !s.Masked && len(rec.Samples) > 0
		if trained {
			trained = false
			for _, m := range s.LossMask {
				if m != 0 {
					trained = true
				}
			}
		}
		shown[k] = shownSample{Trajectory: s.Trajectory, Step: s.Step, PromptLen: len(s.PromptIDs), ResponseLen: len(s.ResponseIDs),
			Reward: num(s.Reward), Advantage: num(s.Advantage), Masked: s.Masked, Termination: string(s.Termination), TokenMismatch: s.TokenMismatch, Trained: trained}
	}
	out["samples"] = shown
	out["has_advantages"] = len(rec.Samples) > 0
	if si < len(samples) {
		s := &samples[si]
		out["sample"] = si
		lo := min(tokOff, len(s.ResponseIDs))
		hi := min(lo+tokLim, len(s.ResponseIDs))
		resp := tokens{Offset: lo}
		for j := lo; j < hi; j++ {
			resp.IDs = append(resp.IDs, s.ResponseIDs[j])
			resp.Text = append(resp.Text, piece(rec, s.ResponseIDs[j]))
			if j < len(s.Logprobs) {
				resp.LP = append(resp.LP, num(s.Logprobs[j]))
			} else {
				resp.LP = append(resp.LP, nil)
			}
			var m int8 = 1
			if j < len(s.LossMask) {
				m = s.LossMask[j]
			}
			resp.Mask = append(resp.Mask, m)
			if len(rec.Samples) > 0 {
				resp.Adv = append(resp.Adv, num(s.AdvantageAt(j)))
			}
		}
		out["response"] = resp
		plo := max(0, len(s.PromptIDs)-maxPromptTail)
		prompt := tokens{Offset: plo}
		for _, id := range s.PromptIDs[plo:] {
			prompt.IDs = append(prompt.IDs, id)
			prompt.Text = append(prompt.Text, piece(rec, id))
		}
		out["prompt"] = prompt
	}
	return out
}

// piece is a token's text, or its id in brackets when the record has none.
func piece(rec *episodestore.Record, id int) string {
	if s, ok := rec.Pieces[id]; ok {
		return s
	}
	return "⟨" + itoa(id) + "⟩"
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// apiTask lists one task's episodes across every kept step.
func (s *Server) apiTask(w http.ResponseWriter, req *http.Request) {
	r, ok := s.runOf(w, req)
	if !ok {
		return
	}
	phase, _, err := phaseStep(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	task := req.URL.Query().Get("task")
	if task == "" {
		badRequest(w, "task: give a task id")
		return
	}
	type hit struct {
		Step   int     `json:"step"`
		I      int     `json:"i"`
		Reward float64 `json:"reward"`
		// Answer is the episode's last reply (read for a sample of the
		// hits spread over the steps).
		Answer  string `json:"answer,omitempty"`
		Correct bool   `json:"correct"`
		Term    string `json:"term"`
		Len     int    `json:"response_tokens"`
	}
	const maxHits, maxAnswers = 2000, 60
	var hits []hit
	steps := s.steps(r, phase)
	for _, st := range steps {
		entries, _, err := s.entries(r, phase, st)
		if err != nil && entries == nil {
			continue
		}
		for i := range entries {
			if entries[i].Task == task && len(hits) < maxHits {
				hits = append(hits, hit{Step: st, I: i, Reward: entries[i].Reward, Correct: entries[i].Correct, Term: entries[i].Termination, Len: entries[i].ResponseTokens})
			}
		}
	}
	stride := max(1, (len(hits)+maxAnswers-1)/maxAnswers)
	for k := 0; k < len(hits); k += stride {
		entries, data, err := s.entries(r, phase, hits[k].Step)
		if err != nil && entries == nil {
			continue
		}
		if rec, err := episodestore.ReadRecord(data, entries[hits[k].I]); err == nil {
			hits[k].Answer, _ = clipText(lastReply(rec), 600)
		}
	}
	writeJSON(w, map[string]any{"task": task, "hits": hits, "steps": len(steps)})
}

func lastReply(rec *episodestore.Record) string {
	for ti := len(rec.Trajectories) - 1; ti >= 0; ti-- {
		steps := rec.Trajectories[ti].Steps
		for j := len(steps) - 1; j >= 0; j-- {
			if steps[j].ModelResponse != "" {
				return steps[j].ModelResponse
			}
			cc := steps[j].ChatCompletions
			for m := len(cc) - 1; m >= 0; m-- {
				if cc[m].Role == "assistant" {
					return cc[m].Content
				}
			}
		}
	}
	return ""
}

// passAtK is pass@1 and pass@k (k the fewest attempts of a task) overall
// and per data source, from a step's or an eval file's entries.
func passAtK(entries []episodestore.Entry) map[string]any {
	type counts struct{ n, c int }
	bySrc := map[string]map[string]*counts{}
	for _, e := range entries {
		src := e.Source
		if src == "" {
			src = "unknown"
		}
		if bySrc[src] == nil {
			bySrc[src] = map[string]*counts{}
		}
		c := bySrc[src][e.Task]
		if c == nil {
			c = &counts{}
			bySrc[src][e.Task] = c
		}
		c.n++
		if e.Correct {
			c.c++
		}
	}
	k := 0
	for _, tasks := range bySrc {
		for _, c := range tasks {
			if k == 0 || c.n < k {
				k = c.n
			}
		}
	}
	type row struct {
		Source   string  `json:"source"`
		Tasks    int     `json:"tasks"`
		Episodes int     `json:"episodes"`
		PassAt1  float64 `json:"pass_at_1"`
		PassAtK  float64 `json:"pass_at_k"`
	}
	var rows []row
	var all row
	all.Source = "all"
	for src, tasks := range bySrc {
		rw := row{Source: src}
		for _, c := range tasks {
			rw.Tasks++
			rw.Episodes += c.n
			p1, pk := rollout.PassAtK(c.n, c.c, 1), rollout.PassAtK(c.n, c.c, k)
			rw.PassAt1 += p1
			rw.PassAtK += pk
			all.PassAt1 += p1
			all.PassAtK += pk
		}
		all.Tasks += rw.Tasks
		all.Episodes += rw.Episodes
		rw.PassAt1 /= float64(rw.Tasks)
		rw.PassAtK /= float64(rw.Tasks)
		rows = append(rows, rw)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Source < rows[j].Source })
	if all.Tasks > 0 {
		all.PassAt1 /= float64(all.Tasks)
		all.PassAtK /= float64(all.Tasks)
	}
	return map[string]any{"k": k, "all": all, "by_source": rows}
}
