package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/internal/boundedio"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// A checkpoint is a directory of three files:
//
//	manifest.json          {format, model, config, step, tokenizer}
//	model.safetensors      the weights, one F32 tensor per parameter
//	optimizer.safetensors  Adam's moments: "adam_m.<name>", "adam_v.<name>"
const (
	ManifestFile     = "manifest.json"
	WeightsFile      = "model.safetensors"
	OptimizerFile    = "optimizer.safetensors"
	CheckpointFormat = "rllm-local-checkpoint-v1"
)

// Manifest describes a checkpoint directory.
type Manifest struct {
	Format    string `json:"format"`
	Model     string `json:"model"`
	Config    Config `json:"config"`
	Step      int    `json:"step"`
	Tokenizer string `json:"tokenizer"`
}

// ReadManifest reads dir/manifest.json.
func ReadManifest(dir string) (Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := boundedio.ReadFile(context.Background(), path, 1<<20) // a manifest is a few hundred bytes
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Manifest{}, &backend.InputError{Msg: fmt.Sprintf("%s does not exist; give a checkpoint directory written by SaveState (rllm train or rllm sft)", path)}
		}
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, &backend.InputError{Msg: fmt.Sprintf("%s is not valid JSON: %v", path, err)}
	}
	if m.Format != CheckpointFormat {
		return Manifest{}, &backend.InputError{Msg: fmt.Sprintf("%s has format %q; this build reads %q", path, m.Format, CheckpointFormat)}
	}
	if m.Tokenizer != TokenizerID {
		return Manifest{}, &backend.InputError{Msg: fmt.Sprintf("%s uses tokenizer %q; this build has %q", path, m.Tokenizer, TokenizerID)}
	}
	if err := m.Config.Validate(); err != nil {
		return Manifest{}, &backend.InputError{Msg: fmt.Sprintf("%s: %v", path, err)}
	}
	return m, nil
}

// Open builds a backend shaped as the checkpoint in dir and loads its
// weights and optimizer state.
func Open(ctx context.Context, dir string, opts Options) (*Backend, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	opts.Config = m.Config
	if opts.Name == "" {
		opts.Name = m.Model
	}
	b, err := New(opts)
	if err != nil {
		return nil, err
	}
	if _, err := b.LoadState(ctx, dir, true).Result(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// SaveState writes the checkpoint directory path (created if needed).
func (b *Backend) SaveState(ctx context.Context, path string) *backend.Future[string] {
	return submit(b, ctx, func() (string, error) { return path, b.save(path) })
}

func (b *Backend) save(dir string) error {
	if err := os.MkdirAll(dir, atomicfile.DirMode); err != nil {
		return err
	}
	specs, _ := layout(b.cfg)
	var names, optNames []string
	weights, moments := map[string]tensor{}, map[string]tensor{}
	for _, s := range specs {
		names = append(names, s.Name)
		weights[s.Name] = tensor{Shape: s.Shape, Data: b.params[s.Offset : s.Offset+s.Size]}
	}
	for _, prefix := range []string{"adam_m.", "adam_v."} {
		src := b.m
		if prefix == "adam_v." {
			src = b.v
		}
		for _, s := range specs {
			optNames = append(optNames, prefix+s.Name)
			moments[prefix+s.Name] = tensor{Shape: s.Shape, Data: src[s.Offset : s.Offset+s.Size]}
		}
	}
	meta := map[string]string{"format": "pt", "step": strconv.Itoa(b.step)}
	if err := writeFileAtomic(dir, WeightsFile, func(buf *bytes.Buffer) error { return writeSafetensors(buf, names, weights, meta) }); err != nil {
		return err
	}
	if err := writeFileAtomic(dir, OptimizerFile, func(buf *bytes.Buffer) error { return writeSafetensors(buf, optNames, moments, meta) }); err != nil {
		return err
	}
	m := Manifest{Format: CheckpointFormat, Model: b.name, Config: b.cfg, Step: b.step, Tokenizer: TokenizerID}
	return writeFileAtomic(dir, ManifestFile, func(buf *bytes.Buffer) error {
		enc := json.NewEncoder(buf)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	})
}

// writeFileAtomic writes dir/name through internal/atomicfile (temporary
// file, fsync, rename), so a crash never leaves half a checkpoint file
// under the real name.
func writeFileAtomic(dir, name string, fill func(*bytes.Buffer) error) error {
	var buf bytes.Buffer
	if err := fill(&buf); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, name), buf.Bytes())
}

