// Package frozenlake is Gymnasium's FrozenLake in pure Go, with rLLM's
// text agent: the grid is shown as text, the model answers with a move.
//
// The dynamics are Gymnasium's (FrozenLake-v1): actions 0 Left, 1 Down,
// 2 Right, 3 Up; moving into a wall stays put; on a slippery lake the
// intended move and each of the two perpendicular moves happen with
// probability 1/3; reward 1 on reaching G; H and G end the episode.
// Random maps draw each cell F with probability p and are redrawn until G
// can be reached. Two layouts: rLLM's (its FrozenLakeEnv, the default
// here), where S and G sit on two random cells and G is at most a few
// moves from S, and Gymnasium's generate_random_map, S top-left and G
// bottom-right. Random numbers come from Go's PCG, so a seed gives the
// same map here on every run but not the map numpy would draw.
package frozenlake

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Actions, numbered as in Gymnasium.
const (
	Left  = 0
	Down  = 1
	Right = 2
	Up    = 3
)

// ActionNames index by action.
var ActionNames = [4]string{"Left", "Down", "Right", "Up"}

// Maps are Gymnasium's named maps.
var Maps = map[string][]string{
	"4x4": {"SFFF", "FHFH", "FFFH", "HFFG"},
	"8x8": {"SFFFFFFF", "FFFFFFFF", "FFFHFFFF", "FFFFFHFF", "FFFHFFFF", "FHHFFFHF", "FHFFHFHF", "FFFHFFFG"},
}

// Transition is one possible outcome of an action.
type Transition struct {
	Prob   float64
	Next   int
	Reward float64
	Done   bool
}

// Lake is a map and its transition table (Gymnasium's P).
type Lake struct {
	Desc       []string
	Rows, Cols int
	Slippery   bool
	P          [][4][]Transition
}

// NewLake checks desc and builds the transition table.
func NewLake(desc []string, slippery bool) (*Lake, error) {
	if len(desc) == 0 || len(desc[0]) == 0 {
		return nil, fmt.Errorf("frozenlake map is empty")
	}
	starts := 0
	for i, row := range desc {
		if len(row) != len(desc[0]) {
			return nil, fmt.Errorf("frozenlake map row %d has %d cells, want %d", i, len(row), len(desc[0]))
		}
		if strings.Trim(row, "SFHG") != "" {
			return nil, fmt.Errorf("frozenlake map row %d (%q) may hold only S, F, H, G", i, row)
		}
		starts += strings.Count(row, "S")
	}
	if starts != 1 {
		return nil, fmt.Errorf("frozenlake map needs exactly one S, has %d", starts)
	}
	l := &Lake{Desc: desc, Rows: len(desc), Cols: len(desc[0]), Slippery: slippery}
	l.P = make([][4][]Transition, l.Rows*l.Cols)
	for s := range l.P {
		r, c := s/l.Cols, s%l.Cols
		for a := 0; a < 4; a++ {
			if cell := desc[r][c]; cell == 'G' || cell == 'H' {
				l.P[s][a] = []Transition{{Prob: 1, Next: s, Reward: 0, Done: true}}
				continue
			}
			if !slippery {
				l.P[s][a] = []Transition{l.outcome(r, c, a, 1)}
				continue
			}
			// Gymnasium's order: (a−1) mod 4, a, (a+1) mod 4.
			for _, b := range [3]int{(a + 3) % 4, a, (a + 1) % 4} {
				l.P[s][a] = append(l.P[s][a], l.outcome(r, c, b, 1.0/3.0))
			}
		}
	}
	return l, nil
}

func (l *Lake) outcome(r, c, a int, prob float64) Transition {
	switch a {
	case Left:
		c = max(c-1, 0)
	case Down:
		r = min(r+1, l.Rows-1)
	case Right:
		c = min(c+1, l.Cols-1)
	case Up:
		r = max(r-1, 0)
	}
	cell := l.Desc[r][c]
	rew := 0.0
	if cell == 'G' {
		rew = 1
	}
	return Transition{Prob: prob, Next: r*l.Cols + c, Reward: rew, Done: cell == 'G' || cell == 'H'}
}

// Start is the state of S.
func (l *Lake) Start() int {
	for r, row := range l.Desc {
		if c := strings.IndexByte(row, 'S'); c >= 0 {
			return r*l.Cols + c
		}
	}
	return 0
}

