package trainer

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func sftExample(prompt, reply string) SFTExample {
	return SFTExample{Messages: []episode.Message{{Role: "user", Content: prompt}}, Reply: reply}
}

func rowError(i int, format string, args ...any) error {
	return dataset.RowError("pairs.jsonl", i, format, args...)
}

// SFT datums are the chat as the model's template renders it and the
// reply as the model writes it, with weight on the reply and its
// end-of-turn token only; a row longer than the context is named.
func TestSFTDatums(t *testing.T) {
	be, err := local.New(local.Options{Config: local.Config{Layers: 1, DModel: 16, Heads: 2, Context: 128}})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	data, err := SFTDatums(ctx, be, []SFTExample{sftExample("3+4=", "7")}, rowError)
	if err != nil {
		t.Fatal(err)
	}
	d := data[0]
	prompt := local.Tokenizer{}.ChatTemplate([]episode.Message{{Role: "user", Content: "3+4="}}, true)
	want := append(append(append([]int(nil), prompt...), local.Tokenizer{}.Encode("7", false)...), local.TokenImEnd)
	if got := append(append([]int(nil), d.Input...), d.LossFnInputs.TargetTokens[len(d.LossFnInputs.TargetTokens)-1]); !slices.Equal(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	w := d.LossFnInputs.Weights
	var sum float64
	for _, x := range w {
		sum += x
	}
	if sum != 2 || w[len(w)-1] != 1 || w[len(w)-2] != 1 {
		t.Fatalf("weights %v: want 1 on the reply \"7\" and <|im_end|> only", w)
	}
	_, err = SFTDatums(ctx, be, []SFTExample{sftExample("a", "b"), sftExample("a", strings.Repeat("x", 200))}, rowError)
	if err == nil || !strings.Contains(err.Error(), "pairs.jsonl: row 1: is 221 tokens after the chat template, more than the 129 a model of context 128 trains on") {
		t.Fatalf("too long: %v", err)
	}
	if usererr.ExitCode(ctx, err) != usererr.ExitUsage {
		t.Fatalf("too long: exit code %d", usererr.ExitCode(ctx, err))
	}
}

// The one SFT loop runs on a Tinker service as on the embedded policy:
// the same datums from the model's own template, the loss falls, and the
// checkpoint it saves (a directory holding tinker.json) is where a later
// run starts from through backend.tinker.weights.
func TestSFTOnTinker(t *testing.T) {
	const key = "tml-sft-test-key"
	srv, err := faketinker.New(faketinker.Options{APIKey: key, PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	open := func(sets ...string) backend.TrainingBackend {
		t.Helper()
		c, err := config.FromOverrides(append([]string{"backend.name=tinker", "backend.tinker.base_url=" + srv.URL,
			"backend.tinker.base_model=" + tinker.EmbeddedModel, "backend.tinker.lora_rank=2"}, sets...))
		if err != nil {
			t.Fatal(err)
		}
		be, err := backend.Open(ctx, c, backend.OpenOptions{Getenv: func(string) string { return key }})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}
	examples := []SFTExample{sftExample("1+1=", "2"), sftExample("2+2=", "4"), sftExample("3+3=", "6")}
	be := open()
	defer be.Close()
	data, err := SFTDatums(ctx, be, examples, rowError)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := local.New(local.Options{Config: local.Config{Layers: 1, DModel: 16, Heads: 2, Context: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	localData, err := SFTDatums(ctx, ref, examples, rowError)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		if !slices.Equal(data[i].Input, localData[i].Input) || !slices.Equal(data[i].LossFnInputs.TargetTokens, localData[i].LossFnInputs.TargetTokens) {
			t.Fatalf("datum %d differs between tinker and local: the template is the model's own on both", i)
		}
	}
	lossOf := func(be backend.TrainingBackend) float64 {
		out, err := be.Forward(ctx, data, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return out.Metrics["loss:sum"]
	}
	before := lossOf(be)
	curve, err := SFT(ctx, be, data, SFTOptions{Epochs: 10, BatchSize: 3, Adam: backend.DefaultAdamParams(0.01)})
	if err != nil {
		t.Fatal(err)
	}
	if len(curve) != 10 || !(curve[len(curve)-1] < curve[0]) {
		t.Fatalf("loss curve %v: want 10 falling steps", curve)
	}
	after := lossOf(be)
	dir := filepath.Join(t.TempDir(), "sft")
	saved, err := be.SaveState(ctx, dir).Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(saved, "tinker://") {
		t.Fatalf("saved to %q", saved)
	}
	again := open("backend.tinker.weights=" + filepath.ToSlash(dir))
	defer again.Close()
	if got := lossOf(again); math.Abs(got-after) > 1e-6*math.Max(1, math.Abs(after)) || math.Abs(got-before) < 1e-6 {
		t.Fatalf("loss from the loaded checkpoint %g, want the fine-tuned %g (fresh %g)", got, after, before)
	}
}
