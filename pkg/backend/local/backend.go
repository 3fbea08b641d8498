// Package local is the embedded policy: a small decoder-only transformer
// in pure Go (float32, hand-written kernels, no cgo) that trains and
// samples through backend.TrainingBackend, so rllm runs end to end on a
// machine with no GPU and no server. See docs/embedded-policy.md.
package local

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// Options configure a local backend.
type Options struct {
	// Name is the model name reported in ModelInfo and snapshot names;
	// "local" when empty.
	Name   string
	Config Config
	// Workers is how many goroutines split a batch (packs of datums, or
	// samples); GOMAXPROCS when 0.
	Workers int
}

// Backend is the embedded model behind backend.TrainingBackend. Calls run
// one at a time on a single goroutine, in submission order.
type Backend struct {
	name    string
	cfg     Config
	workers int

	// Owned by the worker goroutine once New returns.
	params     []float32
	grad       []float32
	m, v       []float32
	step       int
	gradTokens int
	versions   int
	spaces     []*workspace
	grads      [][]float32
	// unpacked runs every datum alone, as before shared-prefix packing:
	// the reference the tests and benchmarks compare packing against.
	unpacked bool

	mu     sync.Mutex
	closed bool
	queue  chan func()
	done   chan struct{}
}

var _ backend.TrainingBackend = (*Backend)(nil)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("local backend is closed")

// New builds a model with freshly initialised weights (from Config.Seed).
func New(opts Options) (*Backend, error) {
	cfg := opts.Config.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "local"
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	_, n := layout(cfg)
	b := &Backend{
		name: opts.Name, cfg: cfg, workers: workers,
		params: initParams(cfg), grad: make([]float32, n), m: make([]float32, n), v: make([]float32, n),
		queue: make(chan func(), 64), done: make(chan struct{}),
	}
	go b.run()
	return b, nil
}

func (b *Backend) run() {
	defer close(b.done)
	for job := range b.queue {
		job()
	}
}

// submit queues fn behind every earlier call. A call whose ctx has ended
// by the time its turn comes fails with ctx.Err() without running.
func submit[T any](b *Backend, ctx context.Context, fn func() (T, error)) *backend.Future[T] {
	f, resolve := backend.NewFuture[T]()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		var zero T
		resolve(zero, ErrClosed)
		return f
	}
	job := func() {
		if err := ctx.Err(); err != nil {
			var zero T
			resolve(zero, err)
			return
		}
		resolve(fn())
	}
	// The queue is buffered; a full queue blocks the submitter, which is
	// the back-pressure a trainer racing ahead should feel.
	b.queue <- job
	return f
}

// Info describes the model.
func (b *Backend) Info() backend.ModelInfo {
	return backend.ModelInfo{Name: b.name, VocabSize: TokenizerVocab, MaxContext: b.cfg.Context, SupportedLosses: backend.BuiltinLosses(), Entropy: true}
}

// Config is the model's configuration.
func (b *Backend) Config() Config { return b.cfg }

// Tokenizer is the model's tokenizer.
func (b *Backend) Tokenizer() Tokenizer { return Tokenizer{} }

// NumParams is the number of float32 parameters.
func (b *Backend) NumParams() int { return len(b.params) }

// TrainsInProcess reports that every training call runs here and
// answers (trainer.InProcessTrainer): Ctrl-C waits for the step in flight.
func (b *Backend) TrainsInProcess() bool { return true }

// Close waits for queued calls and stops the worker.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	<-b.done
	return nil
}

// ForwardBackward computes the loss and accumulates its gradient.
func (b *Backend) ForwardBackward(ctx context.Context, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	if err := b.validate(data, loss); err != nil {
		return backend.Resolved(backend.ForwardBackwardOutput{}, err)
	}
	return submit(b, ctx, func() (backend.ForwardBackwardOutput, error) { return b.compute(ctx, data, loss, true) })
}

// Forward computes the loss without a gradient.
func (b *Backend) Forward(ctx context.Context, data []backend.Datum, loss backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	if err := b.validate(data, loss); err != nil {
		return backend.Resolved(backend.ForwardBackwardOutput{}, err)
	}
	return submit(b, ctx, func() (backend.ForwardBackwardOutput, error) { return b.compute(ctx, data, loss, false) })
}

func (b *Backend) validate(data []backend.Datum, loss backend.Loss) error {
	if err := loss.Validate(); err != nil {
		return err
	}
	for i := range data {
		if err := data[i].Validate(i, TokenizerVocab, b.cfg.Context, loss); err != nil {
			return err
		}
	}
	return nil
}