// Sample picks the outcome of action a in state s for a uniform draw u in
// [0, 1): the first outcome whose cumulative probability exceeds u, as
// Gymnasium's categorical_sample does.
func (l *Lake) Sample(s, a int, u float64) Transition {
	ts := l.P[s][a]
	cum := 0.0
	for _, t := range ts {
		cum += t.Prob
		if cum > u {
			return t
		}
	}
	return ts[len(ts)-1]
}

// GenerateMap draws a size×size map whose cells are F with probability p.
// goalDistance 0 is Gymnasium's generate_random_map: S top-left, G
// bottom-right, redrawn until a path leads from S to G. goalDistance > 0
// is rLLM's generate_random_map: S and G on two distinct random cells,
// redrawn (cells and places) until G is at most goalDistance moves from S.
func GenerateMap(size int, p float64, goalDistance int, rng *rand.Rand) ([]string, error) {
	if size < 2 || size > 64 {
		return nil, fmt.Errorf("frozenlake size %d: use 2 to 64", size)
	}
	if !(p > 0) {
		return nil, fmt.Errorf("frozenlake p %v: the probability of a frozen cell must be above 0", p)
	}
	if goalDistance < 0 {
		return nil, fmt.Errorf("frozenlake goal_distance %d: use 0 (Gymnasium's corners) or a number of moves", goalDistance)
	}
	p = min(1, p)
	board := make([][]byte, size)
	for attempt := 0; ; attempt++ {
		if attempt == 100000 {
			return nil, fmt.Errorf("frozenlake p %v leaves no path from S to G on a %dx%d map; raise p", p, size, size)
		}
		for r := range board {
			board[r] = make([]byte, size)
			for c := range board[r] {
				if rng.Float64() < p {
					board[r][c] = 'F'
				} else {
					board[r][c] = 'H'
				}
			}
		}
		start, goal := [2]int{0, 0}, [2]int{size - 1, size - 1}
		if goalDistance > 0 {
			start = [2]int{rng.IntN(size), rng.IntN(size)}
			for goal = start; goal == start; {
				goal = [2]int{rng.IntN(size), rng.IntN(size)}
			}
		}
		board[start[0]][start[1]] = 'S'
		board[goal[0]][goal[1]] = 'G'
		d := moves(board, start, goal)
		if d > 0 && (goalDistance == 0 || d <= goalDistance) {
			out := make([]string, size)
			for r := range board {
				out[r] = string(board[r])
			}
			return out, nil
		}
	}
}

// moves is the fewest moves from start to goal through cells that are not
// holes (a breadth-first search), or -1 when goal cannot be reached.
func moves(board [][]byte, start, goal [2]int) int {
	n := len(board)
	dist := make([]int, n*n)
	for i := range dist {
		dist[i] = -1
	}
	dist[start[0]*n+start[1]] = 0
	queue := [][2]int{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == goal {
			return dist[cur[0]*n+cur[1]]
		}
		for _, d := range [4][2]int{{1, 0}, {0, 1}, {-1, 0}, {0, -1}} {
			r, c := cur[0]+d[0], cur[1]+d[1]
			if r < 0 || r >= n || c < 0 || c >= n || board[r][c] == 'H' || dist[r*n+c] >= 0 {
				continue
			}
			dist[r*n+c] = dist[cur[0]*n+cur[1]] + 1
			queue = append(queue, [2]int{r, c})
		}
	}
	return -1
}

// Render draws the grid as rLLM's text FrozenLake does: P the player, _
// frozen ice (and the start), O a hole, G the goal, X the player in a
// hole, √ the player on the goal.
func (l *Lake) Render(state int) string {
	var b strings.Builder
	for r, row := range l.Desc {
		for c := 0; c < len(row); c++ {
			if c > 0 {
				b.WriteByte(' ')
			}
			cell := row[c]
			here := r*l.Cols+c == state
			switch {
			case here && cell == 'H':
				b.WriteString("X")
			case here && cell == 'G':
				b.WriteString("√")
			case here:
				b.WriteString("P")
			case cell == 'H':
				b.WriteString("O")
			case cell == 'G':
				b.WriteString("G")
			default:
				b.WriteString("_")
			}
		}
		if r < len(l.Desc)-1 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
