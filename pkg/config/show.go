package config

import (
	"bytes"
	"encoding/json"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// secretKey matches argument names whose values must never be printed.
var secretKey = regexp.MustCompile(`(?i)(api[_-]?key|secret|password|passwd|(^|[_-])token$|bearer|credential)`)

const redactedValue = "<redacted>"

// YAML renders the resolved configuration in schema order. With origins,
// every value's line ends with a comment naming the layer that set it.
// Secret-looking entries of argument maps are redacted.
func (l *Loaded) YAML(withOrigins bool) ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(redacted(l.Config)); err != nil {
		return nil, err
	}
	if withOrigins {
		l.annotate(&root, "")
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

func (l *Loaded) annotate(n *yaml.Node, prefix string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		if schema().sections[key] {
			l.annotate(v, key)
			continue
		}
		if o := l.origin(key); o.Layer != "" {
			if v.Kind == yaml.ScalarNode || len(v.Content) == 0 {
				v.LineComment = o.String()
			} else {
				k.LineComment = o.String()
			}
		}
		if v.Kind == yaml.MappingNode {
			l.annotateMap(v, key)
		}
	}
}

// annotateMap labels keys inside argument maps that were set one by one.
func (l *Loaded) annotateMap(n *yaml.Node, prefix string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := prefix + "." + k.Value
		if o, ok := l.Origins[key]; ok {
			if v.Kind == yaml.ScalarNode {
				v.LineComment = o.String()
			} else {
				k.LineComment = o.String()
			}
		}
		if v.Kind == yaml.MappingNode {
			l.annotateMap(v, key)
		}
	}
}

// JSON renders the resolved configuration; with origins it is
// {"config": ..., "origins": {"key": "where"}}.
func (l *Loaded) JSON(withOrigins bool) ([]byte, error) {
	var v any = redacted(l.Config)
	if withOrigins {
		origins := make(map[string]string, len(l.Origins))
		for _, k := range Keys() {
			if o := l.origin(k); o.Layer != "" {
				origins[k] = o.String()
			}
		}
		for k, o := range l.Origins {
			if _, ok := origins[k]; !ok {
				origins[k] = o.String()
			}
		}
		v = struct {
			Config  *Config           `json:"config"`
			Origins map[string]string `json:"origins"`
		}{redacted(l.Config), origins}
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Redacted is a copy of c with secret-looking values hidden, as config
// show prints it: what may be sent to an experiment tracker.
func (c *Config) Redacted() *Config { return redacted(c) }

// redacted copies c with secret-looking argument values hidden.
func redacted(c *Config) *Config {
	cp := *c
	cp.Rollout.ChatTemplateKwargs = redactMap(c.Rollout.ChatTemplateKwargs)
	cp.Agent.Args = redactMap(c.Agent.Args)
	cp.Env.Args = redactMap(c.Env.Args)
	cp.Workflow.Args = redactMap(c.Workflow.Args)
	cp.Tools.MCP = redactMap(c.Tools.MCP)
	cp.Tools.Args = redactMap(c.Tools.Args)
	if c.Sandbox.Env != nil {
		// The sandboxed program's environment: any of it may be a
		// credential, whatever its name.
		cp.Sandbox.Env = make(map[string]string, len(c.Sandbox.Env))
		for k := range c.Sandbox.Env {
			cp.Sandbox.Env[k] = redactedValue
		}
	}
	// A value that is not a variable name may be a key pasted in.
	if !envNameOrEmpty(cp.Rollout.APIKeyEnv) {
		cp.Rollout.APIKeyEnv = redactedValue
	}
	if !envNameOrEmpty(cp.Backend.Tinker.APIKeyEnv) {
		cp.Backend.Tinker.APIKeyEnv = redactedValue
	}
	return &cp
}

func redactMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			if k == "env_vars" {
				// Variables handed to a child process (exec envs, MCP
				// servers): any of them may be a credential, whatever its name.
				vars := make(map[string]any, len(x))
				for name := range x {
					vars[name] = redactedValue
				}
				out[k] = vars
				continue
			}
			out[k] = redactMap(x)
		case string:
			if secretKey.MatchString(k) && x != "" {
				out[k] = redactedValue
			} else {
				out[k] = x
			}
		default:
			if secretKey.MatchString(k) && v != nil {
				out[k] = redactedValue
			} else {
				out[k] = v
			}
		}
	}
	return out
}
