package harbor

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		toml  string
		check func(t *testing.T, c Config)
		err   string // substring of the error ("": none)
	}{
		{name: "old layout", toml: `version = "1.0"

[metadata]
author_name = "someone"
difficulty = "hard"
custom_field = [1, 2]

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 1800

[environment]
build_timeout_sec = 1200.0
cpus = 2
memory = "4G"
storage = "10G"
allow_internet = true
`, check: func(t *testing.T, c Config) {
			if c.Version != "1.0" || c.VerifierTimeout != 900*time.Second || c.AgentTimeout != 1800*time.Second || c.BuildTimeout != 1200*time.Second ||
				c.CPUs != 2 || c.MemoryMB != 4096 || c.StorageMB != 10240 {
				t.Errorf("%+v", c)
			}
			// Unknown keys are kept.
			if md, _ := c.Raw["metadata"].(map[string]any); md["custom_field"] == nil || c.Raw["environment"].(map[string]any)["allow_internet"] != true {
				t.Errorf("raw %v", c.Raw)
			}
		}},
		{name: "schema_version layout", toml: `schema_version = "1.2"

[task]
name = "org/fix-the-parser"
version = "3"
keywords = ["parsing"]

[verifier]
timeout_sec = 60
[verifier.env]
STRICT = "1"
LEVEL = 2

[environment]
docker_image = "python:3.12-slim"
memory_mb = 1536
storage_mb = 2048
gpus = 0
[environment.env]
PYTHONHASHSEED = "0"

[solution.env]
ORACLE = "yes"
`, check: func(t *testing.T, c Config) {
			if c.SchemaVersion != "1.2" || c.Name != "org/fix-the-parser" || c.DockerImage != "python:3.12-slim" || c.MemoryMB != 1536 || c.StorageMB != 2048 ||
				c.VerifierEnv["STRICT"] != "1" || c.VerifierEnv["LEVEL"] != "2" || c.Env["PYTHONHASHSEED"] != "0" || c.SolutionEnv["ORACLE"] != "yes" {
				t.Errorf("%+v", c)
			}
			if c.AgentTimeout != DefaultAgentTimeout || c.CPUs != DefaultCPUs {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{name: "empty file takes the defaults", toml: ``, check: func(t *testing.T, c Config) {
			if c.AgentTimeout != DefaultAgentTimeout || c.MemoryMB != DefaultMemoryMB || c.StorageMB != DefaultStorageMB {
				t.Errorf("%+v", c)
			}
		}},
		{name: "memory in megabytes and binary units", toml: "[environment]\nmemory = \"512Mi\"\nstorage = \"1.5GB\"\n", check: func(t *testing.T, c Config) {
			if c.MemoryMB != 512 || c.StorageMB != 1536 {
				t.Errorf("%+v", c)
			}
		}},
		{name: "bad toml names the line", toml: "version = \"1.0\"\n\n[agent]\ntimeout_sec = = 5\n", err: "task.toml:4: is not valid TOML"},
		{name: "timeout as a string", toml: "version = \"1.0\"\n[verifier]\ntimeout_sec = \"long\"\n", err: `task.toml:3: verifier.timeout_sec is "long"`},
		{name: "negative timeout", toml: "[agent]\n\n  timeout_sec = -1\n", err: "task.toml:3: agent.timeout_sec is -1"},
		{name: "memory garbage", toml: "[environment]\nmemory = \"lots\"\n", err: `task.toml:2: environment.memory is "lots": not a size`},
		{name: "gpus", toml: "[environment]\ngpus = 1\n", err: "task.toml:2: environment.gpus asks for 1 GPUs"},
		{name: "agent not a table", toml: "agent = 5\n", err: "task.toml:1: agent is a number, not a table"},
		{name: "users and system state", toml: "[agent]\nuser = \"root\"\n[verifier]\nuser = 1000\nsystem_state = true\n", check: func(t *testing.T, c Config) {
			if c.AgentUser != "root" || c.VerifierUser != "1000:1000" || !c.SystemState {
				t.Errorf("%+v", c)
			}
		}},
		{name: "no user named", toml: "[agent]\ntimeout_sec = 5\n", check: func(t *testing.T, c Config) {
			if c.AgentUser != "" || c.VerifierUser != "" || c.SystemState {
				t.Errorf("%+v", c)
			}
		}},
		{name: "user a list", toml: "[agent]\nuser = [\"root\"]\n", err: `task.toml:2: agent.user is [root]; name a user of the image`},
		{name: "user empty", toml: "[verifier]\n\nuser = \"\"\n", err: `task.toml:3: verifier.user is ""`},
		{name: "negative uid", toml: "[agent]\nuser = -1\n", err: `task.toml:2: agent.user is -1`},
		{name: "system_state a string", toml: "[verifier]\nsystem_state = \"yes\"\n", err: `task.toml:2: verifier.system_state is a string, not a boolean`},
		{name: "env value a table", toml: "[environment.env]\nX = { a = 1 }\n", err: "environment.env.X is a table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("task.toml", []byte(tc.toml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !usererr.Is(err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want one user error line with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// writeTask writes files (relative name → content) as a task directory.
func writeTask(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	good := map[string]string{
		"instruction.md":         "Do it.",
		"task.toml":              "version = \"1.0\"\n",
		"environment/Dockerfile": "FROM scratch\n",
		"tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
	}
	for _, tc := range []struct {
		name string
		drop string
		set  map[string]string
		err  string
	}{
		{name: "no verifier", drop: "tests/test.sh", err: "tests/test.sh: is missing; write the verifier there"},
		{name: "no instruction", drop: "instruction.md", err: "instruction.md: cannot be read"},
		{name: "empty instruction", set: map[string]string{"instruction.md": " \n"}, err: "instruction.md: is empty"},
		{name: "no task.toml", drop: "task.toml", err: "task.toml: cannot be read"},
		{name: "no Dockerfile", drop: "environment/Dockerfile", err: "environment/Dockerfile: is missing; write the image's Dockerfile there, or name an image"},
		{name: "bad task.toml", set: map[string]string{"task.toml": "[verifier]\ntimeout_sec = 0\n"}, err: "task.toml:2: verifier.timeout_sec is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "t1")
			files := map[string]string{}
			for k, v := range good {
				if k != tc.drop {
					files[k] = v
				}
			}
			for k, v := range tc.set {
				files[k] = v
			}
			writeTask(t, dir, files)
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.err) || !usererr.Is(err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
	// docker_image instead of a Dockerfile.
	dir := filepath.Join(t.TempDir(), "t2")
	writeTask(t, dir, map[string]string{"instruction.md": "x", "task.toml": "[environment]\ndocker_image = \"img:1\"\n", "tests/test.sh": "true\n"})
	tk, err := Load(dir)
	if err != nil || tk.Config.DockerImage != "img:1" || tk.Dockerfile != "" || tk.HasSolution {
		t.Fatalf("%+v %v", tk, err)
	}
}

func TestLoadAll(t *testing.T) {
	root := t.TempDir()
	if _, err := Generate(root, 3, 1, GenerateOptions{Image: "rllm-base:test"}); err != nil {
		t.Fatal(err)
	}
	// A broken task beside them is reported, by its file, the others read.
	writeTask(t, filepath.Join(root, "broken"), map[string]string{"instruction.md": "x", "task.toml": "", "environment/Dockerfile": "FROM x\n"})
	tasks, err := LoadAll(root)
	if len(tasks) != 3 || err == nil || !strings.Contains(err.Error(), filepath.Join(root, "broken", "tests", "test.sh")) {
		t.Fatalf("%d tasks, %v", len(tasks), err)
	}
	for _, tk := range tasks {
		if !tk.HasSolution || tk.Dockerfile == "" || tk.Config.AgentTimeout != 600*time.Second {
			t.Errorf("%+v", tk)
		}
	}
	// Generating again into the same place overwrites nothing.
	if _, err := Generate(root, 1, 1, GenerateOptions{Image: "x"}); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("%v", err)
	}
	// One task directory is a dataset of one task.
	one, err := LoadAll(filepath.Join(root, "task-0001"))
	if err != nil || len(one) != 1 || one[0].Name != "task-0001" {
		t.Fatalf("%v %v", one, err)
	}
	if _, err := LoadAll(t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no task") {
		t.Errorf("%v", err)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if _, err := Generate(d, 4, 7, GenerateOptions{Image: "rllm-base:x"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"task-0003/tests/test_hidden.py", "task-0002/solution/solve.sh", "task-0000/environment/Dockerfile"} {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if len(x) == 0 || string(x) != string(y) {
			t.Errorf("%s differs or is empty", f)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("version = \"1.0\"\n[agent]\ntimeout_sec = 5\n[environment]\nmemory = \"2G\"\n"))
	f.Add([]byte("schema_version = \"1.1\"\n[task]\nname = \"x\"\n[verifier.env]\nA = 1\n"))
	f.Add([]byte("[environment]\ncpus = 1e400\nstorage = \"9999999T\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("task.toml", data)
		if err != nil {
			if !usererr.Is(err) {
				t.Fatalf("not a user error: %v", err)
			}
			return
		}
		if c.AgentTimeout <= 0 || c.VerifierTimeout <= 0 || c.MemoryMB <= 0 || c.StorageMB <= 0 || c.CPUs <= 0 {
			t.Fatalf("accepted %+v", c)
		}
	})
}

func TestParseReward(t *testing.T) {
	for _, tc := range []struct {
		txt  bool
		in   string
		want float64
		why  string
	}{
		{true, "1\n", 1, ""},
		{true, " 0.25 ", 0.25, ""},
		{true, "", 0, "but not a number"},
		{true, "1 2", 0, "but not a number"},
		{true, "NaN", 0, "but not a number"},
		{true, "inf", 0, "but not a number"},
		{false, `{"reward": 0.5, "tests": "3/6"}`, 0.5, ""},
		{false, `{"score": 1}`, 1, ""},
		{false, `{"a": 1, "b": 0}`, 0, "nor exactly one number"},
		{false, `{"reward": "1"}`, 0, "nor exactly one number"},
		{false, `null`, 0, "not a JSON object"},
		{false, `[1]`, 0, "not a JSON object"},
		{false, `{"reward": 1`, 0, "not a JSON object"},
	} {
		var got float64
		var why string
		if tc.txt {
			got, why = parseRewardTxt([]byte(tc.in))
		} else {
			got, why = parseRewardJSON([]byte(tc.in))
		}
		if got != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%q: %v %q, want %v %q", tc.in, got, why, tc.want, tc.why)
		}
	}
}

func FuzzParseReward(f *testing.F) {
	for _, s := range []string{"1", "0.5\n", `{"reward": 1}`, `{"x": 2, "y": 3}`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) (float64, string){parseRewardTxt, parseRewardJSON} {
			r, why := parse(b)
			if why != "" && r != 0 {
				t.Fatalf("%q: reward %v with a reason %q", b, r, why)
			}
			if math.IsNaN(r) || math.IsInf(r, 0) {
				t.Fatalf("%q: reward %v", b, r)
			}
			if strings.Contains(why, "\n") {
				t.Fatalf("%q: reason on more than one line: %q", b, why)
			}
		}
	})
}
