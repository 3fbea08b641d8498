package faketinker

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

func post(t *testing.T, s *Server, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/v1/"+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func result(t *testing.T, s *Server, id string) map[string]any {
	t.Helper()
	for range 100 {
		code, m := post(t, s, "retrieve_future", "k", `{"request_id":"`+id+`"}`)
		if code != 200 {
			t.Fatalf("retrieve_future: %d %v", code, m)
		}
		if m["type"] != "try_again" {
			return m
		}
	}
	t.Fatal("never finished")
	return nil
}

// The fake holds clients to the wire: strict field names, the keys each
// loss reads, tensor dtypes and shapes, seq_id order and conflicts.
func TestFakeWireRules(t *testing.T) {
	s, err := New(Options{APIKey: "k", PollWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, _ := post(t, s, "create_session", "wrong", `{"tags":[],"user_metadata":{},"sdk_version":"x"}`); code != 401 {
		t.Errorf("wrong key: %d", code)
	}
	_, sess := post(t, s, "create_session", "k", `{"tags":[],"user_metadata":{},"sdk_version":"x"}`)
	_, cm := post(t, s, "create_model", "k", `{"type":"create_model","session_id":"`+sess["session_id"].(string)+`","model_seq_id":0,"base_model":"rllm/embedded-tiny","lora_config":{"rank":1,"train_unembed":true,"train_mlp":true,"train_attn":true}}`)
	model := result(t, s, cm["request_id"].(string))["model_id"].(string)

	datum := func(extra string) string {
		return `{"model_input":{"chunks":[{"type":"encoded_text","tokens":[259,104]}]},"loss_fn_inputs":{"target_tokens":{"data":[104,260],"dtype":"int64","shape":[2]}` + extra + `}}`
	}
	fb := func(seq int, loss, d string) string {
		var b bytes.Buffer
		b.WriteString(`{"type":"forward_backward","model_id":"` + model + `","seq_id":`)
		b.WriteString(string(rune('0' + seq)))
		b.WriteString(`,"forward_backward_input":{"data":[` + d + `],"loss_fn":"` + loss + `"}}`)
		return b.String()
	}
	bad := []struct{ name, body string }{
		{"unknown field", `{"type":"optim_step","model_id":"` + model + `","seq_id":1,"adam_params":{"learning_rate":0.1,"beta1":0.9,"beta2":0.95,"eps":1e-8},"extra":1}`},
		{"key the loss does not use", fb(1, "cross_entropy", datum(`,"advantages":{"data":[1,1],"dtype":"float32","shape":[2]}`))},
		{"wrong dtype", fb(1, "cross_entropy", datum(`,"weights":{"data":[1,1],"dtype":"int64","shape":[2]}`))},
		{"wrong shape", fb(1, "cross_entropy", datum(`,"weights":{"data":[1,1],"dtype":"float32","shape":[3]}`))},
		{"type of another endpoint", `{"type":"optim_step","model_id":"` + model + `","seq_id":1,"adam_params":{"learning_rate":0.1,"beta1":0.9,"beta2":0.95,"eps":1e-8}}`},
		{"missing seq_id", `{"type":"optim_step","model_id":"` + model + `","adam_params":{"learning_rate":0.1,"beta1":0.9,"beta2":0.95,"eps":1e-8}}`},
	}
	for _, tc := range bad {
		if code, m := post(t, s, "forward_backward", "k", tc.body); code/100 != 4 {
			t.Errorf("%s: %d %v", tc.name, code, m)
		}
	}
	// seq_id 2 waits for 1; a reused seq_id with another body is a 409.
	_, two := post(t, s, "forward_backward", "k", fb(2, "cross_entropy", datum("")))
	if code, _ := post(t, s, "forward_backward", "k", fb(2, "cross_entropy", datum(`,"weights":{"data":[2,2],"dtype":"float32","shape":[2]}`))); code != 409 {
		t.Errorf("conflicting seq_id: %d", code)
	}
	if code, m := post(t, s, "retrieve_future", "k", `{"request_id":"`+two["request_id"].(string)+`"}`); code != 200 || m["type"] != "try_again" {
		t.Errorf("seq_id 2 ran before 1: %v", m)
	}
	_, one := post(t, s, "forward_backward", "k", fb(1, "cross_entropy", datum("")))
	r1 := result(t, s, one["request_id"].(string))
	r2 := result(t, s, two["request_id"].(string))
	if r1["loss_fn_outputs"] == nil || r2["loss_fn_outputs"] == nil {
		t.Errorf("results %v %v", r1, r2)
	}
	ex := s.Executions()
	if len(ex) != 2 || ex[0].SeqID != 1 || ex[1].SeqID != 2 {
		t.Errorf("executions %+v", ex)
	}
}

// decodeCall checks the fields a call requires before decoding, and
// refuses unknown fields.
func TestDecodeCall(t *testing.T) {
	tests := []struct {
		name, call, body, wantErr string
	}{
		{"ok", "create_model", `{"session_id":"s","base_model":"b","lora_config":{"rank":1}}`, ""},
		{"missing nested", "create_model", `{"session_id":"s","base_model":"b","lora_config":{}}`, "lora_config.rank is required"},
		{"null is missing", "create_model", `{"session_id":null,"base_model":"b","lora_config":{"rank":1}}`, "session_id is required"},
		{"unknown field", "create_model", `{"session_id":"s","base_model":"b","lora_config":{"rank":1},"extra":1}`, `unknown field "extra"`},
		{"no required fields", "get_info", `{"model_id":"m"}`, ""},
		{"wrong type", "get_info", `{"model_id":1}`, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.call == "create_model" {
				_, err = decodeCall[wire.CreateModelRequest](tt.call, []byte(tt.body))
			} else {
				_, err = decodeCall[wire.ModelRequest](tt.call, []byte(tt.body))
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("decodeCall(%s) = %v, want %q", tt.body, err, tt.wantErr)
			}
		})
	}
}