// LoadState replaces the weights (and, with withOptimizer, Adam's moments
// and step count) by those saved in path. Nothing changes unless every
// tensor is present with the model's shape.
func (b *Backend) LoadState(ctx context.Context, path string, withOptimizer bool) *backend.Future[struct{}] {
	return submit(b, ctx, func() (struct{}, error) { return struct{}{}, b.load(path, withOptimizer) })
}

func (b *Backend) load(dir string, withOptimizer bool) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	params, err := readTensors(context.Background(), filepath.Join(dir, WeightsFile), b.cfg, "")
	if err != nil {
		return err
	}
	var mom, vel []float32
	if withOptimizer {
		file := filepath.Join(dir, OptimizerFile)
		if mom, err = readTensors(context.Background(), file, b.cfg, "adam_m."); err != nil {
			return err
		}
		if vel, err = readTensors(context.Background(), file, b.cfg, "adam_v."); err != nil {
			return err
		}
	}
	copy(b.params, params)
	clear(b.grad)
	if withOptimizer {
		copy(b.m, mom)
		copy(b.v, vel)
		b.step = m.Step
	} else {
		clear(b.m)
		clear(b.v)
		b.step = 0
	}
	return nil
}

// ShapeMismatchError is a checkpoint tensor whose shape differs from the
// model's: the checkpoint comes from a model of another size. It reaches
// the user as the Err of a usererr.Error (exit code 2).
type ShapeMismatchError struct {
	File, Tensor string
	Got, Want    []int
}

func (e *ShapeMismatchError) Error() string {
	return fmt.Sprintf("tensor %s in %s has shape %v but this model expects %v; the checkpoint was saved by a model of another size (set the model config to match it)", e.Tensor, e.File, e.Got, e.Want)
}

// tensorFileLimit bounds a safetensors file of a model with tensors
// tensors of n floats in all: the weights file holds them once, the
// optimizer file (prefix adam_m./adam_v.) twice; the JSON header takes at
// most 1 MiB plus 512 bytes a tensor.
func tensorFileLimit(tensors, n int, prefix string) int64 {
	copies := int64(1)
	if prefix != "" {
		copies = 2
	}
	return 8 + (1<<20+512*int64(tensors))*copies + 4*int64(n)*copies
}

// readTensors reads the tensors named prefix+<param> of a config into a
// flat vector in layout order.
func readTensors(ctx context.Context, file string, c Config, prefix string) ([]float32, error) {
	specs, n := layout(c)
	raw, err := boundedio.ReadFile(ctx, file, tensorFileLimit(len(specs), n, prefix))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &backend.InputError{Msg: fmt.Sprintf("%s does not exist; the checkpoint is incomplete", file)}
		}
		var tl *boundedio.TooLargeError
		if errors.As(err, &tl) {
			return nil, &usererr.Error{Subject: file, Msg: fmt.Sprintf("larger than the %s a checkpoint of this shape takes", boundedio.Size(tl.Limit)), Fix: "the file is not this model's weights; save the checkpoint again"}
		}
		return nil, err
	}
	tensors, _, err := parseSafetensors(file, raw)
	if err != nil {
		return nil, err
	}
	flat := make([]float32, n)
	want := map[string]bool{}
	for _, s := range specs {
		name := prefix + s.Name
		want[name] = true
		t, ok := tensors[name]
		if !ok {
			return nil, &backend.InputError{Msg: fmt.Sprintf("%s lacks tensor %s that this model has; the checkpoint was saved by a model of another shape", file, name)}
		}
		if !slices.Equal(t.Shape, s.Shape) {
			sm := &ShapeMismatchError{File: file, Tensor: name, Got: t.Shape, Want: s.Shape}
			return nil, &usererr.Error{Msg: sm.Error(), Err: sm}
		}
		copy(flat[s.Offset:], t.Data)
	}
	if prefix == "" {
		for name := range tensors {
			if !want[name] {
				return nil, &backend.InputError{Msg: fmt.Sprintf("%s has tensor %s that this model lacks; the checkpoint was saved by a model of another shape", file, name)}
			}
		}
	}
	return flat, nil
}

// ResetOptimizer clears Adam's moments and step count, keeping the
// weights: a fresh optimizer, as when RL starts from a fine-tuned model.
// Without it, second moments sized by earlier large gradients would
// shrink the next phase's updates for hundreds of steps.
func (b *Backend) ResetOptimizer(ctx context.Context) *backend.Future[struct{}] {
	return submit(b, ctx, func() (struct{}, error) {
		clear(b.m)
		clear(b.v)
		clear(b.grad)
		b.step = 0
		return struct{}{}, nil
	})
}
