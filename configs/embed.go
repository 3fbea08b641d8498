// Package configs embeds rllm's default configuration so the binary needs
// no file on disk to run.
package configs

import _ "embed"

// DefaultYAML is configs/default.yaml: every key rllm knows, with its
// default and a comment.
//
//go:embed default.yaml
var DefaultYAML []byte

// DefaultName is how errors and `config show --origin` name the embedded
// defaults.
const DefaultName = "configs/default.yaml"
