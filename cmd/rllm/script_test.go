package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/rllm-org/rllm-go/internal/fakedocker"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// TestMain lets testscript run this binary as the `rllm` command, so the
// .txtar scripts exercise the CLI exactly as a user types it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ForwardCommand { // a sandbox's network forwarder
		os.Exit(sandbox.ForwardMain(os.Args[2:], os.Stderr))
	}
	if exe, err := os.Executable(); err == nil {
		sandbox.SetSelf(exe)
	}
	if os.Getenv("RLLM_TEST_AS_MAIN") == "1" { // this binary re-run as rllm (resume_test.go)
		mainRLLM()
		return
	}
	if mode := os.Getenv("RLLM_TEST_UNDUMPABLE"); mode != "" { // undumpable_linux_test.go
		os.Exit(undumpableProbe(mode))
	}
	testscript.Main(m, map[string]func(){
		"rllm": mainRLLM,
		// Outside environments and tools the scripts start (testhelpers_test.go).
		"rllm-test-env": testExecEnv,
		"rllm-test-mcp": testMCPServer,
	})
}

func mainRLLM() {
	_ = makeUndumpable()
	app := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Environ: os.Environ}
	os.Exit(runWithSignals(app, os.Args[1:], os.Exit))
}

// TestScripts runs testdata/script/*.txtar. Scripts get $TOKENIZERS, the
// real tokenizers fetched by scripts/fetch-tokenizers.sh (condition
// [tokenizers]; scripts needing them skip when absent, except in CI where
// this test fails), $TINY, a small byte-level BPE tokenizer written here,
// and an empty Hugging Face cache in $HF_HUB_CACHE.
func TestScripts(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tokenizers := filepath.Join(root, ".cache", "tokenizers")
	haveReal := fileExists(filepath.Join(tokenizers, "qwen3", "tokenizer.json"))
	if !haveReal && os.Getenv("CI") != "" {
		t.Fatal("tokenizer files missing in .cache/tokenizers: run scripts/fetch-tokenizers.sh")
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("TOKENIZERS", tokenizers)
			env.Setenv("HF_HUB_CACHE", filepath.Join(env.WorkDir, "hub"))
			tiny := filepath.Join(env.WorkDir, "tiny")
			if err := writeTinyTokenizer(tiny); err != nil {
				return err
			}
			env.Setenv("TINY", tiny)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"jsonlines":  cmdJSONLines,
			"fakedocker": cmdFakeDocker,
			"fakehub":    cmdFakeHub,
			"fakewandb":  cmdFakeWandB,
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "tokenizers":
				return haveReal, nil
			case "sandbox": // bwrap creates sandboxes here and /usr has python3
				return sandboxWorks(), nil
			case "docker": // a Docker daemon answers and has the local base image
				return dockerWorks(t), nil
			}
			return false, nil
		},
	})
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeTinyTokenizer writes a byte-level BPE tokenizer whose ids are the
// byte values (byte-level alphabet of GPT-2), with one merge "h e" -> 256,
// a special token <|end|> = 257 and a chat template.
func writeTinyTokenizer(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vocab := map[string]int{}
	next := rune(256)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = next
			next++
		}
		vocab[string(r)] = b
	}
	vocab["he"] = 256
	tok := map[string]any{
		"added_tokens":  []any{map[string]any{"id": 257, "content": "<|end|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"h e"}},
	}
	cfg := map[string]any{
		"eos_token":     "<|end|>",
		"chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}<|end|>\n{% endfor %}{% if tools %}tools: {{ tools|tojson }}\n{% endif %}{% if add_generation_prompt %}assistant:{% endif %}",
	}
	for name, v := range map[string]any{"tokenizer.json": tok, "tokenizer_config.json": cfg} {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cmdJSONLines checks --output json's promise on the last command's
// stdout and stderr: every line is one JSON object.
//
//	jsonlines
func cmdJSONLines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: jsonlines")
	}
	for _, stream := range []string{"stdout", "stderr"} {
		for i, line := range strings.Split(strings.TrimSuffix(ts.ReadFile(stream), "\n"), "\n") {
			if line == "" && i == 0 {
				continue // an empty stream
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(line), &obj); err != nil {
				ts.Fatalf("%s line %d is not one JSON object: %q", stream, i+1, line)
			}
		}
	}
}

// cmdFakeDocker starts a fake Docker daemon (internal/fakedocker) that
// has the images named, for the rest of the script, and points DOCKER_HOST
// at it.
//
//	fakedocker [image...]
func cmdFakeDocker(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: fakedocker [image...]")
	}
	dir, err := os.MkdirTemp("", "fd") // a Unix socket's path is short
	ts.Check(err)
	s, err := fakedocker.Start(filepath.Join(dir, "docker.sock"), args...)
	ts.Check(err)
	ts.Defer(func() { s.Stop(); os.RemoveAll(dir) })
	ts.Setenv("DOCKER_HOST", s.Host())
}

var sandboxOnce = sync.OnceValue(func() bool {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		return false
	}
	p, err := sandbox.Open(context.Background(), sandbox.Config{Backend: sandbox.BackendBwrap, Limits: sandbox.DefaultLimits})
	if err != nil {
		return false
	}
	p.Close()
	return true
})

func sandboxWorks() bool { return sandboxOnce() }

var docker struct {
	once sync.Once
	ok   bool
}

// dockerWorks reports whether a Docker daemon answers with the local base
// image (scripts/docker-setup.sh); where RLLM_REQUIRE_DOCKER=1 (CI, once
// that script succeeded) a daemon that does not is a failure, not a skip.
func dockerWorks(t *testing.T) bool {
	docker.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d, err := sandbox.OpenDocker(ctx, sandbox.Config{Backend: sandbox.BackendDocker, Limits: sandbox.DefaultLimits})
		if err != nil {
			if os.Getenv("RLLM_REQUIRE_DOCKER") == "1" {
				t.Errorf("RLLM_REQUIRE_DOCKER=1 but the docker backend does not open: %v", err)
			}
			return
		}
		d.Close()
		docker.ok = true
	})
	return docker.ok
}
