package dataset

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Format is a dataset file format.
type Format string

// The formats this package reads. Writing supports all but CSV.
const (
	FormatParquet Format = "parquet"
	FormatJSONL   Format = "jsonl"
	FormatJSON    Format = "json"
	FormatCSV     Format = "csv"
)

// Formats lists every format, in the order messages show them.
var Formats = []Format{FormatParquet, FormatJSONL, FormatJSON, FormatCSV}

// extensions maps a file extension (lower case) to its format.
var extensions = map[string]Format{
	".parquet": FormatParquet,
	".jsonl":   FormatJSONL,
	".ndjson":  FormatJSONL,
	".json":    FormatJSON,
	".csv":     FormatCSV,
}

const knownExtensions = ".parquet, .jsonl, .ndjson, .json, .csv"

// FormatOf returns the format a path's extension names (case-insensitive).
// An unknown extension is an *Error that lists the known ones.
func FormatOf(path string) (Format, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if f, ok := extensions[ext]; ok {
		return f, nil
	}
	if ext == "" {
		return "", fileError(path, nil, "cannot tell the dataset format without an extension; use one of %s or set the format explicitly", knownExtensions)
	}
	return "", fileError(path, nil, "unknown dataset extension %q; use one of %s or set the format explicitly", ext, knownExtensions)
}

// ParseFormat accepts a format name as a user types it ("parquet",
// "jsonl", "ndjson", "json", "csv", with or without a leading dot).
func ParseFormat(s string) (Format, error) {
	name := strings.ToLower(strings.TrimPrefix(s, "."))
	if f, ok := extensions["."+name]; ok {
		return f, nil
	}
	return "", &Error{Msg: fmt.Sprintf("unknown dataset format %q; use one of parquet, jsonl, ndjson, json, csv", s)}
}

// resolveFormat picks the explicit format if set, else the extension's.
func resolveFormat(path string, explicit Format) (Format, error) {
	if explicit == "" {
		return FormatOf(path)
	}
	for _, f := range Formats {
		if f == explicit {
			return f, nil
		}
	}
	return ParseFormat(string(explicit))
}
