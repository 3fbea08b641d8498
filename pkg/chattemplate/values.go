package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// DecodeJSON decodes JSON into the values templates see, keeping the key
// order of every object (Python dicts keep it, and `tojson` of a tool
// schema must print keys as the user wrote them to give the same tokens).
// Objects become ordered dicts, numbers int64 or float64.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: "unexpected data after the JSON value"}
	}
	return v, nil
}

// SyntaxError is malformed JSON at a byte offset (callers turn it into a
// line number).
type SyntaxError struct {
	Offset int64
	Msg    string
}

func (e *SyntaxError) Error() string { return e.Msg }

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 512 {
		return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: "JSON nested too deeply"}
	}
	tok, err := dec.Token()
	if err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, &SyntaxError{Offset: syn.Offset, Msg: syn.Error()}
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: err.Error()}
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := &exec.Dict{Pairs: []*exec.Pair{}}
			index := map[string]int{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: err.Error()}
				}
				key, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				// a repeated key keeps its first place and its last value,
				// as Python's json.loads does
				if i, dup := index[key]; dup {
					d.Pairs[i].Value = exec.AsValue(v)
					continue
				}
				index[key] = len(d.Pairs)
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(key), Value: exec.AsValue(v)})
			}
			if _, err := dec.Token(); err != nil {
				return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: err.Error()}
			}
			return d, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: err.Error()}
			}
			return list, nil
		}
		return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: fmt.Sprintf("unexpected %q", t)}
	case json.Number:
		s := t.String()
		if !strings.ContainsAny(s, ".eE") {
			if n, err := t.Int64(); err == nil {
				return n, nil
			}
		}
		f, err := t.Float64()
		if err != nil {
			return nil, &SyntaxError{Offset: dec.InputOffset(), Msg: "number " + s + " out of range"}
		}
		return f, nil
	default:
		return t, nil // string, bool, nil
	}
}

// dict builds an ordered dict from alternating keys and values.
func dict(kv ...any) *exec.Dict {
	d := &exec.Dict{Pairs: make([]*exec.Pair, 0, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(kv[i]), Value: exec.AsValue(kv[i+1])})
	}
	return d
}

// MessageValue turns a message into what templates expect: role and
// content always; reasoning as "reasoning_content" (the key Qwen3 and
// DeepSeek templates read); tool calls with their arguments parsed into an
// object when they are valid JSON (vLLM does the same before rendering,
// because templates such as Llama 3.1's apply tojson to them); tool_call_id
// and name when set.
func MessageValue(m episode.Message) any {
	d := dict("role", m.Role, "content", m.Content)
	add := func(k string, v any) {
		d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
	}
	if m.Reasoning != "" {
		add("reasoning_content", m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			var args any = tc.Function.Arguments
			if parsed, err := DecodeJSON([]byte(tc.Function.Arguments)); err == nil {
				if _, isObject := parsed.(*exec.Dict); isObject {
					args = parsed
				}
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			call := dict("type", typ, "function", dict("name", tc.Function.Name, "arguments", args))
			if tc.ID != "" {
				call = dict("id", tc.ID, "type", typ, "function", dict("name", tc.Function.Name, "arguments", args))
			}
			calls[i] = call
		}
		add("tool_calls", calls)
	}
	if m.ToolCallID != "" {
		add("tool_call_id", m.ToolCallID)
	}
	if m.Name != "" {
		add("name", m.Name)
	}
	return d
}

// ToolValue turns a tool into {"type", "function": {"name",
// "description", "parameters"}} in that order, the parameters' keys in the
// order their JSON gives them.
func ToolValue(t sampler.Tool) (any, error) {
	fn := dict("name", t.Function.Name)
	if t.Function.Description != "" {
		fn.Pairs = append(fn.Pairs, &exec.Pair{Key: exec.AsValue("description"), Value: exec.AsValue(t.Function.Description)})
	}
	if len(t.Function.Parameters) > 0 {
		params, err := DecodeJSON(t.Function.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %s: parameters are not valid JSON: %w", t.Function.Name, err)
		}
		fn.Pairs = append(fn.Pairs, &exec.Pair{Key: exec.AsValue("parameters"), Value: exec.AsValue(params)})
	}
	typ := t.Type
	if typ == "" {
		typ = "function"
	}
	return dict("type", typ, "function", fn), nil
}
