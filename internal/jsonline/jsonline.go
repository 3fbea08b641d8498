// Package jsonline encodes the JSON lines rllm writes for people and
// programs to read (progress, logs, warnings, metrics): one object per
// line, with <, > and & as they are. encoding/json's Marshal escapes them
// for HTML ("->" becomes "-\u003e"), which no reader of these lines wants.
package jsonline

import (
	"bytes"
	"encoding/json"
)

// Marshal returns v as one line of JSON, its '\n' included, without
// HTML escaping.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
