package openai

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
)

// A weights file that never ends (a link to /dev/zero) is refused after at
// most the size a checkpoint of the served shape takes; a checkpoint of
// another shape is refused from its manifest, before its weights are read.
func TestUpdateWeightsBounded(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	srv := newTestServer(t, Options{})
	zero := func(c local.Config) string {
		step := saveCheckpoint(t, c)
		w := filepath.Join(step, "model", local.WeightsFile)
		if err := os.Remove(w); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/zero", w); err != nil {
			t.Skip(err)
		}
		return step
	}
	bigger := testConfig
	bigger.DModel = 32
	for _, c := range []struct {
		path, want string
	}{
		{zero(testConfig), "larger than the"},
		{zero(bigger), "but the server runs layers"},
	} {
		code, out := post(t, srv.URL+"/update_weights_from_disk", `{"model_path":"`+c.path+`"}`)
		if code != 400 || out["success"] != false || !strings.Contains(out["message"].(string), c.want) {
			t.Fatalf("%s: %d %v, want 400 with %q", c.path, code, out, c.want)
		}
	}
}

// Requests queued during /pause_generation run on the weights loaded
// before /continue_generation, as SGLang runs them.
func TestQueuedRequestsTakeNewWeights(t *testing.T) {
	other := testConfig
	other.Seed = 77
	ckpt := saveCheckpoint(t, other)
	ref := newTestServer(t, Options{})
	if code, out := post(t, ref.URL+"/update_weights_from_disk", `{"model_path":"`+ckpt+`","weight_version":"new"}`); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	want, _ := answer(t, ref.URL)

	srv, eng := newTestServerEngine(t, Options{}, local.EngineOptions{Workers: 1})
	post(t, srv.URL+"/pause_generation", `{"mode":"in_place"}`)
	type res struct{ got, version string }
	done := make(chan res, 1)
	go func() {
		got, v := answer(t, srv.URL)
		done <- res{got, v}
	}()
	waitFor(t, "the request to queue", func() bool { return eng.Stats().Waiting == 1 })
	if code, out := post(t, srv.URL+"/update_weights_from_disk", `{"model_path":"`+ckpt+`","weight_version":"new"}`); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	post(t, srv.URL+"/continue_generation", ``)
	r := <-done
	if r.version != "new" || r.got != want {
		t.Fatalf("the queued request ran on version %q (same answer as the new weights: %v), want the new weights", r.version, r.got == want)
	}
}

// The log line after an update names the step loaded: the N of the
// trainer's global_step_N or published step_N directory.
func TestUpdateWeightsLogNamesStep(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	srv := newTestServer(t, Options{Logf: func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, args...))
		mu.Unlock()
	}})
	ckpt := saveCheckpoint(t, testConfig) // .../global_step_1
	published := filepath.Join(t.TempDir(), "published", "step_7")
	if err := os.MkdirAll(filepath.Dir(published), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(ckpt, "model"), published); err != nil {
		t.Fatal(err)
	}
	ckpt2 := saveCheckpoint(t, testConfig)
	for _, c := range []struct{ path, want string }{{ckpt2, "(step 1)"}, {published, "(step 7)"}} {
		if code, out := post(t, srv.URL+"/update_weights_from_disk", `{"model_path":"`+c.path+`","weight_version":"v"}`); code != 200 || !strings.Contains(out["message"].(string), c.want) {
			t.Fatalf("%d %v, want a message naming %s", code, out, c.want)
		}
		mu.Lock()
		last := lines[len(lines)-1]
		mu.Unlock()
		if !strings.Contains(last, c.want) {
			t.Fatalf("log line %q does not name %s", last, c.want)
		}
	}
}
