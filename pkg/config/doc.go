package config

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rllm-org/rllm-go/configs"
)

// KeyDoc is what `rllm config show --doc KEY` prints about a key.
type KeyDoc struct {
	Key string `json:"key"`
	// Doc is the key's comment in configs/default.yaml.
	Doc string `json:"doc"`
	// Default is the default value as YAML.
	Default string `json:"default"`
	// Type says what the key accepts.
	Type string `json:"type"`
	// Range lists the rules validation applies to the value alone, as
	// its messages say them ("must be at least 1", "must be one of ...").
	Range []string `json:"range,omitempty"`
}

// Doc documents a key, or every key under a section ("data",
// "rollout.retry"). The meaning and the default come from
// configs/default.yaml; the range from the validator itself, by trying
// values no rule allows, so the doc cannot drift from what is enforced.
// A key spelled the rLLM/verl way (rllm.async_training.enable) documents
// the key it stands for.
func Doc(key string) ([]KeyDoc, error) {
	s := schema()
	if c, ok := canonical(key); ok {
		key = c
	}
	var keys []string
	if _, ok := s.leaves[key]; ok {
		keys = []string{key}
	} else if s.sections[key] {
		for _, k := range s.order {
			if strings.HasPrefix(k, key+".") {
				keys = append(keys, k)
			}
		}
	} else {
		if sug := s.suggest(key); sug != "" {
			return nil, newError(key, Origin{}, fmt.Sprintf("unknown key; did you mean %s?", sug))
		}
		return nil, newError(key, Origin{}, "unknown key; rllm config show lists every key")
	}
	nodes, err := defaultNodes()
	if err != nil {
		return nil, err
	}
	out := make([]KeyDoc, 0, len(keys))
	for _, k := range keys {
		l := s.leaves[k]
		d := KeyDoc{Key: k, Type: l.kind.describe()}
		if l.nullable {
			d.Type += ", or null"
		}
		if n, ok := nodes[k]; ok {
			d.Doc, d.Default = n.doc, n.value
		}
		d.Range = probeRange(l)
		out = append(out, d)
	}
	return out, nil
}

type docNode struct{ doc, value string }

// defaultNodes maps every key of configs/default.yaml to its comment and
// default. A key without a comment of its own shares the comment of the
// nearest commented key before it in the same section (the mask_* keys
// under "the keys below").
func defaultNodes() (map[string]docNode, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(configs.DefaultYAML, &root); err != nil {
		return nil, err
	}
	out := map[string]docNode{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		last := ""
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			doc := commentText(k.HeadComment)
			if doc == "" {
				doc = last
			} else {
				last = doc
			}
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 && !isArgsMap(key) {
				walk(v, key+".")
				continue
			}
			b, err := yaml.Marshal(v)
			if err != nil {
				continue
			}
			out[key] = docNode{doc: doc, value: strings.TrimSpace(string(b))}
		}
	}
	if len(root.Content) > 0 {
		walk(root.Content[0], "")
	}
	return out, nil
}

// isArgsMap reports whether key is a free-form map leaf rather than a
// section.
func isArgsMap(key string) bool {
	l, ok := schema().leaves[key]
	return ok && (l.kind == kindOpenMap || l.kind == kindStringMap)
}

func commentText(c string) string {
	var lines []string
	for _, l := range strings.Split(c, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		if l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

var (
	gotSuffix  = regexp.MustCompile(`,? got .*$`)
	fromSuffix = regexp.MustCompile(` \(from [^()]*\)$`)
)

// probeRange sets the key alone to values outside any sensible range and
// collects what validation says about it.
func probeRange(l *leaf) []string {
	var probes []string
	switch l.kind {
	case kindInt:
		probes = []string{"-1000000000", "1000000000"}
	case kindFloat:
		probes = []string{"-1e18", "1e18"}
	case kindString:
		probes = []string{"no-such-value-#"}
	case kindStringList:
		probes = []string{"[no-such-value-#]"}
	default:
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range probes {
		_, err := Load(Sources{Args: []string{l.key + "=" + p}})
		errs, ok := err.(Errors)
		if !ok {
			continue
		}
		for _, e := range errs {
			if e.Subject != l.key { // an argument's error is "key: msg (from ...)"
				continue
			}
			msg := strings.TrimSpace(gotSuffix.ReplaceAllString(fromSuffix.ReplaceAllString(e.Msg, ""), ""))
			if msg != "" && !seen[msg] {
				seen[msg] = true
				out = append(out, msg)
			}
		}
	}
	sort.Strings(out)
	return out
}
