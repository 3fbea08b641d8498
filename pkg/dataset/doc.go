// Package dataset turns dataset files into tasks and tasks into batches.
//
// It reads the formats rLLM users bring — parquet as Hugging Face
// `datasets` (pyarrow) exports it, JSON lines, JSON and CSV — one row at a
// time, so a file of any size streams through a Reader without being held
// in memory. It writes tasks back as parquet, JSON lines or JSON, assigns
// every task a stable id, and hands tasks out in shuffled, resumable
// batches (Loader).
//
// Every row becomes an episode.Task: a map from column name to a plain Go
// value (string, int64, float64, bool, nil, []any, map[string]any, and for
// a few parquet types []byte and time.Time). docs/datasets.md describes
// the formats, the column conventions and the errors.
package dataset
