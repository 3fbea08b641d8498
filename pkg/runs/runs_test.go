package runs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func mkModel(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ModelMarker), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolveWeights(t *testing.T) {
	root := t.TempDir()
	run := filepath.Join(root, "run")
	mkModel(t, filepath.Join(run, "global_step_5", ModelDir))
	mkModel(t, filepath.Join(run, "global_step_10", ModelDir))
	os.WriteFile(filepath.Join(run, LatestFile), []byte("10\n"), 0o644)
	// A run killed before its pointer file: the highest step with a model.
	killed := filepath.Join(root, "killed")
	mkModel(t, filepath.Join(killed, "global_step_3", ModelDir))
	mkModel(t, filepath.Join(killed, "global_step_12", ModelDir))
	os.MkdirAll(filepath.Join(killed, "global_step_20"), 0o755) // no model: skipped
	bare := filepath.Join(root, "sft")
	mkModel(t, bare)
	dangling := filepath.Join(root, "dangling")
	os.MkdirAll(dangling, 0o755)
	os.WriteFile(filepath.Join(dangling, LatestFile), []byte("7"), 0o644)
	badPtr := filepath.Join(root, "badptr")
	os.MkdirAll(badPtr, 0o755)
	os.WriteFile(filepath.Join(badPtr, LatestFile), []byte("seven"), 0o644)
	empty := filepath.Join(root, "empty")
	os.MkdirAll(empty, 0o755)
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o644)

	tests := []struct {
		path, want, wantErr string
	}{
		{path: run, want: filepath.Join(run, "global_step_10", ModelDir)},
		{path: filepath.Join(run, "global_step_5"), want: filepath.Join(run, "global_step_5", ModelDir)},
		{path: filepath.Join(run, "global_step_5", ModelDir), want: filepath.Join(run, "global_step_5", ModelDir)},
		{path: killed, want: filepath.Join(killed, "global_step_12", ModelDir)},
		{path: bare, want: bare},
		{path: filepath.Join(root, "nowhere"), wantErr: "does not exist"},
		{path: file, wantErr: "is a file"},
		{path: empty, wantErr: "holds no checkpoint"},
		{path: dangling, wantErr: "has no model"},
		{path: badPtr, wantErr: `holds "seven", not a step number`},
	}
	for _, tt := range tests {
		got, err := ResolveWeights("--weights", tt.path)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !usererr.Is(err) {
				t.Errorf("ResolveWeights(%s) = %q, %v; want a user error containing %q", tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ResolveWeights(%s) = %q, %v; want %q", tt.path, got, err, tt.want)
		}
	}
}

func TestStepOf(t *testing.T) {
	tests := []struct {
		name string
		n    int
		ok   bool
	}{
		{"global_step_0", 0, true},
		{"global_step_120", 120, true},
		{"global_step_", 0, false},
		{"global_step_-1", 0, false},
		{"global_step_1.tmp", 0, false},
		{"step_1", 0, false},
	}
	for _, tt := range tests {
		if n, ok := StepOf(tt.name); n != tt.n || ok != tt.ok {
			t.Errorf("StepOf(%q) = %d, %v", tt.name, n, ok)
		}
	}
	if StepDir(7) != "global_step_7" {
		t.Error(StepDir(7))
	}
}

func TestDescribe(t *testing.T) {
	if got := Describe("run", "run/global_step_4/model"); got != "run/global_step_4/model (step 4)" {
		t.Error(got)
	}
	if got := Describe("m/", "m"); got != "m" {
		t.Error(got)
	}
}

// Steps lists only global_step_N directories, oldest first.
func TestSteps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"global_step_10", "global_step_2", "global_step_x", "global_step_+3", "model"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "global_step_7"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Steps(dir)
	if err != nil || fmt.Sprint(got) != "[2 10]" {
		t.Fatalf("Steps = %v, %v; want [2 10]", got, err)
	}
	if _, err := Steps(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("no error for a missing directory")
	}
}
