package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// op is what an entry does to its key.
type op int

const (
	opSet    op = iota
	opAppend    // key+=value
	opDelete    // ~key
)

// entry is one key set by one layer, before type checking.
type entry struct {
	rawKey  string // as the user spelled it
	key     string // rllm's name for it
	aliased bool
	op      op
	value   any
	raw     string // the value's text where there was one (YAML scalar, override)
	hasRaw  bool
	origin  Origin
	// foreign is the row of a key without rllm counterpart (no effect or
	// refused), judged once the configuration is decoded.
	foreign *Alias
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// parseYAML turns one YAML document into entries, with the line of every
// key so errors can name file:line.
func parseYAML(name string, data []byte, layer string) ([]entry, Errors) {
	var errs Errors
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		line := 0
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		errs.add("", Origin{Layer: layer, Source: name, Line: line}, "invalid YAML: %s", msg)
		return nil, errs
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file sets nothing
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		errs.add("", Origin{Layer: layer, Source: name, Line: root.Line},
			"the top level must be a mapping of sections (data:, rollout:, ...), not a %s", nodeKindName(root))
		return nil, errs
	}
	w := yamlWalker{name: name, layer: layer}
	w.walk(root, "")
	return w.entries, w.errs
}

type yamlWalker struct {
	name, layer string
	entries     []entry
	errs        Errors
}

func (w *yamlWalker) walk(m *yaml.Node, prefix string) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		o := Origin{Layer: w.layer, Source: w.name, Line: k.Line}
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			w.errs.add(prefix, o, "keys must be plain names")
			continue
		}
		raw := k.Value
		if prefix != "" {
			raw = prefix + "." + k.Value
		}
		if first, dup := seen[k.Value]; dup {
			w.errs.add(raw, o, "appears twice in this mapping (first at line %d); keep one", first)
			continue
		}
		seen[k.Value] = k.Line
		key, aliased := canonical(raw)
		s := schema()
		if row, ok := foreign(raw); ok {
			var val any
			if err := v.Decode(&val); err != nil {
				w.errs.add(raw, o, "cannot read value: %v", err)
				continue
			}
			w.entries = append(w.entries, entry{rawKey: raw, key: raw, value: val, origin: o, foreign: &row})
			continue
		}
		switch {
		case s.leaves[key] != nil || s.mapLeaf(key) != nil:
			var val any
			if err := v.Decode(&val); err != nil {
				w.errs.add(key, o, "cannot read value: %v", err)
				continue
			}
			e := entry{rawKey: raw, key: key, aliased: aliased, value: val, origin: o}
			if v.Kind == yaml.ScalarNode {
				e.raw, e.hasRaw = v.Value, true
			}
			w.entries = append(w.entries, e)
		case s.sections[key] || aliasSection(raw):
			switch {
			case v.Kind == yaml.MappingNode:
				w.walk(v, raw)
			case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
				// "data:" with nothing under it sets nothing.
			default:
				w.errs.add(key, o, "is a section; give it keys (e.g. %s:\\n  key: value), not a %s", k.Value, nodeKindName(v))
			}
		default:
			w.errs.add(raw, o, "%s", unknownKeyMsg(key))
		}
	}
}

func nodeKindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "value"
}

func unknownKeyMsg(key string) string {
	if s := schema().suggest(key); s != "" {
		return fmt.Sprintf("unknown key; did you mean %s?", s)
	}
	return "unknown key; rllm config show lists every key"
}

// parseMap turns a library caller's map (dot keys and/or nested maps)
// into entries.
func parseMap(m map[string]any) ([]entry, Errors) {
	var out []entry
	var errs Errors
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			v := m[k]
			raw := k
			if prefix != "" {
				raw = prefix + "." + k
			}
			o := Origin{Layer: "api", Source: raw}
			if err := checkKeySyntax(raw); err != "" {
				errs.add("", o, "%s", err)
				continue
			}
			key, aliased := canonical(raw)
			s := schema()
			if row, ok := foreign(raw); ok {
				out = append(out, entry{rawKey: raw, key: raw, value: v, origin: o, foreign: &row})
				continue
			}
			switch {
			case s.leaves[key] != nil || s.mapLeaf(key) != nil:
				out = append(out, entry{rawKey: raw, key: key, aliased: aliased, value: v, origin: o})
			case s.sections[key] || aliasSection(raw):
				sub, ok := v.(map[string]any)
				if !ok {
					errs.add(key, o, "is a section; give it a map of keys, not %T", v)
					continue
				}
				walk(raw, sub)
			default:
				errs.add(raw, o, "%s", unknownKeyMsg(key))
			}
		}
	}
	walk("", m)
	return out, errs
}

// parseOverride reads one Hydra-style override: key=value, key+=value
// (append to a list), ~key (delete an optional key); a leading + or ++ is
// accepted and ignored, as rLLM/verl command lines carry them.
func parseOverride(s string, layer string) (entry, *usererr.Error) {
	return parseOverrideAt(s, Origin{Layer: layer, Source: s})
}

