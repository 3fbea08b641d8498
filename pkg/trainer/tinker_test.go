package trainer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/internal/fakevllm"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
	"github.com/rllm-org/rllm-go/pkg/rollout"
)

// rllm train on the Tinker backend against the fake service: rollouts
// sample through the Tinker sampler on the newest sampler weights, every
// update is forward + forward_backward + optim_step in seq_id order,
// checkpoints record their tinker:// paths, and a resumed run loads them
// and goes on.
func TestTrainOnTinker(t *testing.T) {
	for _, fl := range []faketinker.Flavour{faketinker.FlavourTinker, faketinker.FlavourSkyRL} {
		t.Run(string(fl), func(t *testing.T) { trainOnTinker(t, fl) })
	}
}

func trainOnTinker(t *testing.T, fl faketinker.Flavour) {
	const key = "tml-trainer-test-key"
	srv, err := faketinker.New(faketinker.Options{Flavour: fl, APIKey: key, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	getenv := func(k string) string {
		if k == "TINKER_API_KEY" {
			return key
		}
		return ""
	}
	sets := []string{"backend.name=tinker", "backend.tinker.base_url=" + srv.URL, "backend.tinker.base_model=" + tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "trainer.save_freq=1", "actor.optim.lr=0.001"}
	c := smallConfig(t, sets...)
	dir := c.Trainer.DefaultLocalDir
	train := func(steps string) *Result {
		c := smallConfig(t, append(sets, "trainer.total_training_steps="+steps, "trainer.default_local_dir="+filepath.ToSlash(dir))...)
		tr, err := New(context.Background(), c, Options{Getenv: getenv})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		res, err := tr.Train(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := train("2")
	if res.Steps != 2 {
		t.Fatalf("steps %d", res.Steps)
	}
	ck, err := tinker.ReadCheckpoint(filepath.Join(dir, "global_step_2", "model"))
	if err != nil {
		t.Fatal(err)
	}
	if ck.WeightsPath == "" || ck.SamplerPath == "" {
		t.Fatalf("checkpoint record %+v", ck)
	}
	res = train("3")
	if res.Steps != 3 {
		t.Fatalf("resumed run ended at step %d, want 3", res.Steps)
	}
	optims := 0
	for _, e := range srv.Executions() {
		if e.Path == "optim_step" {
			optims++
		}
	}
	if optims != 3 {
		t.Errorf("%d optimizer steps ran on the service, want 3 (one per step)", optims)
	}
	// A new run from backend.tinker.weights (the first run's directory):
	// the load is its model's first request.
	from := smallConfig(t, append(sets, "trainer.total_training_steps=1", "backend.tinker.weights="+filepath.ToSlash(dir))...)
	tr, err := New(context.Background(), from, Options{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	loads := 0
	started := map[string]bool{}
	for _, e := range srv.Log() {
		if e.ModelID == "" || e.Path == "retrieve_future" || e.Path == "unload_model" || e.Status != http.StatusOK {
			continue
		}
		if e.Path == "load_weights" {
			loads++
			if started[e.ModelID] {
				t.Errorf("load_weights into %s after other requests", e.ModelID)
			}
		}
		started[e.ModelID] = true
	}
	if loads != 2 {
		t.Errorf("%d loads; want 2 (the resume, backend.tinker.weights)", loads)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl")); err != nil || len(b) == 0 {
		t.Errorf("no metrics: %v", err)
	}
}

// The Tinker backend can publish its policy to vLLM-style servers: each
// step exports the LoRA adapter and loads it under policy-vN, and the
// rollouts then request that model.
func TestTinkerPublishesLoRAToServers(t *testing.T) {
	const key = "tml-trainer-test-key"
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var loads []string
	var mu sync.Mutex
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]string
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		loads = append(loads, r.URL.Path+" "+body["lora_name"])
		mu.Unlock()
		if _, err := os.Stat(filepath.Join(body["lora_path"], "adapter_config.json")); err != nil && strings.HasSuffix(r.URL.Path, "/load_lora_adapter") {
			http.Error(w, "no adapter at "+body["lora_path"], http.StatusBadRequest)
			return
		}
		w.Write([]byte("Success"))
	}))
	defer vllm.Close()
	c := smallConfig(t, "backend.name=tinker", "backend.tinker.base_url="+srv.URL, "backend.tinker.base_model="+tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "rollout.engine=openai", "rollout.endpoints=["+vllm.URL+"]", "rollout.model=base", "trainer.total_training_steps=1")
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Remote.Mode != rollout.PublishVLLMLoRA {
		t.Fatalf("publish mode %s", p.Remote.Mode)
	}
	tr, err := New(context.Background(), c, Options{Getenv: func(string) string { return key }, Rollouts: mustClient(t, "base", vllm.URL)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// Publishing the starting policy exports and loads policy-v0.
	if err := tr.openReference(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := tr.publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := rollout.LoRANameWith(rollout.LoRAPrefix(filepath.Base(c.Trainer.DefaultLocalDir)), 0)
	if len(loads) != 1 || loads[0] != "/v1/load_lora_adapter "+want || tr.opts.Rollouts.Model() != want {
		t.Errorf("loads %v, requests name %q", loads, tr.opts.Rollouts.Model())
	}
}

// A run interrupted and resumed against the same vLLM servers: the
// adapter of the step it resumes from is still loaded there (vLLM refuses
// the name with 400 "has already been loaded"), and the resumed run must
// start anyway, sampling from its own weights.
func TestTinkerResumeAgainstVLLMAdapters(t *testing.T) {
	for _, fl := range []faketinker.Flavour{faketinker.FlavourTinker, faketinker.FlavourSkyRL} {
		t.Run(string(fl), func(t *testing.T) { resumeAgainstVLLMAdapters(t, fl) })
	}
}

func resumeAgainstVLLMAdapters(t *testing.T, fl faketinker.Flavour) {
	const key = "tml-trainer-test-key"
	srv, err := faketinker.New(faketinker.Options{Flavour: fl, APIKey: key, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	vllm := fakevllm.New(fakevllm.Config{Model: "base", RuntimeLoRA: true})
	defer vllm.Close()
	dir := t.TempDir()
	sets := []string{"backend.name=tinker", "backend.tinker.base_url=" + srv.URL, "backend.tinker.base_model=" + tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "rollout.engine=openai", "rollout.endpoints=[" + vllm.URL + "/v1]", "rollout.model=base",
		"trainer.save_freq=1", "trainer.default_local_dir=" + filepath.ToSlash(dir)}
	train := func(steps string) (*Result, error) {
		c := smallConfig(t, append(sets, "trainer.total_training_steps="+steps)...)
		tr, err := New(context.Background(), c, Options{Getenv: func(string) string { return key }, Rollouts: mustClient(t, "base", vllm.URL)})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		return tr.Train(context.Background())
	}
	if _, err := train("1"); err != nil {
		t.Fatal(err)
	}
	res, err := train("2")
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	if res.Steps != 2 {
		t.Fatalf("resumed run ended at step %d", res.Steps)
	}
	name := rollout.LoRAPrefix(filepath.Base(dir))
	if a := vllm.Adapters(); !slices.Contains(a, name+"-v2") {
		t.Fatalf("adapters on the server: %v", a)
	}
}

// trainer.max_ckpt_to_keep prunes the tinker:// copies of a pruned
// checkpoint too, not only its local directory.
func TestTinkerPrunesRemoteCheckpoints(t *testing.T) {
	for _, fl := range []faketinker.Flavour{faketinker.FlavourTinker, faketinker.FlavourSkyRL} {
		t.Run(string(fl), func(t *testing.T) { prunesRemoteCheckpoints(t, fl) })
	}
}

func prunesRemoteCheckpoints(t *testing.T, fl faketinker.Flavour) {
	const key = "tml-trainer-test-key"
	srv, err := faketinker.New(faketinker.Options{Flavour: fl, APIKey: key, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := smallConfig(t, "backend.name=tinker", "backend.tinker.base_url="+srv.URL, "backend.tinker.base_model="+tinker.EmbeddedModel,
		"backend.tinker.lora_rank=2", "trainer.save_freq=1", "trainer.max_ckpt_to_keep=1", "trainer.total_training_steps=3")
	tr, err := New(context.Background(), c, Options{Getenv: func(string) string { return key }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	kept, err := tinker.ReadCheckpoint(filepath.Join(c.Trainer.DefaultLocalDir, "global_step_3", "model"))
	if err != nil {
		t.Fatal(err)
	}
	var weights []string
	for _, p := range srv.Checkpoints() {
		if strings.Contains(p, "/weights/") {
			weights = append(weights, p)
		}
	}
	if len(weights) != 1 || weights[0] != kept.WeightsPath {
		t.Fatalf("training checkpoints left on the service: %v; want only %s", weights, kept.WeightsPath)
	}
	run, kind, name, _ := tinker.ParsePath(kept.SamplerPath)
	if !slices.Contains(srv.Checkpoints(), "tinker://"+run+"/"+kind+"/"+name) {
		t.Fatalf("the kept checkpoint's sampler weights are gone: %v", srv.Checkpoints())
	}
}
