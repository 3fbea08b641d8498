package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// sdkCalls is how many cases testdata/sdk_calls.mjs runs.
const sdkCalls = 42

// TestOpenAINodeSDK runs ordinary calls of the official OpenAI SDK for
// Node (openai 6.x, installed by scripts/fetch-openai-node.sh) against
// the server. It skips when node or the SDK is missing, except under CI.
func TestOpenAINodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node; skipped with -short")
	}
	missing := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI is set, so this fails instead of skipping)", why)
		}
		t.Skip(why)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed; install Node.js to run the OpenAI SDK compatibility test")
	}
	sdk := filepath.Join(repotest.Root(t), "testdata", "node", "node_modules", "openai")
	if _, err := os.Stat(filepath.Join(sdk, "index.mjs")); err != nil {
		missing("the openai npm package is not installed; run scripts/fetch-openai-node.sh")
	}
	eng := local.NewEngine(testSnapshot(t, local.Config{Layers: 2, DModel: 32, Heads: 2, Context: 128, Seed: 4}), "default", local.EngineOptions{Workers: 2})
	defer eng.Close()
	srv := httptest.NewServer(New(eng, Options{ModelName: "rllm-policy"}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "sdk_calls.mjs"))
	cmd.Env = append(os.Environ(), "OPENAI_SDK="+sdk, "BASE_URL="+srv.URL+"/v1", "MODEL=rllm-policy")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	passed, ran := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var res struct {
			Name  string `json:"name"`
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			t.Errorf("node printed %q", sc.Text())
			continue
		}
		ran++
		if res.OK {
			passed++
		} else {
			t.Errorf("%s: %s", res.Name, res.Error)
		}
	}
	if ran != sdkCalls {
		t.Errorf("%d SDK cases ran, want %d (node: %v; stderr: %s)", ran, sdkCalls, runErr, stderr.String())
	}
	t.Logf("%d of %d OpenAI SDK calls work", passed, ran)
}
