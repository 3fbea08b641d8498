package local

import (
	"math"
)

// workspace holds the activations of one sequence, or of one packed
// group of sequences (pack.go), for the backward pass. Its buffers are
// sized for the model's context and grow, up to maxPackRows, the first
// time a longer pack runs; they are reused across sequences.
type workspace struct {
	cfg  Config
	rows int // capacity in rows
	T    int // rows of the last forward

	// The row layout of the last forward. Rows 0..prefix-1 attend
	// causally among themselves; a row r >= prefix attends to the prefix
	// rows and to rows seg[r]..r, its own sequence's earlier suffix rows.
	// pos are the position ids; stride is the probs row length, the most
	// keys any row attends to.
	prefix, stride    int
	tokens, pos       []int
	seg               []int
	blocks            []blockBufs
	xf                []float32 // [T,d] output of the last block
	rstdF             []float32
	nf                []float32
	logits            []float32 // [T,V]
	lse               []float64 // [T] log Σ exp(logits) per row
	ent               []float64 // [T] entropy per row
	dx, dn, datt      []float32 // backward scratch
	dqkv, dh, dlogits []float32
	dp                []float32
	dlpSum, dHSum     []float64 // per-row loss coefficients of a pack
	adds              []rowTarget
}

func newWorkspace(c Config) *workspace {
	c = c.withDefaults()
	return newWorkspaceRows(c, c.Context)
}

// newWorkspaceRows sizes a workspace for T rows. probs keep Context keys
// a row: no row of a pack attends to more keys than its position + 1.
func newWorkspaceRows(c Config, T int) *workspace {
	K, d, ff, H, V := c.Context, c.DModel, c.DFF, c.Heads, TokenizerVocab
	f := func(n int) []float32 { return make([]float32, n) }
	ws := &workspace{cfg: c, rows: T}
	prev := f(T * d)
	for range c.Layers {
		b := blockBufs{
			x: prev, rstd1: f(T), n1: f(T * d), qkv: f(T * 3 * d), probs: f(H * T * K),
			att: f(T * d), x1: f(T * d), rstd2: f(T), n2: f(T * d), hpre: f(T * ff), hact: f(T * ff), out: f(T * d),
		}
		ws.blocks = append(ws.blocks, b)
		prev = b.out
	}
	ws.xf, ws.rstdF, ws.nf, ws.logits = prev, f(T), f(T*d), f(T*V)
	ws.lse, ws.ent = make([]float64, T), make([]float64, T)
	ws.tokens, ws.pos, ws.seg = make([]int, T), make([]int, T), make([]int, T)
	ws.dx, ws.dn, ws.datt, ws.dqkv, ws.dh, ws.dlogits = f(T*d), f(T*d), f(T*d), f(T*3*d), f(T*ff), f(T*V)
	ws.dp = f(K)
	ws.dlpSum, ws.dHSum = make([]float64, T), make([]float64, T)
	return ws
}

// reserve makes room for T rows. It doubles rather than fitting exactly
// so a batch of growing packs reallocates a few times, not every pack.
func (ws *workspace) reserve(T int) {
	if T <= ws.rows {
		return
	}
	*ws = *newWorkspaceRows(ws.cfg, min(max(T, 2*ws.rows), max(T, maxPackRows(ws.cfg))))
}

// run is the forward over the rows ws.tokens[:T] laid out as ws.prefix,
// ws.seg and ws.pos describe.
func (ws *workspace) run(w *weights) {
	c := ws.cfg
	T, d, V := ws.T, c.DModel, TokenizerVocab
	x := ws.blocks[0].x
	for i, t := range ws.tokens[:T] {
		xi := x[i*d : (i+1)*d]
		copy(xi, w.tokEmb[t*d:(t+1)*d])
		p := ws.pos[i]
		for k, e := range w.posEmb[p*d : (p+1)*d] {
			xi[k] += e
		}
	}
	for l := range ws.blocks {
		b := &ws.blocks[l]
		blockQKV(c, &w.layers[l], b, 0, T)
		ws.attention(b)
		blockRest(c, &w.layers[l], b, T)
	}
	rmsNorm(ws.nf, ws.rstdF, ws.xf, w.finalNorm, T, d)
	matMul(ws.logits[:T*V], ws.nf[:T*d], w.head, T, d, V)
	for i := range T {
		ws.lse[i] = logSumExp(ws.logits[i*V : (i+1)*V])
		ws.ent[i] = ws.entropy(i)
	}
}

// keys gives row r's attention keys: the first nPre are rows 0..nPre-1,
// key j >= nPre is row j+shift (the row's own suffix).
func (ws *workspace) keys(r int) (n, nPre, shift int) {
	if r < ws.prefix {
		return r + 1, r + 1, 0
	}
	s := ws.seg[r]
	return ws.prefix + r + 1 - s, ws.prefix, s - ws.prefix
}

// attention is causal multi-head attention under the pack's mask. Keys
// are visited in the order of the unpacked sequence, so a packed row's
// output is the one its sequence alone would give, bit for bit.
func (ws *workspace) attention(b *blockBufs) {
	c := ws.cfg
	d, H := c.DModel, c.Heads
	hd := d / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	T, stride := ws.T, ws.stride
	for r := range T {
		nk, nPre, shift := ws.keys(r)
		for h := range H {
			q := b.qkv[r*3*d+h*hd : r*3*d+(h+1)*hd]
			pr := b.probs[(h*T+r)*stride : (h*T+r)*stride+nk]
			attendHead(b.qkv, q, pr, b.att[r*d+h*hd:r*d+(h+1)*hd], d, h, scale, nPre, shift) // model.go
		}
	}
}

