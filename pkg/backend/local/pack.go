package local

import (
	"math"
	"slices"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// Shared-prefix packing. A GRPO batch holds groups of datums whose inputs
// start with the same prompt and end in short, different responses; run
// one by one, every datum recomputes the prompt. A pack runs such a group
// as one sequence: the shared prefix rows once, then each member's suffix
// rows, which attend to the prefix and to their own member's earlier rows
// only and keep the position ids of their own sequence. Every member's
// logits are then those of its unpacked forward (the attention visits the
// same keys in the same order), and a shared row's gradient is the sum of
// its members' terms.

const (
	// packRowsPerContext bounds a pack's rows at this many model contexts,
	// which bounds a workspace at this many times its unpacked size: 8
	// responses of a quarter context each after a prompt of half a
	// context still fit in one pack.
	packRowsPerContext = 4
	// maxPackMembers bounds the planner's search window (its cost is
	// datums × window) and is well above the usual group size (rollout.n).
	maxPackMembers = 64
)

func maxPackRows(c Config) int { return packRowsPerContext * c.Context }

// pack is data[lo:hi] run as one sequence of rows rows: prefix rows shared
// by every member, then each member's input past the prefix. A datum that
// shares with no neighbour is a pack of one whose prefix is its input.
type pack struct {
	lo, hi, prefix, rows int
}

// planPacks partitions data into packs of consecutive datums, from the
// data alone, so the computation never depends on the number of workers.
// It minimises the total rows by dynamic programming over the split
// points, with a pack's prefix the longest common prefix of its members.
// A pack must have a prefix of at least 2 tokens and no shorter than its
// members' mean suffix: below that it saves under half of its members'
// rows, while it puts them all on one worker, and the chat template alone
// (the same few tokens before every prompt) would otherwise pull
// different prompts together.
func planPacks(data []backend.Datum, maxRows int) []pack {
	n := len(data)
	if n == 0 {
		return nil
	}
	// lcp[i] is the common prefix of data[i] and data[i+1]; the common
	// prefix of data[i:j] is the least of lcp[i:j-1].
	lcp := make([]int, n-1)
	for i := range lcp {
		a, b := data[i].Input, data[i+1].Input
		k := 0
		for k < len(a) && k < len(b) && a[k] == b[k] {
			k++
		}
		lcp[i] = k
	}
	// best[j] is the fewest rows for data[:j]; its last pack is
	// data[from[j]:j] with prefix pre[j].
	best, from, pre := make([]int, n+1), make([]int, n+1), make([]int, n+1)
	for j := 1; j <= n; j++ {
		last := len(data[j-1].Input)
		best[j], from[j], pre[j] = best[j-1]+last, j-1, last
		p, sum := math.MaxInt, last
		for i := j - 2; i >= 0 && j-i <= maxPackMembers; i-- {
			p = min(p, lcp[i])
			sum += len(data[i].Input)
			k := j - i
			// Adding a member never lowers the rows (p <= its length), so
			// once over the bound every longer pack is too.
			rows := sum - (k-1)*p
			if p < 2 || rows > maxRows {
				break
			}
			if sum-k*p > k*p {
				continue
			}
			if c := best[i] + rows; c < best[j] {
				best[j], from[j], pre[j] = c, i, p
			}
		}
	}
	var packs []pack
	for j := n; j > 0; j = from[j] {
		i, p := from[j], pre[j]
		rows := p
		for _, d := range data[i:j] {
			rows += len(d.Input) - p
		}
		packs = append(packs, pack{lo: i, hi: j, prefix: p, rows: rows})
	}
	slices.Reverse(packs)
	return packs
}

// singlePacks is one pack per datum: the computation before packing.
func singlePacks(data []backend.Datum) []pack {
	packs := make([]pack, len(data))
	for i, d := range data {
		packs[i] = pack{lo: i, hi: i + 1, prefix: len(d.Input), rows: len(d.Input)}
	}
	return packs
}

// runPack runs the pack's members as one sequence, sets their outputs in
// outs and, when g is set, adds their loss's gradient to g.
func (ws *workspace) runPack(w, g *weights, data []backend.Datum, pk pack, loss backend.Loss, outs []backend.LossFnOutput) {
	ws.reserve(pk.rows)
	P, members := pk.prefix, data[pk.lo:pk.hi]
	copy(ws.tokens, members[0].Input[:P])
	for r := range P {
		ws.pos[r] = r
	}
	r, stride, withH := P, P, false
	for _, d := range members {
		s := r
		for t := P; t < len(d.Input); t++ {
			ws.tokens[r], ws.pos[r], ws.seg[r] = d.Input[t], t, s
			r++
		}
		stride = max(stride, len(d.Input))
		withH = withH || d.LossFnInputs.EntropyWeights != nil
	}
	ws.T, ws.prefix, ws.stride = r, P, stride
	ws.run(w)

	T, V := ws.T, TokenizerVocab
	dlpSum, dHSum, adds := ws.dlpSum[:T], []float64(nil), ws.adds[:0]
	clear(dlpSum)
	if withH {
		dHSum = ws.dHSum[:T]
		clear(dHSum)
	}
	off := P // first row of the member's suffix
	for m := range members {
		d := &members[m]
		in := &d.LossFnInputs
		n := len(d.Input)
		lp, el, ent := make([]float64, n), make([]float64, n), make([]float64, n)
		for t := range n {
			row := t
			if t >= P {
				row += off - P
			}
			lp[t] = float64(ws.logits[row*V+in.TargetTokens[t]]) - ws.lse[row]
			ent[t] = ws.ent[row]
			var dlp float64
			el[t], dlp = loss.Token(in, t, lp[t])
			if g != nil && dlp != 0 {
				dlpSum[row] += dlp
				adds = append(adds, rowTarget{row, in.TargetTokens[t], dlp})
			}
		}
		if ew := in.EntropyWeights; ew != nil {
			// The bonus −Σ e·H: ∂loss/∂H = −e (masked like every term).
			for t := range n {
				mask := 1.0
				if in.Mask != nil {
					mask = in.Mask[t]
				}
				dH := -ew[t] * mask
				el[t] += dH * ent[t]
				if g != nil {
					row := t
					if t >= P {
						row += off - P
					}
					dHSum[row] += dH
				}
			}
		}
		outs[pk.lo+m] = backend.LossFnOutput{Logprobs: lp, ElementwiseLoss: el, Entropies: ent}
		off += n - P
	}
	ws.adds = adds
	if g != nil {
		// The loss is minimised: its gradient wrt lp is dlp.
		ws.backwardRows(w, g, dlpSum, dHSum, adds)
	}
}
