package local

// The batched decoding step of the serving engine: one token for each of B
// running sequences, each with its own KV cache and position, goes through
// the network as one B-row matrix product per weight. It uses the same
// kernels in the same order as decoder.step, and gonum's product treats
// rows independently (kernels.go), so a sequence decoded in a batch gets
// the logits it would get alone: served logprobs equal training logprobs.

// kvCache is one sequence's attention cache: per layer, rows 0..pos-1 of
// q|k|v (the q part is unused after its step but keeps the layout of the
// prefill decoder, whose caches become a sequence's own).
type kvCache struct {
	layers [][]float32 // per layer: [context, 3·d]
	pos    int
}

func newKVCache(c Config) *kvCache {
	kv := &kvCache{layers: make([][]float32, c.Layers)}
	for l := range kv.layers {
		kv.layers[l] = make([]float32, c.Context*3*c.DModel)
	}
	return kv
}

// copyFrom makes kv a copy of src up to src's position.
func (kv *kvCache) copyFrom(src *kvCache, d int) {
	n := src.pos * 3 * d
	for l := range kv.layers {
		copy(kv.layers[l][:n], src.layers[l][:n])
	}
	kv.pos = src.pos
}

// stepSpace is the scratch of a batched step for up to rows sequences.
type stepSpace struct {
	cfg                             Config
	rows                            int
	x, n1, qkv, att, x1, n2, h, out []float32
	rstd                            []float32
	probs                           []float32 // [H, context] for one row at a time
	nf, logits                      []float32
	probsView                       blockBufs
}

func newStepSpace(c Config, rows int) *stepSpace {
	d, ff := c.DModel, c.DFF
	f := func(n int) []float32 { return make([]float32, n) }
	return &stepSpace{
		cfg: c, rows: rows,
		x: f(rows * d), n1: f(rows * d), qkv: f(rows * 3 * d), att: f(rows * d), x1: f(rows * d), n2: f(rows * d),
		h: f(rows * ff), out: f(rows * d), rstd: f(rows), probs: f(c.Heads * c.Context),
		nf: f(rows * d), logits: f(rows * TokenizerVocab),
	}
}

// forward runs tokens[r] at position caches[r].pos for every r, appends
// each row's q|k|v to its cache, advances the positions and copies each
// row's next-token logits into out[r].
func (sp *stepSpace) forward(w *weights, caches []*kvCache, tokens []int, out [][]float32) {
	c := sp.cfg
	B, d, ff, V := len(tokens), c.DModel, c.DFF, TokenizerVocab
	if B > sp.rows {
		panic("local: batched step larger than its scratch")
	}
	x, next := sp.x[:B*d], sp.out[:B*d]
	for r, t := range tokens {
		pos := caches[r].pos
		xi := x[r*d : (r+1)*d]
		copy(xi, w.tokEmb[t*d:(t+1)*d])
		for k, p := range w.posEmb[pos*d : (pos+1)*d] {
			xi[k] += p
		}
	}
	view := &sp.probsView
	view.probs, view.probStride = sp.probs, c.Context
	for l := range w.layers {
		lw := &w.layers[l]
		rmsNorm(sp.n1, sp.rstd, x, lw.attnNorm, B, d)
		matMul(sp.qkv[:B*3*d], sp.n1[:B*d], lw.wqkv, B, d, 3*d)
		for r := range B {
			kv := caches[r]
			p := kv.pos
			copy(kv.layers[l][p*3*d:(p+1)*3*d], sp.qkv[r*3*d:(r+1)*3*d])
			view.qkv, view.att = kv.layers[l], sp.att[r*d:(r+1)*d]
			attention(c, view, p, 1)
		}
		matMul(sp.x1[:B*d], sp.att[:B*d], lw.wo, B, d, d)
		for i := range B * d {
			sp.x1[i] += x[i]
		}
		rmsNorm(sp.n2, sp.rstd, sp.x1, lw.mlpNorm, B, d)
		matMul(sp.h[:B*ff], sp.n2[:B*d], lw.w1, B, d, ff)
		for i, v := range sp.h[:B*ff] {
			sp.h[i] = gelu(v)
		}
		matMul(next, sp.h[:B*ff], lw.w2, B, ff, d)
		for i := range B * d {
			next[i] += sp.x1[i]
		}
		x, next = next, x
	}
	rmsNorm(sp.nf, sp.rstd, x, w.finalNorm, B, d)
	matMul(sp.logits[:B*V], sp.nf[:B*d], w.head, B, d, V)
	for r := range B {
		copy(out[r], sp.logits[r*V:(r+1)*V])
		caches[r].pos++
	}
}

// prefill runs a whole prompt through a fresh decoder and returns its KV
// cache and the logits of the last position. With allLogits it also
// returns the logits of every position ([len(prompt), V]), for prompt
// logprobs.
func prefill(w *weights, prompt []int, allLogits bool) (*kvCache, []float32, []float32) {
	c := w.cfg
	dec := newDecoder(c, len(prompt))
	last := append([]float32(nil), dec.step(w, prompt)...)
	var all []float32
	if allLogits {
		n, d := len(prompt), c.DModel
		hidden := dec.bufs[len(dec.bufs)-1].out[:n*d]
		nf, rstd := make([]float32, n*d), make([]float32, n)
		rmsNorm(nf, rstd, hidden, w.finalNorm, n, d)
		all = make([]float32, n*TokenizerVocab)
		matMul(all, nf, w.head, n, d, TokenizerVocab)
	}
	return &kvCache{layers: dec.caches, pos: dec.pos}, last, all
}
