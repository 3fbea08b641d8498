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

// FuzzWireMessage: any line a harness writes is refused or checked into
// a message that rllm writes again; what rllm writes is checked the same
// way again (the judge reads only such lines), and a checked answer's
// value turns into a result without a panic.
func FuzzWireMessage(f *testing.F) {
	for _, s := range []string{`{"ret":{"d":[["a",{"h":0}]]}}`, `{"raise":["ValueError","x"]}`, `{"op":"call","h":1,"args":[1,2.5,{"t":[null]}],"kw":{"k":{"f":"nan"}}}`,
		`{"op":"names","names":["f"]}`, `{"op":"next","h":0}`, `{"ret":{"nt":["P",["a"],[1]]}}`, `{"ret":{"Fraction":[1,2]}}`, `{"ret":{"Decimal":"1.5"}}`,
		`{"ret":{"defaultdict":["int",[[1,2]]]}}`, `{"ret":{"deque":[[1],null]}}`, `{"ret":[[[[]]]]}`, `{"ret":{"c":[1,{"f":"inf"}]}}`, `{"ret":1,"ret":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := decodeMsg(line)
		if err != nil {
			return
		}
		for _, fromReply := range []bool{false, true} {
			if req, err := checkRequest(m, fromReply); err == nil {
				again, err := decodeMsg(encodeMsg(req)[:len(encodeMsg(req))-1])
				if err != nil {
					t.Fatalf("rllm's own line %q: %v", encodeMsg(req), err)
				}
				if _, err := checkRequest(again, fromReply); err != nil {
					t.Fatalf("rllm's own line %q: %v", encodeMsg(req), err)
				}
			}
		}
		if ans, err := checkAnswer(m); err == nil {
			again, err := decodeMsg(encodeMsg(ans)[:len(encodeMsg(ans))-1])
			if err != nil {
				t.Fatalf("rllm's own line %q: %v", encodeMsg(ans), err)
			}
			if _, err := checkAnswer(again); err != nil {
				t.Fatalf("rllm's own line %q: %v", encodeMsg(ans), err)
			}
			if v, ok := ans["ret"]; ok {
				_ = showJSON(resultJSON(v))
				_ = namesOf(v)
			}
		}
	})
}
