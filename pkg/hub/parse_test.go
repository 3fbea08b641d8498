package hub

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestParseURI(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want URI
		err  string
	}{
		{"hf://datasets/openai/gsm8k", URI{Repo: "openai/gsm8k"}, ""},
		{"hf://datasets/openai/gsm8k/main/train", URI{Repo: "openai/gsm8k", Config: "main", Split: "train"}, ""},
		{"hf://datasets/openai/gsm8k@v1.0/main", URI{Repo: "openai/gsm8k", Revision: "v1.0", One: "main"}, ""},
		{"hf://datasets/o/n@refs%2Fconvert%2Fparquet/default/test", URI{Repo: "o/n", Revision: "refs/convert/parquet", Config: "default", Split: "test"}, ""},
		{"hf://datasets/o/n/data/train-*.parquet", URI{Repo: "o/n", Glob: "data/train-*.parquet"}, ""},
		{"hf://datasets/o/n/test.jsonl", URI{Repo: "o/n", Glob: "test.jsonl"}, ""},
		{"hf://datasets/o/n/", URI{Repo: "o/n"}, ""},
		{"hf://models/o/n", URI{}, "only datasets are supported"},
		{"hf://datasets/o", URI{}, "names no ORG/NAME"},
		{"hf://datasets/o/n/a/b/c", URI{}, "at most CONFIG/SPLIT"},
		{"hf://datasets/o/../x", URI{}, "ORG and NAME"},
		{"hf://datasets/o/n@../x", URI{}, "revision"},
		{"hf://datasets/o/n/../*.parquet", URI{}, "empty, . or .."},
		{"gsm8k", URI{}, "does not start with hf://"},
	} {
		got, err := ParseURI(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %+v %v", tt.in, got, err)
		}
	}
}

func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"hf://datasets/openai/gsm8k/main/train", "hf://datasets/o/n@refs%2Fconvert%2Fparquet/x", "hf://datasets/o/n/**/*.parquet", "hf://datasets/o/n@%zz", "hf://datasets//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURI(s)
		if err != nil {
			return
		}
		// What parses names a valid repo, stays in it and prints back
		// to a URI that parses to the same thing.
		if !ValidRepo(u.Repo) {
			t.Fatalf("%q: repo %q", s, u.Repo)
		}
		for _, p := range strings.Split(u.Glob, "/") {
			if p == ".." {
				t.Fatalf("%q: glob %q leaves the repo", s, u.Glob)
			}
		}
		u2, err := ParseURI(u.String())
		if err != nil || u2 != u {
			t.Fatalf("%q → %q → %+v %v", s, u.String(), u2, err)
		}
	})
}

func TestFieldMap(t *testing.T) {
	row := episode.Task{
		"answer":         "Steps.\n#### 42",
		"n":              int64(7),
		"prompt":         []any{map[string]any{"role": "user", "content": "What?"}},
		"sol":            `so \boxed{\frac{1}{2}} done`,
		"nums":           []any{int64(3), int64(5)},
		"tests":          `[{"input": "1", "output": "2"}]`,
		"Correct Answer": "B",
	}
	for _, tt := range []struct {
		spec string
		want any
		err  string
	}{
		{"answer | re:####\\s*(.+)", "42", ""},
		{"answer | re:@@(.*)", "Steps.\n#### 42", ""},
		{"prompt[0].content", "What?", ""},
		{"sol | boxed", `\frac{1}{2}`, ""},
		{"n | str", "7", ""},
		{"const:gsm8k", "gsm8k", ""},
		{"const:3", float64(3), ""},
		{"config", "main", ""},
		{"Correct Answer", "B", ""},
		{"format:Use {nums} to make {n}.", "Use [3, 5] to make 7.", ""},
		{"tests | json", []any{map[string]any{"input": "1", "output": "2"}}, ""},
		{"prompt[3].content", nil, "prompt has no item 3"},
		{"answer.x", nil, "answer is not a struct"},
		{"missing", nil, `reads column "missing"`},
		{"answer | re:(", nil, "bad regex"},
		{"answer | re:abc", nil, "needs a group"},
		{"answer | upper", nil, `unknown step "upper"`},
		{"a[x]", nil, "not a list index"},
		{"format:{", nil, "a { without }"},
	} {
		mp, err := FieldMap{"f": tt.spec}.Compile()
		if err == nil {
			var out episode.Task
			out, err = mp.Apply(row, "main")
			if err == nil && tt.err == "" {
				if got := out["f"]; text(got) != text(tt.want) {
					t.Errorf("%s: %#v, want %#v", tt.spec, got, tt.want)
				}
				continue
			}
		}
		if tt.err == "" || err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: %v, want %q", tt.spec, err, tt.err)
		}
	}
}

