package tinker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Starting weights resolve from a tinker:// path, a directory holding
// tinker.json (rllm sft --out), a checkpoint's global_step_N and a run
// directory (its newest checkpoint); anything else is named.
func TestResolveWeights(t *testing.T) {
	root := t.TempDir()
	write := func(dir, weights string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteCheckpoint(dir, Checkpoint{WeightsPath: weights, BaseModel: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "sft"), "tinker://r/weights/sft")
	run := filepath.Join(root, "run")
	write(filepath.Join(run, "global_step_2", "model"), "tinker://r/weights/two")
	write(filepath.Join(run, "global_step_4", "model"), "tinker://r/weights/four")
	if err := os.WriteFile(filepath.Join(run, "latest_checkpointed_iteration.txt"), []byte("4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want, err string }{
		{"tinker://r/weights/x", "tinker://r/weights/x", ""},
		{filepath.Join(root, "sft"), "tinker://r/weights/sft", ""},
		{filepath.Join(run, "global_step_2"), "tinker://r/weights/two", ""},
		{run, "tinker://r/weights/four", ""},
		{filepath.Join(root, "nowhere"), "", "backend.tinker.weights " + filepath.Join(root, "nowhere") + " is neither a tinker://…/weights/… path nor a directory"},
		{filepath.Join(root, "empty"), "", "holds no tinker.json"},
	} {
		got, err := ResolveWeights("backend.tinker.weights", tt.path)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%s: %q, %v; want %q", tt.path, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %v, want an error containing %q", tt.path, err, tt.err)
		}
	}
}
