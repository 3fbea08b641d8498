package local

// The one-sequence forward and backward the gradient checks and
// benchmarks drive directly; Backend.compute runs packs (pack.go).

// forward runs one whole sequence and leaves every activation in ws.
func (ws *workspace) forward(w *weights, tokens []int) {
	ws.reserve(len(tokens))
	ws.T, ws.prefix, ws.stride = len(tokens), len(tokens), len(tokens)
	copy(ws.tokens, tokens)
	for i := range tokens {
		ws.pos[i] = i
	}
	ws.run(w)
}

// backward adds to g the gradient of Σ_i dlp[i]·log p(targets[i]) +
// dH[i]·H_i (H_i the entropy of position i's distribution; dH may be nil)
// after forward has run on the same tokens.
func (ws *workspace) backward(w, g *weights, targets []int, dlp, dH []float64) {
	adds := make([]rowTarget, len(targets))
	for i, t := range targets {
		adds[i] = rowTarget{i, t, dlp[i]}
	}
	ws.backwardRows(w, g, dlp, dH, adds)
}

// targetLogprobs reads log p(targets[i]) off the logits of a forward.
func (ws *workspace) targetLogprobs(targets []int, out []float64) {
	V := TokenizerVocab
	for i, t := range targets {
		out[i] = float64(ws.logits[i*V+t]) - ws.lse[i]
	}
}
