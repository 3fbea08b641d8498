package tinker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

// FuzzExtractAdapter: any download is unpacked or refused, never
// panicking and never writing outside the directory.
func FuzzExtractAdapter(f *testing.F) {
	f.Add(makeTar(f, true, adapterFiles...))
	f.Add(makeTar(f, false, tarEntry{name: "a/../../b", body: "x"}))
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "out")
		os.Mkdir(dir, 0o755)
		_ = extractAdapter(strings.NewReader(string(data)), dir, 1<<20)
		entries, _ := os.ReadDir(root)
		if len(entries) != 1 {
			t.Fatalf("files written outside the directory: %v", entries)
		}
	})
}

// FuzzDecodeResults: server answers never panic the decoders, and what
// they accept is consistent.
func FuzzDecodeResults(f *testing.F) {
	f.Add([]byte(`{"sequences":[{"tokens":[1,2],"logprobs":[-1,-2],"stop_reason":"stop"}]}`))
	f.Add([]byte(`{"loss_fn_outputs":[{"logprobs":{"data":[-1,-2],"dtype":"float32","shape":[2]}}],"metrics":{"loss:sum":3}}`))
	f.Add([]byte(`{"supported_models":["a",{"model_name":"b","max_context_length":8}],"supported_loss_fns":["ppo"]}`))
	f.Add([]byte(`tinker://model_ab12/rllm-x-1`))
	f.Add([]byte(`eyJleHAiOjE3MDAwMDAwMDAuNX0`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := decodeSample(data, backend.SampleRequest{NumSamples: 1, Params: backend.SamplingParams{StopTokenIDs: []int{2}}})
		if err == nil {
			for _, s := range res.Sequences {
				if len(s.Tokens) != len(s.Logprobs) {
					t.Fatal("accepted a sequence with mismatched logprobs")
				}
			}
		}
		var fb wire.ForwardBackwardResult
		if json.Unmarshal(data, &fb) == nil {
			d := []backend.Datum{{Input: []int{1, 2}, LossFnInputs: backend.LossFnInputs{TargetTokens: []int{2, 3}}}}
			out, err := decodeOutputs("forward", fb, d, backend.Loss{Name: backend.LossCrossEntropy})
			if err == nil && len(out.LossFnOutputs[0].Logprobs) != 2 {
				t.Fatal("accepted outputs of the wrong length")
			}
		}
		var caps wire.Capabilities
		_ = json.Unmarshal(data, &caps)
		_, _ = ParseCheckpoint("tinker.json", data)
		var list wire.CheckpointList
		_ = json.Unmarshal(data, &list)
		_ = countFields(data)
		// A JWT's claims are outside input too.
		_, _ = jwtExpiry("eyJ." + string(data) + ".sig")
		_, _ = jwtExpiry(string(data))
		if run, kind, name, err := ParsePath(string(data)); err == nil && (run == "" || name == "" || (kind != "weights" && kind != "sampler_weights")) {
			t.Fatalf("ParsePath(%q) accepted %q %q %q", data, run, kind, name)
		}
	})
}
