package openaiwire

import (
	"encoding/json"
	"math"
	"testing"
)

func TestErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"The model x does not exist.","type":"NotFoundError","param":null,"code":404}}`: "The model x does not exist.",
		`{"object":"error","message":"flat message","type":"BadRequestError","param":null,"code":400}`:       "flat message",
		`{"error":"plain string"}`: "plain string",
		`{"detail":"Not Found"}`:   "Not Found",
		`<html>bad gateway</html>`: "<html>bad gateway</html>",
	} {
		if got, _ := ErrorMessage([]byte(body)); got != want {
			t.Errorf("ErrorMessage(%s) = %q, want %q", body, got, want)
		}
	}
}

func FuzzErrorMessage(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"m"}}`))
	f.Fuzz(func(t *testing.T, body []byte) { ErrorMessage(body) })
}

func TestNegInfLogprob(t *testing.T) {
	if !math.IsInf(DecodeLogprob(-9999.0), -1) || DecodeLogprob(-1.5) != -1.5 {
		t.Fatal("-9999.0 must read as -inf and other values unchanged")
	}
}

func TestTokenID(t *testing.T) {
	for _, tc := range []struct {
		in string
		id int
		ok bool
	}{{TokenIDString(151645), 151645, true}, {"token_id:-1", 0, false}, {"token_id:x", 0, false}, {"hello", 0, false}} {
		if id, ok := ParseTokenID(tc.in); id != tc.id || ok != tc.ok {
			t.Errorf("ParseTokenID(%q) = %d, %v", tc.in, id, ok)
		}
	}
	if EncodeLogprob(math.Inf(-1)) != NegInfLogprob || EncodeLogprob(-0.5) != -0.5 {
		t.Error("EncodeLogprob must write -inf as -9999.0 and keep other values")
	}
}

// The field names and omissions of the shared shapes are the servers'
// (see the inference-servers reference): a change here changes what every
// client, server and fake sends.
func TestWireBytes(t *testing.T) {
	seed := int64(3)
	lp := 0
	text := "hi"
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"chat request, sampling never omitted", ChatRequest{Model: "m"},
			`{"model":"m","messages":null,"temperature":0,"top_p":0,"top_k":0,"n":0,"logprobs":false,"return_token_ids":false}`},
		{"completion request with ids", CompletionRequest{Model: "m", Prompt: Prompt{IDs: []int{1, 2}}, Sampling: Sampling{MaxTokens: 4, Seed: &seed, N: 1}, Logprobs: &lp, ReturnTokenIDs: true},
			`{"model":"m","prompt":[1,2],"temperature":0,"top_p":0,"top_k":0,"max_tokens":4,"seed":3,"n":1,"logprobs":0,"return_token_ids":true}`},
		{"completion choice", CompletionChoice{Text: &text, ChoiceEnd: ChoiceEnd{FinishReason: "stop", TokenIDs: []int{5}}},
			`{"index":0,"text":"hi","logprobs":null,"finish_reason":"stop","stop_reason":"","matched_stop":"","token_ids":[5],"prompt_token_ids":null}`},
		{"error", ErrorResponse{Error{Message: "x", Type: "BadRequestError", Code: 400}},
			`{"error":{"message":"x","type":"BadRequestError","param":null,"code":400}}`},
		{"flat error", FlatErrorResponse{"error", Error{Message: "x", Type: "NotFoundError", Code: 404}},
			`{"object":"error","message":"x","type":"NotFoundError","param":null,"code":404}`},
		{"model", Model{ID: "m", Object: "model", MaxModelLen: 128},
			`{"id":"m","object":"model","created":0,"owned_by":"","root":"","parent":null,"max_model_len":128,"permission":null}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", tc.name, b, err, tc.want)
		}
	}
}

func TestStopReason(t *testing.T) {
	for in, want := range map[string]StopReason{`null`: "", `"</s>"`: "</s>", `151645`: "151645"} {
		var s StopReason
		if err := json.Unmarshal([]byte(in), &s); err != nil || s != want {
			t.Errorf("%s: %q, %v", in, s, err)
		}
	}
	var s StopReason
	if json.Unmarshal([]byte(`{}`), &s) == nil {
		t.Error("an object was read as a stop reason")
	}
}

func TestChoiceEndStop(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"finish_reason":"stop","stop_reason":"."}`, "."}, // vLLM
		{`{"finish_reason":"stop","matched_stop":7}`, "7"},  // SGLang, a token id
		{`{"finish_reason":"stop","stop_reason":null,"matched_stop":"</s>"}`, "</s>"},
		{`{"finish_reason":"length"}`, ""},
	} {
		var c ChatChoice
		if err := json.Unmarshal([]byte(tc.body), &c); err != nil {
			t.Fatal(err)
		}
		if got := c.Stop(); got != tc.want {
			t.Errorf("%s: Stop() = %q, want %q", tc.body, got, tc.want)
		}
	}
}
