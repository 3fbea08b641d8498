package trainer

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
)

// BenchmarkTinkerStepCalls counts the Tinker API calls of one training
// step against each flavour of the fake service: rollouts on a vLLM
// (internal/fakevllm) that gets each step's LoRA adapter, and a
// checkpoint every step. Reported per step: the queued calls submitted
// (forward_backward, optim_step, the saves), the retrieve_future polls,
// the archive downloads (one per published adapter) and every HTTP
// request to the service.
func BenchmarkTinkerStepCalls(b *testing.B) {
	for _, fl := range []faketinker.Flavour{faketinker.FlavourTinker, faketinker.FlavourSkyRL} {
		b.Run(string(fl), func(b *testing.B) {
			const key = "tml-bench-key"
			const steps = 3
			var submits, polls, downloads, total, trained int
			byPath := map[string]int{}
			for b.Loop() {
				srv, err := faketinker.New(faketinker.Options{Flavour: fl, APIKey: key, PollWait: 50 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				vllm := fakevllm.New(fakevllm.Config{Model: "base", RuntimeLoRA: true})
				c := smallConfig(b, "backend.name=tinker", "backend.tinker.base_url="+srv.URL, "backend.tinker.base_model="+tinker.EmbeddedModel,
					"backend.tinker.lora_rank=2", "rollout.engine=openai", "rollout.endpoints=["+vllm.URL+"/v1]", "rollout.model=base",
					"trainer.save_freq=1", "trainer.total_training_steps="+strconv.Itoa(steps), "trainer.default_local_dir="+filepath.ToSlash(b.TempDir()))
				tr, err := New(context.Background(), c, Options{Getenv: func(string) string { return key }, Rollouts: mustClient(b, "base", vllm.URL)})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tr.Train(context.Background()); err != nil {
					b.Fatal(err)
				}
				tr.Close()
				for _, e := range srv.Log() {
					total++
					byPath[e.Path]++
					switch e.Path {
					case "retrieve_future":
						polls++
					case "forward_backward", "forward", "optim_step", "save_weights", "save_weights_for_sampler", "load_weights":
						submits++
					}
				}
				downloads += srv.Downloads()
				trained += steps
				srv.Close()
				vllm.Close()
			}
			n := float64(trained)
			b.Logf("%s, %d steps: requests by endpoint %v", fl, trained, byPath)
			b.ReportMetric(float64(submits)/n, "submits/step")
			b.ReportMetric(float64(polls)/n, "polls/step")
			b.ReportMetric(float64(downloads)/n, "downloads/step")
			b.ReportMetric(float64(total)/n, "requests/step")
		})
	}
}
