package local

import (
	"math"
	"math/rand/v2"
)

const normEps = 1e-5

// weights are named views into a flat parameter vector (the same type
// views a gradient vector).
type weights struct {
	cfg       Config
	flat      []float32
	tokEmb    []float32 // [V,d]
	posEmb    []float32 // [ctx,d]
	layers    []layerWeights
	finalNorm []float32 // [d]
	head      []float32 // [d,V]
}

type layerWeights struct {
	attnNorm []float32 // [d]
	wqkv     []float32 // [d,3d]: q, k, v side by side
	wo       []float32 // [d,d]
	mlpNorm  []float32 // [d]
	w1       []float32 // [d,ff]
	w2       []float32 // [ff,d]
}

func bindWeights(c Config, flat []float32) *weights {
	c = c.withDefaults()
	specs, _ := layout(c)
	views := make([][]float32, len(specs))
	for i, s := range specs {
		views[i] = flat[s.Offset : s.Offset+s.Size : s.Offset+s.Size]
	}
	w := &weights{cfg: c, flat: flat, tokEmb: views[0], posEmb: views[1]}
	k := 2
	for range c.Layers {
		w.layers = append(w.layers, layerWeights{views[k], views[k+1], views[k+2], views[k+3], views[k+4], views[k+5]})
		k += 6
	}
	w.finalNorm, w.head = views[k], views[k+1]
	return w
}

// initParams draws the initial weights from cfg.Seed.
func initParams(c Config) []float32 {
	specs, n := layout(c)
	flat := make([]float32, n)
	rng := rand.New(rand.NewPCG(uint64(c.Seed), 0x726c6c6d))
	for _, s := range specs {
		t := flat[s.Offset : s.Offset+s.Size]
		for i := range t {
			if s.ones {
				t[i] = 1
			} else {
				t[i] = float32(rng.NormFloat64() * s.init)
			}
		}
	}
	return flat
}

// blockBufs are the buffers of one transformer block for n rows starting
// at position pos0. qkv is the whole cache from row 0: rows before pos0
// were filled by earlier calls (the KV cache) and rows pos0..pos0+n-1 are
// written here. probs holds the attention weights as [H][n][probStride].
type blockBufs struct {
	x, rstd1, n1, qkv, probs, att, x1, rstd2, n2, hpre, hact, out []float32
	probStride                                                    int
}

// blockForward runs one pre-norm block on n rows.
func blockForward(c Config, lw *layerWeights, b *blockBufs, pos0, n int) {
	blockQKV(c, lw, b, pos0, n)
	attention(c, b, pos0, n)
	blockRest(c, lw, b, n)
}

// blockQKV and blockRest are the block's row-wise halves, split so that
// training can put its own attention mask (packed sequences) between them.
func blockQKV(c Config, lw *layerWeights, b *blockBufs, pos0, n int) {
	d := c.DModel
	rmsNorm(b.n1, b.rstd1, b.x, lw.attnNorm, n, d)
	matMul(b.qkv[pos0*3*d:(pos0+n)*3*d], b.n1, lw.wqkv, n, d, 3*d)
}

func blockRest(c Config, lw *layerWeights, b *blockBufs, n int) {
	d, ff := c.DModel, c.DFF
	matMul(b.x1[:n*d], b.att[:n*d], lw.wo, n, d, d)
	for i := range n * d {
		b.x1[i] += b.x[i]
	}
	rmsNorm(b.n2, b.rstd2, b.x1, lw.mlpNorm, n, d)
	matMul(b.hpre, b.n2, lw.w1, n, d, ff)
	for i, v := range b.hpre[:n*ff] {
		b.hact[i] = gelu(v)
	}
	matMul(b.out, b.hact, lw.w2, n, ff, d)
	for i := range n * d {
		b.out[i] += b.x1[i]
	}
}

// expScores turns one row of attention scores, whose largest is maxS, into
// unnormalised weights in place and returns 1/their sum.
func expScores(pr []float32, maxS float32) float32 {
	var sum float32
	for j, s := range pr {
		e := float32(math.Exp(float64(s - maxS)))
		pr[j] = e
		sum += e
	}
	return 1 / sum
}

// attention computes causal multi-head attention for rows pos0..pos0+n-1
// over cache rows 0..row.
func attention(c Config, b *blockBufs, pos0, n int) {
	d, H := c.DModel, c.Heads
	hd := d / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	for r := range n {
		p := pos0 + r
		for h := range H {
			q := b.qkv[p*3*d+h*hd : p*3*d+(h+1)*hd]
			pr := b.probs[(h*n+r)*b.probStride : (h*n+r)*b.probStride+p+1]
			attendHead(b.qkv, q, pr, b.att[r*d+h*hd:r*d+(h+1)*hd], d, h, scale, len(pr), 0)
		}
	}
}

// attendHead is head h's attention for query q: its scaled scores against
// the keys, their softmax, left in pr, and the weighted sum of the values,
// written to out. Key j is qkv row j, or row j+shift from j = nPre on (a
// packed row skips the rows of the sequences packed before its own).
func attendHead(qkv, q, pr, out []float32, d, h int, scale float32, nPre, shift int) {
	hd := len(q)
	maxS := float32(math.Inf(-1))
	for j := range pr {
		k := j
		if j >= nPre {
			k += shift
		}
		s := dot(q, qkv[k*3*d+d+h*hd:k*3*d+d+(h+1)*hd]) * scale
		pr[j] = s
		maxS = max(maxS, s)
	}
	inv := expScores(pr, maxS)
	clear(out)
	for j := range pr {
		k := j
		if j >= nPre {
			k += shift
		}
		pr[j] *= inv
		axpy(pr[j], qkv[k*3*d+2*d+h*hd:k*3*d+2*d+(h+1)*hd], out)
	}
}

func rmsNorm(out, rstd, x, gain []float32, n, d int) {
	for i := range n {
		xi := x[i*d : (i+1)*d]
		var ss float64
		for _, v := range xi {
			ss += float64(v) * float64(v)
		}
		r := float32(1 / math.Sqrt(ss/float64(d)+normEps))
		rstd[i] = r
		oi := out[i*d : (i+1)*d]
		for k, v := range xi {
			oi[k] = v * r * gain[k]
		}
	}
}

// rmsNormBackward adds the input gradient of y = x·r·g to dx and the gain
// gradient to dgain, given dy.
func rmsNormBackward(dx, dgain, dy, x, rstd, gain []float32, n, d int) {
	for i := range n {
		xi, dyi, dxi := x[i*d:(i+1)*d], dy[i*d:(i+1)*d], dx[i*d:(i+1)*d]
		r := rstd[i]
		var s float32
		for k := range xi {
			g := gain[k] * dyi[k]
			s += g * xi[k]
			dgain[k] += dyi[k] * xi[k] * r
		}
		c := s * r * r * r / float32(d)
		for k := range xi {
			dxi[k] += r*gain[k]*dyi[k] - xi[k]*c
		}
	}
}

const geluC = 0.7978845608028654 // √(2/π)

func gelu(x float32) float32 {
	t := math.Tanh(geluC * (float64(x) + 0.044715*float64(x)*float64(x)*float64(x)))
	return float32(0.5 * float64(x) * (1 + t))
}

func geluGrad(x float32) float32 {
	xf := float64(x)
	t := math.Tanh(geluC * (xf + 0.044715*xf*xf*xf))
	return float32(0.5*(1+t) + 0.5*xf*(1-t*t)*geluC*(1+3*0.044715*xf*xf))
}

func logSumExp(logits []float32) float64 {
	m := float64(logits[0])
	for _, v := range logits {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range logits {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}
