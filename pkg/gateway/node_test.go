package gateway_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

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
	repotest.Node(t)
	sdk := repotest.NodeModule(t, "node", "openai", "scripts/fetch-openai-node.sh")
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

	ran, stderr := repotest.NodeCases(t, filepath.Join("testdata", "responses_sdk.mjs"),
		"OPENAI_SDK="+sdk, "BASE_URL="+f.srv.URL+"/sessions/"+s.ID+"/v1", "API_KEY="+s.Token)
	if ran != responsesSDKCases {
		t.Fatalf("%d SDK cases ran, want %d (stderr: %s)", ran, responsesSDKCases, stderr)
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
}
