package frozenlake

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler/samplertest"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

var update = flag.Bool("update", false, "rewrite golden files")

const third = 1.0 / 3.0

// Transitions of Gymnasium's 4x4 map, checked by hand against the map
//
//	S F F F    states  0  1  2  3
//	F H F H            4  5  6  7
//	F F F H            8  9 10 11
//	H F F G           12 13 14 15
//
// and Gymnasium's rules: walls keep the player in place, H and G are
// absorbing, slippery moves try (a−1) mod 4, a, (a+1) mod 4 in that order.
func TestTransitions4x4(t *testing.T) {
	tests := []struct {
		slippery bool
		s, a     int
		want     []Transition
	}{
		{false, 0, Left, []Transition{{1, 0, 0, false}}},
		{false, 0, Down, []Transition{{1, 4, 0, false}}},
		{false, 0, Right, []Transition{{1, 1, 0, false}}},
		{false, 0, Up, []Transition{{1, 0, 0, false}}},
		{false, 1, Down, []Transition{{1, 5, 0, true}}},    // into a hole
		{false, 14, Right, []Transition{{1, 15, 1, true}}}, // onto the goal
		{false, 10, Down, []Transition{{1, 14, 0, false}}},
		{false, 5, Up, []Transition{{1, 5, 0, true}}},     // holes absorb
		{false, 15, Left, []Transition{{1, 15, 0, true}}}, // so does the goal
		{true, 14, Right, []Transition{{third, 14, 0, false}, {third, 15, 1, true}, {third, 10, 0, false}}},
		{true, 0, Left, []Transition{{third, 0, 0, false}, {third, 0, 0, false}, {third, 4, 0, false}}},
		{true, 6, Down, []Transition{{third, 5, 0, true}, {third, 10, 0, false}, {third, 7, 0, true}}}, // Left into 5 (H), Down to 10, Right into 7 (H)
		{true, 11, Up, []Transition{{1, 11, 0, true}}},
	}
	for _, tt := range tests {
		l, err := NewLake(Maps["4x4"], tt.slippery)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.P[tt.s][tt.a]; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("slippery=%v P[%d][%s] = %v, want %v", tt.slippery, tt.s, ActionNames[tt.a], got, tt.want)
		}
	}
}

func TestSample(t *testing.T) {
	l, _ := NewLake(Maps["4x4"], true)
	// Cumulative 1/3, 2/3, 1: the first outcome whose cumulative
	// probability exceeds u (Gymnasium's categorical_sample).
	for _, tt := range []struct {
		u    float64
		next int
	}{{0, 14}, {0.2, 14}, {third, 15}, {0.5, 15}, {0.9, 10}, {0.999999, 10}} {
		if got := l.Sample(14, Right, tt.u).Next; got != tt.next {
			t.Errorf("u=%v: next %d, want %d", tt.u, got, tt.next)
		}
	}
}

