package local

import (
	"math"
)

// workspace holds the activations of one sequence for the backward pass,
// sized for the model's context and reused across sequences.
type workspace struct {
	cfg    Config
	T      int
	blocks []blockBufs
	xf     []float32 // [T,d] output of the last block
	rstdF  []float32
	nf     []float32
	logits []float32 // [T,V]
	lse    []float64 // [T] log Σ exp(logits) per row

	// backward scratch
	dx, dn, datt, dqkv, dh, dlogits []float32
}

func newWorkspace(c Config) *workspace {
	c = c.withDefaults()
	T, d, ff, H, V := c.Context, c.DModel, c.DFF, c.Heads, TokenizerVocab
	f := func(n int) []float32 { return make([]float32, n) }
	ws := &workspace{cfg: c}
	prev := f(T * d)
	for range c.Layers {
		b := blockBufs{
			x: prev, rstd1: f(T), n1: f(T * d), qkv: f(T * 3 * d), probs: f(H * T * T),
			att: f(T * d), x1: f(T * d), rstd2: f(T), n2: f(T * d), hpre: f(T * ff), hact: f(T * ff), out: f(T * d),
		}
		ws.blocks = append(ws.blocks, b)
		prev = b.out
	}
	ws.xf, ws.rstdF, ws.nf, ws.logits, ws.lse = prev, f(T), f(T*d), f(T*V), make([]float64, T)
	ws.dx, ws.dn, ws.datt, ws.dqkv, ws.dh, ws.dlogits = f(T*d), f(T*d), f(T*d), f(T*3*d), f(T*ff), f(T*V)
	return ws
}

// forward runs the whole sequence and leaves every activation in ws.
func (ws *workspace) forward(w *weights, tokens []int) {
	c := ws.cfg
	T, d, V := len(tokens), c.DModel, TokenizerVocab
	ws.T = T
	x := ws.blocks[0].x
	for i, t := range tokens {
		xi := x[i*d : (i+1)*d]
		copy(xi, w.tokEmb[t*d:(t+1)*d])
		for k, p := range w.posEmb[i*d : (i+1)*d] {
			xi[k] += p
		}
	}
	for l := range ws.blocks {
		b := &ws.blocks[l]
		b.probStride = T
		blockForward(c, &w.layers[l], b, 0, T)
	}
	rmsNorm(ws.nf, ws.rstdF, ws.xf, w.finalNorm, T, d)
	matMul(ws.logits[:T*V], ws.nf[:T*d], w.head, T, d, V)
	for i := range T {
		ws.lse[i] = logSumExp(ws.logits[i*V : (i+1)*V])
	}
}

// backward adds to g the gradient of Σ_i dlp[i]·log p(targets[i]) +
// dH[i]·H_i (H_i the entropy of position i's distribution; dH may be nil)
// after forward has run on the same tokens and entropies (when dH is set).
func (ws *workspace) backward(w, g *weights, tokens, targets []int, dlp, dH []float64) {
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
		if dlp[i] == 0 && dh == 0 {
			clear(drow)
			continue
		}
		lse := ws.lse[i]
		var h float64
		if dh != 0 {
			h = ws.entropy(i)
		}
		for v, z := range row {
			logp := float64(z) - lse
			p := math.Exp(logp)
			drow[v] = float32(-dlp[i]*p - dh*p*(logp+h))
		}
		drow[targets[i]] += float32(dlp[i])
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
		attentionBackward(c, b, datt, dqkv, T)
		matMulTNAcc(lg.wqkv, b.n1[:T*d], dqkv, T, d, 3*d)
		matMulNT(dn, dqkv, lw.wqkv, T, 3*d, d, false)
		rmsNormBackward(dx, lg.attnNorm, dn, b.x, b.rstd1, lw.attnNorm, T, d)
	}
	for i, t := range tokens {
		dxi := dx[i*d : (i+1)*d]
		axpy(1, dxi, g.tokEmb[t*d:(t+1)*d])
		axpy(1, dxi, g.posEmb[i*d:(i+1)*d])
	}
}

func attentionBackward(c Config, b *blockBufs, datt, dqkv []float32, T int) {
	d, H := c.DModel, c.Heads
	hd := d / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	dp := make([]float32, T)
	for i := range T {
		for h := range H {
			pr := b.probs[(h*T+i)*T : (h*T+i)*T+i+1]
			da := datt[i*d+h*hd : i*d+(h+1)*hd]
			var sum float32
			for j, p := range pr {
				v := b.qkv[j*3*d+2*d+h*hd : j*3*d+2*d+(h+1)*hd]
				dp[j] = dot(da, v)
				sum += p * dp[j]
				axpy(p, da, dqkv[j*3*d+2*d+h*hd:j*3*d+2*d+(h+1)*hd])
			}
			q := b.qkv[i*3*d+h*hd : i*3*d+(h+1)*hd]
			dq := dqkv[i*3*d+h*hd : i*3*d+(h+1)*hd]
			for j, p := range pr {
				ds := p * (dp[j] - sum) * scale
				if ds == 0 {
					continue
				}
				axpy(ds, b.qkv[j*3*d+d+h*hd:j*3*d+d+(h+1)*hd], dq)
				axpy(ds, q, dqkv[j*3*d+d+h*hd:j*3*d+d+(h+1)*hd])
			}
		}
	}
}

// targetLogprobs reads log p(targets[i]) off the logits of a forward.
func (ws *workspace) targetLogprobs(targets []int, out []float64) {
	V := TokenizerVocab
	for i, t := range targets {
		out[i] = float64(ws.logits[i*V+t]) - ws.lse[i]
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
