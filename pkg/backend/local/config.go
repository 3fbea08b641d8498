package local

import (
	"fmt"
	"math"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Config sets the size of the embedded model. The architecture is a
// decoder-only transformer: token and learned position embeddings,
// Layers pre-norm blocks (RMSNorm → causal multi-head attention →
// residual, RMSNorm → GELU MLP → residual), a final RMSNorm and an untied
// output head over the tokenizer's 261 tokens. No biases.
type Config struct {
	Layers  int   `json:"layers"`
	DModel  int   `json:"d_model"`
	Heads   int   `json:"heads"`
	DFF     int   `json:"d_ff"`    // MLP width; 0 means 4·DModel
	Context int   `json:"context"` // maximum sequence length (prompt + reply)
	Seed    int64 `json:"seed"`    // initialisation seed
}

// DefaultConfig is small enough that the arith task learns in minutes on
// two cores: 140,224 parameters.
func DefaultConfig() Config {
	return Config{Layers: 2, DModel: 64, Heads: 4, DFF: 256, Context: 128, Seed: 1}
}

func (c Config) withDefaults() Config {
	if c.DFF == 0 {
		c.DFF = 4 * c.DModel
	}
	return c
}

// Validate names the first size that cannot build a model.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Layers < 1 || c.Layers > 64:
		return configErrorf("model layers is %d; use 1 to 64", c.Layers)
	case c.DModel < 1 || c.DModel > 4096:
		return configErrorf("model d_model is %d; use 1 to 4096", c.DModel)
	case c.Heads < 1 || c.DModel%c.Heads != 0:
		return configErrorf("model heads is %d; it must divide d_model %d", c.Heads, c.DModel)
	case c.DFF < 1 || c.DFF > 16384:
		return configErrorf("model d_ff is %d; use 1 to 16384", c.DFF)
	case c.Context < 2 || c.Context > 8192:
		return configErrorf("model context is %d; use 2 to 8192", c.Context)
	}
	return nil
}

func configErrorf(format string, args ...any) error {
	return &usererr.Error{Msg: fmt.Sprintf(format, args...)}
}

// tensorSpec places one named parameter tensor in the flat parameter
// vector; the names are the safetensors keys.
type tensorSpec struct {
	Name   string
	Shape  []int
	Offset int
	Size   int
	// init is the standard deviation of the normal initialisation; 0 with
	// ones set means a norm gain initialised to 1.
	init float64
	ones bool
}

// layout lists every parameter tensor of a config in a fixed order.
func layout(c Config) ([]tensorSpec, int) {
	c = c.withDefaults()
	d, v := c.DModel, TokenizerVocab
	// GPT-2's scheme: std 0.02, residual projections scaled by 1/√(2L).
	resid := 0.02 / math.Sqrt(2*float64(c.Layers))
	var specs []tensorSpec
	off := 0
	add := func(name string, std float64, ones bool, shape ...int) {
		n := 1
		for _, s := range shape {
			n *= s
		}
		specs = append(specs, tensorSpec{Name: name, Shape: shape, Offset: off, Size: n, init: std, ones: ones})
		off += n
	}
	add("tok_emb", 0.02, false, v, d)
	add("pos_emb", 0.01, false, c.Context, d)
	for l := range c.Layers {
		p := fmt.Sprintf("layers.%d.", l)
		add(p+"attn_norm", 0, true, d)
		add(p+"attn.wqkv", 0.02, false, d, 3*d)
		add(p+"attn.wo", resid, false, d, d)
		add(p+"mlp_norm", 0, true, d)
		add(p+"mlp.w1", 0.02, false, d, c.DFF)
		add(p+"mlp.w2", resid, false, c.DFF, d)
	}
	add("final_norm", 0, true, d)
	add("lm_head", 0.02, false, d, v)
	return specs, off
}
