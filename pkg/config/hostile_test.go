package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/v2"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// Values a careless or hostile user types are refused before anything
// runs, and a pasted secret is never repeated.
func TestHostileValues(t *testing.T) {
	const secret = "sk-proj-abc123-DEADBEEF"
	tests := []struct {
		name string
		src  Sources
		want []string
	}{
		{"context above the embedded policy's", Sources{Sets: []string{"backend.local.context=99999999"}}, []string{"backend.local.context: must be from 2 to 8192, got 99999999"}},
		{"layers above the embedded policy's", Sources{Sets: []string{"backend.local.layers=1000"}}, []string{"backend.local.layers: must be from 1 to 64"}},
		{"huge n", Sources{Sets: []string{"rollout.n=1000000000"}}, []string{"rollout.n: must be from 1 to 100000, got 1000000000"}},
		{"huge validation n", Sources{Sets: []string{"rollout.val_kwargs.n=1000000000"}}, []string{"rollout.val_kwargs.n: must be from 1 to 100000"}},
		{"episodes per step", Sources{Sets: []string{"rollout.n=100000", "data.train_batch_size=1000"}}, []string{"more than 1048576 episodes per step"}},
		{"key pasted as variable name", Sources{Sets: []string{"rollout.api_key_env=" + secret}}, []string{"rollout.api_key_env: must be the name of an environment variable", "--set rollout.api_key_env=<redacted>"}},
		{"key pasted in a variable", Sources{Environ: []string{"RLLM_ROLLOUT__API_KEY_ENV=" + secret}}, []string{"rollout.api_key_env: must be the name", "environment variable RLLM_ROLLOUT__API_KEY_ENV"}},
		{"key pasted for tinker", Sources{Sets: []string{"backend.tinker.api_key_env=" + secret}}, []string{"backend.tinker.api_key_env: must be the name"}},
		{"key that is not YAML", Sources{Sets: []string{"rollout.api_key_env=[" + secret}}, []string{"value (not shown) is not valid YAML"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.src)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			var ue *usererr.Error
			if !errors.As(err, &ue) || usererr.ExitCode(context.Background(), err) != 2 {
				t.Errorf("error %v is not a usererr.Error with exit code 2", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "DEADBEEF") {
				t.Errorf("error repeats the secret: %q", err)
			}
		})
	}
	for _, ok := range []string{"rollout.api_key_env=OPENAI_API_KEY", "rollout.api_key_env=", "backend.local.context=8192", "rollout.n=32768"} {
		if _, err := Load(Sources{Sets: []string{ok}}); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
}

func TestShowHidesPastedKey(t *testing.T) {
	ld := &Loaded{Config: defaultConfig(), Origins: map[string]Origin{"rollout.api_key_env": {Layer: "set", Source: "rollout.api_key_env=<redacted>"}}}
	ld.Config.Rollout.APIKeyEnv = "sk-DEADBEEF"
	ld.Config.Backend.Tinker.APIKeyEnv = "tk DEADBEEF"
	ld.Config.Sandbox.Env = map[string]string{"GITHUB_PAT": "DEADBEEF"}
	for _, f := range []func(bool) ([]byte, error){ld.YAML, ld.JSON} {
		out, err := f(true)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "DEADBEEF") {
			t.Fatalf("config show prints the pasted key:\n%s", out)
		}
	}
}

func TestEndlessAndOversizedFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, _ := os.Create(big)
	f.Truncate(MaxFileBytes + 1) // sparse: costs no disk
	f.Close()
	cases := []struct{ name, path, want string }{
		{"oversized file", big, "config file " + big + " is larger than the limit of 8 MiB"},
		{"/dev/zero", "/dev/zero", "config file /dev/zero is larger than the limit of 8 MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); err != nil {
				t.Skip(err)
			}
			_, err := Load(Sources{Files: []string{c.path}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestFIFOConfigStopsOnCancel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Load(Sources{Context: ctx, Files: []string{path}})
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if usererr.ExitCode(ctx, err) != usererr.ExitInterrupted {
		t.Fatalf("exit code %d, want 130", usererr.ExitCode(ctx, err))
	}
}

// decodeLeaves (the fast path) fills the same Config as koanf's
// Unmarshal with mapstructure.
func TestDecodeLeavesMatchesUnmarshal(t *testing.T) {
	for _, sets := range [][]string{
		nil,
		{"rollout.stop=[a, b]", "actor.optim.betas=[0.8, 0.9]", "actor.optim.lr=1e-5", "rollout.max_tokens=12", "rollout.seed=null",
			"agent.args={k: [1, {x: y}]}", "env.args.size=4", "algorithm.adv_estimator_by_role={solver: rloo}", "trainer.resume_from_path=/x",
			"rollout.chat_template_kwargs={enable_thinking: false}", "rollout.temperature=0", "data.shuffle=false", "trainer.logger=[jsonl]"},
	} {
		ld, err := Load(Sources{Sets: sets})
		if err != nil {
			t.Fatal(err)
		}
		want, err := decode(ld.store)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ld.Config, want) {
			t.Errorf("%v:\n fast %+v\nslow %+v", sets, *ld.Config, *want)
		}
	}
}

// decode is the slow, obvious decoding (mapstructure over the whole
// tree) the fast decodeLeaves must agree with.
func decode(store *koanf.Koanf) (*Config, error) {
	var cfg Config
	err := store.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			Result:      &cfg,
			TagName:     "koanf",
			ErrorUnused: true,
		},
	})
	if err != nil {
		// Every value was type-checked already; reaching here is a bug.
		return nil, fmt.Errorf("internal error decoding the configuration: %w", err)
	}
	return &cfg, nil
}

// defaultConfig is the embedded defaults.
func defaultConfig() *Config {
	ld, err := Load(Sources{})
	if err != nil {
		panic(err)
	}
	return ld.Config
}
