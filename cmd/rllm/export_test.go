package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

const exportTestKey = "tml-export-secret-4242"

// TestExportScripts runs testdata/export/*.txtar against a fake Tinker
// server ($TINKER_URL, key in $TINKER_API_KEY) holding a run trained for
// one step, whose checkpoint is $WORK/run/global_step_1.
// Each script runs against both flavours of the fake (hosted Tinker's
// sampler paths and archive route, with and without JWT sign-in, and
// SkyRL's).
func TestExportScripts(t *testing.T) {
	for name, o := range map[string]faketinker.Options{
		"tinker":     {Flavour: faketinker.FlavourTinker},
		"tinker-jwt": {Flavour: faketinker.FlavourTinker, JWT: true},
		"skyrl":      {Flavour: faketinker.FlavourSkyRL},
	} {
		t.Run(name, func(t *testing.T) { exportScripts(t, o) })
	}
}

func exportScripts(t *testing.T, o faketinker.Options) {
	o.APIKey, o.PollWait = exportTestKey, 100*time.Millisecond
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/export",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			srv, err := faketinker.New(o)
			if err != nil {
				return err
			}
			env.Defer(srv.Close)
			run := filepath.Join(env.WorkDir, "run")
			if err := trainOneTinkerStep(srv.URL, filepath.Join(run, "global_step_1")); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(run, "latest_checkpointed_iteration.txt"), []byte("1\n"), 0o644); err != nil {
				return err
			}
			env.Setenv("TINKER_URL", srv.URL)
			env.Setenv("TINKER_API_KEY", exportTestKey)
			return nil
		},
	})
}

func trainOneTinkerStep(url, dir string) error {
	ctx := context.Background()
	b, err := tinker.New(ctx, tinker.Options{
		ClientOptions: tinker.ClientOptions{BaseURL: url, APIKey: exportTestKey},
		BaseModel:     faketinker.BaseModel,
		LoRA:          wire.LoRAConfig{Rank: 2},
		Heartbeat:     time.Hour,
	})
	if err != nil {
		return err
	}
	defer b.Close()
	d := backend.Datum{Input: []int{259, 104, 105}, LossFnInputs: backend.LossFnInputs{TargetTokens: []int{104, 105, 260}}}
	if _, err := b.ForwardBackward(ctx, []backend.Datum{d}, backend.Loss{Name: backend.LossCrossEntropy}).Result(ctx); err != nil {
		return err
	}
	if _, err := b.OptimStep(ctx, backend.DefaultAdamParams(1e-3)).Result(ctx); err != nil {
		return err
	}
	weights, err := b.SaveState(ctx, "global_step_1").Result(ctx)
	if err != nil {
		return err
	}
	snap, err := b.PublishSampler(ctx, "global_step_1").Result(ctx)
	if err != nil {
		return err
	}
	return tinker.WriteCheckpoint(dir, tinker.Checkpoint{WeightsPath: weights, SamplerPath: snap.(*tinker.Sampler).Path(), BaseModel: faketinker.BaseModel, BaseURL: url})
}

// TestExampleConfigsValidate: every example config in examples/configs
// passes validate-config, after the data commands of its header (which,
// like train, it reads) ran in a fresh directory.
func TestExampleConfigsValidate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "configs", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example configs (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			t.Chdir(t.TempDir())
			run := func(args ...string) {
				var out, errb bytes.Buffer
				app := &App{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, ReadFile: os.ReadFile}
				if code := app.Run(context.Background(), args); code != 0 {
					t.Fatalf("rllm %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
				}
			}
			for _, args := range configHeaderCommands(t, abs) {
				if args[0] == "data" {
					run(args...)
				}
			}
			run("validate-config", "--config", abs)
		})
	}
}

func TestExportStepDir(t *testing.T) {
	run := t.TempDir()
	for _, d := range []string{"global_step_1", "global_step_3", "global_step_x", "global_step_+2"} {
		if err := os.Mkdir(filepath.Join(run, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		latest  string
		step    int
		want    string
		wantErr string
	}{
		{name: "newest without a pointer", step: -1, want: "global_step_3"},
		{name: "the pointer wins", latest: "1\n", step: -1, want: "global_step_1"},
		{name: "a broken pointer falls back", latest: "x", step: -1, want: "global_step_3"},
		{name: "--step", step: 1, want: "global_step_1"},
		{name: "--step not saved", step: 2, wantErr: "steps saved: 1, 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			latest := filepath.Join(run, "latest_checkpointed_iteration.txt")
			os.Remove(latest)
			if tc.latest != "" {
				if err := os.WriteFile(latest, []byte(tc.latest), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := exportStepDir(run, tc.step)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != filepath.Join(run, tc.want) {
				t.Fatalf("exportStepDir = %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}
