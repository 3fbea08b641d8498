package rollout

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestDecodeChat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		rules   responseRules
		wantErr string
		check   func(t *testing.T, text, reasoning, stop string, ids []int, lps []float64)
	}{
		{name: "vllm with -inf and int stop reason",
			body: `{"model":"m","prompt_token_ids":[1,2],"choices":[{"index":0,"message":{"role":"assistant","content":"hi","reasoning":"r"},
			"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]},{"token":"b","logprob":-9999.0,"bytes":[98],"top_logprobs":[]}]},
			"finish_reason":"stop","stop_reason":151645,"token_ids":[5,6]}]}`,
			check: func(t *testing.T, text, reasoning, stop string, ids []int, lps []float64) {
				if text != "hi" || reasoning != "r" || stop != "151645" || len(ids) != 2 || lps[0] != -0.5 || !math.IsInf(lps[1], -1) {
					t.Errorf("got %q %q %q %v %v", text, reasoning, stop, ids, lps)
				}
			}},
		{name: "sglang reasoning_content and matched_stop",
			body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":null,"reasoning_content":"think"},"logprobs":{"content":[{"token":"x","logprob":-1}]},
			"finish_reason":"stop","matched_stop":"</answer>","token_ids":[3]}]}`,
			check: func(t *testing.T, text, reasoning, stop string, ids []int, lps []float64) {
				if text != "" || reasoning != "think" || stop != "</answer>" {
					t.Errorf("got %q %q %q", text, reasoning, stop)
				}
			}},
		{name: "ids from token_id:N when token_ids are absent",
			body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"logprobs":{"content":[{"token":"token_id:42","logprob":-1},{"token":"token_id:7","logprob":-2}]},"finish_reason":"length"}]}`,
			check: func(t *testing.T, _, _, _ string, ids []int, _ []float64) {
				if !slicesEqual(ids, []int{42, 7}) {
					t.Errorf("ids %v", ids)
				}
			}},
		{name: "no choices", body: `{"choices":[]}`, wantErr: "no choices"},
		{name: "no message", body: `{"choices":[{"finish_reason":"stop"}]}`, wantErr: "no message"},
		{name: "no finish_reason", body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"token_ids":[1],"logprobs":{"content":[{"logprob":-1}]}}]}`, wantErr: "no finish_reason"},
		{name: "no token ids", body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"finish_reason":"stop","logprobs":{"content":[{"token":"x","logprob":-1}]}}]}`, wantErr: "no token_ids"},
		{name: "no logprobs", body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"finish_reason":"stop","token_ids":[1]}]}`, wantErr: "no logprobs"},
		{name: "no prompt ids", body: `{"choices":[{"message":{"content":"x"},"finish_reason":"stop","token_ids":[1],"logprobs":{"content":[{"logprob":-1}]}}]}`, wantErr: "no prompt_token_ids"},
		{name: "text only accepts bare replies", body: `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`, rules: responseRules{textOnly: true}},
		{name: "logprobs too short", body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"finish_reason":"stop","token_ids":[1,2],"logprobs":{"content":[{"logprob":-1}]}}]}`, wantErr: "2 token ids but 1 logprobs"},
		{name: "id outside vocabulary", rules: responseRules{vocabSize: 10}, body: `{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"finish_reason":"stop","token_ids":[10],"logprobs":{"content":[{"logprob":-1}]}}]}`, wantErr: "token_ids[0] = 10 is outside the vocabulary of 10"},
		{name: "negative prompt id", body: `{"prompt_token_ids":[-1],"choices":[{"message":{"content":"x"},"finish_reason":"stop","token_ids":[1],"logprobs":{"content":[{"logprob":-1}]}}]}`, wantErr: "prompt_token_ids[0] = -1"},
		{name: "malformed", body: `{"choices":[{"message":`, wantErr: "malformed JSON"},
		{name: "stop reason of a wrong type", body: `{"choices":[{"stop_reason":{}}]}`, wantErr: "malformed JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeChat(strings.NewReader(tc.body), tc.rules)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, r.Text, r.Reasoning, r.StopReason, r.CompletionIDs, r.Logprobs)
			}
		})
	}
}

