package openai

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// sdkCalls is how many cases testdata/sdk_calls.mjs runs.
const sdkCalls = 42

// TestOpenAINodeSDK runs ordinary calls of the official OpenAI SDK for
// Node (openai 6.x, installed by scripts/fetch-openai-node.sh) against
// the server. It skips when node or the SDK is missing, except under CI.
func TestOpenAINodeSDK(t *testing.T) {
	repotest.Node(t)
	sdk := repotest.NodeModule(t, "node", "openai", "scripts/fetch-openai-node.sh")
	eng := local.NewEngine(testSnapshot(t, local.Config{Layers: 2, DModel: 32, Heads: 2, Context: 128, Seed: 4}), "default", local.EngineOptions{Workers: 2})
	defer eng.Close()
	srv := httptest.NewServer(New(eng, Options{ModelName: "rllm-policy"}))
	defer srv.Close()

	ran, stderr := repotest.NodeCases(t, filepath.Join("testdata", "sdk_calls.mjs"), "OPENAI_SDK="+sdk, "BASE_URL="+srv.URL+"/v1", "MODEL=rllm-policy")
	if ran != sdkCalls {
		t.Errorf("%d SDK cases ran, want %d (stderr: %s)", ran, sdkCalls, stderr)
	}
}