func TestSlipFrequencies(t *testing.T) {
	// From state 9 (F, all neighbours inside the grid) Down lands on 13
	// (intended), 10 (Right) or 8 (Left), each about a third of the time.
	e, err := NewEnv(Params{Desc: Maps["4x4"], IsSlippery: true, MaxSteps: 1, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	const n = 30000
	for i := 0; i < n; i++ {
		e.done, e.Steps, e.State = false, 0, 9
		if _, err := e.Step(context.Background(), episode.Action{Content: "Down"}); err != nil {
			t.Fatal(err)
		}
		counts[e.State]++
	}
	for _, s := range []int{8, 10, 13} {
		if f := float64(counts[s]) / n; f < 0.31 || f > 0.356 {
			t.Errorf("state %d reached %.3f of the time, want about 1/3 (%v)", s, f, counts)
		}
	}
	if len(counts) != 3 {
		t.Errorf("outcomes %v", counts)
	}
}

func toAny(rows []string) []any {
	out := make([]any, len(rows))
	for i, r := range rows {
		out[i] = r
	}
	return out
}

// bfsPath is an independent check (breadth first, unlike the generator's
// depth-first search) that G can be reached from S.
// gridMoves is the test's own shortest path: moves from cell from to cell
// to (row-major indices) avoiding holes, -1 when there is none.
func gridMoves(m []string, from, to int) int {
	n := len(m)
	dist := map[int]int{from: 0}
	q := []int{from}
	for len(q) > 0 {
		c := q[0]
		q = q[1:]
		if c == to {
			return dist[c]
		}
		for _, d := range [][2]int{{0, 1}, {1, 0}, {0, -1}, {-1, 0}} {
			r, k := c/n+d[0], c%n+d[1]
			if _, seen := dist[r*n+k]; r >= 0 && r < n && k >= 0 && k < n && m[r][k] != 'H' && !seen {
				dist[r*n+k] = dist[c] + 1
				q = append(q, r*n+k)
			}
		}
	}
	return -1
}

func TestGenerateMap(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		size := 2 + int(seed%9)
		m, err := GenerateMap(size, 0.6, 0, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != size || m[0][0] != 'S' || m[size-1][size-1] != 'G' || gridMoves(m, 0, size*size-1) < 0 {
			t.Fatalf("seed %d: bad map %q", seed, m)
		}
	}
	// rLLM's layout: S and G anywhere, G within goal_distance moves; over
	// many seeds S leaves the corner and every allowed distance occurs.
	distances := map[int]bool{}
	for seed := uint64(0); seed < 300; seed++ {
		size, limit := 2+int(seed%9), 1+int(seed%6)
		m, err := GenerateMap(size, 0.6, limit, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(m, "")
		s, g := strings.IndexByte(joined, 'S'), strings.IndexByte(joined, 'G')
		if len(m) != size || s < 0 || g < 0 || strings.Count(joined, "S") != 1 || strings.Count(joined, "G") != 1 {
			t.Fatalf("seed %d: bad map %q", seed, m)
		}
		d := gridMoves(m, s, g)
		if d < 1 || d > limit {
			t.Fatalf("seed %d: G is %d moves from S in %q, want 1..%d", seed, d, m, limit)
		}
		distances[d] = true
	}
	if len(distances) != 6 {
		t.Errorf("distances seen %v, want 1..6", distances)
	}
	if _, err := GenerateMap(4, 0.8, -1, rand.New(rand.NewPCG(1, 0))); err == nil {
		t.Error("goal distance -1 accepted")
	}
	if m, _ := GenerateMap(5, 1, 0, rand.New(rand.NewPCG(1, 0))); strings.Count(strings.Join(m, ""), "H") != 0 {
		t.Errorf("p=1 map has holes: %q", m)
	}
	if _, err := GenerateMap(6, 0.05, 0, rand.New(rand.NewPCG(1, 0))); err == nil {
		t.Error("p=0.05 on 6x6 found a path; expected to give up")
	}
	for _, bad := range [][]string{{}, {"SF", "F"}, {"SX", "FG"}, {"FF", "FG"}} {
		if _, err := NewLake(bad, true); err == nil {
			t.Errorf("NewLake(%q) accepted", bad)
		}
	}
}

// TestSeededGolden pins what a seed produces (maps and a slippery
// rollout) so a change in generation or dynamics is caught. Regenerate
// with -update only for an intended change; the expected values were
// checked against the transition table above.
func TestSeededGolden(t *testing.T) {
	var b strings.Builder
	for _, seed := range []int{0, 1, 42} {
		e, err := NewEnv(Params{Size: 4, P: 0.8, Seed: seed, IsSlippery: true, MaxSteps: 100})
		if err != nil {
			t.Fatal(err)
		}
		obs, _, _ := e.Reset(context.Background())
		fmt.Fprintf(&b, "seed %d map %s\n%s\n", seed, strings.Join(e.Lake.Desc, "/"), obs)
		for _, move := range []string{"Right", "Right", "Down", "Down", "Down", "Right"} {
			from := e.State
			res, err := e.Step(context.Background(), episode.Action{Content: move})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%d %s -> %d reward %v done %v\n", from, move, e.State, res.Reward, res.Done)
			// Whatever the slip, it must be one of P's outcomes.
			ok := false
			for _, tr := range e.Lake.P[from][mustParse(move)] {
				ok = ok || tr.Next == e.State && tr.Reward == res.Reward
			}
			if !ok {
				t.Errorf("seed %d: %d %s -> %d is not in P", seed, from, move, e.State)
			}
			if res.Done {
				break
			}
		}
	}
	golden := "testdata/seeded.golden"
	if *update {
		os.WriteFile(golden, []byte(b.String()), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("seeded rollouts changed:\n%s\nwant:\n%s", b.String(), want)
	}
}

func mustParse(s string) int { a, _ := ParseAction(s); return a }

func TestParseReply(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"```Up```", "Up", true},
		{"I go ```left``` no wait ```Down```", "Down", true},
		{"<think>```Up```</think>```Right```", "Right", true},
		{"```2```", "Down", true}, // rLLM numbering: 1 Left, 2 Down, 3 Right, 4 Up
		{"Right", "Right", true},
		{"```0```", "", false},
		{"```5```", "", false},
		{"```Diagonal```", "", false},
		{"", "", false},
		{"```Up", "", false},
	}
	for _, tt := range tests {
		if got, ok := ParseReply(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("%q: %q %v, want %q %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseReply(f *testing.F) {
	f.Add("```Up```")
	f.Add("```")
	f.Fuzz(func(t *testing.T, reply string) {
		move, ok := ParseReply(reply)
		if ok {
			if _, valid := ParseAction(move); !valid {
				t.Fatalf("accepted %q", move)
			}
		}
		e, _ := NewEnv(Params{Desc: Maps["4x4"], IsSlippery: true, MaxSteps: 3, Seed: 1})
		e.Reset(context.Background())
		res, err := e.Step(context.Background(), episode.Action{Content: reply})
		if err != nil || !ok && res.Info["format_error"] == nil {
			t.Fatalf("reply %q: %+v %v", reply, res, err)
		}
	})
}

// TestWorkflow plays the deterministic 4x4 lake through the multi_turn
// workflow with scripted replies, one of them unreadable.
func TestWorkflow(t *testing.T) {
	s := samplertest.Texts("```Down```", "I think ```down```", "```Right```", "hmm, no idea", "```2```", "```Right```", "```Right```")
	w, err := workflow.New("multi_turn", nil, workflow.Deps{
		Sampler: s, MaxSteps: 10,
		Agent: workflow.Component{Name: "frozenlake"},
		Env:   workflow.Component{Name: "frozenlake", Args: map[string]any{"map_name": "4x4", "is_slippery": false}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.Run(context.Background(), episode.Task{"seed": 3}, "fl:0")
	if err != nil {
		t.Fatal(err)
	}
	steps := ep.Trajectories[0].Steps
	if ep.TerminationReason != episode.TerminationEnvDone || !ep.IsCorrect || len(steps) != 7 || ep.Trajectories[0].Reward != 1 {
		t.Fatalf("termination %s correct %v steps %d reward %v", ep.TerminationReason, ep.IsCorrect, len(steps), ep.Trajectories[0].Reward)
	}
	if steps[3].Info["format_error"] == nil || steps[3].Info["parse_error"] == nil || steps[3].Reward != 0 {
		t.Errorf("unreadable step: %+v", steps[3].Info)
	}
	states := []int{4, 8, 9, 9, 13, 14, 15}
	for i, st := range steps {
		if st.Info["state"] != states[i] {
			t.Errorf("step %d: state %v, want %d", i, st.Info["state"], states[i])
		}
	}
	if last := s.Requests[6].Messages; !strings.Contains(last[len(last)-1].Content, "O _ P G") || last[0].Role != "system" {
		t.Errorf("last prompt: %+v", last[len(last)-1])
	}
}