// compute runs the datums, packed by shared prefix (pack.go), split
// across workers, each with its own activations and gradient buffer, then
// sums the gradients in a fixed order so results do not depend on
// scheduling.
func (b *Backend) compute(ctx context.Context, data []backend.Datum, loss backend.Loss, withGrad bool) (backend.ForwardBackwardOutput, error) {
	packs := singlePacks(data)
	if !b.unpacked {
		packs = planPacks(data, maxPackRows(b.cfg))
	}
	workers := max(1, min(b.workers, len(packs)))
	for len(b.spaces) < workers {
		b.spaces = append(b.spaces, newWorkspace(b.cfg))
		b.grads = append(b.grads, make([]float32, len(b.params)))
	}
	w := bindWeights(b.cfg, b.params)
	outs := make([]backend.LossFnOutput, len(data))
	var wg sync.WaitGroup
	for wk := range workers {
		if withGrad {
			clear(b.grads[wk])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := b.spaces[wk]
			var g *weights
			if withGrad {
				g = bindWeights(b.cfg, b.grads[wk])
			}
			for p := wk; p < len(packs); p += workers {
				if ctx.Err() != nil {
					return
				}
				ws.runPack(w, g, data, packs[p], loss, outs)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return backend.ForwardBackwardOutput{}, err
	}
	var total float64
	tokens := 0
	for _, o := range outs {
		for _, l := range o.ElementwiseLoss {
			total += l
		}
		tokens += len(o.Logprobs)
	}
	if withGrad {
		for wk := range workers {
			axpy(1, b.grads[wk], b.grad)
		}
		b.gradTokens += tokens
	}
	return backend.ForwardBackwardOutput{
		LossFnOutputs: outs,
		Metrics:       map[string]float64{"loss:sum": total, "tokens:sum": float64(tokens)},
	}, nil
}

// OptimStep applies Adam(W) to the accumulated gradient.
func (b *Backend) OptimStep(ctx context.Context, p backend.AdamParams) *backend.Future[backend.OptimStepOutput] {
	if err := p.Validate(); err != nil {
		return backend.Resolved(backend.OptimStepOutput{}, err)
	}
	return submit(b, ctx, func() (backend.OptimStepOutput, error) { return b.optimStep(p) })
}

// NonFiniteGradientError refuses an optimizer step whose gradient holds a
// NaN or Inf; the weights and optimizer state are unchanged and the
// gradient is discarded, so the next step starts clean.
type NonFiniteGradientError struct {
	Tensor string
}

func (e *NonFiniteGradientError) Error() string {
	return fmt.Sprintf("optimizer step refused: the gradient of %s is NaN or Inf (check the advantages, weights and logprobs sent to forward_backward); weights unchanged, gradient discarded", e.Tensor)
}

func (b *Backend) optimStep(p backend.AdamParams) (backend.OptimStepOutput, error) {
	defer func() {
		clear(b.grad)
		b.gradTokens = 0
	}()
	var sq float64
	for _, g := range b.grad {
		sq += float64(g) * float64(g)
	}
	norm := math.Sqrt(sq)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return backend.OptimStepOutput{}, &NonFiniteGradientError{Tensor: b.firstNonFinite()}
	}
	scale := 1.0
	if p.GradClipNorm > 0 && norm > p.GradClipNorm {
		scale = p.GradClipNorm / norm
	}
	b.step++
	b1, b2 := p.Beta1, p.Beta2
	bc1 := 1 - math.Pow(b1, float64(b.step))
	bc2 := 1 - math.Pow(b2, float64(b.step))
	lr, wd, eps := p.LearningRate, p.WeightDecay, p.Eps
	for i, g32 := range b.grad {
		g := float64(g32) * scale
		m := b1*float64(b.m[i]) + (1-b1)*g
		v := b2*float64(b.v[i]) + (1-b2)*g*g
		b.m[i], b.v[i] = float32(m), float32(v)
		w := float64(b.params[i])
		w -= lr * ((m / bc1) / (math.Sqrt(v/bc2) + eps))
		w -= lr * wd * float64(b.params[i])
		b.params[i] = float32(w)
	}
	return backend.OptimStepOutput{Metrics: map[string]float64{
		"grad_norm": norm, "learning_rate": lr, "step": float64(b.step),
	}}, nil
}

func (b *Backend) firstNonFinite() string {
	specs, _ := layout(b.cfg)
	for _, s := range specs {
		for _, g := range b.grad[s.Offset : s.Offset+s.Size] {
			if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
				return s.Name
			}
		}
	}
	return "?"
}

// PublishSampler copies the current weights into an immutable snapshot.
func (b *Backend) PublishSampler(ctx context.Context, name string) *backend.Future[backend.TokenSampler] {
	return submit(b, ctx, func() (backend.TokenSampler, error) { return b.publish(name), nil })
}

func (b *Backend) publish(name string) *Snapshot {
	b.versions++
	if name == "" {
		name = fmt.Sprintf("%s-v%d", b.name, b.versions)
	}
	flat := append([]float32(nil), b.params...)
	return &Snapshot{name: name, version: b.versions, w: bindWeights(b.cfg, flat), workers: b.workers}
}

// Step is the number of optimizer steps taken (restored by LoadState).
// It waits for queued calls.
func (b *Backend) Step(ctx context.Context) (int, error) {
	return submit(b, ctx, func() (int, error) { return b.step, nil }).Result(ctx)
}