func FuzzParseField(f *testing.F) {
	for _, s := range []string{"answer | re:####\\s*(.+)", "prompt[0].content | str", "const:{\"a\":1}", "format:{a} and {b[1]}", "x | boxed | json", "a[99999999999]"} {
		f.Add(s)
	}
	row := episode.Task{"a": []any{"x", map[string]any{"b": "y"}}, "answer": "#### 1", "x": `\boxed{2}`}
	f.Fuzz(func(t *testing.T, spec string) {
		mp, err := FieldMap{"f": spec}.Compile()
		if err != nil {
			return
		}
		mp.Apply(row, "c") // never panics
		mp.Check([]string{"a"})
	})
}

func TestBuiltinCatalog(t *testing.T) {
	c := Builtin()
	for _, name := range []string{"gsm8k", "math500", "aime2024", "aime_2025", "deepscaler_math", "dapo_math", "countdown", "humaneval", "mbpp", "livecodebench", "hotpotqa"} {
		if _, ok := c.Lookup(name); !ok {
			t.Errorf("catalog lacks %s", name)
		}
	}
	if _, err := c.Find("gsm8"); err == nil || !strings.Contains(err.Error(), "did you mean gsm8k?") {
		t.Errorf("err %v", err)
	}
	if _, err := LoadCatalog([]byte(`{"datasets":[{"name":"x","repo":"bad","revision":"main","splits":["train"],"env":"math","fields":{}}]}`)); err == nil {
		t.Error("bad repo accepted")
	}
	if _, err := LoadCatalog([]byte(`{"datasets":[{"name":"x","repo":"a/b","revision":"main","splits":["train"],"env":"math","fields":{"q":"a | re:("}}]}`)); err == nil {
		t.Error("bad field map accepted")
	}
}

// Any dataset card: its configs: header parses or is refused, never a
// panic.
func FuzzReadmeConfigs(f *testing.F) {
	f.Add(gsmCard)
	f.Add("---\nconfigs:\n- config_name: a\n  data_files: x/*.parquet\n---\n")
	f.Add("---\nconfigs:\n- data_files:\n    train: [a.csv, b.csv]\n---\n")
	f.Add("---\nconfigs: 3\n---")
	f.Fuzz(func(t *testing.T, card string) {
		p := filepath.Join(t.TempDir(), "README.md")
		os.WriteFile(p, []byte(card), 0o644)
		cfgs, err := readmeConfigs(p)
		if err != nil {
			return
		}
		for _, c := range cfgs {
			for _, globs := range c.DataFiles {
				for _, g := range globs {
					matchGlob(g, "data/train-00000-of-00001.parquet")
				}
			}
		}
	})
}

func FuzzGlob(f *testing.F) {
	for _, g := range []string{"main/train-*", "**/*.parquet", "data/[!x]*.csv", "a[", "**"} {
		f.Add(g, "data/train-00000-of-00001.parquet")
	}
	f.Fuzz(func(t *testing.T, g, p string) {
		matchGlob(g, p)
	})
}
