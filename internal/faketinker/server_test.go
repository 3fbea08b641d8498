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

func get(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/api/v1/"+path, nil)
	req.Header.Set("X-API-Key", "k")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location") + string(b)
}

// Each flavour refuses what its service refuses (flavour.go): the other
// service's path form and archive route, a load that is not a model's
// first request, and on SkyRL a resent save and the fields it drops.
func TestFlavourRefusals(t *testing.T) {
	for _, fl := range []Flavour{FlavourTinker, FlavourSkyRL} {
		t.Run(string(fl), func(t *testing.T) {
			s, err := New(Options{Flavour: fl, APIKey: "k", PollWait: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			skyrl := fl == FlavourSkyRL
			_, cfg := post(t, s, "client/config", "k", `{"sdk_version":"x"}`)
			if (len(cfg) == 1) != skyrl || cfg["pjwt_auth_enabled"] != false {
				t.Errorf("client/config: %v", cfg)
			}
			_, sess := post(t, s, "create_session", "k", `{"tags":[],"user_metadata":{},"sdk_version":"x"}`)
			lora := `{"rank":1,"train_unembed":true,"train_mlp":true,"train_attn":true}`
			code, cm := post(t, s, "create_model", "k", `{"type":"create_model","session_id":"`+sess["session_id"].(string)+`","model_seq_id":0,"base_model":"rllm/embedded-tiny","lora_config":`+lora+`}`)
			if skyrl {
				if code != 422 {
					t.Errorf("SkyRL took LoRA targets it drops: %d %v", code, cm)
				}
				_, cm = post(t, s, "create_model", "k", `{"type":"create_model","session_id":"`+sess["session_id"].(string)+`","model_seq_id":0,"base_model":"rllm/embedded-tiny","lora_config":{"rank":1}}`)
				if cm["status"] != "created" {
					t.Errorf("SkyRL's create_model answer: %v", cm)
				}
			}
			model := result(t, s, cm["request_id"].(string))["model_id"].(string)
			save := `{"type":"save_weights_for_sampler","model_id":"` + model + `","seq_id":1,"path":"s1","ttl_seconds":60}`
			code, m := post(t, s, "save_weights_for_sampler", "k", save)
			if skyrl != (code == 422) {
				t.Errorf("ttl_seconds: %d %v", code, m)
			}
			if skyrl {
				save = `{"type":"save_weights_for_sampler","model_id":"` + model + `","seq_id":1,"path":"s1"}`
				_, m = post(t, s, "save_weights_for_sampler", "k", save)
			}
			path := result(t, s, m["request_id"].(string))["path"].(string)
			want := map[bool]string{false: "tinker://" + model + "/sampler_weights/s1", true: "tinker://" + model + "/s1"}[skyrl]
			if path != want {
				t.Errorf("sampler path %s; want %s", path, want)
			}
			// A resend of the same save: de-duplicated, or SkyRL's 409.
			code, m = post(t, s, "save_weights_for_sampler", "k", save)
			if wantCode := map[bool]int{false: 200, true: 409}[skyrl]; code != wantCode || skyrl && !strings.Contains(m["detail"].(string), "Checkpoint 's1' already exists for model '"+model+"'") {
				t.Errorf("resend: %d %v", code, m)
			}
			// The short form is SkyRL's only.
			code, m = post(t, s, "asample", "k", `{"type":"sample","prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},"num_samples":1,"sampling_params":{"max_tokens":2,"temperature":1,"top_k":-1,"top_p":1,"stop":[]},"model_path":"tinker://`+model+`/s1"}`)
			if skyrl != (code == 200) {
				t.Errorf("asample with the short form: %d %v", code, m)
			}
			// Each flavour's archive route, and a 404 on the other's.
			hosted, _ := get(t, s, "training_runs/"+model+"/checkpoints/sampler_weights/s1/archive")
			short, loc := get(t, s, "training_runs/"+model+"/checkpoints/s1/archive")
			if skyrl && (hosted != 404 || short != 302 || !strings.Contains(loc, "/checkpoints/s1/download")) || !skyrl && (hosted != 302 || short != 404) {
				t.Errorf("archive routes: hosted %d, SkyRL's %d %s", hosted, short, loc)
			}
			// load_weights after another request of the model.
			code, m = post(t, s, "load_weights", "k", `{"type":"load_weights","model_id":"`+model+`","seq_id":2,"path":"tinker://`+model+`/weights/w","optimizer":true}`)
			if code != 400 || !strings.Contains(m["detail"].(string), "LoadWeights is not permitted with seq_id 2") {
				t.Errorf("a load after a save: %d %v", code, m)
			}
			// The fields neither service has, and forward_only on JSON.
			code, _ = post(t, s, "forward_backward", "k", `{"type":"forward_backward","model_id":"`+model+`","seq_id":2,"forward_only":true,"forward_backward_input":{"data":[],"loss_fn":"cross_entropy"}}`)
			if code != 422 {
				t.Errorf("forward_only on JSON forward_backward: %d", code)
			}
			code, m = post(t, s, "optim_step", "k", `{"type":"optim_step","model_id":"`+model+`","seq_id":2,"adam_params":{"learning_rate":0.001,"beta1":0.9,"beta2":0.95,"eps":1e-12,"weight_decay":0,"grad_clip_norm":1}}`)
			if skyrl != (code == 422) {
				t.Errorf("grad_clip_norm: %d %v", code, m)
			}
			code, caps := get(t, s, "get_server_capabilities")
			if code != 200 || strings.Contains(caps, "max_context_length") != !skyrl || strings.Contains(caps, "supported_loss_fns") {
				t.Errorf("capabilities: %s", caps)
			}
		})
	}
}
