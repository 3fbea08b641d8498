package trainer

import (
	"context"
	"fmt"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/ppo"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// benchEpisodes is a step's worth of single-turn episodes: tasks × n, each
// with a prompt of p and a response of r tokens.
func benchEpisodes(tasks, n, p, r int) []*episode.Episode {
	eps := make([]*episode.Episode, 0, tasks*n)
	for ti := 0; ti < tasks; ti++ {
		for k := 0; k < n; k++ {
			st := episode.Step{PromptIDs: make([]int, p), ResponseIDs: make([]int, r), Logprobs: make([]float64, r), LossMask: make([]int8, r)}
			for j := range st.LossMask {
				st.LossMask[j] = 1
				st.Logprobs[j] = -1
			}
			reward := float64((ti + k) % 2)
			eps = append(eps, &episode.Episode{ID: fmt.Sprintf("t%d:%d", ti, k), IsCorrect: reward == 1, TerminationReason: episode.TerminationEnvDone,
				Trajectories: []episode.Trajectory{{ID: "t", Reward: reward, Steps: []episode.Step{st}}}})
		}
	}
	return eps
}

// nullBackend answers instantly: logprobs equal to the sampling ones
// (−1), no compute, so a benchmark through it measures only the
// trainer's own work.
type nullBackend struct{}

func (nullBackend) Info() backend.ModelInfo {
	return backend.ModelInfo{Name: "null", VocabSize: 1 << 20, MaxContext: 1 << 20, SupportedLosses: []string{backend.LossCrossEntropy}}
}
func (nullBackend) fb(data []backend.Datum) *backend.Future[backend.ForwardBackwardOutput] {
	out := backend.ForwardBackwardOutput{LossFnOutputs: make([]backend.LossFnOutput, len(data))}
	for i, d := range data {
		lp := make([]float64, len(d.LossFnInputs.TargetTokens))
		for j := range lp {
			lp[j] = -1
		}
		out.LossFnOutputs[i].Logprobs = lp
	}
	return backend.Resolved(out, nil)
}
func (b nullBackend) ForwardBackward(_ context.Context, data []backend.Datum, _ backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	return b.fb(data)
}
func (b nullBackend) Forward(_ context.Context, data []backend.Datum, _ backend.Loss) *backend.Future[backend.ForwardBackwardOutput] {
	return b.fb(data)
}
func (nullBackend) OptimStep(context.Context, backend.AdamParams) *backend.Future[backend.OptimStepOutput] {
	return backend.Resolved(backend.OptimStepOutput{Metrics: map[string]float64{"grad_norm": 1}}, nil)
}
func (nullBackend) SaveState(_ context.Context, p string) *backend.Future[string] {
	return backend.Resolved(p, nil)
}
func (nullBackend) LoadState(context.Context, string, bool) *backend.Future[struct{}] {
	return backend.Resolved(struct{}{}, nil)
}
func (nullBackend) PublishSampler(context.Context, string) *backend.Future[backend.TokenSampler] {
	return backend.Resolved[backend.TokenSampler](nil, nil)
}
func (nullBackend) ChatSampler(backend.TokenSampler) sampler.Sampler { return nil }
func (nullBackend) Codec() backend.Codec                             { return nil }
func (nullBackend) Close() error                                     { return nil }

// BenchmarkStepOverhead is everything a training step does besides
// sampling and model compute, for 512 episodes (128 tasks × 4) of 4,096
// tokens (1,024 prompt + 3,072 response): assemble, filters, GRPO, 4
// mini-batches of datums, the client-side PPO loss and its gradient
// weights, through a backend that answers instantly.
func BenchmarkStepOverhead(b *testing.B) {
	eps := benchEpisodes(128, 4, 1024, 3072)
	plan := &Plan{BatchSize: 128, Update: UpdatePlan{Loss: ppo.DefaultLossConfig(), MiniBatchTasks: 32, Epochs: 1},
		Advantage: AdvantagePlan{Estimators: ppo.RoleEstimators{Default: "grpo"}, Config: ppo.DefaultConfig()},
		Filters:   FilterPlan{Compact: ppo.CompactFilter{Enable: true, MaskTimeout: true}}}
	ctx := context.Background()
	var ws ppo.Workspace
	b.SetBytes(int64(len(eps) * 4096 * 8)) // token ids as ints
	b.ReportAllocs()
	for b.Loop() {
		groups, err := groupEpisodes(eps, 4)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := assemble(groups, rollout.AssembleOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := compactFilter(groups, plan.Filters.Compact); err != nil {
			b.Fatal(err)
		}
		if err := computeAdvantages(groups, &plan.Advantage, &ws); err != nil {
			b.Fatal(err)
		}
		if _, err := update(ctx, nullBackend{}, &plan.Update, miniBatches(groups, plan.Update.MiniBatchTasks), backend.DefaultAdamParams(1e-5)); err != nil {
			b.Fatal(err)
		}
	}
}
