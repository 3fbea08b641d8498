package config

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rllm-org/rllm-go/configs"
)

func files(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if s, ok := m[name]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
}

// Every key of the schema has a default and a comment in
// configs/default.yaml, and the file has no key the schema lacks.
func TestDefaultsDocumentEveryKey(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(configs.DefaultYAML, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(n *yaml.Node, prefix string, commented bool)
	walk = func(n *yaml.Node, prefix string, commented bool) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := strings.TrimPrefix(prefix+"."+k.Value, ".")
			// A group of keys may share the comment of the section above
			// them (compact_filtering's mask_* keys, train_unembed...).
			has := k.HeadComment != "" || commented
			if schema().sections[key] {
				walk(v, key, false)
				continue
			}
			seen[key] = true
			if schema().leaves[key] == nil {
				t.Errorf("configs/default.yaml:%d: %s is not in the schema", k.Line, key)
			}
			if !has && !strings.Contains(key, "compact_filtering.mask_") && !strings.HasPrefix(key, "backend.tinker.train_") {
				t.Errorf("configs/default.yaml:%d: %s has no comment", k.Line, key)
			}
		}
	}
	walk(doc.Content[0], "", false)
	for _, k := range Keys() {
		if !seen[k] {
			t.Errorf("%s has no default in configs/default.yaml", k)
		}
	}
}

