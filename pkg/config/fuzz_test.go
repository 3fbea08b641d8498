package config

import (
	"context"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// FuzzOverride feeds arbitrary command-line overrides through the whole
// load: any input may fail, none may panic, and failures are usage errors.
func FuzzOverride(f *testing.F) {
	for _, s := range []string{"data.train_batch_size=8", "~agent.args.x", "rollout.stop+=[a]", "=", "a..b=1",
		"actor_rollout_ref.rollout.n=4", "trainer.default_local_dir=${trainer.seed}", "rollout.n=.nan", "env.args={a: [1, {b: 2}]}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := Load(Sources{Sets: []string{s}})
		if err != nil {
			if usererr.ExitCode(context.Background(), err) != usererr.ExitUsage {
				t.Fatalf("override %q: error %v is not a usage error", s, err)
			}
		}
	})
}

// FuzzYAMLLayer loads arbitrary bytes as a --config file.
func FuzzYAMLLayer(f *testing.F) {
	for _, s := range []string{"data:\n  seed: 1\n", "- a\n", "data: [1\n", "a: &x [*x]\n", "rllm:\n  agent:\n    agent_args: {k: v}\n",
		"data:\n  seed: 1\n  seed: 2\n", "\t", "actor:\n  optim:\n    betas: [1e400, -1e400]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Load(Sources{Files: []string{"f.yaml"}, ReadFile: func(string) ([]byte, error) { return data, nil }})
		if err != nil {
			if usererr.ExitCode(context.Background(), err) != usererr.ExitUsage {
				t.Fatalf("error %v is not a usage error", err)
			}
		}
	})
}
