package main

import (
	"testing"

	"github.com/rllm-org/rllm-go/pkg/env"
	"github.com/rllm-org/rllm-go/pkg/hub"
	"github.com/rllm-org/rllm-go/pkg/reward"
)

// Every catalog dataset goes with an env rllm has, and its field map
// gives the fields that env reads.
func TestCatalogEnvsAndFields(t *testing.T) {
	needs := map[string][]string{
		"math":      {"question", "ground_truth"},
		"search":    {"question", "ground_truth"},
		"countdown": {"question", "target", "nums"},
		"code":      {"question", "ground_truth"},
	}
	for _, e := range hub.Builtin().Datasets {
		if _, err := env.Registry.Lookup(e.Env); err != nil {
			t.Errorf("%s: env %s: %v", e.Name, e.Env, err)
		}
		if e.Env != "code" {
			if _, err := reward.Registry.Lookup(e.Reward); err != nil {
				t.Errorf("%s: reward %s: %v", e.Name, e.Reward, err)
			}
		}
		want, ok := needs[e.Env]
		if !ok {
			t.Errorf("%s: env %s has no known fields", e.Name, e.Env)
		}
		for _, f := range want {
			if _, ok := e.Fields[f]; !ok {
				t.Errorf("%s: the field map lacks %s, which env %s reads", e.Name, f, e.Env)
			}
		}
	}
}