func TestPrecedence(t *testing.T) {
	fs := files(map[string]string{
		"a.yaml": "data:\n  train_batch_size: 4\n  seed: 1\nrollout:\n  n: 2\n",
		"b.yaml": "data:\n  seed: 2\n",
	})
	tests := []struct {
		name string
		src  Sources
		want func(*Config) string // returns "" when fine
	}{
		{"defaults", Sources{}, func(c *Config) string {
			return expect(c.Data.TrainBatchSize, 32) + expect(c.Rollout.N, 8)
		}},
		{"later file wins", Sources{Files: []string{"a.yaml", "b.yaml"}}, func(c *Config) string {
			return expect(c.Data.Seed, 2) + expect(c.Data.TrainBatchSize, 4)
		}},
		{"env over file", Sources{Files: []string{"a.yaml"}, Environ: []string{"RLLM_DATA__SEED=9", "PATH=/bin"}}, func(c *Config) string {
			return expect(c.Data.Seed, 9)
		}},
		{"set over env", Sources{Environ: []string{"RLLM_DATA__SEED=9"}, Sets: []string{"data.seed=10"}}, func(c *Config) string {
			return expect(c.Data.Seed, 10)
		}},
		{"arg over set for the same spelling", Sources{Sets: []string{"data.seed=10"}, Args: []string{"data.seed=11"}}, func(c *Config) string {
			return expect(c.Data.Seed, 11)
		}},
		{"map and list library forms", Sources{Map: map[string]any{"data.train_batch_size": 8, "rollout": map[string]any{"n": 2}}, Overrides: []string{"data.seed=5"}}, func(c *Config) string {
			return expect(c.Data.TrainBatchSize, 8) + expect(c.Rollout.N, 2) + expect(c.Data.Seed, 5)
		}},
		{"alias in a lower layer, canonical in a higher one", Sources{Files: []string{"a.yaml"}, Sets: []string{"actor_rollout_ref.rollout.n=6"}}, func(c *Config) string {
			return expect(c.Rollout.N, 6)
		}},
		{"nested aliases in a file", Sources{ReadFile: files(map[string]string{"v.yaml": "actor_rollout_ref:\n  actor:\n    optim:\n      lr: 1.0e-6\nrllm:\n  agent:\n    max_steps: 3\n"}), Files: []string{"v.yaml"}}, func(c *Config) string {
			return expect(*c.Actor.Optim.LR, 1e-6) + expect(c.Agent.MaxSteps, 3)
		}},
		{"args maps merge across layers", Sources{Map: map[string]any{"agent.args": map[string]any{"a": 1}}, Sets: []string{"agent.args.b=x"}}, func(c *Config) string {
			return expect(fmt.Sprint(c.Agent.Args), "map[a:1 b:x]")
		}},
		{"delete a map key and null an optional key", Sources{Sets: []string{"env.args.size=4", "env.args.p=0.8", "~env.args.size", "trainer.total_training_steps=3", "~trainer.total_training_steps"}}, func(c *Config) string {
			return expect(fmt.Sprint(c.Env.Args), "map[p:0.8]") + expect(c.Trainer.TotalTrainingSteps == nil, true)
		}},
		{"append to a list", Sources{Sets: []string{"rollout.stop=[a]", "rollout.stop+=b", "rollout.stop+=[c, d]"}}, func(c *Config) string {
			return expect(strings.Join(c.Rollout.Stop, ","), "a,b,c,d")
		}},
		{"interpolation", Sources{Sets: []string{"trainer.project_name=p", "trainer.experiment_name=e"}}, func(c *Config) string {
			return expect(c.Trainer.DefaultLocalDir, "checkpoints/p/e")
		}},
		{"numeric names stay text", Sources{Args: []string{"trainer.experiment_name=2024"}}, func(c *Config) string {
			return expect(c.Trainer.ExperimentName, "2024")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.src.ReadFile == nil {
				tt.src.ReadFile = fs
			}
			ld, err := Load(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.want(ld.Config); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func expect[T comparable](got, want T) string {
	if got != want {
		return fmt.Sprintf("got %v, want %v; ", got, want)
	}
	return ""
}

func TestErrors(t *testing.T) {
	fs := files(map[string]string{
		"bad.yaml":   "data: [1\n",
		"list.yaml":  "- a\n- b\n",
		"sec.yaml":   "data: 3\n",
		"empty.yaml": "",
	})
	tests := []struct {
		name string
		src  Sources
		want []string // substrings of the error lines, in order
	}{
		{"no error for an empty file", Sources{Files: []string{"empty.yaml"}}, nil},
		{"top level list", Sources{Files: []string{"list.yaml"}}, []string{"list.yaml:1: the top level must be a mapping"}},
		{"section given a value", Sources{Files: []string{"sec.yaml"}}, []string{"sec.yaml:1: data: is a section"}},
		{"section as an override", Sources{Sets: []string{"data=3"}}, []string{"data: is a section, not a value"}},
		{"append to a scalar", Sources{Sets: []string{"data.seed+=1"}}, []string{"data.seed: += appends to a list"}},
		{"bool", Sources{Sets: []string{"data.shuffle=yes"}}, []string{`data.shuffle: must be true or false, got "yes"`}},
		{"not whole", Sources{Sets: []string{"rollout.n=2.5"}}, []string{"rollout.n: must be a whole number, got 2.5"}},
		{"list items", Sources{Sets: []string{"actor.optim.betas=[0.9, x]"}}, []string{`actor.optim.betas: item 1 must be a number, got "x"`}},
		{"betas range", Sources{Sets: []string{"actor.optim.betas=[0.9, 1.5]"}}, []string{"actor.optim.betas: must be in [0, 1), got 1.5"}},
		{"top_p", Sources{Sets: []string{"rollout.top_p=0"}}, []string{"rollout.top_p: must be in (0, 1], got 0"}},
		{"dangling interpolation", Sources{Sets: []string{"trainer.default_local_dir=out/${trainer.nope}"}}, []string{"refers to ${trainer.nope}, which is not a single value"}},
		{"cyclic interpolation", Sources{Sets: []string{"trainer.project_name=${trainer.experiment_name}", "trainer.experiment_name=${trainer.project_name}"}}, []string{"refers back to it"}},
		{"openai without endpoints", Sources{Sets: []string{"rollout.engine=openai"}}, []string{"rollout.endpoints: is empty", "rollout.model: is empty"}},
		{"resume_path without a path", Sources{Sets: []string{"trainer.resume_mode=resume_path"}}, []string{"trainer.resume_from_path: is not set"}},
		{"heads divide width", Sources{Sets: []string{"backend.local.heads=3"}}, []string{"backend.local.heads: (3) must divide backend.local.d_model (64)"}},
		{"env var value", Sources{Environ: []string{"RLLM_ROLLOUT__N=[1"}}, []string{"rollout.n: value \"[1\" is not valid YAML", "RLLM_ROLLOUT__N"}},
		{"all problems at once", Sources{Sets: []string{"rollout.n=0", "data.train_batch_size=0", "x=1"}}, []string{"x: unknown key", "data.train_batch_size: must be at least 1", "rollout.n: must be from 1 to 100000, got 0"}},
		{"key with whitespace", Sources{Sets: []string{"data. seed=1"}}, []string{"contains whitespace"}},
		{"empty key part", Sources{Sets: []string{"data..seed=1"}}, []string{"empty part between dots"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.src.ReadFile = fs
			_, err := Load(tt.src)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			var ec interface{ ExitCode() int }
			if !errors.As(err, &ec) || ec.ExitCode() != 2 {
				t.Errorf("error %v does not carry exit code 2", err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestEffectiveValues(t *testing.T) {
	c := defaultConfig()
	if c.EffectiveLR() != 0.0005 || c.EffectiveMiniBatch() != 32 || c.EffectiveMaxTokens() != 512 {
		t.Errorf("local effective values: lr %g mini %d max_tokens %d", c.EffectiveLR(), c.EffectiveMiniBatch(), c.EffectiveMaxTokens())
	}
	c, err := FromOverrides([]string{"backend.name=tinker", "rollout.max_tokens=64", "actor.ppo_mini_batch_size=8"})
	if err != nil {
		t.Fatal(err)
	}
	if c.EffectiveLR() != 2e-5 || c.EffectiveMiniBatch() != 8 || c.EffectiveMaxTokens() != 64 {
		t.Errorf("tinker effective values: lr %g mini %d max_tokens %d", c.EffectiveLR(), c.EffectiveMiniBatch(), c.EffectiveMaxTokens())
	}
}

func TestOriginsAndShow(t *testing.T) {
	ld, err := Load(Sources{
		ReadFile: files(map[string]string{"r.yaml": "rollout:\n  n: 2\n"}),
		Files:    []string{"r.yaml"},
		Environ:  []string{"RLLM_DATA__SEED=4"},
		Sets:     []string{"agent.args.token=abc"},
		Args:     []string{"trainer.seed=3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"rollout.n":        "r.yaml:2",
		"data.seed":        "environment variable RLLM_DATA__SEED",
		"agent.args.token": "--set agent.args.token=<redacted>",
		"trainer.seed":     "argument trainer.seed=3",
	} {
		if got := ld.Origin(key).String(); got != want {
			t.Errorf("origin of %s = %q, want %q", key, got, want)
		}
	}
	if !strings.HasPrefix(ld.Origin("data.shuffle").String(), "configs/default.yaml:") {
		t.Errorf("default origin = %q", ld.Origin("data.shuffle"))
	}
	for _, render := range []func(bool) ([]byte, error){ld.YAML, ld.JSON} {
		out, err := render(true)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "abc") {
			t.Errorf("secret printed:\n%s", out)
		}
	}
}

// Every row of the alias table points at a key or section, or says what
// becomes of the key.
func TestAliasTargets(t *testing.T) {
	s := schema()
	for _, a := range Aliases {
		switch {
		case a.To == "" && a.Refused == "" && a.Group == "":
			t.Errorf("row %s has no key, no group and no refusal", a.From)
		case a.To == "":
		case !a.Prefix && s.leaves[a.To] == nil:
			t.Errorf("alias %s points at %s, which is not a key", a.From, a.To)
		case a.Prefix && !s.sections[a.To] && s.leaves[a.To] == nil:
			t.Errorf("alias %s.* points at %s, which is not a section", a.From, a.To)
		}
		// A row after one that catches it would never match.
		if got, _ := match(a.From); got.From != a.From {
			t.Errorf("row %s is shadowed by the earlier row %s", a.From, got.From)
		}
	}
}
