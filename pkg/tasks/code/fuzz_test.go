package code

import (
	"encoding/json"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// FuzzParseTests: any ground_truth text gives tests or an error naming
// the task, never a panic.
func FuzzParseTests(f *testing.F) {
	for _, s := range []string{`[{"input":"1","output":"1"}]`, `{"fn_name":"f","inputs":[[1]],"outputs":[[1]]}`,
		`{"functional":"assert True"}`, `["assert f(1)"]`, "def check(c):\n  assert c(1)", `[{"input":"[1]\n2","output":"3","testtype":"functional","metadata":{"func_name":"f"}}]`,
		`{"inputs":[1],"outputs":[]}`, `[`, `7`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, gt string) {
		task := episode.Task{"id": "fz", "ground_truth": gt, "entry_point": "f"}
		tests, err := ParseTests(task)
		if err == nil && len(tests) == 0 {
			t.Fatal("no tests and no error")
		}
		var v any
		if json.Unmarshal([]byte(gt), &v) == nil {
			_, _ = ParseTests(episode.Task{"id": "fz", "ground_truth": v})
		}
	})
}

func FuzzOutputsMatch(f *testing.F) {
	f.Add("3.0\n", "3")
	f.Add("1e5000", "1e5000")
	f.Add("inf -0", "Infinity 0")
	f.Fuzz(func(t *testing.T, a, b string) {
		if OutputsMatch(a, b) != OutputsMatch(b, a) {
			t.Fatalf("not symmetric: %q %q", a, b)
		}
		_ = JSONEqual(a, b)
	})
}

func FuzzExtract(f *testing.F) {
	f.Add("```python\nprint(1)\n```")
	f.Add("``````\n```")
	f.Fuzz(func(t *testing.T, s string) {
		code, _, ok := Extract(s)
		if !ok && code != "" {
			t.Fatal("code without a block")
		}
	})
}
