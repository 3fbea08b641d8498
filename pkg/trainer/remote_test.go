package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/local/openai"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// serveLike starts rllm serve's server in-process on a model of c's
// shape (its own random weights: the trainer's first publication replaces
// them) and returns its URL.
func serveLike(t testing.TB, c *config.Config) string {
	t.Helper()
	b, err := local.OpenConfig(context.Background(), c, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	snap, err := b.PublishSampler(context.Background(), "served").Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	eng := local.NewEngine(snap.(*local.Snapshot), "base", local.EngineOptions{})
	t.Cleanup(eng.Close)
	srv := httptest.NewServer(openai.New(eng, openai.Options{ModelName: "policy"}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func weightVersion(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/get_weight_version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		WeightVersion string `json:"weight_version"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	return v.WeightVersion
}

// Training with rollouts from two rllm serve endpoints: every step's
// weights are published to both (SGLang's update_weights_from_disk)
// before the next rollouts, which sample from them.
func TestTrainWithRolloutsFromServers(t *testing.T) {
	base := smallConfig(t)
	a, b := serveLike(t, base), serveLike(t, base)
	c := smallConfig(t, "rollout.engine=openai", "rollout.endpoints=["+a+","+b+"]", "rollout.model=policy",
		"trainer.total_training_steps=2", "backend.local.warmup_steps=0")
	client := mustClient(t, "policy", []string{a, b}...)
	tr, err := New(context.Background(), c, Options{Rollouts: client})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 2 {
		t.Fatalf("steps %d", res.Steps)
	}
	for _, url := range []string{a, b} {
		if v := weightVersion(t, url); v != "2" {
			t.Errorf("%s serves weight version %q after 2 steps, want 2", url, v)
		}
	}
	st := client.Stats()
	if st.Requests == 0 {
		t.Errorf("no rollout went to the servers: %+v", st)
	}
	entries, _ := os.ReadDir(filepath.Join(c.Trainer.DefaultLocalDir, publishedDir))
	if len(entries) > 2 {
		t.Errorf("%d published weight directories kept, want at most 2", len(entries))
	}
}

// A server that refuses the update (another model shape) stops the run
// with an error naming it: never sampling from stale weights silently.
func TestTrainStopsWhenAServerRefusesWeights(t *testing.T) {
	other := serveLike(t, smallConfig(t, "backend.local.d_model=16"))
	c := smallConfig(t, "rollout.engine=openai", "rollout.endpoints=["+other+"]", "rollout.model=policy", "backend.local.warmup_steps=0")
	client := mustClient(t, "policy", []string{other}...)
	tr, err := New(context.Background(), c, Options{Rollouts: client})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Train(context.Background())
	if err == nil || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "refused the weight update") {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkPublishToServers is the time from an optimizer step to new
// rollouts on its weights with 1, 2 and 4 local rllm serve endpoints:
// saving the default-size embedded policy and every server loading it
// (update_weights_from_disk).
func BenchmarkPublishToServers(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			c, err := config.FromOverrides([]string{"trainer.default_local_dir=" + filepath.ToSlash(b.TempDir()), "backend.local.warmup_steps=0"})
			if err != nil {
				b.Fatal(err)
			}
			var urls []string
			for range n {
				urls = append(urls, serveLike(b, c))
			}
			c, _ = config.FromOverrides([]string{"trainer.default_local_dir=" + filepath.ToSlash(b.TempDir()), "backend.local.warmup_steps=0",
				"rollout.engine=openai", "rollout.endpoints=[" + strings.Join(urls, ",") + "]", "rollout.model=policy"})
			client := mustClient(b, "policy", urls...)
			tr, err := New(context.Background(), c, Options{Rollouts: client})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			b.ResetTimer()
			for b.Loop() {
				tr.step++
				if err := tr.publish(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// rollout.engine and the backend choose how servers take each step's
// weights.
func TestPublishModeFromEngine(t *testing.T) {
	for _, tc := range []struct {
		backend, engine string
		want            rollout.PublishMode
		refused         string
	}{
		{"local", "openai", rollout.PublishFullWeights, ""},
		{"local", "sglang", rollout.PublishFullWeights, ""},
		{"local", "vllm", "", "vLLM cannot load the embedded policy"},
		{"tinker", "openai", rollout.PublishVLLMLoRA, ""},
		{"tinker", "vllm", rollout.PublishVLLMLoRA, ""},
		{"tinker", "sglang", rollout.PublishSGLangLoRA, ""},
	} {
		c, err := config.FromOverrides([]string{"backend.name=" + tc.backend, "rollout.engine=" + tc.engine,
			"rollout.endpoints=[http://127.0.0.1:1]", "rollout.model=m"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlan(c)
		switch {
		case tc.refused != "":
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s + %s: %v, want a refusal", tc.backend, tc.engine, err)
			}
		case err != nil:
			t.Errorf("%s + %s: %v", tc.backend, tc.engine, err)
		case p.Remote.Mode != tc.want:
			t.Errorf("%s + %s: %s, want %s", tc.backend, tc.engine, p.Remote.Mode, tc.want)
		}
	}
}

// mustClient is a rollout client of the servers at urls serving model,
// closed at the end of the test.
func mustClient(t testing.TB, model string, urls ...string) *rollout.Client {
	t.Helper()
	c, err := rollout.NewClient(rollout.Options{Endpoints: urls, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// What a killed export left in published/ (atomicfile's temporary
// directories) goes with the next prune, beside the versions older than
// the two newest.
func TestPrunePublishedRemovesLeftovers(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"step_3", "step_4", "step_5", ".rllm-tmp-step_4-123"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := prunePublished(root, 5); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "step_4,step_5" {
		t.Fatalf("published/ holds %v", names)
	}
}

// The new user's run: rllm serve's context (48 here) is smaller than
// rollout.max_tokens. With the context read from /v1/models (Check) the
// replies are capped to fit and the run samples; without it every
// request is refused, every episode ends max_prompt_length_exceeded, and
// the first warning names that cause with the server's message.
func TestTrainFitsRepliesToTheServersContext(t *testing.T) {
	for _, checked := range []bool{true, false} {
		t.Run(map[bool]string{true: "context known", false: "context unknown"}[checked], func(t *testing.T) {
			base := smallConfig(t)
			url := serveLike(t, base)
			c := smallConfig(t, "rollout.engine=openai", "rollout.endpoints=["+url+"]", "rollout.model=policy",
				"trainer.total_training_steps=2", "backend.local.warmup_steps=0", "rollout.max_tokens=512")
			client := mustClient(t, "policy", url)
			if checked {
				if err := client.Check(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			tr, err := New(context.Background(), c, Options{Rollouts: client})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			res, err := tr.Train(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			refused := res.Last["batch/termination_reason/max_prompt_length_exceeded"]
			if checked {
				if res.Last["rollout/response_tokens"] == 0 || refused != 0 || len(res.Warnings) != 0 {
					t.Fatalf("metrics %v warnings %+v: want sampled replies, none refused, no warning", res.Last, res.Warnings)
				}
				return
			}
			if refused != 1 || len(res.Warnings) == 0 || res.Warnings[0].Kind != WarnFirstTurn || res.Warnings[0].Step != 1 ||
				!strings.Contains(res.Warnings[0].Message, "maximum context length is 48 tokens") {
				t.Fatalf("metrics %v warnings %+v: want every episode refused and the cause named at step 1", res.Last, res.Warnings)
			}
		})
	}
}