func TestDecodeCompletion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		rules   responseRules
		wantErr string
	}{
		{name: "vllm", body: `{"choices":[{"index":0,"text":"ab","logprobs":{"tokens":["a","b"],"token_logprobs":[-1,-9999.0],"top_logprobs":[{"a":-1},{"b":-9999.0}],"text_offset":[0,1]},
			"finish_reason":"length","stop_reason":null,"token_ids":[3,4],"prompt_token_ids":[1,2]}]}`},
		{name: "prompt ids from the request", rules: responseRules{promptIDs: []int{1}}, body: `{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1]},"finish_reason":"stop","token_ids":[3]}]}`},
		{name: "no text", body: `{"choices":[{"finish_reason":"stop"}]}`, wantErr: "no text"},
		{name: "tokens and logprobs disagree", body: `{"choices":[{"text":"a","logprobs":{"tokens":["a","b"],"token_logprobs":[-1]},"finish_reason":"stop"}]}`, wantErr: "2 logprob tokens but 1"},
		{name: "ids and logprobs disagree", body: `{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1]},"finish_reason":"stop","token_ids":[1,2],"prompt_token_ids":[1]}]}`, wantErr: "2 token ids but 1 logprobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeCompletion(strings.NewReader(tc.body), tc.rules)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.PromptIDs) == 0 || len(r.CompletionIDs) != len(r.Logprobs) {
				t.Errorf("response %+v", r)
			}
		})
	}
}

// The decoders read whatever a server sends: they must never panic, and
// whatever they accept must be consistent.
func FuzzDecodeChat(f *testing.F) {
	f.Add([]byte(`{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"finish_reason":"stop","token_ids":[1],"logprobs":{"content":[{"token":"token_id:1","logprob":-9999.0}]}}]}`))
	f.Add([]byte(`{"choices":[{"message":null,"stop_reason":12}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, rules := range []responseRules{{vocabSize: 100}, {textOnly: true}} {
			r, err := decodeChat(bytes.NewReader(body), rules)
			if err == nil && !rules.textOnly && (len(r.CompletionIDs) != len(r.Logprobs) || r.FinishReason == "") {
				t.Fatalf("accepted an inconsistent response: %+v", r)
			}
			for _, id := range r.CompletionIDs {
				if err == nil && (id < 0 || rules.vocabSize > 0 && id >= rules.vocabSize) {
					t.Fatalf("accepted id %d", id)
				}
			}
		}
	})
}

func FuzzDecodeCompletion(f *testing.F) {
	f.Add([]byte(`{"choices":[{"text":"ab","logprobs":{"tokens":["a","b"],"token_logprobs":[-1,-2]},"finish_reason":"length","token_ids":[3,4],"prompt_token_ids":[1]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeCompletion(bytes.NewReader(body), responseRules{vocabSize: 100})
		if err == nil && (len(r.CompletionIDs) != len(r.Logprobs) || r.FinishReason == "") {
			t.Fatalf("accepted an inconsistent response: %+v", r)
		}
	})
}

// The weight version SGLang (and rllm serve) put in the response metadata
// reaches the sampler's response, so episodes can record it.
func TestDecodeWeightVersion(t *testing.T) {
	chat := `{"model":"policy","prompt_token_ids":[1],"metadata":{"weight_version":"12"},"choices":[{"message":{"content":"x"},"logprobs":{"content":[{"token":"x","logprob":-1}]},"finish_reason":"stop","token_ids":[3]}]}`
	r, err := decodeChat(strings.NewReader(chat), responseRules{})
	if err != nil || r.WeightVersion != "12" || r.Model != "policy" {
		t.Errorf("chat: %+v %v", r, err)
	}
	r, err = decodeChat(strings.NewReader(`{"prompt_token_ids":[1],"choices":[{"message":{"content":"x"},"logprobs":{"content":[{"token":"x","logprob":-1}]},"finish_reason":"stop","token_ids":[3]}]}`), responseRules{})
	if err != nil || r.WeightVersion != "" {
		t.Errorf("without metadata: %+v %v", r, err)
	}
}