// parseOverrideAt is parseOverride for an override that came from o (an
// environment variable names itself, not its value).
func parseOverrideAt(s string, o Origin) (entry, *usererr.Error) {
	typed := o.Source == s
	body := strings.TrimPrefix(strings.TrimPrefix(s, "+"), "+")
	e := entry{origin: o}
	var key, val string
	switch {
	case strings.HasPrefix(body, "~"):
		e.op = opDelete
		key, _, _ = strings.Cut(body[1:], "=")
	default:
		k, v, ok := strings.Cut(body, "=")
		if !ok {
			return e, newError("", o, "has no '='; write key=value, key+=value or ~key")
		}
		key, val = k, v
		if strings.HasSuffix(key, "+") {
			e.op = opAppend
			key = strings.TrimSuffix(key, "+")
		}
	}
	if msg := checkKeySyntax(key); msg != "" {
		return e, newError("", o, msg)
	}
	e.rawKey = key
	e.key, e.aliased = canonical(key)
	last := key[strings.LastIndexByte(key, '.')+1:]
	secret := secretKey.MatchString(last) && e.op != opDelete &&
		((!strings.HasSuffix(last, "_env") && !strings.HasSuffix(last, "_file")) ||
			(strings.HasSuffix(last, "_env") && !envNameOrEmpty(val)))
	if typed && secret {
		// The origin is printed by config show and in errors: never the secret.
		e.origin.Source = key + "=" + redactedValue
		o = e.origin
	}
	s2 := schema()
	if row, ok := foreign(key); ok {
		e.foreign = &row
		if e.op != opSet {
			return e, newError(key, o, "has no counterpart in rllm, so it cannot be appended to or deleted; remove it")
		}
		_ = yaml.Unmarshal([]byte(val), &e.value) // judged as text when it is not YAML
		if e.value == nil && val != "" {
			e.value = val
		}
		return e, nil
	}
	if s2.leaves[e.key] == nil && s2.mapLeaf(e.key) == nil {
		if s2.sections[e.key] {
			return e, newError(e.key, o, "is a section, not a value; set one of its keys (rllm config show lists them)")
		}
		return e, newError(key, o, unknownKeyMsg(e.key))
	}
	if e.op == opDelete {
		return e, nil
	}
	e.raw, e.hasRaw = val, true
	if l := s2.leaves[e.key]; l != nil && strings.TrimSpace(val) == "" && l.kind != kindString && l.kind != kindStringList {
		// key= with nothing after it is a shell variable that was not
		// set, not a request for the default.
		return e, newError(e.key, o, fmt.Sprintf("is empty (%s=); give it a value, or null for the default", key))
	}
	if err := yaml.Unmarshal([]byte(val), &e.value); err != nil {
		if secret {
			return e, newError(e.key, o, "value (not shown) is not valid YAML; quote it")
		}
		return e, newError(e.key, o, fmt.Sprintf("value %q is not valid YAML (%s); quote it, e.g. %s='\"...\"'",
			val, strings.TrimPrefix(err.Error(), "yaml: "), key))
	}
	return e, nil
}

func checkKeySyntax(key string) string {
	switch {
	case key == "":
		return "the key is empty"
	case strings.ContainsAny(key, " \t\r\n"):
		return fmt.Sprintf("key %q contains whitespace", key)
	case strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") || strings.Contains(key, ".."):
		return fmt.Sprintf("key %q has an empty part between dots", key)
	}
	return ""
}

// envPrefix starts every configuration variable; "__" separates levels
// because single underscores are part of key names.
const envPrefix = "RLLM_"

// parseEnv reads RLLM_SECTION__KEY=value variables. Variables that look
// like a mistyped configuration variable (RLLM_DATA_TRAIN_BATCH_SIZE)
// produce a notice rather than being silently ignored.
func parseEnv(environ []string) ([]entry, Errors, []string) {
	var out []entry
	var errs Errors
	var notices []string
	vars := append([]string(nil), environ...)
	sort.Strings(vars)
	for _, kv := range vars {
		name, val, ok := strings.Cut(kv, "=")
		// An empty variable counts as unset, as most tools treat it.
		if !ok || !strings.HasPrefix(name, envPrefix) || val == "" {
			continue
		}
		rest := name[len(envPrefix):]
		if !strings.Contains(rest, "__") {
			lower := strings.ToLower(rest)
			for sec := range schema().sections {
				if !strings.Contains(sec, ".") && strings.HasPrefix(lower, sec+"_") {
					notices = append(notices, fmt.Sprintf("ignoring %s: configuration variables separate levels with a double underscore, e.g. RLLM_DATA__TRAIN_BATCH_SIZE", name))
					break
				}
			}
			continue
		}
		key := strings.ToLower(strings.ReplaceAll(rest, "__", "."))
		e, err := parseOverrideAt(key+"="+val, Origin{Layer: "env", Source: name})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, e)
	}
	return out, errs, notices
}

// envName matches an environment variable name as shells write them.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envNameOrEmpty reports whether v (a value typed for an *_env key,
// possibly quoted) is empty or a variable name, not something else such
// as the key itself pasted in.
func envNameOrEmpty(v string) bool {
	v = strings.Trim(strings.TrimSpace(v), `"'`)
	return v == "" || envName.MatchString(v)
}
