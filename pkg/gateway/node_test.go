package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/repotest"
	"github.com/rllm-org/rllm-go/pkg/gateway"
	"github.com/rllm-org/rllm-go/pkg/gateway/gatewaytest"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// responsesSDKCases is how many cases testdata/responses_sdk.mjs runs.
const responsesSDKCases = 6

// TestResponsesNodeSDK runs the official OpenAI SDK for Node (openai 6,
// installed by scripts/fetch-openai-node.sh) against a session's
// /v1/responses: responses.create and responses.stream, streamed and
// not, a function tool round trip, previous_response_id, a refused
// hosted tool and an over-long prompt. It skips when node or the SDK is
// missing, except under CI.
func TestResponsesNodeSDK(t *testing.T) {
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
		missing("node is not installed; install Node.js to run the OpenAI SDK test")
	}
	sdk := filepath.Join(repotest.Root(t), "testdata", "node", "node_modules", "openai")
	if _, err := os.Stat(filepath.Join(sdk, "index.mjs")); err != nil {
		missing("the openai npm package is not installed; run scripts/fetch-openai-node.sh")
	}
	f := newFixture(t, gateway.Options{})
	f.smp.Reply = func(req sampler.Request) gatewaytest.Reply {
		for _, m := range req.Messages {
			if m.Content == "TOO LONG" {
				return gatewaytest.Reply{Err: fmt.Errorf("4097 tokens: %w", sampler.ErrPromptTooLong)}
			}
		}
		return toolThenAnswer(req)
	}
	s := f.open(t, gateway.SessionConfig{})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "responses_sdk.mjs"))
	cmd.Env = append(os.Environ(), "OPENAI_SDK="+sdk, "BASE_URL="+f.srv.URL+"/sessions/"+s.ID+"/v1", "API_KEY="+s.Token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	ran := 0
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
		if !res.OK {
			t.Errorf("%s: %s", res.Name, res.Error)
		}
	}
	if ran != responsesSDKCases {
		t.Fatalf("%d SDK cases ran, want %d (node: %v; stderr: %s)", ran, responsesSDKCases, runErr, stderr.String())
	}
	// Three round trips of two calls, one lone call: seven traces, the
	// refused and over-long calls left none. Each round trip is one
	// trajectory whose steps carry the sampler's exact ids.
	tr := s.Traces()
	if len(tr) != 7 {
		t.Fatalf("%d traces, want 7", len(tr))
	}
	tj := gateway.Trajectories(tr, "ep", "program")
	steps := []int{}
	for _, j := range tj {
		steps = append(steps, len(j.Steps))
	}
	if !reflect.DeepEqual(steps, []int{2, 2, 1, 2}) {
		t.Fatalf("trajectories of %v steps, want [2 2 1 2]", steps)
	}
	for _, x := range tr {
		want := gatewaytest.Tokens(gatewaytest.Body(x.Response.Reasoning, x.Response.Content, x.Response.ToolCalls) + "\n")
		if x.Endpoint != "responses" || !reflect.DeepEqual(x.CompletionIDs, want) || len(x.Logprobs) != len(want) ||
			!reflect.DeepEqual(x.PromptIDs, gatewaytest.Render(x.Messages, x.Tools)) {
			t.Errorf("trace %d is not exact: %+v", x.Seq, x)
		}
	}
	if st := s.Stats(); st.PromptTooLong != 2 || st.Refused != 1 {
		t.Errorf("stats %+v", st)
	}
	if err := errors.Join(ctx.Err()); err != nil && !strings.Contains(err.Error(), "deadline") {
		t.Error(err)
	}
}