// rowTarget is one sequence's target term on a row: dlp·log p(target).
type rowTarget struct {
	row, target int
	dlp         float64
}

// backwardRows adds to g the gradient of Σ_a a.dlp·log p_a.row(a.target)
// + Σ_r dH[r]·H_r after a forward. dlpSum[r] must be the sum of the dlp
// of row r's adds: a row shared by several sequences carries the sum of
// their terms. dH may be nil.
func (ws *workspace) backwardRows(w, g *weights, dlpSum, dH []float64, adds []rowTarget) {
	c := ws.cfg
	T, d, ff, V := ws.T, c.DModel, c.DFF, TokenizerVocab
	// ∂lp/∂z_v = onehot(target)_v − p_v;  ∂H/∂z_v = −p_v·(log p_v + H).
	dlogits := ws.dlogits[:T*V]
	for i := range T {
		row, drow := ws.logits[i*V:(i+1)*V], dlogits[i*V:(i+1)*V]
		var dh float64
		if dH != nil {
			dh = dH[i]
		}
		a := dlpSum[i]
		if a == 0 && dh == 0 {
			clear(drow)
			continue
		}
		lse, h := ws.lse[i], ws.ent[i]
		for v, z := range row {
			logp := float64(z) - lse
			p := math.Exp(logp)
			drow[v] = float32(-a*p - dh*p*(logp+h))
		}
	}
	for _, t := range adds {
		dlogits[t.row*V+t.target] += float32(t.dlp)
	}
	matMulTNAcc(g.head, ws.nf[:T*d], dlogits, T, d, V)
	dn := ws.dn[:T*d]
	matMulNT(dn, dlogits, w.head, T, V, d, false)
	dx := ws.dx[:T*d]
	clear(dx)
	rmsNormBackward(dx, g.finalNorm, dn, ws.xf, ws.rstdF, w.finalNorm, T, d)

	for l := len(ws.blocks) - 1; l >= 0; l-- {
		b, lw, lg := &ws.blocks[l], &w.layers[l], &g.layers[l]
		// MLP: out = x1 + w2·gelu(w1·norm(x1)); dx is ∂/∂out.
		matMulTNAcc(lg.w2, b.hact[:T*ff], dx, T, ff, d)
		dh := ws.dh[:T*ff]
		matMulNT(dh, dx, lw.w2, T, d, ff, false)
		for i, v := range b.hpre[:T*ff] {
			dh[i] *= geluGrad(v)
		}
		matMulTNAcc(lg.w1, b.n2[:T*d], dh, T, d, ff)
		matMulNT(dn, dh, lw.w1, T, ff, d, false)
		rmsNormBackward(dx, lg.mlpNorm, dn, b.x1, b.rstd2, lw.mlpNorm, T, d)
		// Attention: x1 = x + wo·att; dx is now ∂/∂x1.
		matMulTNAcc(lg.wo, b.att[:T*d], dx, T, d, d)
		datt := ws.datt[:T*d]
		matMulNT(datt, dx, lw.wo, T, d, d, false)
		dqkv := ws.dqkv[:T*3*d]
		clear(dqkv)
		ws.attentionBackward(b, datt, dqkv)
		matMulTNAcc(lg.wqkv, b.n1[:T*d], dqkv, T, d, 3*d)
		matMulNT(dn, dqkv, lw.wqkv, T, 3*d, d, false)
		rmsNormBackward(dx, lg.attnNorm, dn, b.x, b.rstd1, lw.attnNorm, T, d)
	}
	for i, t := range ws.tokens[:T] {
		dxi := dx[i*d : (i+1)*d]
		p := ws.pos[i]
		axpy(1, dxi, g.tokEmb[t*d:(t+1)*d])
		axpy(1, dxi, g.posEmb[p*d:(p+1)*d])
	}
}

func (ws *workspace) attentionBackward(b *blockBufs, datt, dqkv []float32) {
	c := ws.cfg
	d, H := c.DModel, c.Heads
	hd := d / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	T, stride := ws.T, ws.stride
	dp := ws.dp
	for i := range T {
		nk, nPre, shift := ws.keys(i)
		for h := range H {
			pr := b.probs[(h*T+i)*stride : (h*T+i)*stride+nk]
			da := datt[i*d+h*hd : i*d+(h+1)*hd]
			var sum float32
			for j, p := range pr {
				k := j
				if j >= nPre {
					k += shift
				}
				v := b.qkv[k*3*d+2*d+h*hd : k*3*d+2*d+(h+1)*hd]
				dp[j] = dot(da, v)
				sum += p * dp[j]
				axpy(p, da, dqkv[k*3*d+2*d+h*hd:k*3*d+2*d+(h+1)*hd])
			}
			q := b.qkv[i*3*d+h*hd : i*3*d+(h+1)*hd]
			dq := dqkv[i*3*d+h*hd : i*3*d+(h+1)*hd]
			for j, p := range pr {
				ds := p * (dp[j] - sum) * scale
				if ds == 0 {
					continue
				}
				k := j
				if j >= nPre {
					k += shift
				}
				axpy(ds, b.qkv[k*3*d+d+h*hd:k*3*d+d+(h+1)*hd], dq)
				axpy(ds, q, dqkv[k*3*d+d+h*hd:k*3*d+d+(h+1)*hd])
			}
		}
	}
}

// entropy is the entropy of position i's next-token distribution (at
// temperature 1), from the logits of a forward.
func (ws *workspace) entropy(i int) float64 {
	V := TokenizerVocab
	lse := ws.lse[i]
	var h float64
	for _, z := range ws.logits[i*V : (i+1)*V] {
		logp := float64(z) - lse
		h -= math.Exp(logp) * logp
	}
	return h
}
